"""ERB-rate scale helpers (Glasberg & Moore 1990, as used by the AMT).

``E(f) = 9.2645 ln(1 + 0.00437 f)`` (ERB number, "Cam") and ``ERB(f) = 24.7 + f / 9.265`` Hz.
"""

from __future__ import annotations

import math

import numpy as np

from .._validation import check_band, check_positive_finite

__all__ = ["MAX_CHANNELS", "freq_to_erb", "erb_to_freq", "erb_bandwidth", "erbspacebw"]

#: most channels :func:`erbspacebw` designs (a mistyped ``bwmul`` would otherwise allocate
#: an enormous grid)
MAX_CHANNELS = 10_000

_C1 = 9.2645
_C2 = 0.00437


def freq_to_erb(f: np.ndarray | float) -> np.ndarray:
    """ERB number (Cam) of frequency ``f`` in Hz (AMT ``freqtoerb``)."""
    f = np.asarray(f, dtype=np.float64)
    return np.sign(f) * _C1 * np.log1p(np.abs(f) * _C2)


def erb_to_freq(e: np.ndarray | float) -> np.ndarray:
    """Frequency in Hz of ERB number ``e`` (AMT ``erbtofreq``)."""
    e = np.asarray(e, dtype=np.float64)
    return np.sign(e) * (np.exp(np.abs(e) / _C1) - 1.0) / _C2


def erb_bandwidth(fc: np.ndarray | float) -> np.ndarray:
    """Equivalent rectangular bandwidth in Hz at ``fc`` (AMT ``audfiltbw``): 24.7 + fc/9.265."""
    return 24.7 + np.asarray(fc, dtype=np.float64) / 9.265


def erbspacebw(
    flow: float, fhigh: float, bwmul: float = 1.0, basef: float | None = None
) -> np.ndarray:
    """Centre frequencies between ``flow`` and ``fhigh`` spaced ``bwmul`` ERB apart (Hz).

    With ``basef`` the grid contains ``basef`` exactly: ``E(basef) + k bwmul`` for every
    integer ``k`` that stays inside ``[flow, fhigh]`` (AMT ``erbspacebw`` with a base
    frequency; the Dau1997 grid: 30 channels, 107.65 ... 7469.67 Hz, 1000 Hz exactly).
    Without it the ``m + 1`` points ``E(flow) + k bwmul + (R - m bwmul) / 2`` with
    ``R = E(fhigh) - E(flow)``, ``m = floor(R / bwmul)`` are centred in the range
    (31 channels, 86.94 ... 7819.20 Hz for 80 ... 8000 Hz).
    """
    check_band(flow, fhigh)
    check_positive_finite("bwmul", bwmul)
    check_positive_finite("basef", basef, allow_none=True)
    el, eh = float(freq_to_erb(flow)), float(freq_to_erb(fhigh))
    if (eh - el) / bwmul > MAX_CHANNELS:
        raise ValueError(
            f"flow={flow}, fhigh={fhigh} with bwmul={bwmul} spans {(eh - el) / bwmul:.3g} "
            f"channels, more than {MAX_CHANNELS}; raise bwmul or narrow the range"
        )
    if basef is not None:
        eb = float(freq_to_erb(basef))
        # small tolerance so that an end point that falls exactly on the grid is kept
        klo = -math.floor((eb - el) / bwmul + 1e-9)
        khi = math.floor((eh - eb) / bwmul + 1e-9)
        e = eb + np.arange(klo, khi + 1) * bwmul
    else:
        r = eh - el
        m = math.floor(r / bwmul + 1e-9)
        e = el + np.arange(m + 1) * bwmul + (r - m * bwmul) / 2.0
    return erb_to_freq(e)

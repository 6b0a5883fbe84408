"""Scales, tables and input handling of the Moore–Glasberg loudness models.

Sound pressure is in pascals; intensities are relative to (20 µPa)², so ``10 log10(I)`` is a
level in dB SPL. The models run at 32 kHz with one frame per millisecond (hop 32 samples) on the
bins ``k = 1 … 960`` of a 2048-point DFT grid (15.625 Hz … 15 kHz), stored at index ``k - 1``.
ERB-number (Cam) scale of Glasberg & Moore (1990).
"""

from __future__ import annotations

import functools
import math
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from ..._validation import (
    check_int,
    check_level_db,
    check_rate,
    check_real_array,
    check_signal,
)

__all__ = [
    "FS",
    "HOP",
    "N_FFT",
    "N_BINS",
    "P0",
    "BIN_HZ",
    "loudness_tables",
    "cam_to_hz",
    "hz_to_cam",
    "erb_hz",
    "roex_p",
    "roex",
    "bin_hz",
    "pa_from_full_scale",
    "check_pressure_signal",
    "resample_to_32k",
]

FS = 32000
HOP = 32
N_FFT = 2048
N_BINS = 960  # bins 1 … 960 of the 2048-point grid (15.625 Hz … 15 kHz)
P0 = 20e-6  # reference sound pressure (Pa)
BIN_HZ = FS / N_FFT


@functools.lru_cache(maxsize=1)
def loudness_tables() -> dict[str, np.ndarray]:
    """Constants of the loudness models (``lhotse_amt/data/loudness_tables.npz``).

    See ``lhotse_amt/data/README_loudness.md`` for the sources: the 4097-tap free-field
    outer + middle-ear FIR ``ff_32000`` and the threshold, A(G) and alpha(G) tables.
    """
    path = resources.files("lhotse_amt") / "data" / "loudness_tables.npz"
    with resources.as_file(path) as p, np.load(p, allow_pickle=False) as d:
        return {k: np.array(d[k]) for k in d.files}


def cam_to_hz(cam: np.ndarray | float) -> np.ndarray:
    """Frequency (Hz) of ERB-number ``cam`` (finite, >= 0):
    ``(10**(cam / 21.366) - 1) / 0.004368``."""
    return (10.0 ** (check_real_array("cam", cam, min=0.0, unit="Cam") / 21.366) - 1.0) / 0.004368


def hz_to_cam(f: np.ndarray | float) -> np.ndarray:
    """ERB-number (Cam) of frequency ``f`` (Hz, finite, >= 0): ``21.366 log10(0.004368 f + 1)``."""
    return 21.366 * np.log10(0.004368 * check_real_array("f", f, min=0.0, unit="Hz") + 1.0)


def erb_hz(f: np.ndarray | float) -> np.ndarray:
    """Equivalent rectangular bandwidth (Hz) at ``f`` (Hz, finite, >= 0; Glasberg & Moore
    1990)."""
    return 24.673 * (0.004368 * check_real_array("f", f, min=0.0, unit="Hz") + 1.0)


def roex_p(f: np.ndarray | float) -> np.ndarray:
    """Roex slope parameter ``p = 4 f / ERB(f)`` (upper slope; lower slope at 51 dB/ERB)."""
    f = check_real_array("f", f, min=0.0, unit="Hz")
    return 4.0 * f / erb_hz(f)


def roex(u: np.ndarray) -> np.ndarray:
    """Rounded-exponential weight ``(1 + u) exp(-u)`` at ``u = p |g|`` (finite, >= 0)."""
    u = check_real_array("u", u, min=0.0)
    return (1.0 + u) * np.exp(-u)


def bin_hz() -> np.ndarray:
    """Frequencies (Hz) of the bins 1 … 960, ``(960,)``."""
    return np.arange(1, N_BINS + 1) * BIN_HZ


def pa_from_full_scale(x: Tensor, full_scale_db_spl: float) -> Tensor:
    """Convert a digital signal to pascals.

    ``full_scale_db_spl`` is the rms level (dB SPL) of a full-scale sinusoid (peak amplitude 1),
    e.g. 100 for the AMT ``moore2016`` convention: ``x_pa = x * sqrt(2) * 20e-6 * 10**(L / 20)``.
    ``full_scale_db_spl`` must be finite, within [-50, 200] dB SPL.
    """
    check_signal(x, min_samples=0, min_dim=0, max_dim=None, allow_empty=True, name="x")
    check_level_db("full_scale_db_spl", full_scale_db_spl)
    return x * (math.sqrt(2.0) * P0 * 10.0 ** (full_scale_db_spl / 20.0))


def check_pressure_signal(x: Tensor, what: str, min_samples: int) -> None:
    """Raise ``TypeError`` for a non-tensor, ``ValueError`` for a non-floating, 0-d, empty,
    non-finite or too-short signal (time on the last axis, at least ``min_samples``
    samples); ``what`` names it in the messages."""
    check_int("min_samples", min_samples, min=0)
    check_signal(x, min_samples, max_dim=None, name=what)


def resample_to_32k(x: Tensor, fs: float) -> Tensor:
    """Resample ``x (..., T)`` from ``fs`` to 32 kHz with :func:`scipy.signal.resample_poly`.

    Polyphase FIR resampling (Kaiser window, scipy defaults). Not differentiable: the result is
    a new tensor without gradient history. ``fs`` must be a whole number of Hz.
    """
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    fs = check_rate("fs", fs, integral=True)
    from fractions import Fraction

    from scipy.signal import resample_poly

    if fs == FS:
        return x
    fr = Fraction(FS, 1) / Fraction(fs).limit_denominator(10_000)
    y = resample_poly(x.detach().cpu().double().numpy(), fr.numerator, fr.denominator, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(y)).to(device=x.device, dtype=x.dtype)

"""Digital Butterworth filter design (low-, high- and band-pass), without importing
:mod:`scipy.signal` (whose import costs about half a CPU-second at start-up).

The design follows the textbook route (e.g. Oppenheim & Schafer, *Discrete-Time Signal
Processing*, 3rd ed., sections 7.1-7.2; Parks & Burrus, *Digital Filter Design*, 1987):

1. analog low-pass prototype of order ``N``: poles ``-exp(i pi m / (2N))`` for
   ``m = -N+1, -N+3, ..., N-1`` on the unit circle, no zeros, gain 1;
2. cut-off pre-warping ``w_a = 4 tan(pi w / 2)`` (``w`` normalised to the Nyquist
   frequency, bilinear transform with sampling rate 2);
3. frequency transform: ``s -> s / w_a`` (low-pass), ``s -> w_a / s`` (high-pass) or
   ``s -> (s^2 + w_0^2) / (s B)`` with ``w_0 = sqrt(w_1 w_2)``, ``B = w_2 - w_1`` (band-pass);
4. bilinear transform ``z = (4 + s) / (4 - s)`` of the zeros, poles and gain; zeros at
   infinity map to ``z = -1``.

The coefficients agree with :func:`scipy.signal.butter` to round-off (a test compares them).
Second-order sections put the pole pairs closest to the unit circle last and each pair
with its nearest zeros; the overall gain sits in the first section.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["butter"]

_BTYPES = {
    "low": "lowpass",
    "lowpass": "lowpass",
    "high": "highpass",
    "highpass": "highpass",
    "band": "bandpass",
    "bandpass": "bandpass",
}


def _zpk(order: int, wn: np.ndarray, btype: str) -> tuple[np.ndarray, np.ndarray, float]:
    m = np.arange(-order + 1, order, 2)
    p = -np.exp(1j * np.pi * m / (2 * order))
    z = np.zeros(0, dtype=complex)
    k = 1.0
    warped = 4.0 * np.tan(np.pi * wn / 2.0)
    if btype == "lowpass":
        wo = float(warped[0])
        p = p * wo
        k = k * wo**order
    elif btype == "highpass":
        wo = float(warped[0])
        k = k * float(np.real(1.0 / np.prod(-p)))
        p = wo / p
        z = np.zeros(order, dtype=complex)
    else:
        bw = float(warped[1] - warped[0])
        wo = math.sqrt(float(warped[0] * warped[1]))
        p_lp = p * bw / 2.0
        root = np.sqrt(p_lp**2 - wo**2 + 0j)
        p = np.concatenate([p_lp + root, p_lp - root])
        z = np.zeros(order, dtype=complex)
        k = k * bw**order
    # bilinear transform, sampling rate 2 (fs2 = 2 * 2)
    fs2 = 4.0
    degree = len(p) - len(z)
    zd = np.concatenate([(fs2 + z) / (fs2 - z), -np.ones(degree)])
    pd = (fs2 + p) / (fs2 - p)
    kd = k * float(np.real(np.prod(fs2 - z) / np.prod(fs2 - p)))
    return zd, pd, kd


def _pairs(values: np.ndarray) -> list[np.ndarray]:
    """Split roots of a real polynomial into conjugate pairs and single real roots."""
    values = np.asarray(values, dtype=complex)
    real_mask = np.abs(values.imag) <= 1e-12 * np.maximum(1.0, np.abs(values))
    upper = values[(~real_mask) & (values.imag > 0)]
    out = [np.array([c, np.conj(c)]) for c in upper]
    out += [np.array([r]) for r in values[real_mask].real.astype(complex)]
    return out


def _to_sos(z: np.ndarray, p: np.ndarray, k: float) -> np.ndarray:
    """Second-order sections ``(n_sections, 6)`` ``[b0, b1, b2, 1, a1, a2]``."""
    n_sec = (max(len(z), len(p)) + 1) // 2
    # pad to an even count with roots at the origin
    z = np.concatenate([z, np.zeros(2 * n_sec - len(z))])
    p = np.concatenate([p, np.zeros(2 * n_sec - len(p))])
    pole_groups = _pairs(p)
    # complex pairs first; real poles grouped two by two (closest to the circle together)
    complex_groups = [g for g in pole_groups if len(g) == 2]
    reals = sorted((g[0] for g in pole_groups if len(g) == 1), key=lambda r: -abs(r))
    real_groups = [np.array(reals[i : i + 2]) for i in range(0, len(reals), 2)]
    groups = sorted(complex_groups + real_groups, key=lambda g: -float(np.max(np.abs(g))))
    zeros = list(z)
    sections = np.zeros((n_sec, 6))
    # the pole pair closest to the unit circle goes to the last section
    for idx, g in zip(range(n_sec - 1, -1, -1), groups):
        chosen = []
        for pole in g:
            j = int(np.argmin([abs(zz - pole) for zz in zeros]))
            chosen.append(zeros.pop(j))
        if len(chosen) == 1:
            chosen.append(zeros.pop(int(np.argmin(np.abs(zeros)))))
        b = np.real(np.poly(chosen))
        a = np.real(np.poly(g)) if len(g) == 2 else np.real(np.poly(np.append(g, 0.0)))
        sections[idx, :3] = b
        sections[idx, 3:] = a
    sections[0, :3] *= k
    return sections


def butter(
    order: int,
    wn: float | tuple[float, float] | list[float] | np.ndarray,
    btype: str = "lowpass",
    *,
    fs: float | None = None,
    output: str = "ba",
) -> tuple[np.ndarray, np.ndarray] | np.ndarray:
    """Digital Butterworth filter of order ``order``.

    Args:
        order: filter order ``N >= 1`` (a band-pass has order ``2 N``).
        wn: cut-off(s): a scalar for ``"lowpass"``/``"highpass"``, a pair ``(low, high)``
            for ``"bandpass"``; in Hz if ``fs`` is given, else normalised to the Nyquist
            frequency (in ``(0, 1)``).
        btype: ``"lowpass"``/``"low"``, ``"highpass"``/``"high"`` or ``"bandpass"``/``"band"``.
        fs: sampling rate in Hz, or ``None`` for normalised ``wn``.
        output: ``"ba"`` (numerator, denominator, each of length ``order + 1``, or
            ``2 order + 1`` for a band-pass) or ``"sos"`` (``(n_sections, 6)`` second-order
            sections, as :func:`scipy.signal.sosfilt` takes them).

    Returns:
        ``(b, a)`` float64 arrays, or the float64 ``(n_sections, 6)`` array.
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise ValueError(f"order must be an integer >= 1, got {order!r}")
    if btype not in _BTYPES:
        raise ValueError(f"btype must be one of {sorted(_BTYPES)}, got {btype!r}")
    if output not in ("ba", "sos"):
        raise ValueError(f"output must be 'ba' or 'sos', got {output!r}")
    kind = _BTYPES[btype]
    w = np.atleast_1d(np.asarray(wn, dtype=np.float64))
    n_edges = 2 if kind == "bandpass" else 1
    if w.shape != (n_edges,):
        raise ValueError(f"a {kind} needs {n_edges} cut-off frequency(ies), got wn={wn!r}")
    if fs is not None:
        if not (isinstance(fs, (int, float, np.number)) and math.isfinite(fs) and fs > 0):
            raise ValueError(f"fs must be a positive finite number in Hz, got {fs!r}")
        w = 2.0 * w / float(fs)
    if not (np.all(np.isfinite(w)) and np.all(w > 0) and np.all(w < 1)):
        raise ValueError(
            f"cut-off(s) {wn!r} must lie strictly between 0 and the Nyquist frequency"
            + (f" ({float(fs) / 2:g} Hz)" if fs is not None else " (1 when normalised)")
        )
    if kind == "bandpass" and not w[0] < w[1]:
        raise ValueError(f"band-pass edges must be increasing, got wn={wn!r}")
    z, p, k = _zpk(int(order), w, kind)
    if output == "sos":
        return _to_sos(z, p, k)
    b = k * np.real(np.poly(z))
    a = np.real(np.poly(p))
    return b, a

"""Polyphase rational resampling (anti-aliased), equivalent to
:func:`scipy.signal.resample_poly` with its default Kaiser-window FIR.

``fs_out / fs_in = up / down`` (reduced). The anti-alias low-pass is a ``2 L + 1``-tap
windowed sinc, ``L = 10 max(up, down)``, cut-off ``1 / max(up, down)`` of the
intermediate Nyquist frequency, Kaiser window ``beta = 5``, gain ``up``; it is centred
(zero-phase), the input zero-padded at both ends, and the output has
``ceil(T up / down)`` samples. Only the needed output samples are computed: one strided
convolution per output phase (``up`` of them), differentiable.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from torch import Tensor

from .._validation import check_int, check_number, check_positive_finite, check_rate, check_signal

__all__ = ["MAX_FACTOR", "kaiser_lowpass", "rational_factors", "resample_poly"]

#: largest up/down factor :func:`resample_poly` accepts (its filter has ``20 max(up, down)``
#: taps; rates that need larger factors are almost always mistyped)
MAX_FACTOR = 10_000


def kaiser_lowpass(numtaps: int, cutoff: float, beta: float, fs: float = 2.0) -> np.ndarray:
    """Linear-phase FIR low-pass by the window method (Kaiser 1974): the ideal low-pass
    ``c sinc(c (n - (numtaps - 1) / 2))``, ``c = cutoff / (fs / 2)``, times a symmetric
    Kaiser window ``I0(beta sqrt(1 - (2 n / (numtaps - 1) - 1)^2)) / I0(beta)``, scaled to
    unit gain at 0 Hz; ``numtaps`` taps (float64). The design of
    ``scipy.signal.firwin(numtaps, cutoff, window=("kaiser", beta), fs=fs)`` (taps equal
    to float64 rounding), without importing :mod:`scipy.signal` (about half a CPU-second
    at start-up).

    Args:
        numtaps: number of taps (>= 1).
        cutoff: cut-off frequency, in the units of ``fs`` (``0 < cutoff < fs / 2``).
        beta: Kaiser window shape parameter (>= 0).
        fs: sampling rate (default 2: ``cutoff`` relative to the Nyquist frequency).
    """
    numtaps = check_int("numtaps", numtaps, min=1)
    beta = check_number("beta", beta, min=0.0)
    c = check_number("cutoff", cutoff) / (0.5 * check_positive_finite("fs", fs))
    if not 0.0 < c < 1.0:
        raise ValueError(f"cutoff must lie in (0, fs / 2), got {cutoff!r} with fs {fs!r}")
    if numtaps == 1:
        return np.ones(1)
    half = 0.5 * (numtaps - 1)
    m = np.arange(numtaps, dtype=np.float64) - half
    window = np.i0(beta * np.sqrt(1.0 - (m / half) ** 2.0)) / np.i0(np.float64(beta))
    h = c * np.sinc(c * m) * window
    return h / np.sum(h)


def rational_factors(fs_in: float, fs_out: float, max_denominator: int = 10000) -> tuple[int, int]:
    """``(up, down)`` with ``fs_out / fs_in = up / down`` (reduced)."""
    check_rate("fs_in", fs_in)
    check_rate("fs_out", fs_out)
    check_int("max_denominator", max_denominator, min=1)
    fr = Fraction(fs_out / fs_in).limit_denominator(max_denominator)
    return fr.numerator, fr.denominator


def resample_poly(x: Tensor, up: int, down: int) -> Tensor:
    """Resample ``x (..., T)`` by ``up / down`` along the last axis (``up``, ``down``
    integers in ``[1, MAX_FACTOR]``)."""
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    up = check_int("up", up, min=1, max=MAX_FACTOR)
    down = check_int("down", down, min=1, max=MAX_FACTOR)
    g = math.gcd(up, down)
    up, down = up // g, down // g
    if up == down == 1:
        return x
    T = x.shape[-1]
    n_out = T * up // down + int(T * up % down != 0)
    max_rate = max(up, down)
    half = 10 * max_rate
    h = kaiser_lowpass(2 * half + 1, 1.0 / max_rate, 5.0) * up
    lead = x.shape[:-1]
    xf = x.reshape(-1, 1, T)
    # y[i] = sum_k x[k] h[t_i - k up],  t_i = i down + half   (h centred on the output)
    phases = []
    span = 0
    for r in range(min(up, n_out)):
        t = r * down + half
        p, k0 = t % up, t // up
        taps = h[p::up]  # taps[j] multiplies x[k0 - j]
        phases.append((k0, taps))
        span = max(span, len(taps))
    pad_l = span
    n_blocks = -(-n_out // up)
    pad_r = max(0, (n_blocks + 1) * down + half // up + 2 - T)
    xp = torch.nn.functional.pad(xf, (pad_l, pad_r))
    y = xf.new_zeros((xf.shape[0], n_blocks, up))
    for r, (k0, taps) in enumerate(phases):
        w = torch.as_tensor(np.ascontiguousarray(taps[::-1]), dtype=x.dtype, device=x.device)
        start = k0 - (len(taps) - 1) + pad_l
        nb = -(-(n_out - r) // up)
        seg = xp[..., start : start + (nb - 1) * down + len(taps)]
        y[:, :nb, r] = torch.nn.functional.conv1d(seg, w.view(1, 1, -1), stride=down)[:, 0, :nb]
    return y.reshape(xf.shape[0], -1)[:, :n_out].reshape(*lead, n_out)

"""Compiled CPU kernel for the level-dependent lower skirt of the loudness models' excitation.

The excitation stage of :mod:`lhotse_amt.functional.loudness` needs, per frame and channel
``c``, the sum over the kept spectral components ``k`` below the channel centre of
``I_k W(u_kc)`` with the rounded-exponential weight ``W(u) = (1 + u) exp(-u)`` and
``u_kc = s_k p_c (fc - f_k) / fc`` (``s_k`` the level-dependent slope factor of the component).
These ~34 000 exponentials per frame and ear dominate the models' cost; the torch reference
(:func:`lhotse_amt.functional.loudness._lower_branch`) materialises them as tensors, this kernel
fuses them into one pass without temporaries.

Semantics (identical to the reference, including the clamp ``u <= 80``)::

    for f, c:  out[f, c] = sum_{k < kc[c], I[f, k] > 0} I[f, k] (1 - v) exp(v),
               v = max(s[f, k] * h_c(f_k), -80),  h_c(f) = q_c f - p_c  (= -p_c (fc - f) / fc)

The exponential is evaluated inline, so the loop vectorises: in float64 by Cody–Waite range
reduction, a degree-12 Taylor polynomial and the exponent set by a bit cast (~2 ulp); in
float32 as ``2^y`` with ``y = v log2(e)`` (``log2(e)`` folded into ``p`` and ``q``), ``y = t + r``
with ``t`` the nearest integer, ``2^r`` by a degree-6 polynomial fitted for relative error on
``|r| <= 1/2`` (1.9e-9 in exact arithmetic, ~1 ulp evaluated in float32) and ``2^t`` from the
exponent bits, ``1 - v = 1 - y ln 2``. The sum over ``k`` is vectorised too (numba
``fastmath={"reassoc", "contract"}``: re-associated additions and fused multiply-adds, no
approximate functions, no NaN/inf assumptions); in float32 each channel's sum starts at a
multiple of 32 components before its end, the extra leading terms being zero-intensity padding,
so every sum runs in whole vectors (512-bit lanes where the CPU has them,
:func:`lhotse_amt.kernels.fastmath.prefer_wide_vectors`). Results agree with the reference to
float rounding (tests: <= 1e-13 relative in float64, <= 1e-5 in float32).

Computed in the input dtype (float32 or float64). No gradient: the models use this kernel only
when no gradient is needed and fall back to the torch reference otherwise.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from .fastmath import f32_bits, f32_from_bits, f64_from_bits, prefer_wide_vectors

__all__ = ["lower_skirt", "lower_skirt_numpy"]

_FM = {"reassoc", "contract"}


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10

_F32 = np.float32
_ONE_32 = _F32(1.0)
_ZERO_32 = _F32(0.0)


@njit(cache=True, fastmath=_FM, inline="always")
def _exp64(v):  # pragma: no cover - compiled
    t = np.floor(v * _LOG2E + 0.5)
    r = (v - t * _LN2_HI) - t * _LN2_LO
    p = 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    return p * f64_from_bits((np.int64(t) + 1023) << 52)


@njit(cache=True, fastmath=_FM)
def _lower64(inten, s, p, q, f, kc, out):  # pragma: no cover - compiled
    prefer_wide_vectors()
    n_frames, n_bins = inten.shape
    n_ch = p.shape[0]
    ig = np.empty(n_bins, np.float64)
    sg = np.empty(n_bins, np.float64)
    fg = np.empty(n_bins, np.float64)
    kg = np.empty(n_bins, np.int64)
    for fr in range(n_frames):
        n = 0
        for k in range(n_bins):
            if inten[fr, k] > 0.0:
                ig[n] = inten[fr, k]
                sg[n] = s[fr, k]
                fg[n] = f[k]
                kg[n] = k
                n += 1
        j = 0
        for c in range(n_ch):
            while j < n and kg[j] < kc[c]:
                j += 1
            pc = p[c]
            qc = q[c]
            acc = 0.0
            for m in range(j):
                v = max(sg[m] * (qc * fg[m] - pc), -80.0)
                acc += ig[m] * ((1.0 - v) * _exp64(v))
            out[fr, c] = acc


# 2^r on |r| <= 1/2, degree 6, coefficients fitted for minimal relative error
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5, _Q6 = (
    _F32(1.0000000005920142),
    _F32(0.6931472056005571),
    _F32(0.24022646608790407),
    _F32(0.055503289974554865),
    _F32(0.009618519526641042),
    _F32(0.0013399860382742456),
    _F32(0.0001533757880452164),
)
_LN2_32 = _F32(0.6931471805599453)
_YMIN_32 = _F32(-80.0 * _LOG2E)  # the clamp v >= -80 in units of y = v log2(e)
_PAD = 32  # float32 sums run over whole multiples of this many components


_MAGIC_32 = _F32(12582912.0 + 127.0)  # 1.5 * 2^23 + exponent bias


@njit(inline="always", fastmath=_FM)
def _skirt_term32(y, i, il):  # pragma: no cover - compiled
    # I (1 - v) exp(v) with y = v log2(e) = t + r: adding 1.5 * 2^23 + 127 rounds y to the
    # integer t in the low mantissa bits (ties to even), so t + 127 shifted into the exponent
    # field is 2^t; 2^r by the degree-6 polynomial; I (1 - v) = I - (I ln 2) y
    tt = y + _MAGIC_32
    r = y - (tt - _MAGIC_32)
    e = _Q6
    e = e * r + _Q5
    e = e * r + _Q4
    e = e * r + _Q3
    e = e * r + _Q2
    e = e * r + _Q1
    e = e * r + _Q0
    e = e * f32_from_bits(f32_bits(tt) << np.int32(23))
    return e * (i - il * y)


@njit(cache=True, fastmath=_FM, error_model="numpy")
def _lower32(inten, s, p2, q2, f, kc, out):  # pragma: no cover - compiled
    # p2, q2: p and q times log2(e), so y = s (q2 f - p2) = v log2(e). Kept components are
    # compacted to ig/il/sg/fg[PAD + m]; the leading PAD entries stay zero-intensity padding
    # (I = 0, s = 1, f = 0: a finite term times zero) so that each channel's sum can start
    # PAD-aligned before its end. Unsigned indices: no wraparound checks, the loop vectorises.
    # The clamp y >= -80 log2(e) is skipped in frames where it cannot act (0 <= s and
    # s max(p2) < 80 log2(e), as y >= -s p2 for the components below a channel's centre)
    prefer_wide_vectors()
    n_frames, n_bins = inten.shape
    n_ch = p2.shape[0]
    pad = np.uint64(_PAD)
    p2max = _ZERO_32
    for c in range(n_ch):
        p2max = max(p2max, p2[c])
    ig = np.zeros(n_bins + _PAD, np.float32)
    il = np.zeros(n_bins + _PAD, np.float32)
    sg = np.ones(n_bins + _PAD, np.float32)
    fg = np.zeros(n_bins + _PAD, np.float32)
    kg = np.empty(n_bins, np.int64)
    for fr in range(n_frames):
        n = 0
        smin = _ONE_32
        smax = _ZERO_32
        for k in range(n_bins):
            v = inten[fr, k]
            if v > _ZERO_32:
                sk = s[fr, k]
                ig[_PAD + n] = v
                il[_PAD + n] = v * _LN2_32
                sg[_PAD + n] = sk
                fg[_PAD + n] = f[k]
                kg[n] = k
                n += 1
                smin = min(smin, sk)
                smax = max(smax, sk)
        clamp = not (smin >= _ZERO_32 and smax * p2max < -_YMIN_32)
        j = 0
        for c in range(n_ch):
            while j < n and kg[j] < kc[c]:
                j += 1
            pc = p2[c]
            qc = q2[c]
            acc = _ZERO_32
            total = np.uint64(j + (-j) % _PAD)  # terms summed, a multiple of PAD
            m0 = pad + np.uint64(j) - total
            if clamp:
                for i in range(total):
                    m = m0 + np.uint64(i)
                    y = max(sg[m] * (qc * fg[m] - pc), _YMIN_32)
                    acc += _skirt_term32(y, ig[m], il[m])
            else:
                for i in range(total):
                    m = m0 + np.uint64(i)
                    acc += _skirt_term32(sg[m] * (qc * fg[m] - pc), ig[m], il[m])
            out[fr, c] = acc


def lower_skirt_numpy(
    inten: np.ndarray, s: np.ndarray, p: np.ndarray, fc: np.ndarray, f: np.ndarray, kc: np.ndarray
) -> np.ndarray:
    """Lower-skirt sums ``(N, C)`` for intensities ``inten (N, K)`` (0 = component not kept),
    slope factors ``s (N, K)``, channel slopes ``p (C,)`` and centres ``fc (C,)`` (Hz), component
    frequencies ``f (K,)`` (Hz, ascending) and ``kc (C,)`` = number of components below each
    centre. float32 or float64 (all arrays converted to the dtype of ``inten``)."""
    dt = inten.dtype
    if dt not in (np.float32, np.float64):
        raise ValueError(f"unsupported dtype {dt}")
    inten = np.ascontiguousarray(inten)
    s = np.ascontiguousarray(s, dtype=dt)
    p64 = np.asarray(p, dtype=np.float64)
    q = (p64 / np.asarray(fc, dtype=np.float64)).astype(dt)
    out = np.empty((inten.shape[0], len(p64)), dtype=dt)
    if inten.shape[0]:
        f_dt = np.asarray(f, dtype=dt)
        kc64 = np.asarray(kc, dtype=np.int64)
        if dt == np.float32:
            p2 = (p64 * _LOG2E).astype(dt)
            q2 = (p64 / np.asarray(fc, dtype=np.float64) * _LOG2E).astype(dt)
            _lower32(inten, s, p2, q2, f_dt, kc64, out)
        else:
            _lower64(inten, s, p64, q, f_dt, kc64, out)
    return out


def lower_skirt(
    inten: torch.Tensor,
    s: torch.Tensor,
    p: np.ndarray,
    fc: np.ndarray,
    f: np.ndarray,
    kc: np.ndarray,
) -> torch.Tensor:
    """Torch wrapper of :func:`lower_skirt_numpy` for ``(..., K)`` tensors -> ``(..., C)``."""
    lead = inten.shape[:-1]
    a = inten.detach().reshape(-1, inten.shape[-1]).cpu().numpy()
    b = s.detach().reshape(-1, s.shape[-1]).cpu().numpy()
    out = lower_skirt_numpy(a, b, p, fc, f, kc)
    return torch.from_numpy(out).reshape(*lead, len(p)).to(inten.device)

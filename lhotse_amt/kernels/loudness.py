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
with ``t`` the nearest integer, ``2^r`` by a degree-5 polynomial fitted for relative error on
``|r| <= 1/2`` (7.5e-8 in exact arithmetic, 2.3e-7 evaluated in float32, i.e. 2-4 ulp; all
terms are positive, so the sum's relative error is no larger) and ``2^t`` from the exponent
bits, ``1 - v = 1 - y ln 2``. The sum over ``k`` is vectorised too (numba
``fastmath={"reassoc", "contract"}``: re-associated additions and fused multiply-adds, no
approximate functions, no NaN/inf assumptions); in float32 each channel's sum starts at a
multiple of 32 components before its end, the extra leading terms being zero-intensity padding,
so every sum runs in whole vectors (512-bit lanes where the CPU has them,
:func:`lhotse_amt.kernels.fastmath.prefer_wide_vectors`). Frames in which nearly all
components are kept (noise, speech) sum over every component below the channel, the others'
intensity being zero, instead of compacting the kept ones first, and two such consecutive
frames share one pass over each channel's components (shared loads and channel terms, twice
the work per loop iteration: a channel's sum is a few hundred terms, so loop overhead
matters); so do two consecutive sparse frames whose kept sets nearly coincide (tones), over
the union of those sets (a frame without a partner is summed as the pair of itself). The
slope factors can be computed in the kernel from the components' levels per ERB
(``slope_from_level``), so the models never materialise them. Results agree with the
reference to float rounding (tests: <= 1e-13 relative in float64, <= 1e-5 in float32).

Computed in the input dtype (float32 or float64). No gradient: the models use this kernel only
when no gradient is needed and fall back to the torch reference otherwise.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from .fastmath import NO_CFUNC, f32_bits, f32_from_bits, f64_from_bits, prefer_wide_vectors

__all__ = ["lower_skirt", "lower_skirt_numpy"]

_FM = {"reassoc", "contract"}


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10

_F32 = np.float32
_ONE_32 = _F32(1.0)
_ZERO_32 = _F32(0.0)


@njit(cache=True, fastmath=_FM, inline="always")
def _horner5(x, c5, c4, c3, c2, c1, c0):  # pragma: no cover - compiled
    # c5 x^5 + ... + c0 by Horner's rule, in the dtype of its arguments
    return ((((c5 * x + c4) * x + c3) * x + c2) * x + c1) * x + c0


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


_LN2 = 0.6931471805599453
# log2(m) = (2 / ln 2) atanh(t), t = (m - 1) / (m + 1), |t| <= 0.1716 for m in [0.707, 1.414]:
# series to t**11, truncation error < 3e-11
_L1, _L3, _L5, _L7, _L9, _L11 = (2.0 / (k * _LN2) for k in (1, 3, 5, 7, 9, 11))


@njit(cache=True, fastmath=_FM, inline="always", error_model="numpy")
def _log2_pos32(x):  # pragma: no cover - compiled
    # log2 of a positive normal float32, evaluated in float64 (vectorisable, ~1e-10 absolute)
    b = f32_bits(x)
    ex = np.float64((b >> np.int32(23)) - np.int32(127))
    m = np.float64(f32_from_bits((b & np.int32(0x7FFFFF)) | np.int32(0x3F800000)))
    hi = m > 1.4142135623730951
    m = 0.5 * m if hi else m
    ex = ex + 1.0 if hi else ex
    t = (m - 1.0) / (m + 1.0)
    return ex + t * _horner5(t * t, _L11, _L9, _L7, _L5, _L3, _L1)


@njit(cache=True, fastmath=_FM, **NO_CFUNC)
def _lower64(inten, s, sa, sb, p, q, f, kc, out):  # pragma: no cover - compiled
    # sb != 0: s holds levels per ERB X (intensity), the slope factor is sa + sb log10(X)
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
                sk = s[fr, k]
                sg[n] = sa + sb * np.log10(max(sk, 1e-30)) if sb != 0.0 else sk
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


# 2^r on |r| <= 1/2, degree 5, coefficients fitted for minimal relative error (7.5e-8 in exact
# arithmetic, 2.3e-7 evaluated in float32)
_Q0, _Q1, _Q2, _Q3, _Q4, _Q5 = (
    _F32(1.0000000749386127),
    _F32(0.6931469654701327),
    _F32(0.24022120484452953),
    _F32(0.05550713240463393),
    _F32(0.009675540263547018),
    _F32(0.001327653151478089),
)
_LN2_32 = _F32(0.6931471805599453)
_YMIN_32 = _F32(-80.0 * _LOG2E)  # the clamp v >= -80 in units of y = v log2(e)
_TINY_32 = _F32(1e-30)
_NEG_INF_32 = _F32(-np.inf)
_PAD = 32  # float32 sums run over whole multiples of this many components


_MAGIC_32 = _F32(12582912.0 + 127.0)  # 1.5 * 2^23 + exponent bias


@njit(inline="always", fastmath=_FM)
def _skirt_term32(y, i, il):  # pragma: no cover - compiled
    # I (1 - v) exp(v) with y = v log2(e) = t + r: adding 1.5 * 2^23 + 127 rounds y to the
    # integer t in the low mantissa bits (ties to even), so t + 127 shifted into the exponent
    # field is 2^t; 2^r by the degree-5 polynomial; I (1 - v) = I - (I ln 2) y
    tt = y + _MAGIC_32
    r = y - (tt - _MAGIC_32)
    e = _horner5(r, _Q5, _Q4, _Q3, _Q2, _Q1, _Q0)
    e = e * f32_from_bits(f32_bits(tt) << np.int32(23))
    return e * (i - il * y)


@njit(cache=True, nogil=True, fastmath=_FM, error_model="numpy", **NO_CFUNC)
def _lower32(inten, s, sa, sb, p2, q2, kc, wf, kg, jc, cnt, dense, out):  # pragma: no cover
    # p2, q2: p and q times log2(e), so y = s (q2 f - p2) = v log2(e). Components are laid
    # out from index PAD of the rows of wf: all of them below the top channel when nearly all
    # are kept (dense spectra, no compaction), else the kept ones compacted; the leading PAD
    # entries stay zero-intensity padding (I = 0, s = 1, f = 0: a finite term times zero) so
    # that each channel's sum can start PAD-aligned before its end. Unsigned indices: no
    # wraparound checks, the loop vectorises. The clamp y >= -80 log2(e) is at -inf in frames
    # where it cannot act (0 <= s and s max(p2) < 80 log2(e), as y >= -s p2 for the
    # components below a channel's centre). Scratch from the caller (allocations here would
    # compile numpy's allocators into the kernel): wf (8, K + PAD) float32, rows ig, il, sg
    # (a frame's intensities, intensities times ln 2, slope factors), ig2, il2, sg2 (the
    # second frame of a pair), fg (compacted frequencies) and fd (all component
    # frequencies, dense rows), zero but sg, sg2 (one) and fd[PAD:] (f); kg (K,), jc (C,)
    # and cnt, dense (N,). Each step is written out once (no helper functions: a helper
    # is compiled on its own and again inside this kernel, once per call site)
    prefer_wide_vectors()
    n_frames, n_bins = inten.shape
    n_ch = p2.shape[0]
    pad = np.uint64(_PAD)
    p2max = _ZERO_32
    kmax = 0
    # max/min as conditional expressions (the same selects as the builtins, which numba
    # compiles as separate functions, one per argument type)
    for c in range(n_ch):
        p2max = p2[c] if p2[c] > p2max else p2max
        kmax = kc[c] if kc[c] > kmax else kmax
    kmax = n_bins if n_bins < kmax else kmax
    ig, il, sg, ig2, il2, sg2, fg, fd = wf[0], wf[1], wf[2], wf[3], wf[4], wf[5], wf[6], wf[7]
    for fr in range(n_frames):
        n = 0
        for k in range(kmax):
            n += inten[fr, k] > _ZERO_32
        cnt[fr] = n
        dense[fr] = 8 * n >= 7 * kmax
    fr = 0
    while fr < n_frames:
        pair = False
        if fr + 1 < n_frames:
            if dense[fr] and dense[fr + 1]:
                pair = True
            elif not dense[fr] and not dense[fr + 1] and cnt[fr] > 0 and cnt[fr + 1] > 0:
                nu = 0  # components kept in either frame
                for k in range(kmax):
                    nu += (inten[fr, k] > _ZERO_32) | (inten[fr + 1, k] > _ZERO_32)
                pair = 5 * nu <= 6 * (cnt[fr + 1] if cnt[fr + 1] > cnt[fr] else cnt[fr])
        # two frames of a pair are summed in one pass over each channel's components: the
        # loads of f and the channel terms are shared and the loops do twice the work per
        # iteration (short channel sums are dominated by loop overhead otherwise). Dense
        # frames: every component below the top channel; sparse ones: the kept components
        # of frame fr or fr2 (a tone's are nearly the same in two consecutive frames),
        # compacted for both frames, a component absent from one frame having intensity 0
        # and slope 1 there (a finite term times zero). A frame without a partner is laid
        # out as the pair (fr, fr) and written twice: one loop form to compile (each
        # vectorised loop costs compile time at a process's first extract), at the price
        # of a second sum for the rare unpaired frame
        fr2 = fr + 1 if pair else fr
        if dense[fr]:  # zero intensities included (their terms are 0); vectorised
            n = kmax
            ff = fd
            for k in range(kmax):
                v = inten[fr, k]
                ig[_PAD + k] = v
                il[_PAD + k] = v * _LN2_32
                sg[_PAD + k] = s[fr, k]
            for k in range(kmax):
                v = inten[fr2, k]
                ig2[_PAD + k] = v
                il2[_PAD + k] = v * _LN2_32
                sg2[_PAD + k] = s[fr2, k]
        else:
            n = 0
            ff = fg
            for k in range(kmax):
                v = inten[fr, k]
                v2 = inten[fr2, k]
                if v > _ZERO_32 or v2 > _ZERO_32:
                    v = _ZERO_32 if _ZERO_32 > v else v
                    v2 = _ZERO_32 if _ZERO_32 > v2 else v2
                    ig[_PAD + n] = v
                    il[_PAD + n] = v * _LN2_32
                    sg[_PAD + n] = s[fr, k]
                    ig2[_PAD + n] = v2
                    il2[_PAD + n] = v2 * _LN2_32
                    sg2[_PAD + n] = s[fr2, k]
                    fg[_PAD + n] = fd[_PAD + k]
                    kg[n] = k
                    n += 1
        # levels -> slope factors sa + sb log2(max(x, 1e-30)) in place (vectorised); then
        # slope 1 where the intensity is zero (keeps those terms finite and out of the
        # clamp decision), and the range of the slopes
        smin = _ONE_32
        smax = _ZERO_32
        for q in range(2):  # the frames fr and fr2
            gq = ig2 if q else ig
            sq = sg2 if q else sg
            # unsigned indices: no wraparound code, so these loops vectorise
            if sb != 0.0:
                for k in range(np.uint64(n)):
                    x = sq[pad + k]
                    x = _TINY_32 if _TINY_32 > x else x
                    sq[pad + k] = np.float32(sa + sb * _log2_pos32(x))
            for k in range(np.uint64(n)):
                sk = sq[pad + k] if gq[pad + k] > _ZERO_32 else _ONE_32
                sq[pad + k] = sk
                smin = sk if sk < smin else smin
                smax = sk if sk > smax else smax
        clamp = not (smin >= _ZERO_32 and smax * p2max < -_YMIN_32)
        ymin = _YMIN_32 if clamp else _NEG_INF_32
        # number of laid-out components below each channel centre: all below it (dense
        # rows), else the kept ones (kg: their bin indices, ascending)
        j = 0
        for c in range(n_ch):
            if dense[fr]:
                j = kc[c] if kc[c] < kmax else kmax
            else:
                while j < n and kg[j] < kc[c]:
                    j += 1
            jc[c] = j
        for c in range(n_ch):
            j = jc[c]
            pc = p2[c]
            qc = q2[c]
            acc = _ZERO_32
            acc2 = _ZERO_32
            total = np.uint64(j + (-j) % _PAD)
            m0 = pad + np.uint64(j) - total
            # one loop form for both cases (each costs compile time): without the clamp
            # the bound is -inf, which leaves every y as it is
            for i in range(total):
                m = m0 + np.uint64(i)
                h = qc * ff[m] - pc
                y = sg[m] * h
                y2 = sg2[m] * h
                y = ymin if ymin > y else y
                y2 = ymin if ymin > y2 else y2
                acc += _skirt_term32(y, ig[m], il[m])
                acc2 += _skirt_term32(y2, ig2[m], il2[m])
            out[fr, c] = acc
            out[fr2, c] = acc2
        fr = fr2 + 1


def lower_skirt_numpy(
    inten: np.ndarray,
    s: np.ndarray,
    p: np.ndarray,
    fc: np.ndarray,
    f: np.ndarray,
    kc: np.ndarray,
    slope_from_level: tuple[float, float] | None = None,
) -> np.ndarray:
    """Lower-skirt sums ``(N, C)`` for intensities ``inten (N, K)`` (0 = component not kept),
    slope factors ``s (N, K)``, channel slopes ``p (C,)`` and centres ``fc (C,)`` (Hz), component
    frequencies ``f (K,)`` (Hz, ascending) and ``kc (C,)`` = number of components below each
    centre. float32 or float64 (all arrays converted to the dtype of ``inten``).

    ``slope_from_level=(a, b)``: ``s`` holds each component's input level per ERB ``X``
    (intensity, re (20 µPa)²) and the slope factor is ``a + b log10(max(X, 1e-30))``, computed
    in the kernel for the kept components only (the models' ``1 - 0.35 / p(1 kHz) (10 log10 X -
    51)``); ``s`` may then be a strided view (e.g. the first ``K`` columns of a wider array)."""
    dt = inten.dtype
    if dt not in (np.float32, np.float64):
        raise ValueError(f"unsupported dtype {dt}")
    inten = np.ascontiguousarray(inten)
    if s.dtype != dt or s.strides[-1] != s.itemsize:
        s = np.ascontiguousarray(s, dtype=dt)
    sa, sb = (0.0, 0.0) if slope_from_level is None else map(float, slope_from_level)
    p64 = np.asarray(p, dtype=np.float64)
    q = (p64 / np.asarray(fc, dtype=np.float64)).astype(dt)
    out = np.empty((inten.shape[0], len(p64)), dtype=dt)
    if inten.shape[0]:
        f_dt = np.asarray(f, dtype=dt)
        kc64 = np.asarray(kc, dtype=np.int64)
        if dt == np.float32:
            p2 = (p64 * _LOG2E).astype(dt)
            q2 = (p64 / np.asarray(fc, dtype=np.float64) * _LOG2E).astype(dt)
            n, k = inten.shape
            wf = np.zeros((8, k + _PAD), np.float32)
            wf[2] = wf[5] = 1.0
            wf[7, _PAD:] = f_dt
            scratch = np.empty(k + len(p64) + n, np.int64)
            kg, jc, cnt = scratch[:k], scratch[k : k + len(p64)], scratch[k + len(p64) :]
            dense = np.empty(n, np.bool_)
            # log10(X) = log10(2) log2(X)
            sb2 = sb * math.log10(2.0)
            _lower32(inten, s, sa, sb2, p2, q2, kc64, wf, kg, jc, cnt, dense, out)
        else:
            _lower64(inten, s, sa, sb, p64, q, f_dt, kc64, out)
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

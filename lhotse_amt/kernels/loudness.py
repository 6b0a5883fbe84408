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

The exponential is evaluated inline (Cody–Waite range reduction, Taylor polynomial of degree 12
in float64 / 7 in float32, exponent set by a bit cast), accurate to about 2 ulp, so the loop
vectorises; the sum over ``k`` is vectorised too (numba ``fastmath={"reassoc", "contract"}``:
re-associated additions and fused multiply-adds, no approximate functions, no
NaN/inf assumptions). Results therefore agree with the reference to float rounding
(tests: <= 1e-13 relative in float64, <= 1e-5 in float32).

Computed in the input dtype (float32 or float64). No gradient: the models use this kernel only
when no gradient is needed and fall back to the torch reference otherwise.
"""

from __future__ import annotations

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

__all__ = ["lower_skirt", "lower_skirt_numpy"]

_FM = {"reassoc", "contract"}


@intrinsic
def _i64_as_f64(typingctx, x):  # pragma: no cover - compiled
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


@intrinsic
def _i32_as_f32(typingctx, x):  # pragma: no cover - compiled
    sig = types.float32(types.int32)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())

    return sig, codegen


_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10

_F32 = np.float32
_LOG2E_32 = _F32(1.4426950408889634)
_LN2_HI_32 = _F32(0.693359375)
_LN2_LO_32 = _F32(-2.12194440e-4)
_C7, _C6, _C5, _C4, _C3, _C2 = (
    _F32(1 / 5040),
    _F32(1 / 720),
    _F32(1 / 120),
    _F32(1 / 24),
    _F32(1 / 6),
    _F32(0.5),
)
_ONE_32 = _F32(1.0)
_HALF_32 = _F32(0.5)
_CLAMP_32 = _F32(-80.0)
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
    return p * _i64_as_f64((np.int64(t) + 1023) << 52)


@njit(cache=True, fastmath=_FM, inline="always")
def _exp32(v):  # pragma: no cover - compiled
    t = np.floor(v * _LOG2E_32 + _HALF_32)
    r = (v - t * _LN2_HI_32) - t * _LN2_LO_32
    p = _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _ONE_32
    p = p * r + _ONE_32
    return p * _i32_as_f32((np.int32(t) + np.int32(127)) << np.int32(23))


@njit(cache=True, fastmath=_FM)
def _lower64(inten, s, p, q, f, kc, out):  # pragma: no cover - compiled
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


@njit(cache=True, fastmath=_FM)
def _lower32(inten, s, p, q, f, kc, out):  # pragma: no cover - compiled
    n_frames, n_bins = inten.shape
    n_ch = p.shape[0]
    ig = np.empty(n_bins, np.float32)
    sg = np.empty(n_bins, np.float32)
    fg = np.empty(n_bins, np.float32)
    kg = np.empty(n_bins, np.int64)
    for fr in range(n_frames):
        n = 0
        for k in range(n_bins):
            if inten[fr, k] > _ZERO_32:
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
            acc = _ZERO_32
            for m in range(j):
                v = max(sg[m] * (qc * fg[m] - pc), _CLAMP_32)
                acc += ig[m] * ((_ONE_32 - v) * _exp32(v))
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
        fn = _lower32 if dt == np.float32 else _lower64
        fn(
            inten,
            s,
            p64.astype(dt),
            q,
            np.asarray(f, dtype=dt),
            np.asarray(kc, dtype=np.int64),
            out,
        )
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

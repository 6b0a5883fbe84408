"""The fused Paulick et al. (2024) front end on the CPU: DRNL -> IHC -> adaptation loops
(-> FIR decimator) in one compiled pass per batch row, without storing the intermediate
signals (:func:`frontend`; the stages' kernels and shared step functions are in
:mod:`lhotse_amt.kernels.paulick`).

The kernel contracts ``a * b + c`` into fused multiply-adds and evaluates the overshoot
limiter only for the loops where some channel exceeds 1 (the only values it changes), with
``-2 / m_j`` precomputed; it agrees with the stage-wise path to ~1e-11 relative in float64
(the DRNL's low-frequency sections amplify last-bit differences). Every output sample has
a fixed operation order, so chunked and one-shot processing agree bit for bit. With a
decimator and the broken-stick exponent 1/4 (every DRNL parameter set here) it runs
:mod:`lhotse_amt.kernels.paulick_simd` instead of ``_frontend_kernel``: the same recursion
with each block of 8 channels' states in vector registers (``LHOTSE_AMT_SIMD=0`` in the
environment keeps the channel-vectorised kernel).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from . import SIMD, paulick_simd
from .cpu import _threads
from .fastmath import denormals_off, prefer_wide_vectors, restore_fp_mode
from .paulick import (
    _NOPY,
    _NOPY_FMA,
    _adapt_step,
    _drnl_args,
    _drnl_step,
    _ihc_pack,
    _ihc_step,
    _np,
    _out_dtype,
    _pad_channels,
    _state_back,
)

__all__ = ["KernelInputs", "frontend", "kernel_inputs"]

#: use :mod:`lhotse_amt.kernels.paulick_simd` where it applies (``LHOTSE_AMT_SIMD=0``: never)
_SIMD = SIMD


@njit(inline="always", **_NOPY)
def _aligned(n, m, dt):  # pragma: no cover - compiled
    # an (n, m) array whose data start on a 64-byte boundary (numba allocates on 32 bytes):
    # with m a multiple of 8 (float64) every row is a whole number of cache lines, so no
    # 512-bit load or store of the channel loops straddles two lines
    a = np.empty(n * m + 16, dt)
    off = ((64 - a.ctypes.data % 64) % 64) // a.itemsize
    return a[off : off + n * m].reshape((n, m))


@njit(**_NOPY_FMA)
def _frontend_row(
    r, x, g, lin, nl1, nl2, a, b, c, zl, z1, z2, p, w, aa, mm, rr, s,
    minlvl, use_limit, c0, sc, wd, hist, j0, R, round32, y,
):  # pragma: no cover - compiled  # fmt: skip
    # R == 0: y (N, C, T) gets the adaptation output at every sample. R >= 1: the output
    # feeds the FIR decimator instead, y (N, C, M) gets sum_q wd[q] u[n - K + 1 + q] at the
    # samples n = j0 + i R (u: the adaptation output rounded to float32 when round32, as
    # the stage-wise decimator sees it; taps in order, so every output has one fixed
    # summation order whatever the chunking); hist (N, K - 1, C): the last K - 1 values of
    # u before the chunk, updated in place. A ring of 2 K rows holds every value twice so
    # that the last K values are always K contiguous rows. The channel axis of every array
    # may be padded (y has the real channels only: the first y.shape[1]).
    # (a separate function, not the prange body: compiled on its own, every channel loop
    # vectorises)
    prefer_wide_vectors()
    T = x.shape[1]
    C = g.shape[0]
    K = wd.shape[0]
    quarter = c == 0.25
    Cy = y.shape[1]  # channels written (C may include padding channels)
    v = _aligned(1, C, x.dtype)[0]
    u = _aligned(1, C, x.dtype)[0]
    acc = _aligned(1, C, x.dtype)[0]
    ZL = zl[r]
    Z1 = z1[r]
    Z2 = z2[r]
    wr = _aligned(1, C, x.dtype)[0]
    wr[:] = w[r]
    sr = _aligned(s.shape[1], C, x.dtype)
    sr[:] = s[r]
    xr = x[r]
    yr = y[r]
    ring = _aligned(2 * K, C, x.dtype)
    m32 = mm.astype(np.float32)
    t32 = _aligned(1, C, np.float32)[0]
    if R > 0:
        for q in range(K - 1):
            for k in range(C):
                ring[1 + q, k] = hist[r, q, k]
                ring[K + 1 + q, k] = hist[r, q, k]
    pos = 0
    nxt = j0
    i = 0
    for n in range(T):
        _drnl_step(xr[n], g, lin, nl1, nl2, a, b, c, quarter, ZL, Z1, Z2, v, u)
        _ihc_step(v, p, wr)
        _adapt_step(v, aa, mm, rr, sr, minlvl, use_limit, c0, sc, round32, m32, t32)
        if R == 0:
            for k in range(Cy):
                yr[k, n] = v[k]
            continue
        pk = pos + K
        if round32:
            for k in range(C):
                t = np.float64(np.float32(v[k]))
                ring[pos, k] = t
                ring[pk, k] = t
        else:
            for k in range(C):
                ring[pos, k] = v[k]
                ring[pk, k] = v[k]
        if n == nxt:
            for k in range(C):
                acc[k] = 0.0
            q4 = K - K % 4
            for q in range(0, q4, 4):
                # four taps per sweep over the channels, added in tap order
                w0, w1, w2, w3 = wd[q], wd[q + 1], wd[q + 2], wd[q + 3]
                i0 = pos + 1 + q
                for k in range(C):
                    acc[k] = (
                        ((acc[k] + w0 * ring[i0, k]) + w1 * ring[i0 + 1, k]) + w2 * ring[i0 + 2, k]
                    ) + w3 * ring[i0 + 3, k]
            for q in range(q4, K):
                wq = wd[q]
                i0 = pos + 1 + q
                for k in range(C):
                    acc[k] += wq * ring[i0, k]
            for k in range(Cy):
                yr[k, i] = acc[k]
            i += 1
            nxt += R
        pos = pos + 1 if pos + 1 < K else 0
    if R > 0 and T > 0:
        # after the last sample (written at row pos - 1) the last K - 1 values are the
        # rows pos + 1 ... pos + K - 1 (pos already advanced)
        for q in range(K - 1):
            for k in range(C):
                hist[r, q, k] = ring[pos + 1 + q, k]
    w[r] = wr
    s[r] = sr


@njit(parallel=True, **_NOPY_FMA)
def _frontend_kernel(
    x, g, lin, nl1, nl2, a, b, c, zl, z1, z2, p, w, aa, mm, s,
    minlvl, use_limit, c0, sc, wd, hist, j0, R, round32, y,
):  # pragma: no cover - compiled  # fmt: skip
    rr = _aligned(mm.shape[0], mm.shape[1], mm.dtype)
    rr[:] = -2.0 / mm
    for r in prange(x.shape[0]):
        fp = denormals_off()
        _frontend_row(
            r, x, g, lin, nl1, nl2, a, b, c, zl, z1, z2, p, w, aa, mm, rr, s,
            minlvl, use_limit, c0, sc, wd, hist, j0, R, round32, y,
        )  # fmt: skip
        restore_fp_mode(fp)


class KernelInputs(NamedTuple):
    """The front end's arguments as the kernels take them: ``x (N, T)`` float64, the DRNL
    coefficients and section states, the IHC constants and state, the adaptation loops'
    coefficients (``(J, Cp)``) and states (``(N, J, Cp)``) and the decimator history
    (``(N, K - 1, Cp)``), every channel axis padded to ``Cp`` (a multiple of 8) on 64-byte
    aligned rows; ``C`` the real channels, ``lead`` the batch shape."""

    x: np.ndarray
    drnl: tuple
    c: float
    drnl_state: tuple
    ihc: np.ndarray
    w: np.ndarray
    aa: np.ndarray
    mm: np.ndarray
    s: np.ndarray
    hist: np.ndarray
    C: int
    lead: tuple


def kernel_inputs(
    x: torch.Tensor, front: tuple, drnl_state: dict | None, hist: np.ndarray
) -> KernelInputs:
    """:class:`KernelInputs` of ``x`` and ``front``, :func:`frontend`'s arguments
    ``drnl_coefs, ihc_consts, ihc_state, adapt_a, adapt_m, adapt_state`` (and any after
    them), with the DRNL state ``drnl_state`` and the decimator history ``hist (N, K - 1,
    C)`` (channel-last). Fresh arrays: the kernels update the states in place, never the
    caller's."""
    drnl_coefs, ihc_consts, ihc_state, adapt_a, adapt_m, adapt_state = front[:6]
    g, lin_sos, nl1_sos, nl2_sos, a, b, c = drnl_coefs
    lead, xn, args, zs = _drnl_args(x, g, lin_sos, nl1_sos, nl2_sos, a, b, drnl_state)
    N = xn.shape[0]
    dt = xn.dtype
    C = args[0].shape[0]
    J = adapt_a.shape[-1]
    w = _np(ihc_state.expand(*lead, C).reshape(N, C), dt)
    aa = _np(adapt_a.expand(C, J), dt).T
    mm = _np(adapt_m.expand(C, J), dt).T
    s = _np(adapt_state.expand(*lead, C, J).reshape(N, C, J), dt).transpose(0, 2, 1)
    # the kernel's channel axis padded to a multiple of 8 (whole 512-bit vectors, no
    # scalar remainder) on 64-byte-aligned rows; the padding lanes repeat the last channel
    cp = -(-C // 8) * 8
    pad = [_pad_channels(t, cp) for t in (*args, *zs, w, aa, mm, s, hist)]
    return KernelInputs(
        xn, tuple(pad[:6]), dt.type(c), tuple(pad[6:9]), _ihc_pack(ihc_consts, dt), *pad[9:],
        C, lead,
    )  # fmt: skip


def frontend(
    x: torch.Tensor,
    drnl_coefs: tuple,
    drnl_state: dict | None,
    ihc_consts: dict[str, float],
    ihc_state: torch.Tensor,
    adapt_a: torch.Tensor,
    adapt_m: torch.Tensor,
    adapt_state: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    out_offset: float,
    out_scale: float,
    dec_weight: torch.Tensor | None = None,
    dec_factor: int = 0,
    dec_state: dict | None = None,
) -> tuple[torch.Tensor, dict, torch.Tensor, torch.Tensor, dict | None]:
    """DRNL -> IHC -> adaptation loops (-> FIR decimator) in one pass over ``x (B, T)``.

    Args:
        drnl_coefs: ``(g, lin_sos, nl1_sos, nl2_sos, a, b, c)`` as for :func:`drnl`.
        ihc_consts, ihc_state ``(B, C)``: as for :func:`ihc`.
        adapt_a, adapt_m: ``(C, J)`` loop coefficients and limiter constants;
        adapt_state ``(B, C, J)``; minlvl, use_limit, out_offset ``c``, out_scale: the
        adaptation-loop constants (output ``(v - c) * scale``, model units).
        dec_weight, dec_factor ``R``, dec_state: with ``R >= 1``, the adaptation output
            (rounded to ``x``'s dtype) goes through the FIR decimator
            :class:`lhotse_amt.models.paulick2024.FIRDecimator` (``dec_weight (K,)``: its
            flipped taps, output ``m`` at input sample ``R m``; ``dec_state``: its state,
            ``{"hist": (B, C, K - 1), "t": samples seen}``) inside the kernel, so no
            sample-rate output is stored.

    Returns:
        adaptation output ``(B, C, T)`` (or the decimated ``(B, C, M)``) in ``x``'s dtype,
        the three new states and the new decimator state (``None`` without decimation).
    """
    N, T = math.prod(x.shape[:-1]), x.shape[-1]
    C = drnl_coefs[0].shape[0]
    dt = np.dtype(np.float64)
    R = int(dec_factor) if dec_weight is not None else 0
    if R > 0:
        wd = _np(dec_weight.reshape(-1), dt)
        K = wd.shape[0]
        st = dec_state or {}
        t0 = int(st.get("t", 0))
        h = st.get("hist")
        if h is None:
            hist = np.zeros((N, K - 1, C), dt)
        else:
            hist = _np(h.to(x.dtype).reshape(N, C, K - 1), dt).transpose(0, 2, 1)
        j0 = (-t0) % R
        M = max(0, -(-(T - j0) // R))
    else:
        wd = np.zeros(1, dt)
        hist = np.zeros((N, 0, C), dt)
        t0 = j0 = 0
        M = T
    front = (drnl_coefs, ihc_consts, ihc_state, adapt_a, adapt_m, adapt_state)
    k = kernel_inputs(x, front, drnl_state, hist)
    lead = k.lead
    J = k.aa.shape[0]
    y = _alloc.empty((N, C, M), _out_dtype(x))
    if T > 0:
        # with a decimator and the exponent 1/4, the kernel that keeps each block of 8
        # channels' states in registers (same recursion; measured ~1.3-1.6x faster)
        kernel = _frontend_kernel
        if _SIMD and paulick_simd.supported(k.c, R):
            kernel = paulick_simd.frontend_kernel  # (on the jobs threads)
        else:
            _threads()
        kernel(
            k.x, *k.drnl, k.c, *k.drnl_state, k.ihc, k.w, k.aa, k.mm, k.s,
            dt.type(minlvl), bool(use_limit), dt.type(out_offset), dt.type(out_scale),
            wd, k.hist, j0, R, x.dtype == torch.float32, y,
        )  # fmt: skip
    zs = [z[..., :C] for z in k.drnl_state]
    w, s, hist = k.w[:, :C], k.s[..., :C], k.hist[..., :C]
    dev = x.device
    new_drnl = {key: _state_back(z, lead).to(dev) for key, z in zip(("lin", "nl1", "nl2"), zs)}
    s_out = torch.from_numpy(np.ascontiguousarray(s.transpose(0, 2, 1))).reshape(*lead, C, J)
    new_dec = None
    if R > 0:
        hb = torch.from_numpy(np.ascontiguousarray(hist.transpose(0, 2, 1)))
        new_dec = {"hist": hb.reshape(*lead, C, -1).to(device=dev, dtype=x.dtype), "t": t0 + T}
    return (
        torch.from_numpy(y).reshape(*lead, C, M).to(dev),
        new_drnl,
        torch.from_numpy(np.ascontiguousarray(w)).reshape(*lead, C).to(dev),
        s_out.to(dev),
        new_dec,
    )

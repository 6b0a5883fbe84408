"""CPU kernels (numba) of the IHC operator ``lhotse_amt::ihc_paulick`` and its backward.

The recursion is that of :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference`
(Paulick, Relaño-Iborra & Dau 2024), on the deviation ``W = V - V_pre`` (volts), per row
with the 12 step constants of :func:`~lhotse_amt.functional.ihc_paulick.ihc_step_constants`
in the order of :data:`IHC_STEP_KEYS`::

    u = x0 - scale x[n];   z = min(u, zmax)
    G = gmax / D,   D = 1 + e1 (1 + e0),   e1 = exp(z / s1),   e0 = exp(z / s0)
    W[n] = W[n-1] + k F,   F = -G (W[n-1] + dep) - gkf (W[n-1] + dkf) - gks (W[n-1] + dks)

**Adjoint** (derived by hand; ``a`` is the adjoint of ``W[n]``: the output gradient of
sample ``n`` plus what flows back from sample ``n + 1``)::

    a <- a + gy[n]
    g_k += a F;   g_gkf -= a k (W[n-1] + dkf);   g_gks -= a k (W[n-1] + dks)
    g_dep -= a k G;   g_dkf -= a k gkf;   g_dks -= a k gks
    g_G = -a k (W[n-1] + dep);   g_gmax += g_G / D;   g_D = -g_G G / D
    g_s1 -= g_D e1 (1 + e0) z / s1^2;   g_s0 -= g_D e1 e0 z / s0^2
    g_z = g_D (e1 (1 + e0) / s1 + e1 e0 / s0)
    capped (u > zmax): g_zmax += g_z;  else: g_x0 += g_z, g_scale -= g_z x[n],
                                             g_x[n] = -g_z scale
    a <- a (1 - k (G + gkf + gks))          (the adjoint of W[n-1])

After sample 0, ``a`` is the gradient of the initial state.

**Layout.** Rows are independent; output row ``r`` reads input row ``xrow[r]`` and
constant row ``crow[r]``. Rows run in lane groups of :data:`LANES` (``prange`` over the
groups, the lanes in the inner loop so that the two exponentials vectorise; padding lanes
repeat the group's last row). The recursion runs in float64 whatever the tensor dtype.
The forward stores ``W`` at the start of every block of :data:`CHECKPOINT_BLOCK` samples;
the backward recomputes each block once from its checkpoint into buffers (``W[n-1]``,
``A = e1 (1 + e0)``, ``e1 e0`` and ``1 / D`` per sample) and runs the adjoint back over
them: memory ``O(512)`` per thread plus ``O(T / 512)`` checkpoints per row. The slopes
enter as reciprocals (``z * (1 / s)``, as in :mod:`lhotse_amt.kernels.paulick`: last-bit
differences from the reference's ``z / s``).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .autodiff import CHECKPOINT_BLOCK, KERNEL_OPTS, checkpoint_blocks, lane_group, row_blocks
from .fastmath import (
    assume_distinct_arrays,
    denormals_off,
    prefer_wide_vectors,
    restore_fp_mode,
)
from .paulick import _exp
from .rows import RowKernels, numba_launch

__all__ = [
    "IHC_STEP_KEYS",
    "CHECKPOINT_BLOCK",
    "LANES",
    "checkpoint_blocks",
    "ihc_forward",
    "ihc_backward",
]

#: order of the step constants in the operator's constant rows
IHC_STEP_KEYS: tuple[str, ...] = (
    "scale",
    "gmax",
    "x0",
    "s0",
    "s1",
    "zmax",
    "k",
    "gkf",
    "gks",
    "dep",
    "dkf",
    "dks",
)
#: rows per lane group
LANES = 8

_CK = CHECKPOINT_BLOCK
_W = LANES
_NC = len(IHC_STEP_KEYS)
_OPTS = KERNEL_OPTS


@njit(inline="always", **_OPTS)
def _group(R, grp, xrow, crow, c, zi):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row), their input rows,
    # constants cc (12, W) and states w (W,)
    r0, nr, rows, xr, cr = lane_group(R, grp, _W, xrow, crow)
    cc = np.empty((_NC, _W))
    w = np.empty(_W)
    for q in range(_W):
        for j in range(_NC):
            cc[j, q] = c[cr[q], j]
        cc[3, q] = 1.0 / cc[3, q]
        cc[4, q] = 1.0 / cc[4, q]
        w[q] = zi[rows[q]]
    return r0, nr, rows, xr, cc, w


# One Euler step of lane q (cc rows 3, 4 hold the reciprocal slopes 1 / s0, 1 / s1):
#   z = min(x0 - scale x, zmax); e1 = exp(z / s1); e0 = exp(z / s0)
#   A = e1 (1 + e0); G = gmax / (1 + A); W <- W + k (-G (W + dep) - gkf (W + dkf) - ...)
# written out in each loop (an inlined helper returning a tuple keeps LLVM from
# vectorising the lane loop).
# The lane loops of one block, each a function of its own with the buffers as arguments:
# the buffers are distinct allocations (assume_distinct_arrays) and the lane count is a
# run-time value (LLVM leaves loops with a small constant trip count scalar), so the
# loops over the lanes vectorise.


@njit(**_OPTS)
def _fwd_block(n, cc, xb, w, yb):  # pragma: no cover - compiled
    assume_distinct_arrays()
    prefer_wide_vectors()
    L = w.shape[0]
    for i in range(n):
        for q in range(L):
            z = min(cc[2, q] - cc[0, q] * xb[i, q], cc[5, q])
            e1 = _exp(z * cc[4, q])
            e0 = _exp(z * cc[3, q])
            G = cc[1, q] / (1.0 + e1 * (1.0 + e0))
            W = w[q]
            F = -G * (W + cc[9, q]) - cc[7, q] * (W + cc[10, q]) - cc[8, q] * (W + cc[11, q])
            W = W + cc[6, q] * F
            w[q] = W
            yb[i, q] = W


@njit(**_OPTS)
def _rec_block(n, cc, xb, w, wp, bA, bB, bi):  # pragma: no cover - compiled
    # W[n-1], A, B and 1 / D of every sample of the block
    assume_distinct_arrays()
    prefer_wide_vectors()
    L = w.shape[0]
    for i in range(n):
        for q in range(L):
            z = min(cc[2, q] - cc[0, q] * xb[i, q], cc[5, q])
            e1 = _exp(z * cc[4, q])
            e0 = _exp(z * cc[3, q])
            A = e1 * (1.0 + e0)
            iD = 1.0 / (1.0 + A)
            G = cc[1, q] * iD
            W = w[q]
            F = -G * (W + cc[9, q]) - cc[7, q] * (W + cc[10, q]) - cc[8, q] * (W + cc[11, q])
            wp[i, q] = W
            bA[i, q] = A
            bB[i, q] = e1 * e0
            bi[i, q] = iD
            w[q] = W + cc[6, q] * F


@njit(**_OPTS)
def _adj_block(n, cc, xb, gyb, wp, bA, bB, bi, a, g, gxb, want_c):  # pragma: no cover
    # the adjoint back over the block: a (W,) from the adjoint of the block's last state
    # to that of the state before it; constant gradients accumulate into g (12, W)
    assume_distinct_arrays()
    prefer_wide_vectors()
    L = a.shape[0]
    for i in range(n - 1, -1, -1):
        for q in range(L):
            sc, gm, x0, r0s, r1s, zm = cc[0, q], cc[1, q], cc[2, q], cc[3, q], cc[4, q], cc[5, q]
            kk, gkf, gks, dep = cc[6, q], cc[7, q], cc[8, q], cc[9, q]
            xv = xb[i, q]
            aq = a[q] + gyb[i, q]
            Wp = wp[i, q]
            A = bA[i, q]
            B = bB[i, q]
            iD = bi[i, q]
            u = x0 - sc * xv
            capped = u > zm
            z = zm if capped else u
            G = gm * iD
            ka = kk * aq
            gG = -ka * (Wp + dep)
            gD = -gG * G * iD
            gz = gD * (A * r1s + B * r0s)
            gu = 0.0 if capped else gz
            gxb[i, q] = -gu * sc
            if want_c:
                F = -G * (Wp + dep) - gkf * (Wp + cc[10, q]) - gks * (Wp + cc[11, q])
                g[0, q] -= gu * xv
                g[1, q] += gG * iD
                g[2, q] += gu
                g[3, q] -= gD * B * z * r0s * r0s
                g[4, q] -= gD * A * z * r1s * r1s
                g[5, q] += gz - gu
                g[6, q] += aq * F
                g[7, q] -= ka * (Wp + cc[10, q])
                g[8, q] -= ka * (Wp + cc[11, q])
                g[9, q] -= ka * G
                g[10, q] -= ka
                g[11, q] -= ka
            a[q] = aq * (1.0 - kk * (G + gkf + gks))


@njit(**_OPTS)
def _fwd_group(grp, x, xrow, c, crow, zi, y, zf, ck):  # pragma: no cover - compiled
    # one lane group, block by block: the lanes' input gathered into xb (n, W), the
    # recursion over contiguous lanes, the output scattered back from yb. (A function of
    # its own, not the prange body: compiled on its own, the lane loops vectorise.)
    prefer_wide_vectors()
    R, T, _, nb = row_blocks(y, _W)
    keep = ck.shape[1] > 0
    r0, nr, rows, xr, cc, w = _group(R, grp, xrow, crow, c, zi)
    xb = np.empty((_CK, _W))
    yb = np.empty((_CK, _W))
    for b in range(nb):
        t0 = b * _CK
        n = min(_CK, T - t0)
        if keep:
            for q in range(nr):
                ck[r0 + q, b] = w[q]
        for q in range(_W):
            for i in range(n):
                xb[i, q] = np.float64(x[xr[q], t0 + i])
        _fwd_block(n, cc, xb, w, yb)
        for q in range(nr):
            for i in range(n):
                y[r0 + q, t0 + i] = yb[i, q]
    for q in range(nr):
        zf[r0 + q] = w[q]


@njit(parallel=True, **_OPTS)
def _fwd(x, xrow, c, crow, zi, y, zf, ck):  # pragma: no cover - compiled
    R = y.shape[0]
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        _fwd_group(grp, x, xrow, c, crow, zi, y, zf, ck)
        restore_fp_mode(fp)


@njit(**_OPTS)
def _bwd_group(
    grp, gy, gzf, x, xrow, c, crow, zi, ck, gx, gc, gzi, want_x, want_c
):  # pragma: no cover - compiled
    # one lane group: each block's input and output gradient gathered into (n, W)
    # buffers, the block recomputed from its checkpoint (W[n-1], A, B, 1 / D per sample),
    # then the adjoint back over it; the input gradient scattered back from gxb
    prefer_wide_vectors()
    R, T, _, nb = row_blocks(gy, _W)
    r0, nr, rows, xr, cc, w = _group(R, grp, xrow, crow, c, zi)
    # (n, W) buffers, each its own allocation (assume_distinct_arrays): input, output and
    # input gradient; W[n-1], A, B and 1 / D per sample
    e = (_CK, _W)
    xb, gyb, gxb = np.empty(e), np.empty(e), np.empty(e)
    wp, bA, bB, bi = np.empty(e), np.empty(e), np.empty(e), np.empty(e)
    a = np.empty(_W)
    for q in range(_W):
        a[q] = gzf[rows[q]]
    g = np.zeros((_NC, _W))
    for b in range(nb - 1, -1, -1):
        t0 = b * _CK
        n = min(_CK, T - t0)
        for q in range(_W):
            w[q] = ck[rows[q], b]
            for i in range(n):
                xb[i, q] = np.float64(x[xr[q], t0 + i])
                gyb[i, q] = np.float64(gy[rows[q], t0 + i])
        _rec_block(n, cc, xb, w, wp, bA, bB, bi)
        _adj_block(n, cc, xb, gyb, wp, bA, bB, bi, a, g, gxb, want_c)
        if want_x:
            for q in range(nr):
                for i in range(n):
                    gx[r0 + q, t0 + i] = gxb[i, q]
    for q in range(nr):
        gzi[r0 + q] = a[q]
        if want_c:
            for j in range(_NC):
                gc[r0 + q, j] = g[j, q]
            # d W / d dkf = -k gkf and d W / d dks = -k gks per sample: the sums of -k a
            # times the constant conductances
            gc[r0 + q, 10] *= cc[7, q]
            gc[r0 + q, 11] *= cc[8, q]


@njit(parallel=True, **_OPTS)
def _bwd(gy, gzf, x, xrow, c, crow, zi, ck, gx, gc, gzi, want_x, want_c):  # pragma: no cover
    R = gy.shape[0]
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        _bwd_group(grp, gy, gzf, x, xrow, c, crow, zi, ck, gx, gc, gzi, want_x, want_c)
        restore_fp_mode(fp)


KERNELS = RowKernels(numba_launch(_fwd), numba_launch(_bwd))
#: ``(x (Rx, T), xrow (R,), c (Rc, 12) (:data:`IHC_STEP_KEYS`), crow (R,), zi (R,),
#: keep=True)`` -> ``W (R, T)`` in ``x``'s dtype (volts re ``V_pre``), the final states
#: ``(R,)`` in ``zi``'s dtype and (``keep``) the states at the start of every block
#: ``(R, checkpoint_blocks(T))`` float64 (else ``(R, 0)``)
#: (:class:`~lhotse_amt.kernels.rows.RowKernels`)
ihc_forward = KERNELS.forward
#: ``(gy, gzf, x, xrow, c, crow, zi, ck, want_x, want_c)`` -> per-row gradients
#: ``gx (R, T)`` (``(R, 0)`` unless ``want_x``; ``x``'s dtype), ``gc (R, 12)`` and
#: ``gzi (R,)`` (float64) from the forward's checkpoints ``ck``
ihc_backward = KERNELS.backward

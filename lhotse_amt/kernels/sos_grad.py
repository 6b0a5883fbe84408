"""Second-order sections (transposed direct form II, as :func:`scipy.signal.sosfilt`) with
gradients: the kernels of the operator ``lhotse_amt::sos``.

Forward and backward CPU kernels (numba); the checkpointed backward scheme and the row
layout are those of :mod:`lhotse_amt.kernels.autodiff`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .autodiff import _CKA, KERNEL_OPTS, lane_group, row_blocks
from .cpu import _load_lane_pairs, _store_lanes, sos_lane_coefs
from .fastmath import assume_distinct_arrays, denormals_off, restore_fp_mode
from .rows import RowKernels, numba_launch

__all__ = ["sos_forward", "sos_backward"]

_OPTS = KERNEL_OPTS


# --------------------------------------------------------------------------------------
# Second-order sections, transposed direct form II (scipy.signal.sosfilt)
# --------------------------------------------------------------------------------------


_WS = 16  # rows per lane group of the second-order-section kernels


@njit(inline="always", **_OPTS)
def _sos_group(R, grp, xrow, crow, sos, zi, S):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row), their input rows,
    # coefficients co (S, 5, W) = b0, b1, b2, a1, a2 and states z (S, 2, W)
    W = _WS
    r0, nr, rows, xr, cr = lane_group(R, grp, W, xrow, crow)
    co = np.empty((S, 5, W))
    z = np.empty((S, 2, W))
    for k in range(W):
        sos_lane_coefs(co, k, sos, cr[k])
        for q in range(S):
            z[q, 0, k] = zi[rows[k], q, 0]
            z[q, 1, k] = zi[rows[k], q, 1]
    return r0, nr, rows, xr, co, z


@njit(parallel=True, **_OPTS)
def _sos_fwd(x, xrow, sos, crow, zi, y, zf, ck):  # pragma: no cover - compiled
    # lane groups of _WS rows; section states at the start of every block of _CKA
    # samples go to ck (R, nb, S, 2) for the backward
    R = y.shape[0]
    T = y.shape[1]
    S = sos.shape[1]
    W = _WS
    for grp in prange((R + W - 1) // W):
        fp = denormals_off()
        r0, nr, rows, xr, co, z = _sos_group(R, grp, xrow, crow, sos, zi, S)
        v = np.empty(W)
        for n in range(T):
            if n % _CKA == 0 and ck.shape[1] > 0:  # ck (R, 0, S, 2) when not kept
                b = n // _CKA
                for k in range(nr):
                    for q in range(S):
                        ck[r0 + k, b, q, 0] = z[q, 0, k]
                        ck[r0 + k, b, q, 1] = z[q, 1, k]
            for k in range(W):
                v[k] = np.float64(x[xr[k], n])
            for q in range(S):
                for k in range(W):
                    vk = v[k]
                    out = co[q, 0, k] * vk + z[q, 0, k]
                    z[q, 0, k] = co[q, 1, k] * vk - co[q, 3, k] * out + z[q, 1, k]
                    z[q, 1, k] = co[q, 2, k] * vk - co[q, 4, k] * out
                    v[k] = out
            for k in range(nr):
                y[r0 + k, n] = v[k]
        for k in range(nr):
            for q in range(S):
                zf[r0 + k, q, 0] = z[q, 0, k]
                zf[r0 + k, q, 1] = z[q, 1, k]
        restore_fp_mode(fp)


@njit(**_OPTS)
def _sos_record(S, n, co, z, w):  # pragma: no cover - compiled
    # n samples of the lanes through the sections: w[0] (n, W) holds the input; section
    # inputs and the last output into w (S + 1, n, W); advances z. Its own function so
    # that the arrays are marked distinct (the lane loops vectorise)
    assume_distinct_arrays()
    W = _WS
    for q in range(S):
        for i in range(n):
            for k in range(W):
                vk = w[q, i, k]
                out = co[q, 0, k] * vk + z[q, 0, k]
                z[q, 0, k] = co[q, 1, k] * vk - co[q, 3, k] * out + z[q, 1, k]
                z[q, 1, k] = co[q, 2, k] * vk - co[q, 4, k] * out
                w[q + 1, i, k] = out


@njit(**_OPTS)
def _sos_adjoint(S, n, co, w, g, lam, gc):  # pragma: no cover - compiled
    # the adjoint of every section (last first) back over n samples of the lanes:
    # G = g - a1 l1 - a2 l2; g <- b0 G + b1 l1 + b2 l2; (l1, l2) <- (G, l1); output
    # gradients g (n, W) in, input gradients out; state adjoints lam (S, 2, W) = (l1, l2);
    # coefficient gradient sums gc (S, 5, W)
    assume_distinct_arrays()
    W = _WS
    for q in range(S - 1, -1, -1):
        for i in range(n - 1, -1, -1):
            for k in range(W):
                p1 = lam[q, 0, k]
                p2 = lam[q, 1, k]
                v = w[q, i, k]
                out = w[q + 1, i, k]
                G = g[i, k] - co[q, 3, k] * p1 - co[q, 4, k] * p2
                g[i, k] = co[q, 0, k] * G + co[q, 1, k] * p1 + co[q, 2, k] * p2
                gc[q, 0, k] += G * v
                gc[q, 1, k] += p1 * v
                gc[q, 2, k] += p2 * v
                gc[q, 3, k] -= p1 * out
                gc[q, 4, k] -= p2 * out
                lam[q, 1, k] = p1
                lam[q, 0, k] = G


@njit(parallel=True, **_OPTS)
def _sos_bwd(
    gy, gzf, x, xrow, sos, crow, zi, ck, gx, gsos, gzi, want_x, want_c
):  # pragma: no cover
    # per block (last first): the section signals are recomputed from the block's
    # checkpoint, then the adjoint of every section (last first) runs back over it:
    # G = g - a1 l1 - a2 l2; g <- b0 G + b1 l1 + b2 l2; (l1, l2) <- (G, l1)
    R, T, ng, nb = row_blocks(gy, _WS)
    S = sos.shape[1]
    W = _WS
    for grp in prange(ng):
        fp = denormals_off()
        # the lanes' state adjoints lam (S, 2, W) from gzf as the forward's states from zi;
        # the states z are set from the checkpoints at every block
        r0, nr, rows, xr, co, lam = _sos_group(R, grp, xrow, crow, sos, gzf, S)
        z = np.empty((S, 2, W))
        w = np.empty((S + 1, _CKA, W))
        g = np.empty((_CKA, W))
        gc = np.zeros((S, 5, W))
        for b in range(nb - 1, -1, -1):
            t0 = b * _CKA
            n = min(_CKA, T - t0)
            for k in range(W):
                for q in range(S):
                    z[q, 0, k] = ck[rows[k], b, q, 0]
                    z[q, 1, k] = ck[rows[k], b, q, 1]
            _load_lane_pairs(x, xr, gy, rows, t0, n, w[0], g)
            _sos_record(S, n, co, z, w)
            _sos_adjoint(S, n, co, w, g, lam, gc)
            if want_x:
                _store_lanes(g, r0, nr, t0, n, gx)
        for k in range(nr):
            for q in range(S):
                gzi[r0 + k, q, 0] = lam[q, 0, k]
                gzi[r0 + k, q, 1] = lam[q, 1, k]
                if want_c:
                    gsos[r0 + k, q, 0] = gc[q, 0, k]
                    gsos[r0 + k, q, 1] = gc[q, 1, k]
                    gsos[r0 + k, q, 2] = gc[q, 2, k]
                    gsos[r0 + k, q, 4] = gc[q, 3, k]
                    gsos[r0 + k, q, 5] = gc[q, 4, k]
        restore_fp_mode(fp)


KERNELS = RowKernels(numba_launch(_sos_fwd), numba_launch(_sos_bwd))
#: ``(x (Rx, T), xrow (R,), sos (Rc, S, 6), crow (R,), zi (R, S, 2))`` -> ``y (R, T)`` in
#: ``x``'s dtype, ``zf (R, S, 2)`` in ``zi``'s and the backward's checkpoints
#: ``(R, checkpoint_blocks(T), S, 2)`` float64 (:class:`~lhotse_amt.kernels.rows.RowKernels`)
sos_forward = KERNELS.forward
#: ``(gy, gzf, x, xrow, sos, crow, zi, ck, want_x, want_c)`` -> per-row gradients
#: ``gx (R, T)``, ``gsos (R, S, 6)``, ``gzi (R, S, 2)`` (float64 for the coefficient and
#: state gradients, ``x``'s dtype for ``gx``)
sos_backward = KERNELS.backward

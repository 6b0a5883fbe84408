"""Adaptation loops with the overshoot limiter (Dau et al. 1996a; Munkner et al. 1996) with
gradients: the kernels of the adaptation operator.

Forward and backward CPU kernels (numba); the checkpointed backward scheme and the row
layout are those of :mod:`lhotse_amt.kernels.autodiff`.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .autodiff import _CKA, KERNEL_OPTS, lane_group, row_blocks
from .cpu import divide_lanes
from .fastmath import assume_distinct_arrays, denormals_off, exp_nonpos_inline, restore_fp_mode
from .rows import RowKernels, numba_launch

__all__ = ["adaptation_forward", "adaptation_backward"]

_OPTS = KERNEL_OPTS


# --------------------------------------------------------------------------------------
# Adaptation loops with the overshoot limiter (Dau et al. 1996a; Munkner et al. 1996)
# --------------------------------------------------------------------------------------
# v_0 = max(x, minlvl); loop j: w = v / s_j; v = lim_j(w) if limit and w > 1 else w;
# s_j <- a_j s_j + (1 - a_j) v.  lim(w) = 2 m / (1 + e) - (m - 1), e = exp(-2 (w - 1) / m)


_W = 32  # rows per lane group of the adaptation-loop kernels


@njit(inline="always", **_OPTS)
def _lim_e(w, m):  # pragma: no cover - compiled
    # e = exp(-2 (w - 1) / m) for w > 1 (vectorisable exp; the argument clamped to
    # [-37.5, 0], where the limiter is saturated to double precision)
    t = -2.0 * (w - 1.0) / m
    t = t if t > -37.5 else -37.5
    t = t if t < 0.0 else 0.0
    return exp_nonpos_inline(t)


@njit(inline="always", **_OPTS)
def _lane_group(R, grp, xrow, crow, a, m, zi, J):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row), their input rows,
    # coefficients (J, W) and states (J, W)
    r0, nr, rows, xr, cr = lane_group(R, grp, _W, xrow, crow)
    aa = np.empty((J, _W))
    mm = np.empty((J, _W))
    s = np.empty((J, _W))
    for k in range(_W):
        for j in range(J):
            aa[j, k] = a[cr[k], j]
            mm[j, k] = m[cr[k], j]
            s[j, k] = zi[rows[k], j]
    return r0, nr, rows, xr, aa, mm, s


@njit(inline="always", **_OPTS)
def _adapt_step(v, j, s, aa, mm, use_limit):  # pragma: no cover - compiled
    # loop j on the lanes of v in place; returns whether a lane hit the limiter
    W = v.shape[0]
    hits = divide_lanes(v, s, j)
    if use_limit and hits:
        for k in range(W):
            q = v[k]
            e = _lim_e(q, mm[j, k])
            lim = 2.0 * mm[j, k] / (1.0 + e) - (mm[j, k] - 1.0)
            v[k] = lim if q > 1.0 else q
    for k in range(W):
        s[j, k] = aa[j, k] * s[j, k] + (1.0 - aa[j, k]) * v[k]
    return hits


@njit(parallel=True, **_OPTS)
def _adapt_fwd(x, xrow, a, m, crow, minlvl, use_limit, zi, y, zf, ck):  # pragma: no cover
    # lane groups of _W rows; the states at the start of every block of _CKA samples go
    # to ck (R, nb, J) for the backward
    R = y.shape[0]
    T = y.shape[1]
    J = zi.shape[1]
    keep = ck.shape[1] > 0
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        r0, nr, rows, xr, aa, mm, s = _lane_group(R, grp, xrow, crow, a, m, zi, J)
        v = np.empty(_W)
        for n in range(T):
            if keep and n % _CKA == 0:
                b = n // _CKA
                for k in range(nr):
                    for j in range(J):
                        ck[r0 + k, b, j] = s[j, k]
            for k in range(_W):
                q = np.float64(x[xr[k], n])
                v[k] = q if q > minlvl else minlvl
            for j in range(J):
                _adapt_step(v, j, s, aa, mm, use_limit)
            for k in range(nr):
                y[r0 + k, n] = v[k]
        for k in range(nr):
            for j in range(J):
                zf[r0 + k, j] = s[j, k]
        restore_fp_mode(fp)


@njit(**_OPTS)
def _adapt_record(J, n, xb, aa, mm, use_limit, s, v, sv, inv, wis, dl, dm):  # pragma: no cover
    # n samples of the lanes' clamped input xb (n, W) through the loops, recording per
    # sample and loop (J, n, W) the terms of the adjoint step: s - v_out (sv), 1 / s (inv),
    # w / s (wis), the limiter's derivatives d lim / dw (dl, 1 without limiting) and
    # d lim / dm (dm, 0 without); scratch v (W,). Its own function so that the arrays are
    # marked distinct (the lane loops vectorise)
    assume_distinct_arrays()
    for i in range(n):
        for k in range(_W):
            v[k] = xb[i, k]
        for j in range(J):
            hits = False
            for k in range(_W):
                sk = s[j, k]
                q = v[k] / sk
                iv = 1.0 / sk
                inv[j, i, k] = iv
                wis[j, i, k] = q * iv
                dl[j, i, k] = 1.0
                dm[j, i, k] = 0.0
                v[k] = q
                hits |= q > 1.0
            if use_limit and hits:
                for k in range(_W):
                    q = v[k]
                    mk = mm[j, k]
                    e = _lim_e(q, mk)
                    d = 1.0 + e
                    lim = 2.0 * mk / d - (mk - 1.0)
                    hit = q > 1.0
                    dl[j, i, k] = 4.0 * e / (d * d) if hit else 1.0
                    dm[j, i, k] = 2.0 / d - 4.0 * e * (q - 1.0) / (mk * d * d) - 1.0 if hit else 0.0
                    v[k] = lim if hit else q
            for k in range(_W):
                sk = s[j, k]
                sv[j, i, k] = sk - v[k]
                s[j, k] = aa[j, k] * sk + (1.0 - aa[j, k]) * v[k]


@njit(**_OPTS)
def _adapt_adjoint(J, n, gb, aa, sv, inv, wis, dl, dm, lam, gaa, gmm, gv):  # pragma: no cover
    # the adjoint step (multiply-adds only) back over n samples of the lanes: output
    # gradients gb (n, W) in, gradients of the loops' input out (in place); carried state
    # adjoints lam (J, W); coefficient gradient sums gaa, gmm (J, W); scratch gv (W,)
    assume_distinct_arrays()
    for i in range(n - 1, -1, -1):
        for k in range(_W):
            gv[k] = gb[i, k]
        for j in range(J - 1, -1, -1):
            for k in range(_W):
                lj = lam[j, k]
                gvt = gv[k] + (1.0 - aa[j, k]) * lj
                gaa[j, k] += lj * sv[j, i, k]
                gmm[j, k] += gvt * dm[j, i, k]
                gw = gvt * dl[j, i, k]
                gv[k] = gw * inv[j, i, k]
                lam[j, k] = aa[j, k] * lj - gw * wis[j, i, k]
        for k in range(_W):
            gb[i, k] = gv[k]


@njit(parallel=True, **_OPTS)
def _adapt_bwd(
    gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, gx, ga, gm, gzi, want_x, want_c
):  # pragma: no cover - compiled
    # lane groups as the forward; each block is recomputed once from its checkpoint,
    # then the adjoint step (multiply-adds only) runs back over it
    R, T, ng, nb = row_blocks(gy, _W)
    J = zi.shape[1]
    for grp in prange(ng):
        fp = denormals_off()
        # the lanes' state adjoints lam (J, W) from gzf as the forward's states from zi;
        # the states s are set from the checkpoints at every block
        r0, nr, rows, xr, aa, mm, lam = _lane_group(R, grp, xrow, crow, a, m, gzf, J)
        s = np.empty((J, _W))
        sv = np.empty((J, _CKA, _W))
        inv = np.empty((J, _CKA, _W))
        wis = np.empty((J, _CKA, _W))
        dl = np.empty((J, _CKA, _W))
        dm = np.empty((J, _CKA, _W))
        gaa = np.zeros((J, _W))
        gmm = np.zeros((J, _W))
        gv = np.empty(_W)
        v = np.empty(_W)
        xb = np.empty((_CKA, _W))
        gb = np.empty((_CKA, _W))
        for b in range(nb - 1, -1, -1):
            t0 = b * _CKA
            n = min(_CKA, T - t0)
            for k in range(_W):
                for j in range(J):
                    s[j, k] = ck[rows[k], b, j]
            for i in range(n):
                for k in range(_W):
                    q = np.float64(x[xr[k], t0 + i])
                    xb[i, k] = q if q > minlvl else minlvl
                    gb[i, k] = gy[rows[k], t0 + i]
            _adapt_record(J, n, xb, aa, mm, use_limit, s, v, sv, inv, wis, dl, dm)
            _adapt_adjoint(J, n, gb, aa, sv, inv, wis, dl, dm, lam, gaa, gmm, gv)
            if want_x:
                for i in range(n):
                    for k in range(nr):
                        q = np.float64(x[xr[k], t0 + i])
                        gx[r0 + k, t0 + i] = gb[i, k] if q > minlvl else 0.0
        for k in range(nr):
            for j in range(J):
                gzi[r0 + k, j] = lam[j, k]
                if want_c:
                    ga[r0 + k, j] = gaa[j, k]
                    gm[r0 + k, j] = gmm[j, k]
        restore_fp_mode(fp)


KERNELS = RowKernels(numba_launch(_adapt_fwd), numba_launch(_adapt_bwd))
#: ``(x (Rx, T), xrow (R,), a (Rc, J), m (Rc, J), crow (R,), minlvl, use_limit, zi (R, J),
#: keep=True)`` -> raw loop output ``v (R, T)``, final states ``(R, J)`` and (``keep``) the
#: checkpoints of the backward ``(R, checkpoint_blocks(T), J)`` float64 (else ``(R, 0, J)``)
#: (:class:`~lhotse_amt.kernels.rows.RowKernels`)
adaptation_forward = KERNELS.forward
#: ``(gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, want_x, want_c)`` -> per-row
#: ``gx (R, T)``, ``ga (R, J)``, ``gm (R, J)``, ``gzi (R, J)`` from the forward's
#: checkpoints ``ck``
adaptation_backward = KERNELS.backward

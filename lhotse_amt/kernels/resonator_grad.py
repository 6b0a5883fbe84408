"""Cascades of identical complex one-pole sections with a complex gain and a real output
(``Re`` or ``|.|``) with gradients: the kernels of the resonator operator.

Forward and backward CPU kernels (numba); the checkpointed backward scheme and the row
layout are those of :mod:`lhotse_amt.kernels.autodiff`.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .autodiff import _CKA, KERNEL_OPTS, lane_group, row_blocks
from .cpu import _load_lane_pairs, _load_lanes, _store_lanes, complex_pole_lanes
from .fastmath import assume_distinct_arrays, denormals_off, restore_fp_mode
from .rows import RowKernels, numba_launch

__all__ = ["resonator_forward", "resonator_backward"]

_OPTS = KERNEL_OPTS


# --------------------------------------------------------------------------------------
# Cascade of K identical complex one-pole sections with a complex gain, real output
# --------------------------------------------------------------------------------------
# u_k[n] = p u_k[n-1] + u_{k-1}[n], u_0 = x (real); w = g u_K;
# y = Re w (mode 0) or |w| (mode 1). A single section (K = 1: the modulation filterbanks'
# resonators) has its own forward and backward loops over transposed sample blocks, in
# which the lane loops vectorise without the section loop


_WR = 16  # rows per lane group of the resonator kernels


@njit(inline="always", **_OPTS)
def _res_group(R, grp, xrow, crow, pole, gain, mode, zi, K):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row) with their input rows,
    # pole, gain, output mode and section states (K, W)
    W = _WR
    r0, nr, rows, xr, cr = lane_group(R, grp, W, xrow, crow)
    pr = np.empty(W)
    pi = np.empty(W)
    gr = np.empty(W)
    gi = np.empty(W)
    ab = np.empty(W)
    sr = np.empty((K, W))
    si = np.empty((K, W))
    for k in range(W):
        r = rows[k]
        c = cr[k]
        pr[k] = pole[c, 0]
        pi[k] = pole[c, 1]
        gr[k] = gain[c, 0]
        gi[k] = gain[c, 1]
        ab[k] = 1.0 if mode[c] != 0 else 0.0
        for q in range(K):
            sr[q, k] = zi[r, q, 0]
            si[q, k] = zi[r, q, 1]
    return r0, nr, rows, xr, pr, pi, gr, gi, ab, sr, si


@njit(**_OPTS)
def _res_run1(n, xb, pr, pi, gr, gi, ab, sr, si, yb):  # pragma: no cover
    # one section (K = 1) over n samples of the lanes' input xb (n, W): outputs into
    # yb (n, W), advances sr/si. Its own function so that the arrays are marked distinct
    # (the lane loop vectorises)
    assume_distinct_arrays()
    for i in range(n):
        for k in range(_WR):
            a = sr[0, k]
            b = si[0, k]
            nre = pr[k] * a - pi[k] * b + xb[i, k]
            nim = pr[k] * b + pi[k] * a
            sr[0, k] = nre
            si[0, k] = nim
            wr = gr[k] * nre - gi[k] * nim
            wi = gr[k] * nim + gi[k] * nre
            mag = math.sqrt(wr * wr + wi * wi)
            yb[i, k] = mag if ab[k] != 0.0 else wr


@njit(parallel=True, **_OPTS)
def _res_fwd(x, xrow, pole, gain, mode, crow, zi, y, zf, ck):  # pragma: no cover - compiled
    # lane groups of _WR rows; section states at the start of every block of _CKA
    # samples go to ck (R, nb, K, 2) for the backward
    R = y.shape[0]
    T = y.shape[1]
    K = zi.shape[1]
    W = _WR
    keep = ck.shape[1] > 0
    for grp in prange((R + W - 1) // W):
        fp = denormals_off()
        r0, nr, rows, xr, pr, pi, gr, gi, ab, sr, si = _res_group(
            R, grp, xrow, crow, pole, gain, mode, zi, K
        )
        vr = np.empty(W)
        vi = np.empty(W)
        # one section: block by block through transposed buffers (xb, yb)
        xb = np.empty((_CKA if K == 1 else 0, W))
        yb = np.empty((_CKA if K == 1 else 0, W))
        for n in range(T):
            if keep and n % _CKA == 0:
                b = n // _CKA
                for k in range(nr):
                    for q in range(K):
                        ck[r0 + k, b, q, 0] = sr[q, k]
                        ck[r0 + k, b, q, 1] = si[q, k]
            if K == 1:
                if n % _CKA == 0:
                    nn = min(_CKA, T - n)
                    _load_lanes(x, xr, n, nn, xb)
                    _res_run1(nn, xb, pr, pi, gr, gi, ab, sr, si, yb)
                    _store_lanes(yb, r0, nr, n, nn, y)
                continue
            for k in range(W):
                vr[k] = np.float64(x[xr[k], n])
                vi[k] = 0.0
            for q in range(K):
                complex_pole_lanes(W, pr, pi, sr[q], si[q], vr, vi)
            for k in range(W):
                wr = gr[k] * vr[k] - gi[k] * vi[k]
                wi = gr[k] * vi[k] + gi[k] * vr[k]
                mag = math.sqrt(wr * wr + wi * wi)
                vr[k] = mag if ab[k] != 0.0 else wr
            for k in range(nr):
                y[r0 + k, n] = vr[k]
        for k in range(nr):
            for q in range(K):
                zf[r0 + k, q, 0] = sr[q, k]
                zf[r0 + k, q, 1] = si[q, k]
        restore_fp_mode(fp)


@njit(inline="always", **_OPTS)
def _output_factor(vr, vi, gr, gi, ab):  # pragma: no cover - compiled
    # d output / d w as a complex factor for w = g u_K: w / |w| for |.| lanes (0 at w = 0),
    # 1 for Re lanes
    wr = gr * vr - gi * vi
    wi = gr * vi + gi * vr
    mag = math.sqrt(wr * wr + wi * wi)
    inv = 1.0 / mag if mag > 0.0 else 0.0
    return (wr * inv, wi * inv) if ab != 0.0 else (1.0, 0.0)


@njit(inline="always", **_OPTS)
def _output_adjoint(g, fr, fi, kr, ki, gr, gi, acc, k):  # pragma: no cover - compiled
    # output gradient g of lane k: G_w = g f; G_g += conj(u_K) G_w into acc[2:4, k];
    # returns G_{u_K} = conj(g) G_w
    Gwr = g * fr
    Gwi = g * fi
    acc[2, k] += kr * Gwr + ki * Gwi
    acc[3, k] += kr * Gwi - ki * Gwr
    return gr * Gwr + gi * Gwi, gr * Gwi - gi * Gwr


@njit(inline="always", **_OPTS)
def _section_adjoint(lr, li, Gr, Gi, ur, ui, pr, pi, acc, k):  # pragma: no cover - compiled
    # one section of lane k at one sample: lambda = carried + G_{u_q}; G_p += conj(u_q[n-1])
    # lambda into acc[0:2, k]; returns lambda and the carried conj(p) lambda
    lkr = lr + Gr
    lki = li + Gi
    acc[0, k] += ur * lkr + ui * lki
    acc[1, k] += ur * lki - ui * lkr
    return lkr, lki, pr * lkr + pi * lki, pr * lki - pi * lkr


@njit(**_OPTS)
def _res_record(K, n, xb, pr, pi, gr, gi, ab, sr, si, ur, ui, kr, ki, fr, fi):  # pragma: no cover
    # n samples of the lanes' input xb (n, W): section states before each sample (ur, ui:
    # (K, n, W)), the last section's output u_K (kr, ki: (n, W)) and the output's
    # derivative factor (fr + i fi: w / |w| for |.| lanes, 1 for Re lanes); advances
    # sr/si. Its own function so that the arrays are marked distinct (lane loops vectorise)
    assume_distinct_arrays()
    W = _WR  # a compile-time trip count: the lane loops unroll into vectors
    for i in range(n):
        for k in range(W):
            kr[i, k] = xb[i, k]
            ki[i, k] = 0.0
        for q in range(K):
            for k in range(W):
                ur[q, i, k] = sr[q, k]
                ui[q, i, k] = si[q, k]
                nre = pr[k] * sr[q, k] - pi[k] * si[q, k] + kr[i, k]
                nim = pr[k] * si[q, k] + pi[k] * sr[q, k] + ki[i, k]
                sr[q, k] = nre
                si[q, k] = nim
                kr[i, k] = nre
                ki[i, k] = nim
        for k in range(W):
            fr[i, k], fi[i, k] = _output_factor(kr[i, k], ki[i, k], gr[k], gi[k], ab[k])


@njit(**_OPTS)
def _res_adjoint(
    K, n, gb, pr, pi, gr, gi, ur, ui, kr, ki, fr, fi, lr, li, acc, Gr, Gi
):  # pragma: no cover
    # the adjoint recursion back over n samples of the lanes: output gradients gb (n, W)
    # in, input gradients out (in place); carried section adjoints lr/li (K, W);
    # gradient sums acc (4, W): Re/Im of the pole's, Re/Im of the gain's; scratch Gr/Gi (W,)
    assume_distinct_arrays()
    W = _WR
    for i in range(n - 1, -1, -1):
        for k in range(W):
            Gr[k], Gi[k] = _output_adjoint(
                gb[i, k], fr[i, k], fi[i, k], kr[i, k], ki[i, k], gr[k], gi[k], acc, k
            )
        for q in range(K - 1, -1, -1):
            for k in range(W):
                Gr[k], Gi[k], lr[q, k], li[q, k] = _section_adjoint(
                    lr[q, k], li[q, k], Gr[k], Gi[k], ur[q, i, k], ui[q, i, k], pr[k], pi[k],
                    acc, k,
                )  # fmt: skip
        for k in range(W):
            gb[i, k] = Gr[k]


@njit(**_OPTS)
def _res_record1(n, xb, pr, pi, gr, gi, ab, sr, si, ur, ui, fr, fi):  # pragma: no cover
    # one section (K = 1): the section state before each sample and after the last
    # (ur, ui: (n + 1, W)) and the output's derivative factor (fr + i fi); advances sr/si
    assume_distinct_arrays()
    W = _WR
    for k in range(W):
        ur[0, k] = sr[0, k]
        ui[0, k] = si[0, k]
    for i in range(n):
        for k in range(W):
            a = ur[i, k]
            b = ui[i, k]
            nre = pr[k] * a - pi[k] * b + xb[i, k]
            nim = pr[k] * b + pi[k] * a
            ur[i + 1, k] = nre
            ui[i + 1, k] = nim
            fr[i, k], fi[i, k] = _output_factor(nre, nim, gr[k], gi[k], ab[k])
    for k in range(W):
        sr[0, k] = ur[n, k]
        si[0, k] = ui[n, k]


@njit(**_OPTS)
def _res_adjoint1(n, gb, pr, pi, gr, gi, ur, ui, fr, fi, lr, li, acc):  # pragma: no cover
    # the adjoint of one section (K = 1) back over n samples (see _res_adjoint)
    assume_distinct_arrays()
    W = _WR
    for i in range(n - 1, -1, -1):
        for k in range(W):
            Gr, Gi = _output_adjoint(
                gb[i, k], fr[i, k], fi[i, k], ur[i + 1, k], ui[i + 1, k], gr[k], gi[k], acc, k
            )
            gb[i, k], _, lr[0, k], li[0, k] = _section_adjoint(
                lr[0, k], li[0, k], Gr, Gi, ur[i, k], ui[i, k], pr[k], pi[k], acc, k
            )


@njit(parallel=True, **_OPTS)
def _res_bwd(
    gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, gx, gpole, ggain, gzi, want_x, want_c
):  # pragma: no cover - compiled
    R, T, ng, nb = row_blocks(gy, _WR)
    K = zi.shape[1]
    W = _WR
    for grp in prange(ng):
        fp = denormals_off()
        # the lanes' state adjoints lr, li (K, W) from gzf as the forward's states from zi;
        # the states sr, si are set from the checkpoints at every block
        r0, nr, rows, xr, pr, pi, gr, gi, ab, lr, li = _res_group(
            R, grp, xrow, crow, pole, gain, mode, gzf, K
        )
        sr = np.empty((K, W))
        si = np.empty((K, W))
        ur = np.empty((K, _CKA, W))
        ui = np.empty((K, _CKA, W))
        u1r = np.empty((_CKA + 1, W))
        u1i = np.empty((_CKA + 1, W))
        kr = np.empty((_CKA, W))
        ki = np.empty((_CKA, W))
        fr = np.empty((_CKA, W))
        fi = np.empty((_CKA, W))
        xb = np.empty((_CKA, W))
        gb = np.empty((_CKA, W))
        acc = np.zeros((4, W))
        Gr = np.empty(W)
        Gi = np.empty(W)
        for b in range(nb - 1, -1, -1):
            t0 = b * _CKA
            n = min(_CKA, T - t0)
            for k in range(W):
                for q in range(K):
                    sr[q, k] = ck[rows[k], b, q, 0]
                    si[q, k] = ck[rows[k], b, q, 1]
            _load_lane_pairs(x, xr, gy, rows, t0, n, xb, gb)
            if K == 1:
                _res_record1(n, xb, pr, pi, gr, gi, ab, sr, si, u1r, u1i, fr, fi)
                _res_adjoint1(n, gb, pr, pi, gr, gi, u1r, u1i, fr, fi, lr, li, acc)
            else:
                _res_record(K, n, xb, pr, pi, gr, gi, ab, sr, si, ur, ui, kr, ki, fr, fi)
                _res_adjoint(K, n, gb, pr, pi, gr, gi, ur, ui, kr, ki, fr, fi, lr, li, acc, Gr, Gi)
            if want_x:
                _store_lanes(gb, r0, nr, t0, n, gx)
        for k in range(nr):
            for q in range(K):
                gzi[r0 + k, q, 0] = lr[q, k]
                gzi[r0 + k, q, 1] = li[q, k]
            if want_c:
                gpole[r0 + k, 0] = acc[0, k]
                gpole[r0 + k, 1] = acc[1, k]
                ggain[r0 + k, 0] = acc[2, k]
                ggain[r0 + k, 1] = acc[3, k]
        restore_fp_mode(fp)


KERNELS = RowKernels(numba_launch(_res_fwd), numba_launch(_res_bwd))
#: ``(x (Rx, T), xrow (R,), pole (Rc, 2), gain (Rc, 2), mode (Rc,), crow (R,),
#: zi (R, K, 2))``
#: (pole and gain as (real, imaginary); mode 0: ``Re``, 1: ``|.|``) -> ``y (R, T)``,
#: ``zf (R, K, 2)`` and the backward's checkpoints ``(R, checkpoint_blocks(T), K, 2)``
#: float64 (:class:`~lhotse_amt.kernels.rows.RowKernels`)
resonator_forward = KERNELS.forward
#: ``(gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x, want_c)`` -> per-row
#: ``gx (R, T)``, ``gpole (R, 2)``, ``ggain (R, 2)``, ``gzi (R, K, 2)`` (complex gradients
#: as PyTorch defines them: ``dL/dRe + i dL/dIm``)
resonator_backward = KERNELS.backward

"""CPU kernels (numba) of the differentiable recursion operators in :mod:`lhotse_amt.ops`.

Each operator has a forward kernel and a backward kernel. Rows are independent: output
row ``r`` reads input row ``xrow[r]`` and coefficient row ``crow[r]`` (broadcasting
without copies: a filterbank reads one input row for many channels). Every recursion runs
in float64 whatever the tensor dtype.

**Backward.** A recursion's backward is its adjoint recursion run backwards in time. It
needs the forward's internal values (section signals, pole-section states, loop states),
which are *recomputed* block-wise instead of saved: a first forward pass stores only the
states at the start of every block of ``_CK`` samples; then, from the last block to the
first, the block's internal values are recomputed from its checkpoint into a buffer of
``_CK`` samples and the adjoint recursion runs back over it. A row's backward therefore
costs about two forward passes and one adjoint pass, and its memory is ``O(_CK)`` per
thread plus ``O(T / _CK)`` checkpoints, independent of the signal length.

Gradients of coefficients are accumulated per output row (the operator sums rows that
share a coefficient row); the input gradient is written per output row (the operator sums
rows that share an input row).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .cpu import _np, _threads
from .fastmath import assume_distinct_arrays, denormals_off, exp_nonpos_inline, restore_fp_mode

__all__ = [
    "sos_forward",
    "sos_backward",
    "resonator_forward",
    "resonator_backward",
    "adaptation_forward",
    "adaptation_backward",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"})
#: samples per recomputed block of the backward kernels
_CK = 2048


# --------------------------------------------------------------------------------------
# Second-order sections, transposed direct form II (scipy.signal.sosfilt)
# --------------------------------------------------------------------------------------


_WS = 16  # rows per lane group of the second-order-section kernels


@njit(inline="always", **_OPTS)
def _sos_group(R, grp, xrow, crow, sos, zi, S):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row), their input rows,
    # coefficients co (S, 5, W) = b0, b1, b2, a1, a2 and states z (S, 2, W)
    W = _WS
    r0 = grp * W
    nr = min(W, R - r0)
    rows = np.empty(W, np.int64)
    xr = np.empty(W, np.int64)
    co = np.empty((S, 5, W))
    z = np.empty((S, 2, W))
    for k in range(W):
        r = r0 + min(k, nr - 1)
        rows[k] = r
        xr[k] = xrow[r]
        c = crow[r]
        for q in range(S):
            co[q, 0, k] = sos[c, q, 0]
            co[q, 1, k] = sos[c, q, 1]
            co[q, 2, k] = sos[c, q, 2]
            co[q, 3, k] = sos[c, q, 4]
            co[q, 4, k] = sos[c, q, 5]
            z[q, 0, k] = zi[r, q, 0]
            z[q, 1, k] = zi[r, q, 1]
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
            if n % _CKA == 0:
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
def _sos_adjoint(S, n, co, w, g, l1, l2, gc):  # pragma: no cover - compiled
    # the adjoint of every section (last first) back over n samples of the lanes:
    # G = g - a1 l1 - a2 l2; g <- b0 G + b1 l1 + b2 l2; (l1, l2) <- (G, l1); output
    # gradients g (n, W) in, input gradients out; coefficient gradient sums gc (S, 5, W)
    assume_distinct_arrays()
    W = _WS
    for q in range(S - 1, -1, -1):
        for i in range(n - 1, -1, -1):
            for k in range(W):
                p1 = l1[q, k]
                p2 = l2[q, k]
                v = w[q, i, k]
                out = w[q + 1, i, k]
                G = g[i, k] - co[q, 3, k] * p1 - co[q, 4, k] * p2
                g[i, k] = co[q, 0, k] * G + co[q, 1, k] * p1 + co[q, 2, k] * p2
                gc[q, 0, k] += G * v
                gc[q, 1, k] += p1 * v
                gc[q, 2, k] += p2 * v
                gc[q, 3, k] -= p1 * out
                gc[q, 4, k] -= p2 * out
                l2[q, k] = p1
                l1[q, k] = G


@njit(parallel=True, **_OPTS)
def _sos_bwd(
    gy, gzf, x, xrow, sos, crow, zi, ck, gx, gsos, gzi, want_x, want_c
):  # pragma: no cover
    # per block (last first): the section signals are recomputed from the block's
    # checkpoint, then the adjoint of every section (last first) runs back over it:
    # G = g - a1 l1 - a2 l2; g <- b0 G + b1 l1 + b2 l2; (l1, l2) <- (G, l1)
    R = gy.shape[0]
    T = gy.shape[1]
    S = sos.shape[1]
    W = _WS
    nb = (T + _CKA - 1) // _CKA
    for grp in prange((R + W - 1) // W):
        fp = denormals_off()
        r0, nr, rows, xr, co, z = _sos_group(R, grp, xrow, crow, sos, zi, S)
        w = np.empty((S + 1, _CKA, W))
        g = np.empty((_CKA, W))
        l1 = np.empty((S, W))
        l2 = np.empty((S, W))
        for k in range(W):
            for q in range(S):
                l1[q, k] = gzf[rows[k], q, 0]
                l2[q, k] = gzf[rows[k], q, 1]
        gc = np.zeros((S, 5, W))
        for b in range(nb - 1, -1, -1):
            t0 = b * _CKA
            n = min(_CKA, T - t0)
            for k in range(W):
                for q in range(S):
                    z[q, 0, k] = ck[rows[k], b, q, 0]
                    z[q, 1, k] = ck[rows[k], b, q, 1]
            for k in range(W):
                for i in range(n):
                    w[0, i, k] = x[xr[k], t0 + i]
                    g[i, k] = gy[rows[k], t0 + i]
            _sos_record(S, n, co, z, w)
            _sos_adjoint(S, n, co, w, g, l1, l2, gc)
            if want_x:
                for k in range(nr):
                    for i in range(n):
                        gx[r0 + k, t0 + i] = g[i, k]
        for k in range(nr):
            for q in range(S):
                gzi[r0 + k, q, 0] = l1[q, k]
                gzi[r0 + k, q, 1] = l2[q, k]
                if want_c:
                    gsos[r0 + k, q, 0] = gc[q, 0, k]
                    gsos[r0 + k, q, 1] = gc[q, 1, k]
                    gsos[r0 + k, q, 2] = gc[q, 2, k]
                    gsos[r0 + k, q, 4] = gc[q, 3, k]
                    gsos[r0 + k, q, 5] = gc[q, 4, k]
        restore_fp_mode(fp)


def sos_forward(
    x: torch.Tensor, xrow: torch.Tensor, sos: torch.Tensor, crow: torch.Tensor, zi: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``, ``xrow (R,)``, ``sos (Rc, S, 6)``, ``crow (R,)``, ``zi (R, S, 2)`` ->
    ``y (R, T)`` in ``x``'s dtype, ``zf (R, S, 2)`` in ``zi``'s and the backward's
    checkpoints ``(R, checkpoint_blocks(T), S, 2)`` float64."""
    _threads()
    R, T = xrow.shape[0], x.shape[1]
    S = sos.shape[1]
    y = torch.empty((R, T), dtype=x.dtype)
    zf = torch.empty(zi.shape, dtype=torch.float64)
    ck = torch.empty((R, checkpoint_blocks(T), S, 2), dtype=torch.float64)
    _sos_fwd(
        _np(x),
        _np(xrow),
        _np(sos.double()),
        _np(crow),
        _np(zi.double()),
        y.numpy(),
        zf.numpy(),
        ck.numpy(),
    )
    return y, zf.to(zi.dtype), ck


def sos_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    sos: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row gradients ``gx (R, T)``, ``gsos (R, S, 6)``, ``gzi (R, S, 2)`` (float64
    for the coefficient and state gradients, ``x``'s dtype for ``gx``)."""
    _threads()
    R, T = gy.shape
    S = sos.shape[1]
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype)
    gsos = torch.zeros((R, S, 6), dtype=torch.float64)
    gzi = torch.empty((R, S, 2), dtype=torch.float64)
    _sos_bwd(
        _np(gy),
        _np(gzf.double()),
        _np(x),
        _np(xrow),
        _np(sos.double()),
        _np(crow),
        _np(zi.double()),
        _np(ck),
        gx.numpy(),
        gsos.numpy(),
        gzi.numpy(),
        want_x,
        want_c,
    )
    return gx, gsos, gzi


# --------------------------------------------------------------------------------------
# Cascade of K identical complex one-pole sections with a complex gain, real output
# --------------------------------------------------------------------------------------
# u_k[n] = p u_k[n-1] + u_{k-1}[n], u_0 = x (real); w = g u_K;
# y = Re w (mode 0) or |w| (mode 1)


_WR = 16  # rows per lane group of the resonator kernels


@njit(inline="always", **_OPTS)
def _res_group(R, grp, xrow, crow, pole, gain, mode, zi, K):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row) with their input rows,
    # pole, gain, output mode and section states (K, W)
    W = _WR
    r0 = grp * W
    nr = min(W, R - r0)
    rows = np.empty(W, np.int64)
    xr = np.empty(W, np.int64)
    pr = np.empty(W)
    pi = np.empty(W)
    gr = np.empty(W)
    gi = np.empty(W)
    ab = np.empty(W)
    sr = np.empty((K, W))
    si = np.empty((K, W))
    for k in range(W):
        r = r0 + min(k, nr - 1)
        rows[k] = r
        xr[k] = xrow[r]
        c = crow[r]
        pr[k] = pole[c, 0]
        pi[k] = pole[c, 1]
        gr[k] = gain[c, 0]
        gi[k] = gain[c, 1]
        ab[k] = 1.0 if mode[c] != 0 else 0.0
        for q in range(K):
            sr[q, k] = zi[r, q, 0]
            si[q, k] = zi[r, q, 1]
    return r0, nr, rows, xr, pr, pi, gr, gi, ab, sr, si


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
        for n in range(T):
            if keep and n % _CKA == 0:
                b = n // _CKA
                for k in range(nr):
                    for q in range(K):
                        ck[r0 + k, b, q, 0] = sr[q, k]
                        ck[r0 + k, b, q, 1] = si[q, k]
            for k in range(W):
                vr[k] = np.float64(x[xr[k], n])
                vi[k] = 0.0
            for q in range(K):
                for k in range(W):
                    nre = pr[k] * sr[q, k] - pi[k] * si[q, k] + vr[k]
                    nim = pr[k] * si[q, k] + pi[k] * sr[q, k] + vi[k]
                    sr[q, k] = nre
                    si[q, k] = nim
                    vr[k] = nre
                    vi[k] = nim
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
            vr = kr[i, k]
            vi = ki[i, k]
            wr = gr[k] * vr - gi[k] * vi
            wi = gr[k] * vi + gi[k] * vr
            mag = math.sqrt(wr * wr + wi * wi)
            inv = 1.0 / mag if mag > 0.0 else 0.0
            fr[i, k] = wr * inv if ab[k] != 0.0 else 1.0
            fi[i, k] = wi * inv if ab[k] != 0.0 else 0.0


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
            g = gb[i, k]
            Gwr = g * fr[i, k]
            Gwi = g * fi[i, k]
            # G_g += conj(u_K) G_w ; G_{u_K} = conj(g) G_w
            acc[2, k] += kr[i, k] * Gwr + ki[i, k] * Gwi
            acc[3, k] += kr[i, k] * Gwi - ki[i, k] * Gwr
            Gr[k] = gr[k] * Gwr + gi[k] * Gwi
            Gi[k] = gr[k] * Gwi - gi[k] * Gwr
        for q in range(K - 1, -1, -1):
            for k in range(W):
                lkr = lr[q, k] + Gr[k]
                lki = li[q, k] + Gi[k]
                # G_p += conj(u_q[n-1]) lambda_q ; carried: conj(p) lambda_q
                acc[0, k] += ur[q, i, k] * lkr + ui[q, i, k] * lki
                acc[1, k] += ur[q, i, k] * lki - ui[q, i, k] * lkr
                lr[q, k] = pr[k] * lkr + pi[k] * lki
                li[q, k] = pr[k] * lki - pi[k] * lkr
                Gr[k] = lkr
                Gi[k] = lki
        for k in range(W):
            gb[i, k] = Gr[k]


@njit(parallel=True, **_OPTS)
def _res_bwd(
    gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, gx, gpole, ggain, gzi, want_x, want_c
):  # pragma: no cover - compiled
    R = gy.shape[0]
    T = gy.shape[1]
    K = zi.shape[1]
    W = _WR
    nb = (T + _CKA - 1) // _CKA
    for grp in prange((R + W - 1) // W):
        fp = denormals_off()
        r0, nr, rows, xr, pr, pi, gr, gi, ab, sr, si = _res_group(
            R, grp, xrow, crow, pole, gain, mode, zi, K
        )
        ur = np.empty((K, _CKA, W))
        ui = np.empty((K, _CKA, W))
        kr = np.empty((_CKA, W))
        ki = np.empty((_CKA, W))
        fr = np.empty((_CKA, W))
        fi = np.empty((_CKA, W))
        xb = np.empty((_CKA, W))
        gb = np.empty((_CKA, W))
        lr = np.empty((K, W))
        li = np.empty((K, W))
        for k in range(W):
            for q in range(K):
                lr[q, k] = gzf[rows[k], q, 0]
                li[q, k] = gzf[rows[k], q, 1]
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
                for i in range(n):
                    xb[i, k] = x[xr[k], t0 + i]
                    gb[i, k] = gy[rows[k], t0 + i]
            _res_record(K, n, xb, pr, pi, gr, gi, ab, sr, si, ur, ui, kr, ki, fr, fi)
            _res_adjoint(K, n, gb, pr, pi, gr, gi, ur, ui, kr, ki, fr, fi, lr, li, acc, Gr, Gi)
            if want_x:
                for k in range(nr):
                    for i in range(n):
                        gx[r0 + k, t0 + i] = gb[i, k]
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


def resonator_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    mode: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``; ``pole``, ``gain`` ``(Rc, 2)`` (real, imaginary); ``mode (Rc,)``
    (0: ``Re``, 1: ``|.|``); ``zi (R, K, 2)`` -> ``y (R, T)``, ``zf (R, K, 2)`` and the
    backward's checkpoints ``(R, checkpoint_blocks(T), K, 2)`` float64."""
    _threads()
    R, T = xrow.shape[0], x.shape[1]
    K = zi.shape[1]
    y = torch.empty((R, T), dtype=x.dtype)
    zf = torch.empty(zi.shape, dtype=torch.float64)
    ck = torch.empty((R, checkpoint_blocks(T), K, 2), dtype=torch.float64)
    _res_fwd(
        _np(x),
        _np(xrow),
        _np(pole.double()),
        _np(gain.double()),
        _np(mode),
        _np(crow),
        _np(zi.double()),
        y.numpy(),
        zf.numpy(),
        ck.numpy(),
    )
    return y, zf.to(zi.dtype), ck


def resonator_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    mode: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row ``gx (R, T)``, ``gpole (R, 2)``, ``ggain (R, 2)``, ``gzi (R, K, 2)``
    (complex gradients as PyTorch defines them: ``dL/dRe + i dL/dIm``)."""
    _threads()
    R, T = gy.shape
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype)
    gp = torch.zeros((R, 2), dtype=torch.float64)
    gg = torch.zeros((R, 2), dtype=torch.float64)
    gzi = torch.empty(zi.shape, dtype=torch.float64)
    _res_bwd(
        _np(gy),
        _np(gzf.double()),
        _np(x),
        _np(xrow),
        _np(pole.double()),
        _np(gain.double()),
        _np(mode),
        _np(crow),
        _np(zi.double()),
        _np(ck),
        gx.numpy(),
        gp.numpy(),
        gg.numpy(),
        gzi.numpy(),
        want_x,
        want_c,
    )
    return gx, gp, gg, gzi


# --------------------------------------------------------------------------------------
# Adaptation loops with the overshoot limiter (Dau et al. 1996a; Munkner et al. 1996)
# --------------------------------------------------------------------------------------
# v_0 = max(x, minlvl); loop j: w = v / s_j; v = lim_j(w) if limit and w > 1 else w;
# s_j <- a_j s_j + (1 - a_j) v.  lim(w) = 2 m / (1 + e) - (m - 1), e = exp(-2 (w - 1) / m)


@njit(inline="always", **_OPTS)
def _limit(w, m):  # pragma: no cover - compiled
    e = math.exp(-2.0 * (w - 1.0) / m)
    return 2.0 * m / (1.0 + e) - (m - 1.0), e


@njit(inline="always", **_OPTS)
def _adapt_block(st, J, t0, n, a, m, minlvl, use_limit, s, x, xr):  # pragma: no cover
    # loop states before each loop at each sample of the block into st (J, n); advances s
    for i in range(n):
        v = np.float64(x[xr, t0 + i])
        v = v if v > minlvl else minlvl
        for j in range(J):
            st[j, i] = s[j]
            w = v / s[j]
            if use_limit and w > 1.0:
                w, _ = _limit(w, m[j])
            s[j] = a[j] * s[j] + (1.0 - a[j]) * w
            v = w


@njit(parallel=True, **_OPTS)
def _adapt_fwd(x, xrow, a, m, crow, minlvl, use_limit, zi, y, zf):  # pragma: no cover
    R = y.shape[0]
    T = y.shape[1]
    J = zi.shape[1]
    for r in prange(R):
        fp = denormals_off()
        xr = xrow[r]
        c = crow[r]
        aa = np.empty(J)
        mm = np.empty(J)
        s = np.empty(J)
        for j in range(J):
            aa[j] = a[c, j]
            mm[j] = m[c, j]
            s[j] = zi[r, j]
        for n in range(T):
            v = np.float64(x[xr, n])
            v = v if v > minlvl else minlvl
            for j in range(J):
                w = v / s[j]
                if use_limit and w > 1.0:
                    w, _ = _limit(w, mm[j])
                s[j] = aa[j] * s[j] + (1.0 - aa[j]) * w
                v = w
            y[r, n] = v
        for j in range(J):
            zf[r, j] = s[j]
        restore_fp_mode(fp)


_W = 32  # rows per lane group of the adaptation-loop kernels
#: samples per recomputed block of the adaptation-loop backward (a checkpoint each)
_CKA = 512
CHECKPOINT_BLOCK = _CKA


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
    r0 = grp * _W
    nr = min(_W, R - r0)
    rows = np.empty(_W, np.int64)
    xr = np.empty(_W, np.int64)
    aa = np.empty((J, _W))
    mm = np.empty((J, _W))
    s = np.empty((J, _W))
    for k in range(_W):
        r = r0 + min(k, nr - 1)
        rows[k] = r
        xr[k] = xrow[r]
        c = crow[r]
        for j in range(J):
            aa[j, k] = a[c, j]
            mm[j, k] = m[c, j]
            s[j, k] = zi[r, j]
    return r0, nr, rows, xr, aa, mm, s


@njit(inline="always", **_OPTS)
def _adapt_step(v, j, s, aa, mm, use_limit):  # pragma: no cover - compiled
    # loop j on the lanes of v in place; returns whether a lane hit the limiter
    W = v.shape[0]
    hits = False
    for k in range(W):
        q = v[k] / s[j, k]
        v[k] = q
        hits |= q > 1.0
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
    W = _W
    for i in range(n):
        for k in range(W):
            v[k] = xb[i, k]
        for j in range(J):
            hits = False
            for k in range(W):
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
                for k in range(W):
                    q = v[k]
                    mk = mm[j, k]
                    e = _lim_e(q, mk)
                    d = 1.0 + e
                    lim = 2.0 * mk / d - (mk - 1.0)
                    hit = q > 1.0
                    dl[j, i, k] = 4.0 * e / (d * d) if hit else 1.0
                    dm[j, i, k] = 2.0 / d - 4.0 * e * (q - 1.0) / (mk * d * d) - 1.0 if hit else 0.0
                    v[k] = lim if hit else q
            for k in range(W):
                sk = s[j, k]
                sv[j, i, k] = sk - v[k]
                s[j, k] = aa[j, k] * sk + (1.0 - aa[j, k]) * v[k]


@njit(**_OPTS)
def _adapt_adjoint(J, n, gb, aa, sv, inv, wis, dl, dm, lam, gaa, gmm, gv):  # pragma: no cover
    # the adjoint step (multiply-adds only) back over n samples of the lanes: output
    # gradients gb (n, W) in, gradients of the loops' input out (in place); carried state
    # adjoints lam (J, W); coefficient gradient sums gaa, gmm (J, W); scratch gv (W,)
    assume_distinct_arrays()
    W = _W
    for i in range(n - 1, -1, -1):
        for k in range(W):
            gv[k] = gb[i, k]
        for j in range(J - 1, -1, -1):
            for k in range(W):
                lj = lam[j, k]
                gvt = gv[k] + (1.0 - aa[j, k]) * lj
                gaa[j, k] += lj * sv[j, i, k]
                gmm[j, k] += gvt * dm[j, i, k]
                gw = gvt * dl[j, i, k]
                gv[k] = gw * inv[j, i, k]
                lam[j, k] = aa[j, k] * lj - gw * wis[j, i, k]
        for k in range(W):
            gb[i, k] = gv[k]


@njit(parallel=True, **_OPTS)
def _adapt_bwd(
    gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, gx, ga, gm, gzi, want_x, want_c
):  # pragma: no cover - compiled
    # lane groups as the forward; each block is recomputed once from its checkpoint,
    # then the adjoint step (multiply-adds only) runs back over it
    R = gy.shape[0]
    T = gy.shape[1]
    J = zi.shape[1]
    nb = (T + _CKA - 1) // _CKA
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        r0, nr, rows, xr, aa, mm, s = _lane_group(R, grp, xrow, crow, a, m, zi, J)
        sv = np.empty((J, _CKA, _W))
        inv = np.empty((J, _CKA, _W))
        wis = np.empty((J, _CKA, _W))
        dl = np.empty((J, _CKA, _W))
        dm = np.empty((J, _CKA, _W))
        lam = np.empty((J, _W))
        for k in range(_W):
            for j in range(J):
                lam[j, k] = gzf[rows[k], j]
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
            for k in range(_W):
                for i in range(n):
                    q = np.float64(x[xr[k], t0 + i])
                    xb[i, k] = q if q > minlvl else minlvl
                    gb[i, k] = gy[rows[k], t0 + i]
            _adapt_record(J, n, xb, aa, mm, use_limit, s, v, sv, inv, wis, dl, dm)
            _adapt_adjoint(J, n, gb, aa, sv, inv, wis, dl, dm, lam, gaa, gmm, gv)
            if want_x:
                for k in range(nr):
                    for i in range(n):
                        q = np.float64(x[xr[k], t0 + i])
                        gx[r0 + k, t0 + i] = gb[i, k] if q > minlvl else 0.0
        for k in range(nr):
            for j in range(J):
                gzi[r0 + k, j] = lam[j, k]
                if want_c:
                    ga[r0 + k, j] = gaa[j, k]
                    gm[r0 + k, j] = gmm[j, k]
        restore_fp_mode(fp)


def checkpoint_blocks(T: int) -> int:
    """Number of checkpoints a forward keeps for the backward of a signal of ``T``."""
    return (T + _CKA - 1) // _CKA


def adaptation_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    crow: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    zi: torch.Tensor,
    keep: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``, ``a``, ``m`` ``(Rc, J)``, ``zi (R, J)`` -> raw loop output
    ``v (R, T)``, final states ``(R, J)`` and (``keep``) the checkpoints of the backward
    ``(R, checkpoint_blocks(T), J)`` float64 (else ``(R, 0, J)``)."""
    _threads()
    R, T = xrow.shape[0], x.shape[1]
    J = zi.shape[1]
    y = torch.empty((R, T), dtype=x.dtype)
    zf = torch.empty(zi.shape, dtype=torch.float64)
    ck = torch.empty((R, checkpoint_blocks(T) if keep else 0, J), dtype=torch.float64)
    _adapt_fwd(
        _np(x),
        _np(xrow),
        _np(a.double()),
        _np(m.double()),
        _np(crow),
        float(minlvl),
        bool(use_limit),
        _np(zi.double()),
        y.numpy(),
        zf.numpy(),
        ck.numpy(),
    )
    return y, zf.to(zi.dtype), ck


def adaptation_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    crow: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row ``gx (R, T)``, ``ga (R, J)``, ``gm (R, J)``, ``gzi (R, J)`` from the
    forward's checkpoints ``ck``."""
    _threads()
    R, T = gy.shape
    J = zi.shape[1]
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype)
    ga = torch.zeros((R, J), dtype=torch.float64)
    gm = torch.zeros((R, J), dtype=torch.float64)
    gzi = torch.empty((R, J), dtype=torch.float64)
    _adapt_bwd(
        _np(gy),
        _np(gzf.double()),
        _np(x),
        _np(xrow),
        _np(a.double()),
        _np(m.double()),
        _np(crow),
        float(minlvl),
        bool(use_limit),
        _np(zi.double()),
        _np(ck),
        gx.numpy(),
        ga.numpy(),
        gm.numpy(),
        gzi.numpy(),
        want_x,
        want_c,
    )
    return gx, ga, gm, gzi

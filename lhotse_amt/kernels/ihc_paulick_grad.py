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
the backward recomputes each block once from its checkpoint into a buffer (``W[n-1]``,
``e0``, ``e1`` per sample) and runs the adjoint back over it: memory ``O(512)`` per
thread plus ``O(T / 512)`` checkpoints per row.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import njit, prange

from .fastmath import denormals_off, restore_fp_mode
from .paulick import _exp

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
#: samples per recomputed block of the backward (a checkpoint each)
CHECKPOINT_BLOCK = 512
#: rows per lane group
LANES = 8

_CK = CHECKPOINT_BLOCK
_W = LANES
_NC = len(IHC_STEP_KEYS)
_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"})


def _threads() -> None:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)


def _np(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().numpy()


def checkpoint_blocks(T: int) -> int:
    """Checkpoints a forward keeps for the backward of a signal of ``T`` samples."""
    return (T + _CK - 1) // _CK


@njit(inline="always", **_OPTS)
def _group(R, grp, xrow, crow, c, zi):  # pragma: no cover - compiled
    # rows of lane group grp (padding lanes repeat the last row), their input rows,
    # constants cc (12, W) and states w (W,)
    r0 = grp * _W
    nr = min(_W, R - r0)
    rows = np.empty(_W, np.int64)
    xr = np.empty(_W, np.int64)
    cc = np.empty((_NC, _W))
    w = np.empty(_W)
    for q in range(_W):
        r = r0 + min(q, nr - 1)
        rows[q] = r
        xr[q] = xrow[r]
        for j in range(_NC):
            cc[j, q] = c[crow[r], j]
        w[q] = zi[r]
    return r0, nr, rows, xr, cc, w


@njit(inline="always", **_OPTS)
def _step(cc, q, xv, W):  # pragma: no cover - compiled
    # one Euler step of lane q: the new state, e0 and e1
    z = cc[2, q] - cc[0, q] * xv
    z = min(z, cc[5, q])
    e1 = _exp(z / cc[4, q])
    e0 = _exp(z / cc[3, q])
    G = cc[1, q] / (1.0 + e1 * (1.0 + e0))
    F = -G * (W + cc[9, q]) - cc[7, q] * (W + cc[10, q]) - cc[8, q] * (W + cc[11, q])
    return W + cc[6, q] * F, e0, e1


@njit(parallel=True, **_OPTS)
def _fwd(x, xrow, c, crow, zi, y, zf, ck):  # pragma: no cover - compiled
    R = y.shape[0]
    T = y.shape[1]
    keep = ck.shape[1] > 0
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        r0, nr, rows, xr, cc, w = _group(R, grp, xrow, crow, c, zi)
        for n in range(T):
            if keep and n % _CK == 0:
                b = n // _CK
                for q in range(nr):
                    ck[r0 + q, b] = w[q]
            for q in range(_W):
                w[q], _, _ = _step(cc, q, np.float64(x[xr[q], n]), w[q])
            for q in range(nr):
                y[r0 + q, n] = w[q]
        for q in range(nr):
            zf[r0 + q] = w[q]
        restore_fp_mode(fp)


@njit(parallel=True, **_OPTS)
def _bwd(gy, gzf, x, xrow, c, crow, zi, ck, gx, gc, gzi, want_x, want_c):  # pragma: no cover
    R = gy.shape[0]
    T = gy.shape[1]
    nb = (T + _CK - 1) // _CK
    for grp in prange((R + _W - 1) // _W):
        fp = denormals_off()
        r0, nr, rows, xr, cc, w = _group(R, grp, xrow, crow, c, zi)
        wp = np.empty((_CK, _W))
        b0 = np.empty((_CK, _W))
        b1 = np.empty((_CK, _W))
        a = np.empty(_W)
        for q in range(_W):
            a[q] = gzf[rows[q]]
        g = np.zeros((_NC, _W))
        for b in range(nb - 1, -1, -1):
            t0 = b * _CK
            n = min(_CK, T - t0)
            # recompute the block from its checkpoint: W[n-1], e0, e1 per sample
            for q in range(_W):
                w[q] = ck[rows[q], b]
            for i in range(n):
                for q in range(_W):
                    wp[i, q] = w[q]
                    w[q], b0[i, q], b1[i, q] = _step(cc, q, np.float64(x[xr[q], t0 + i]), w[q])
            # adjoint back over the block
            for i in range(n - 1, -1, -1):
                for q in range(_W):
                    sc, gm, x0, s0, s1, zm = (
                        cc[0, q],
                        cc[1, q],
                        cc[2, q],
                        cc[3, q],
                        cc[4, q],
                        cc[5, q],
                    )
                    kk, gkf, gks, dep, dkf, dks = (
                        cc[6, q], cc[7, q], cc[8, q], cc[9, q], cc[10, q], cc[11, q]
                    )  # fmt: skip
                    xv = np.float64(x[xr[q], t0 + i])
                    aq = a[q] + np.float64(gy[rows[q], t0 + i])
                    Wp = wp[i, q]
                    e0 = b0[i, q]
                    e1 = b1[i, q]
                    u = x0 - sc * xv
                    capped = u > zm
                    z = zm if capped else u
                    A = e1 * (1.0 + e0)
                    B = e1 * e0
                    D = 1.0 + A
                    G = gm / D
                    ka = kk * aq
                    gG = -ka * (Wp + dep)
                    gD = -gG * G / D
                    gz = gD * (A / s1 + B / s0)
                    if want_c:
                        F = -G * (Wp + dep) - gkf * (Wp + dkf) - gks * (Wp + dks)
                        g[0, q] += 0.0 if capped else -gz * xv
                        g[1, q] += gG / D
                        g[2, q] += 0.0 if capped else gz
                        g[3, q] -= gD * B * z / (s0 * s0)
                        g[4, q] -= gD * A * z / (s1 * s1)
                        g[5, q] += gz if capped else 0.0
                        g[6, q] += aq * F
                        g[7, q] -= ka * (Wp + dkf)
                        g[8, q] -= ka * (Wp + dks)
                        g[9, q] -= ka * G
                        g[10, q] -= ka * gkf
                        g[11, q] -= ka * gks
                    if want_x and q < nr:
                        gx[r0 + q, t0 + i] = 0.0 if capped else -gz * sc
                    a[q] = aq * (1.0 - kk * (G + gkf + gks))
        for q in range(nr):
            gzi[r0 + q] = a[q]
            if want_c:
                for j in range(_NC):
                    gc[r0 + q, j] = g[j, q]
        restore_fp_mode(fp)


def ihc_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    c: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    keep: bool = True,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``, ``xrow (R,)``, ``c (Rc, 12)`` (:data:`IHC_STEP_KEYS`), ``crow (R,)``,
    ``zi (R,)`` -> ``W (R, T)`` in ``x``'s dtype (volts re ``V_pre``), the final states
    ``(R,)`` in ``zi``'s dtype and (``keep``) the states at the start of every block
    ``(R, checkpoint_blocks(T))`` float64 (else ``(R, 0)``)."""
    _threads()
    R, T = xrow.shape[0], x.shape[1]
    y = torch.empty((R, T), dtype=x.dtype)
    zf = torch.empty((R,), dtype=torch.float64)
    ck = torch.empty((R, checkpoint_blocks(T) if keep else 0), dtype=torch.float64)
    if R > 0:
        _fwd(
            _np(x),
            _np(xrow),
            _np(c.double()),
            _np(crow),
            _np(zi.double()),
            y.numpy(),
            zf.numpy(),
            ck.numpy(),
        )
    return y, zf.to(zi.dtype), ck


def ihc_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    c: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row gradients ``gx (R, T)`` (``(R, 0)`` unless ``want_x``; ``x``'s dtype),
    ``gc (R, 12)`` and ``gzi (R,)`` (float64) from the forward's checkpoints ``ck``."""
    _threads()
    R, T = gy.shape
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype)
    gc = torch.zeros((R, _NC), dtype=torch.float64)
    gzi = torch.empty((R,), dtype=torch.float64)
    if R > 0:
        _bwd(
            _np(gy),
            _np(gzf.double()),
            _np(x),
            _np(xrow),
            _np(c.double()),
            _np(crow),
            _np(zi.double()),
            _np(ck),
            gx.numpy(),
            gc.numpy(),
            gzi.numpy(),
            bool(want_x),
            bool(want_c),
        )
    return gx, gc, gzi

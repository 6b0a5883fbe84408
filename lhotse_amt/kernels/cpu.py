"""Compiled per-channel CPU kernels (numba).

Each kernel runs the exact sample recursion of its plain-torch reference in
:mod:`lhotse_amt.functional`, one channel per loop iteration (channels in parallel with
``numba.prange``), in the dtype of its input (float32 or float64). The wrappers take and
return torch tensors shaped ``(N, T)`` (channels flattened) and never copy more than needed.

The number of numba threads follows ``torch.get_num_threads()`` so that "one thread"
benchmarks and the Lhotse CLI's single-thread clamp apply to these kernels too.
"""

from __future__ import annotations

import numba
import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from .fastmath import (
    KERNEL_OPTS,
    assume_distinct_arrays,
    denormals_off,
    exp32_nonpos_inline,
    exp_nonpos_inline,
    restore_fp_mode,
)

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy")


def _threads() -> None:
    n = max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))
    if numba.get_num_threads() != n:
        numba.set_num_threads(n)


def _np(t: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(t.detach().cpu().numpy())


# --------------------------------------------------------------------------------------
# Second-order sections (transposed direct form II, as scipy.signal.sosfilt)
# --------------------------------------------------------------------------------------


_LANE_OPTS = dict(_NOPY, boundscheck=False)
_LANES = 32  # rows per group of the lane kernels: 4 independent 8-lane vectors
_CHUNK = 256  # samples per transposed chunk of the lane kernels


@njit(inline="always", **_NOPY)
def _lane_rows(N, g):  # pragma: no cover - compiled
    # rows of lane group g: first row, row count, lane count (a multiple of 8; padding
    # lanes repeat the group's last row) and the row of every lane
    c0 = g * _LANES
    nc = min(_LANES, N - c0)
    W = (nc + 7) // 8 * 8
    idx = np.empty(W, np.int64)
    for k in range(W):
        idx[k] = c0 + min(k, nc - 1)
    return c0, nc, W, idx


@njit(inline="always", **_NOPY)
def _load_lanes(x, idx, t0, n, buf):  # pragma: no cover - compiled
    # samples t0 .. t0 + n of the lane rows idx of x (N, T) into buf (chunk, W), transposed
    # (sample by sample: buf is written in order, the rows of x are read as streams)
    for i in range(n):
        for k in range(idx.shape[0]):
            buf[i, k] = x[idx[k], t0 + i]


@njit(inline="always", **_NOPY)
def _load_lane_pairs(x, xr, g, rows, t0, n, xb, gb):  # pragma: no cover - compiled
    # _load_lanes of x (lane rows xr) into xb and of g (lane rows rows) into gb, in one
    # pass: a backward block's input and output gradient
    for i in range(n):
        for k in range(rows.shape[0]):
            xb[i, k] = x[xr[k], t0 + i]
            gb[i, k] = g[rows[k], t0 + i]


@njit(inline="always", **_NOPY)
def _store_lanes(buf, c0, nc, t0, n, y):  # pragma: no cover - compiled
    # the first nc lanes of buf (chunk, W) back into rows c0 .. c0 + nc of y at t0 .. t0 + n
    # (sample by sample, as _load_lanes)
    for i in range(n):
        for k in range(nc):
            y[c0 + k, t0 + i] = buf[i, k]


@njit(inline="always", **_NOPY)
def complex_pole_lanes(W, pr, pi, sr, si, ur, ui):  # pragma: no cover - compiled
    # one complex one-pole section s <- p s + u on lanes 0 .. W - 1 at one sample (a stage
    # of the gammatone, a resonator): state sr + i si, pole pr + i pi, input ur + i ui,
    # which becomes the section's output (the next section's input)
    for k in range(W):
        nr = pr[k] * sr[k] - pi[k] * si[k] + ur[k]
        ni = pr[k] * si[k] + pi[k] * sr[k] + ui[k]
        sr[k] = nr
        si[k] = ni
        ur[k] = nr
        ui[k] = ni


@njit(inline="always", **_NOPY)
def sos_lane_coefs(co, k, sos, c):  # pragma: no cover - compiled
    # b0, b1, b2, a1, a2 of every section of coefficient row c of sos (N, S, 6) into lane
    # k of co (S, 5, W)
    for s in range(sos.shape[1]):
        co[s, 0, k] = sos[c, s, 0]
        co[s, 1, k] = sos[c, s, 1]
        co[s, 2, k] = sos[c, s, 2]
        co[s, 3, k] = sos[c, s, 4]
        co[s, 4, k] = sos[c, s, 5]


@njit(**_LANE_OPTS)
def _sos_lanes(buf, n, co, z0, z1):  # pragma: no cover - compiled
    # the first n rows (samples) of buf (chunk, W) through the sections, in place; its own
    # function so that its array arguments can be marked distinct (the lane loops vectorise)
    assume_distinct_arrays()
    S, _, W = co.shape
    for i in range(n):
        for s in range(S):
            for k in range(W):
                v = buf[i, k]
                out = co[s, 0, k] * v + z0[s, k]
                z0[s, k] = co[s, 1, k] * v - co[s, 3, k] * out + z1[s, k]
                z1[s, k] = co[s, 2, k] * v - co[s, 4, k] * out
                buf[i, k] = out


@njit(parallel=True, **_NOPY)
def _sosfilt_kernel(x, sos, zi, y):  # pragma: no cover - compiled
    # rows in groups of up to 32 vector lanes (see _adaptation_kernel): per sample, each
    # section is one loop over the lanes; same operations in the same order per row as a
    # row-by-row transposed direct form II
    N, T = x.shape
    S = sos.shape[1]
    for g in prange((N + _LANES - 1) // _LANES):
        fp = denormals_off()
        c0, nc, W, idx = _lane_rows(N, g)
        co = np.empty((S, 5, W), x.dtype)
        z0 = np.empty((S, W), x.dtype)
        z1 = np.empty((S, W), x.dtype)
        for k in range(W):
            c = idx[k]
            sos_lane_coefs(co, k, sos, c)
            for s in range(S):
                z0[s, k] = zi[c, s, 0]
                z1[s, k] = zi[c, s, 1]
        buf = np.empty((_CHUNK, W), x.dtype)
        for t0 in range(0, T, _CHUNK):
            n = min(_CHUNK, T - t0)
            _load_lanes(x, idx, t0, n, buf)
            _sos_lanes(buf, n, co, z0, z1)
            _store_lanes(buf, c0, nc, t0, n, y)
        for k in range(nc):
            for s in range(S):
                zi[c0 + k, s, 0] = z0[s, k]
                zi[c0 + k, s, 1] = z1[s, k]
        restore_fp_mode(fp)


def sosfilt(
    x: torch.Tensor, sos: torch.Tensor, zi: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (N, T)``, ``sos (N, S, 6)``, ``zi (N, S, 2)`` -> ``y (N, T)``, ``zf (N, S, 2)``."""
    _threads()
    xn = _np(x)
    sn = _np(sos).astype(xn.dtype, copy=False)
    N, S = sn.shape[0], sn.shape[1]
    z = np.zeros((N, S, 2), xn.dtype) if zi is None else _np(zi).astype(xn.dtype, copy=True)
    y = _alloc.empty_like(xn)
    if xn.shape[1] > 0:
        _sosfilt_kernel(xn, sn, z, y)
    return torch.from_numpy(y), torch.from_numpy(z)


# --------------------------------------------------------------------------------------
# Cascade of identical complex one-pole sections
# --------------------------------------------------------------------------------------


@njit(parallel=True, **_NOPY)
def _cascade_kernel(x, pr, pi, gr, gi, zr, zi, mode, yr, yi):  # pragma: no cover - compiled
    # mode: 0 complex (yr, yi), 1 real2 (2 Re y), 2 real (Re y)
    N, T = x.shape
    K = zr.shape[1]
    for c in prange(N):
        fp = denormals_off()
        ar = pr[c]
        ai = pi[c]
        cr = gr[c]
        ci = gi[c]
        sr = zr[c].copy()
        si = zi[c].copy()
        for n in range(T):
            vr = x[c, n]
            vi = 0.0 * vr
            for k in range(K):
                nr = ar * sr[k] - ai * si[k] + vr
                ni = ar * si[k] + ai * sr[k] + vi
                sr[k] = nr
                si[k] = ni
                vr = nr
                vi = ni
            outr = cr * vr - ci * vi
            if mode == 0:
                yr[c, n] = outr
                yi[c, n] = cr * vi + ci * vr
            elif mode == 1:
                yr[c, n] = 2.0 * outr
            else:
                yr[c, n] = outr
        zr[c] = sr
        zi[c] = si
        restore_fp_mode(fp)


_MODES = {"complex": 0, "real2": 1, "real": 2}


def one_pole_cascade(
    x: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    order: int,
    zi: torch.Tensor | None,
    output: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (N, T)`` real, ``pole``/``gain`` complex ``(N,)``, ``zi`` complex ``(N, K)``."""
    _threads()
    xn = _np(x)
    dt = xn.dtype
    p = _np(pole)
    g = _np(gain)
    N, T = xn.shape
    if zi is None:
        zr = np.zeros((N, order), dt)
        zim = np.zeros((N, order), dt)
    else:
        zn = _np(zi)
        zr = np.ascontiguousarray(zn.real.astype(dt))
        zim = np.ascontiguousarray(zn.imag.astype(dt))
    mode = _MODES[output]
    yr = _alloc.empty((N, T), dt)
    yi = _alloc.empty((N, T), dt) if mode == 0 else np.empty((N, 0), dt)
    if T > 0:
        _cascade_kernel(
            xn,
            np.ascontiguousarray(p.real.astype(dt)),
            np.ascontiguousarray(p.imag.astype(dt)),
            np.ascontiguousarray(np.real(g).astype(dt)),
            np.ascontiguousarray(np.imag(g).astype(dt)),
            zr,
            zim,
            mode,
            yr,
            yi,
        )
    cdt = torch.complex128 if dt == np.float64 else torch.complex64
    zf = torch.complex(torch.from_numpy(zr), torch.from_numpy(zim)).to(cdt)
    if mode == 0:
        y = torch.complex(torch.from_numpy(yr), torch.from_numpy(yi)).to(cdt)
    else:
        y = torch.from_numpy(yr)
    return y, zf


# --------------------------------------------------------------------------------------
# Adaptation loops (Dau et al. 1996/1997; Munkner et al. 1996 overshoot limitation)
# --------------------------------------------------------------------------------------


@njit(inline="always", **KERNEL_OPTS)
def overshoot_limit(q, m, aq):  # pragma: no cover - compiled
    # the overshoot limiter of Munkner et al. (1996) for a loop output q > 1 with limit m
    # and aq = -2 / m: 2 m / (1 + exp(-2 (q - 1) / m)) - (m - 1), float64, the exp
    # vectorisable (fastmath.exp_nonpos_inline, its argument clamped to [-37.5, 0])
    t = (q - 1.0) * aq
    t = t if t > -37.5 else -37.5
    t = t if t < 0.0 else 0.0
    return 2.0 * m / (1.0 + exp_nonpos_inline(t)) - (m - 1.0)


@njit(inline="always", **KERNEL_OPTS)
def overshoot_limit32_(v, j, aq, mm32, t32):  # pragma: no cover - compiled
    # overshoot_limit of loop j on the lanes of v (W,) in place where they exceed 1, its
    # correction m (1 - e) / (1 + e), e = exp(-2 (q - 1) / m), in float32 (mm32, aq: (J, W)
    # limits and -2 / limits; scratch t32 (W,) float32; absolute error < 1e-6 on a value
    # >= 1): three loops over the lanes, the middle one pure float32 (twice the lanes of
    # float64 per vector)
    f1 = np.float32(1.0)
    for k in range(v.shape[0]):
        z = np.float32((v[k] - 1.0) * aq[j, k])
        z = z if z > np.float32(-37.5) else np.float32(-37.5)
        t32[k] = z if z < np.float32(0.0) else np.float32(0.0)
    for k in range(v.shape[0]):
        e = exp32_nonpos_inline(t32[k])
        t32[k] = mm32[j, k] * (f1 - e) / (f1 + e)
    for k in range(v.shape[0]):
        q = v[k]
        lim = 1.0 + np.float64(t32[k])
        v[k] = lim if q > 1.0 else q


@njit(inline="always", **KERNEL_OPTS)
def divide_lanes(v, st, j):  # pragma: no cover - compiled
    # v[k] / st[j, k] on every lane of v (in place; adaptation loop j); whether a quotient
    # exceeds 1 (where the overshoot limiter applies)
    hits = False
    for k in range(v.shape[0]):
        q = v[k] / st[j, k]
        v[k] = q
        hits |= q > 1.0
    return hits


@njit(inline="always", **KERNEL_OPTS)
def adaptation_loops_lanes(v, st, aa, ab, mm, aq, use_limit, fast, mm32, t32):  # pragma: no cover
    # one sample through the J adaptation loops on the lanes of v (in place): divide by
    # the loop state, the overshoot limiter where the quotient exceeds 1 (evaluated only
    # when some lane needs it: the first loops almost never do), state update. st, aa,
    # ab, mm (limit), aq (-2 / limit): (J, W). fast: the limiter's correction in float32
    # (overshoot_limit32_: mm32, scratch t32), else float64 (overshoot_limit)
    W = v.shape[0]
    for j in range(st.shape[0]):
        hits = divide_lanes(v, st, j)
        if use_limit and hits:
            if fast:
                overshoot_limit32_(v, j, aq, mm32, t32)
            else:
                for k in range(W):
                    q = v[k]
                    lim = overshoot_limit(np.float64(q), mm[j, k], aq[j, k])
                    v[k] = lim if q > 1.0 else q
        for k in range(W):
            st[j, k] = aa[j, k] * st[j, k] + ab[j, k] * v[k]


@njit(parallel=True, **KERNEL_OPTS)
def _adaptation_kernel(x, a, m, minlvl, use_limit, s, y):  # pragma: no cover - compiled
    # groups of up to 32 channels, one per vector lane: a chunk of samples is transposed
    # into buf (n, W), the loops run down it with every per-sample step a loop over the W
    # lanes (independent vector divisions instead of one chain of scalar ones), and the
    # chunk is transposed back. The overshoot limiter is evaluated for the whole group
    # only when a lane needs it, with the vectorisable exp of fastmath (relative error
    # ~1e-16) and a select.
    N, T = x.shape
    J = a.shape[1]
    dt = x.dtype
    for g in prange((N + _LANES - 1) // _LANES):
        fp = denormals_off()
        c0, nc, W, idx = _lane_rows(N, g)
        aa = np.empty((J, W), dt)
        ab = np.empty((J, W), dt)
        mm = np.empty((J, W), dt)
        aq = np.empty((J, W), np.float64)
        st = np.empty((J, W), dt)
        lo = np.empty(W, dt)
        for k in range(W):
            c = idx[k]
            lo[k] = minlvl[c]
            for j in range(J):
                aa[j, k] = a[c, j]
                ab[j, k] = 1.0 - a[c, j]
                mm[j, k] = m[c, j]
                aq[j, k] = -2.0 / m[c, j]
                st[j, k] = s[c, j]
        buf = np.empty((_CHUNK, W), dt)
        v = np.empty(W, dt)
        mm32 = np.empty((0, 0), np.float32)  # the float64 limiter only: no float32 scratch
        t32 = np.empty(0, np.float32)
        for t0 in range(0, T, _CHUNK):
            n = min(_CHUNK, T - t0)
            _load_lanes(x, idx, t0, n, buf)
            for i in range(n):
                for k in range(W):
                    q = buf[i, k]
                    v[k] = q if q > lo[k] else lo[k]
                adaptation_loops_lanes(v, st, aa, ab, mm, aq, use_limit, False, mm32, t32)
                for k in range(W):
                    buf[i, k] = v[k]
            _store_lanes(buf, c0, nc, t0, n, y)
        for k in range(nc):
            for j in range(J):
                s[c0 + k, j] = st[j, k]
        restore_fp_mode(fp)


def adaptation_loops(
    x: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    minlvl: torch.Tensor,
    use_limit: bool,
    state: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw loop output ``v`` (before the final offset/scaling) and the final states.

    ``x (N, T)``, ``a (N, J)``, ``m (N, J)``, ``minlvl (N,)``, ``state (N, J)``.
    """
    _threads()
    xn = _np(x)
    dt = xn.dtype
    s = _np(state).astype(dt, copy=True)
    y = _alloc.empty_like(xn)
    if xn.shape[1] > 0:
        _adaptation_kernel(
            xn,
            _np(a).astype(dt, copy=False),
            _np(m).astype(dt, copy=False),
            _np(minlvl).astype(dt, copy=False),
            bool(use_limit),
            s,
            y,
        )
    return torch.from_numpy(y), torch.from_numpy(s)

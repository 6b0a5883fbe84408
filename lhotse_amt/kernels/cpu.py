"""Compiled per-channel CPU kernels (numba).

Each kernel runs the exact sample recursion of its plain-torch reference in
:mod:`lhotse_amt.functional`, one channel per loop iteration (channels in parallel with
``numba.prange``), in the dtype of its input (float32 or float64). The wrappers take and
return torch tensors shaped ``(N, T)`` (channels flattened) and never copy more than needed.

The number of numba threads follows ``torch.get_num_threads()`` so that "one thread"
benchmarks and the Lhotse CLI's single-thread clamp apply to these kernels too.
"""

from __future__ import annotations

import math

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import njit, prange, types
from numba.extending import intrinsic

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


@njit(parallel=True, **_NOPY)
def _sosfilt_kernel(x, sos, zi, y):  # pragma: no cover - compiled
    N, T = x.shape
    S = sos.shape[1]
    for c in prange(N):
        z = zi[c].copy()
        for n in range(T):
            v = x[c, n]
            for s in range(S):
                b0 = sos[c, s, 0]
                out = b0 * v + z[s, 0]
                z[s, 0] = sos[c, s, 1] * v - sos[c, s, 4] * out + z[s, 1]
                z[s, 1] = sos[c, s, 2] * v - sos[c, s, 5] * out
                v = out
            y[c, n] = v
        zi[c] = z


def sosfilt(
    x: torch.Tensor, sos: torch.Tensor, zi: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (N, T)``, ``sos (N, S, 6)``, ``zi (N, S, 2)`` -> ``y (N, T)``, ``zf (N, S, 2)``."""
    _threads()
    xn = _np(x)
    sn = _np(sos).astype(xn.dtype, copy=False)
    N, S = sn.shape[0], sn.shape[1]
    z = np.zeros((N, S, 2), xn.dtype) if zi is None else _np(zi).astype(xn.dtype, copy=True)
    y = np.empty_like(xn)
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
    yr = np.empty((N, T), dt)
    yi = np.empty((N, T), dt) if mode == 0 else np.empty((N, 0), dt)
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


@njit(parallel=True, **_NOPY)
def _adaptation_kernel(x, a, m, minlvl, use_limit, s, y):  # pragma: no cover - compiled
    N, T = x.shape
    J = a.shape[1]
    for c in prange(N):
        st = s[c].copy()
        for n in range(T):
            v = x[c, n]
            if v < minlvl[c]:
                v = minlvl[c]
            for j in range(J):
                v = v / st[j]
                if use_limit and v > 1.0:
                    mj = m[c, j]
                    v = 2.0 * mj / (1.0 + math.exp(-2.0 * (v - 1.0) / mj)) - (mj - 1.0)
                st[j] = a[c, j] * st[j] + (1.0 - a[c, j]) * v
            y[c, n] = v
        s[c] = st


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
    y = np.empty_like(xn)
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


# --------------------------------------------------------------------------------------
# Bank of complex one-pole resonators with Re / |.| outputs (modulation filterbank)
# --------------------------------------------------------------------------------------


@njit(parallel=True, **_NOPY)
def _efilt_bank_kernel(x, pr, pi, gr, gi, use_abs, scale, sr, si, y):  # pragma: no cover
    B, C, T = x.shape
    M = pr.shape[1]
    for bc in prange(B * C):
        b = bc // C
        c = bc % C
        for m in range(M):
            sc = scale[c, m]
            if sc == 0.0:
                for n in range(T):
                    y[b, c, m, n] = 0.0
                continue
            ar = pr[c, m]
            ai = pi[c, m]
            cr = gr[c, m]
            ci = gi[c, m]
            ur = sr[b, c, m]
            ui = si[b, c, m]
            if use_abs[c, m]:
                for n in range(T):
                    v = x[b, c, n]
                    nr = ar * ur - ai * ui + v
                    ui = ar * ui + ai * ur
                    ur = nr
                    yr = cr * ur - ci * ui
                    yi = cr * ui + ci * ur
                    y[b, c, m, n] = sc * math.sqrt(yr * yr + yi * yi)
            else:
                for n in range(T):
                    v = x[b, c, n]
                    nr = ar * ur - ai * ui + v
                    ui = ar * ui + ai * ur
                    ur = nr
                    y[b, c, m, n] = sc * (cr * ur - ci * ui)
            sr[b, c, m] = ur
            si[b, c, m] = ui


def efilt_bank(
    x: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    use_abs: torch.Tensor,
    scale: torch.Tensor,
    state: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (..., C, T)``; ``pole``/``gain`` complex ``(C, M)``; ``use_abs``/``scale`` ``(C, M)``;
    ``state`` complex ``(..., C, M, 1)``. Returns ``y (..., C, M, T)`` and the new state."""
    _threads()
    lead = x.shape[:-2]
    C, T = x.shape[-2], x.shape[-1]
    M = pole.shape[-1]
    xn = _np(x.reshape(-1, C, T))
    dt = xn.dtype
    Bf = xn.shape[0]
    if state is None:
        sr = np.zeros((Bf, C, M), dt)
        si = np.zeros((Bf, C, M), dt)
    else:
        sn = _np(state.reshape(Bf, C, M))
        sr = np.ascontiguousarray(sn.real.astype(dt))
        si = np.ascontiguousarray(sn.imag.astype(dt))
    p = _np(pole)
    g = _np(gain)
    y = np.empty((Bf, C, M, T), dt)
    _efilt_bank_kernel(
        xn,
        np.ascontiguousarray(p.real.astype(dt)),
        np.ascontiguousarray(p.imag.astype(dt)),
        np.ascontiguousarray(np.real(g).astype(dt)),
        np.ascontiguousarray(np.imag(g).astype(dt)),
        _np(use_abs).astype(np.bool_),
        _np(scale).astype(dt),
        sr,
        si,
        y,
    )
    cdt = torch.complex128 if dt == np.float64 else torch.complex64
    st = torch.complex(torch.from_numpy(sr), torch.from_numpy(si)).to(cdt)
    return torch.from_numpy(y).reshape(*lead, C, M, T), st.reshape(*lead, C, M, 1)


# --------------------------------------------------------------------------------------
# Time-major kernels: the innermost loop runs over channels, whose recursions are
# independent, so LLVM vectorises it (SIMD across channels) instead of waiting on one
# channel's dependency chain. Used by the feature-extraction path on the CPU.
# --------------------------------------------------------------------------------------

_TM = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)


@njit(**_TM)
def _sections_tm(v, sos, z0, z1):  # pragma: no cover - compiled
    # one sample of S shared second-order sections on the channel row v (in place);
    # states z0/z1 (S, C)
    C = v.shape[0]
    for s in range(sos.shape[0]):
        b0, b1, b2, a1, a2 = sos[s, 0], sos[s, 1], sos[s, 2], sos[s, 4], sos[s, 5]
        r0 = z0[s]
        r1 = z1[s]
        for c in range(C):
            x = v[c]
            out = b0 * x + r0[c]
            r0[c] = b1 * x - a1 * out + r1[c]
            r1[c] = b2 * x - a2 * out
            v[c] = out


@njit(**_TM)
def _gammatone_ihc_tm1(x, pr, pi, g2, K, zr, zi, sos, z0, z1, rect, y):  # pragma: no cover
    # one item: x (T,); pole pr/pi, 2 x real gain g2 (C,); states zr/zi (K, C); IHC
    # sections sos (S, 6), states z0/z1 (S, C); y (T, C). Every channel loop is innermost
    # over contiguous rows of local copies, so LLVM vectorises it (SIMD across channels).
    T = x.shape[0]
    C = pr.shape[0]
    sr = zr.copy()
    si = zi.copy()
    a0 = z0.copy()
    a1 = z1.copy()
    ur = np.empty(C)
    ui = np.empty(C)
    for n in range(T):
        v = x[n]
        for c in range(C):
            ur[c] = v
            ui[c] = 0.0
        for k in range(K):
            rr = sr[k]
            ri = si[k]
            for c in range(C):
                nr = pr[c] * rr[c] - pi[c] * ri[c] + ur[c]
                ni = pr[c] * ri[c] + pi[c] * rr[c] + ui[c]
                rr[c] = nr
                ri[c] = ni
                ur[c] = nr
                ui[c] = ni
        if rect:
            for c in range(C):
                w = g2[c] * ur[c]
                ur[c] = w if w > 0.0 else 0.0
        else:
            for c in range(C):
                ur[c] = g2[c] * ur[c]
        _sections_tm(ur, sos, a0, a1)
        yn = y[n]
        for c in range(C):
            yn[c] = ur[c]
    zr[:] = sr
    zi[:] = si
    z0[:] = a0
    z1[:] = a1


@njit(parallel=True, **_TM)
def _gammatone_ihc_tm(x, pr, pi, g, K, zr, zi, sos, zs, rect, y):  # pragma: no cover
    # x (B, T); pole pr/pi, real gain g (C,); states zr/zi (B, K, C); IHC sections
    # sos (S, 6) shared by all channels, states zs (B, S, 2, C); y (B, T, C) = IHC output
    # (rect: half-wave rectification before the sections; S = 0, rect False: gammatone)
    g2 = 2.0 * g
    for b in prange(x.shape[0]):
        _gammatone_ihc_tm1(
            x[b], pr, pi, g2, K, zr[b], zi[b], sos, zs[b, :, 0], zs[b, :, 1], rect, y[b]
        )


def gammatone_ihc_time_major(
    x: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    order: int,
    ihc_sos: torch.Tensor | None,
    state: dict | None,
) -> tuple[np.ndarray, dict]:
    """Gammatone (``2 Re``) + half-wave rectification + IHC low-pass on ``x (B, T)``.

    Returns the IHC output time-major ``(B, T, C)`` (float64 numpy) and the states in the
    layouts of :func:`lhotse_amt.functional.gammatone.gammatone` (complex ``(B, C, K)``)
    and :func:`lhotse_amt.functional.iir.sosfilt` (``(B, C, S, 2)``). With
    ``ihc_sos=None`` the output is the gammatone output itself (no rectification).
    """
    _threads()
    xn = _np(x).astype(np.float64)
    B, T = xn.shape
    p = _np(pole).astype(np.complex128)
    C = p.shape[0]
    rect = ihc_sos is not None
    sos = _np(ihc_sos).astype(np.float64) if rect else np.zeros((0, 6))
    S = sos.shape[0]
    state = state or {}
    if "filterbank" in state:
        z = _np(state["filterbank"]).astype(np.complex128)  # (B, C, K)
        zr = np.ascontiguousarray(z.real.transpose(0, 2, 1))
        zi = np.ascontiguousarray(z.imag.transpose(0, 2, 1))
    else:
        zr = np.zeros((B, order, C))
        zi = np.zeros((B, order, C))
    if "ihc" in state:
        zs = np.ascontiguousarray(_np(state["ihc"]).astype(np.float64).transpose(0, 2, 3, 1))
    else:
        zs = np.zeros((B, S, 2, C))
    y = np.empty((B, T, C))
    _gammatone_ihc_tm(
        xn,
        np.ascontiguousarray(p.real),
        np.ascontiguousarray(p.imag),
        _np(gain).astype(np.float64),
        order,
        zr,
        zi,
        sos,
        zs,
        rect,
        y,
    )
    fb = torch.complex(torch.from_numpy(zr), torch.from_numpy(zi)).transpose(1, 2)
    new = {"filterbank": fb}
    if rect:
        new["ihc"] = torch.from_numpy(zs).permute(0, 3, 1, 2)
    return y, new


@njit(**_TM)
def _modbank_pooled_tm(
    u, pre, zpre, lp, zlp, pr, pi, gr, gi, gm, mode, clo, sc0, sr, si, hop, end, square, sums
):  # pragma: no cover - compiled
    # u (T, C) adaptation output; pre/lp (S, 6) shared sections, states (S, 2, C);
    # bands pr/pi (M, C); output gains (scale included) gr/gi (M, C) for signed bands, gm
    # (M, C) (scale |gain|) for |.| bands; mode[m]: 0 signed, 1 |.|, 2 mixed (gm = 0 on
    # signed channels, gr = gi = 0 on |.| channels); channels c < clo[m] have no band m;
    # states sr/si (M, C); sums (M + 1, nblk, C); samples >= end unused
    T, C = u.shape
    M = pr.shape[0]
    Tb = max(0, min(T, end))
    nblk = (Tb + hop - 1) // hop
    w = np.empty((Tb, C))
    for n in range(Tb):
        for c in range(C):
            w[n, c] = u[n, c]
    for s in range(pre.shape[0]):
        for n in range(Tb):
            for c in range(C):
                v = w[n, c]
                out = pre[s, 0] * v + zpre[s, 0, c]
                zpre[s, 0, c] = pre[s, 1] * v - pre[s, 4] * out + zpre[s, 1, c]
                zpre[s, 1, c] = pre[s, 2] * v - pre[s, 5] * out
                w[n, c] = out
    acc = sums[0]
    for k in range(nblk):
        for c in range(C):
            acc[k, c] = 0.0
        for n in range(k * hop, min((k + 1) * hop, Tb)):
            for c in range(C):
                v = w[n, c]
                for s in range(lp.shape[0]):
                    out = lp[s, 0] * v + zlp[s, 0, c]
                    zlp[s, 0, c] = lp[s, 1] * v - lp[s, 4] * out + zlp[s, 1, c]
                    zlp[s, 1, c] = lp[s, 2] * v - lp[s, 5] * out
                    v = out
                v = v * sc0[c]
                acc[k, c] += v * v if square else v
    for m in range(M):
        a_r = pr[m]
        a_i = pi[m]
        c_r = gr[m]
        c_i = gi[m]
        g_m = gm[m]
        xr = sr[m]
        xi = si[m]
        acc = sums[m + 1]
        c0 = clo[m]
        md = mode[m]
        for k in range(nblk):
            for c in range(C):
                acc[k, c] = 0.0
        _band_pooled(
            w,
            a_r[c0:],
            a_i[c0:],
            c_r[c0:],
            c_i[c0:],
            g_m[c0:],
            xr[c0:],
            xi[c0:],
            c0,
            md,
            hop,
            Tb,
            square,
            acc,
        )


@njit(**_TM)
def _band_pooled(
    w, a_r, a_i, c_r, c_i, g_m, sr, si, c0, md, hop, Tb, square, acc
):  # pragma: no cover
    # one efilt band on channels c0... of w (Tb, C) summed into acc (nblk, C); md: 0 signed,
    # 1 |.|, 2 both. Contiguous 1-D views, local state copies and a scratch row let LLVM
    # vectorise the channel loops (indices from 0: provably non-negative).
    C = a_r.shape[0]
    xr = sr.copy()
    xi = si.copy()
    tmp = np.empty(C)
    if md == 1:
        for n in range(Tb):
            wn = w[n][c0:]
            for c in range(C):
                nr = a_r[c] * xr[c] - a_i[c] * xi[c] + wn[c]
                ni = a_r[c] * xi[c] + a_i[c] * xr[c]
                xr[c] = nr
                xi[c] = ni
                v = g_m[c] * math.sqrt(nr * nr + ni * ni)
                tmp[c] = v * v if square else v
            ak = acc[n // hop][c0:]
            for c in range(C):
                ak[c] += tmp[c]
    elif md == 0:
        for n in range(Tb):
            wn = w[n][c0:]
            for c in range(C):
                nr = a_r[c] * xr[c] - a_i[c] * xi[c] + wn[c]
                ni = a_r[c] * xi[c] + a_i[c] * xr[c]
                xr[c] = nr
                xi[c] = ni
                v = c_r[c] * nr - c_i[c] * ni
                tmp[c] = v * v if square else v
            ak = acc[n // hop][c0:]
            for c in range(C):
                ak[c] += tmp[c]
    else:
        for n in range(Tb):
            wn = w[n][c0:]
            for c in range(C):
                nr = a_r[c] * xr[c] - a_i[c] * xi[c] + wn[c]
                ni = a_r[c] * xi[c] + a_i[c] * xr[c]
                xr[c] = nr
                xi[c] = ni
                v = g_m[c] * math.sqrt(nr * nr + ni * ni) + (c_r[c] * nr - c_i[c] * ni)
                tmp[c] = v * v if square else v
            ak = acc[n // hop][c0:]
            for c in range(C):
                ak[c] += tmp[c]
    sr[:] = xr
    si[:] = xi


@njit(parallel=True, **_TM)
def _modbank_pooled_tm_batch(
    u, pre, zpre, lp, zlp, pr, pi, gr, gi, gm, mode, clo, sc0, sr, si, hop, ends, square, sums
):  # pragma: no cover - compiled
    for b in prange(u.shape[0]):
        _modbank_pooled_tm(
            u[b],
            pre,
            zpre[b],
            lp,
            zlp[b],
            pr,
            pi,
            gr,
            gi,
            gm,
            mode,
            clo,
            sc0,
            sr[b],
            si[b],
            hop,
            ends[b],
            square,
            sums[b],
        )


def modulation_bank_pooled(
    u: np.ndarray,
    lp_sos: torch.Tensor,
    prefilter_sos: torch.Tensor | None,
    pole: torch.Tensor,
    gain: torch.Tensor,
    use_abs: torch.Tensor,
    scale: torch.Tensor,
    state: dict | None,
    hop: int,
    ends: list[int],
    square: bool,
) -> tuple[torch.Tensor, dict]:
    """Modulation filterbank (``efilt``) on the time-major adaptation output
    ``u (B, T, C)``, summed over blocks of ``hop`` samples (samples at or after
    ``ends[b]`` are not used: that item is finished).

    Same recursion as :func:`lhotse_amt.functional.modulation.modulation_filterbank`
    (float64 arithmetic). ``pole``/``gain``/``use_abs`` are the band-pass bands
    ``(C, M)``; ``scale`` covers all bands ``(C, M + 1)``. Returns block sums
    ``(B, C, M + 1, ceil(T / hop))`` (of squares if ``square``) and the new state in the
    layout of the unfused function.
    """
    _threads()
    u = np.ascontiguousarray(u, dtype=np.float64)
    B, T, C = u.shape
    M = pole.shape[-1]
    state = state or {}
    pre = np.zeros((0, 6)) if prefilter_sos is None else _np(prefilter_sos).astype(np.float64)
    lp = _np(lp_sos).astype(np.float64)

    def _sos_state(key: str, S: int) -> np.ndarray:
        if key in state:  # (B, C, S, 2) -> (B, S, 2, C)
            return np.ascontiguousarray(_np(state[key]).astype(np.float64).transpose(0, 2, 3, 1))
        return np.zeros((B, S, 2, C))

    zpre = _sos_state("pre", pre.shape[0])
    zlp = _sos_state("lp", lp.shape[0])
    if "bp" in state:
        sn = _np(state["bp"]).reshape(B, C, M).astype(np.complex128).transpose(0, 2, 1)
        sr, si = np.ascontiguousarray(sn.real), np.ascontiguousarray(sn.imag)
    else:
        sr, si = np.zeros((B, M, C)), np.zeros((B, M, C))
    p = _np(pole).astype(np.complex128).T
    g = _np(gain).astype(np.complex128).T  # (M, C)
    sc = _np(scale).astype(np.float64).T  # (M + 1, C)
    ab = _np(use_abs).T.astype(np.bool_)  # (M, C)
    scb = sc[1:]
    # |scale g y| = scale |g| |y|: |.| bands need no complex output multiplication
    gm = np.where(ab, scb * np.abs(g), 0.0)
    gr = np.where(ab, 0.0, scb * g.real)
    gi = np.where(ab, 0.0, scb * g.imag)
    mode = np.where(ab.all(1), 1, np.where(ab.any(1), 2, 0)).astype(np.int64)
    # channels without a band (scale 0) are skipped when they form a leading block
    clo = np.zeros(M, np.int64)
    for m in range(M):
        nz = np.flatnonzero(scb[m] != 0.0)
        if nz.size and np.all(scb[m, nz[0] :] != 0.0):
            clo[m] = nz[0]
        elif nz.size == 0:
            clo[m] = C
    nblk = -(-T // hop)
    sums = np.zeros((B, M + 1, nblk, C))
    _modbank_pooled_tm_batch(
        u,
        pre,
        zpre,
        lp,
        zlp,
        np.ascontiguousarray(p.real),
        np.ascontiguousarray(p.imag),
        np.ascontiguousarray(gr),
        np.ascontiguousarray(gi),
        np.ascontiguousarray(gm),
        mode,
        clo,
        np.ascontiguousarray(sc[0]),
        sr,
        si,
        int(hop),
        np.asarray(ends, dtype=np.int64),
        bool(square),
        sums,
    )
    new = {
        "lp": torch.from_numpy(zlp).permute(0, 3, 1, 2),
        "bp": torch.complex(torch.from_numpy(sr), torch.from_numpy(si)).transpose(1, 2)[..., None],
    }
    if prefilter_sos is not None:
        new["pre"] = torch.from_numpy(zpre).permute(0, 3, 1, 2)
    return torch.from_numpy(sums).permute(0, 3, 1, 2), new


# --------------------------------------------------------------------------------------
# Time-major adaptation loops (SIMD across channels)
# --------------------------------------------------------------------------------------


@intrinsic
def _f64_from_bits(typingctx, i):  # pragma: no cover - compiled
    sig = types.float64(types.int64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return sig, codegen


# FMA contraction only (no reassociation, no approximate functions)
_TMF = dict(_TM, fastmath={"contract"})
_LN2HI = 6.93147180369123816490e-01
_LN2LO = 1.90821492927058770002e-10
_LOG2E = 1.4426950408889634


@njit(inline="always", **_TMF)
def _exp_nonpos(u):  # pragma: no cover - compiled
    # exp(u) for -37.5 <= u <= 0 without a library call (vectorisable): u = k ln2 + r,
    # |r| <= ln2 / 2, degree-12 Taylor polynomial (Estrin), 2^k from the exponent bits;
    # relative error ~1e-16
    k = np.floor(u * _LOG2E + 0.5)
    r = (u - k * _LN2HI) - k * _LN2LO
    r2 = r * r
    r4 = r2 * r2
    q0 = (1.0 + r) + (0.5 + r * (1.0 / 6.0)) * r2
    q1 = (1.0 / 24.0 + r * (1.0 / 120.0)) + (1.0 / 720.0 + r * (1.0 / 5040.0)) * r2
    q2 = (1.0 / 40320.0 + r * (1.0 / 362880.0)) + (1.0 / 3628800.0 + r * (1.0 / 39916800.0)) * r2
    p = (q0 + q1 * r4) + (q2 + r4 * (1.0 / 479001600.0)) * (r4 * r4)
    return p * _f64_from_bits((np.int64(k) + 1023) << 52)


@njit(**_TMF)
def _adaptation_tm(x, a, b, m, q, minlvl, use_limit, off, scale, s, y):  # pragma: no cover
    # x (T, C); a, b = 1 - a, m, q = -2 / m: (J, C); states s (J, C); y (T, C) in model
    # units ((v - off) * scale). The limiter is evaluated branch-free on every channel
    # (selected where v > 1); its exp argument is clamped at -37.5, below which
    # 1 + exp(u) == 1 in float64 exactly as with the library exp.
    T, C = x.shape
    J = a.shape[0]
    # channels padded to a multiple of 8 (no scalar remainder loops; the padding lanes
    # run on copies of channel 0 and are discarded)
    P = (C + 7) // 8 * 8
    st = np.empty((J, P))
    aa = np.empty((J, P))
    bb = np.empty((J, P))
    mm = np.empty((J, P))
    qq = np.empty((J, P))
    for j in range(J):
        for c in range(P):
            i = c if c < C else 0
            st[j, c] = s[j, i]
            aa[j, c] = a[j, i]
            bb[j, c] = b[j, i]
            mm[j, c] = m[j, i]
            qq[j, c] = q[j, i]
    v = np.empty(P)
    for c in range(P):
        v[c] = minlvl
    for n in range(T):
        xn = x[n]
        for c in range(C):
            w = xn[c]
            v[c] = w if w > minlvl else minlvl
        for c in range(C, P):
            v[c] = minlvl
        for j in range(J):
            sj = st[j]
            aj = aa[j]
            bj = bb[j]
            mj = mm[j]
            qj = qq[j]
            for c in range(P):
                w = v[c] / sj[c]
                if use_limit:
                    u = (w - 1.0) * qj[c]
                    u = u if u > -37.5 else -37.5
                    u = u if u < 0.0 else 0.0
                    lim = 2.0 * mj[c] / (1.0 + _exp_nonpos(u)) - (mj[c] - 1.0)
                    w = lim if w > 1.0 else w
                v[c] = w
                sj[c] = aj[c] * sj[c] + bj[c] * w
        yn = y[n]
        for c in range(C):
            yn[c] = (v[c] - off) * scale
    for j in range(J):
        for c in range(C):
            s[j, c] = st[j, c]


@njit(parallel=True, **_TMF)
def _adaptation_tm_batch(x, a, b, m, q, minlvl, use_limit, off, scale, s, y):  # pragma: no cover
    for i in prange(x.shape[0]):
        _adaptation_tm(x[i], a, b, m, q, minlvl, use_limit, off, scale, s[i], y[i])


def adaptation_time_major(
    u: np.ndarray, module: torch.nn.Module, state: torch.Tensor | None
) -> tuple[np.ndarray, torch.Tensor]:
    """:class:`lhotse_amt.modules.AdaptationLoops` on the time-major IHC output
    ``u (B, T, C)`` (float64, channels in SIMD lanes). Returns the output in model units
    ``(B, T, C)`` and the states in the module's layout ``(B, C, J)``.

    Agrees with :func:`lhotse_amt.functional.adaptation.adaptation_loops_reference` to
    ~1e-14 relative (the library ``exp`` of the overshoot limiter is replaced by an
    accurate inline one; ``-2 (v - 1) / m`` is a multiplication by ``-2 / m``).
    """
    from ..functional.adaptation import adaptation_coefficients

    _threads()
    u = np.ascontiguousarray(u, dtype=np.float64)
    B, T, C = u.shape
    tau = module.tau.detach().to("cpu", torch.float64)
    minlvl = 10.0 ** ((module.minspl - module.dboffset) / 20.0)
    a, m, s0 = adaptation_coefficients(tau, module.fs, module.limit, minlvl)
    J = a.shape[-1]
    a2 = np.ascontiguousarray(np.broadcast_to(a.numpy()[:, None], (J, C)))
    m2 = np.ascontiguousarray(np.broadcast_to(m.numpy()[:, None], (J, C)))
    if state is None:
        s = np.ascontiguousarray(np.broadcast_to(s0.numpy()[None, :, None], (B, J, C)))
    else:
        s = np.ascontiguousarray(_np(state).astype(np.float64).transpose(0, 2, 1))
    off = minlvl ** (1.0 / 2.0**J)
    use_limit = module.limit > 1.0
    with np.errstate(divide="ignore"):
        q = -2.0 / m2 if use_limit else np.zeros_like(m2)
    y = np.empty_like(u)
    _adaptation_tm_batch(u, a2, 1.0 - a2, m2, q, minlvl, use_limit, off, 100.0 / (1.0 - off), s, y)
    return y, torch.from_numpy(s).transpose(1, 2)


# --------------------------------------------------------------------------------------
# King et al. (2019) chain after the compression, fused with frame pooling (time-major)
# --------------------------------------------------------------------------------------


@njit(**_TM)
def _king_pooled_tm(
    u, ihc, zi0, zi1, post, zp0, zp1, bank, zb0, zb1, gain, use_abs, hop, end, square, sums
):  # pragma: no cover - compiled
    # u (T, C) compressed gammatone output; ihc (S1, 6) after half-wave rectification,
    # post (S2, 6) (high-pass, optional low-pass); states (S, C); bank (M, S3, 6), states
    # zb0/zb1 (M, S3, C); band m output times gain[m], |.| if use_abs[m]; sums (M, nblk, C)
    T, C = u.shape
    M = bank.shape[0]
    Tb = max(0, min(T, end))
    w = np.empty((Tb, C))
    a0 = zi0.copy()
    a1 = zi1.copy()
    p0 = zp0.copy()
    p1 = zp1.copy()
    v = np.empty(C)
    for n in range(Tb):
        un = u[n]
        for c in range(C):
            x = un[c]
            v[c] = x if x > 0.0 else 0.0
        _sections_tm(v, ihc, a0, a1)
        _sections_tm(v, post, p0, p1)
        wn = w[n]
        for c in range(C):
            wn[c] = v[c]
    zi0[:] = a0
    zi1[:] = a1
    zp0[:] = p0
    zp1[:] = p1
    for m in range(M):
        b0 = zb0[m].copy()
        b1 = zb1[m].copy()
        sos = bank[m]
        g = gain[m]
        ab = use_abs[m]
        acc = sums[m]
        for n in range(Tb):
            wn = w[n]
            for c in range(C):
                v[c] = wn[c]
            _sections_tm(v, sos, b0, b1)
            ak = acc[n // hop]
            if ab:
                for c in range(C):
                    y = g * abs(v[c])
                    ak[c] += y * y if square else y
            else:
                for c in range(C):
                    y = g * v[c]
                    ak[c] += y * y if square else y
        zb0[m] = b0
        zb1[m] = b1


@njit(parallel=True, **_TM)
def _king_pooled_tm_batch(
    u, ihc, zi0, zi1, post, zp0, zp1, bank, zb0, zb1, gain, use_abs, hop, ends, square, sums
):  # pragma: no cover - compiled
    for b in prange(u.shape[0]):
        _king_pooled_tm(
            u[b],
            ihc,
            zi0[b],
            zi1[b],
            post,
            zp0[b],
            zp1[b],
            bank,
            zb0[b],
            zb1[b],
            gain,
            use_abs,
            hop,
            ends[b],
            square,
            sums[b],
        )


def king_bank_pooled(
    u: np.ndarray,
    ihc_sos: torch.Tensor,
    post_sos: list[torch.Tensor],
    bank_sos: torch.Tensor,
    gain: np.ndarray,
    use_abs: np.ndarray,
    state: dict | None,
    hop: int,
    ends: list[int],
    square: bool,
) -> tuple[torch.Tensor, dict]:
    """King et al. (2019) stages after the compression on the time-major ``u (B, T, C)``:
    half-wave rectification + IHC sections, the ``post_sos`` filters (the 3-Hz high-pass,
    optionally the 150-Hz low-pass) and the band-pass bank ``bank_sos (M, S, 6)``; band
    ``m`` is multiplied by ``gain[m]`` (``|.|`` first where ``use_abs[m]``) and summed
    over blocks of ``hop`` samples (samples at or after ``ends[b]`` unused). Float64
    recursion as the unfused stages. Returns sums ``(B, C, M, ceil(T / hop))`` and the
    state (numpy arrays, this function's own layout)."""
    _threads()
    u = np.ascontiguousarray(u, dtype=np.float64)
    B, T, C = u.shape
    ihc = _np(ihc_sos).astype(np.float64).reshape(-1, 6)
    post = np.concatenate(
        [_np(s).astype(np.float64).reshape(-1, 6) for s in post_sos] or [np.zeros((0, 6))]
    )
    bank = np.ascontiguousarray(_np(bank_sos).astype(np.float64))
    M, S3 = bank.shape[0], bank.shape[1]
    st = state or {
        "ihc": np.zeros((B, 2, ihc.shape[0], C)),
        "post": np.zeros((B, 2, post.shape[0], C)),
        "bank": np.zeros((B, 2, M, S3, C)),
    }
    zi, zp, zb = st["ihc"], st["post"], st["bank"]
    nblk = -(-T // hop)
    sums = np.zeros((B, M, nblk, C))
    _king_pooled_tm_batch(
        u,
        ihc,
        zi[:, 0],
        zi[:, 1],
        post,
        zp[:, 0],
        zp[:, 1],
        bank,
        zb[:, 0],
        zb[:, 1],
        np.asarray(gain, np.float64),
        np.asarray(use_abs, np.bool_),
        int(hop),
        np.asarray(ends, dtype=np.int64),
        bool(square),
        sums,
    )
    return torch.from_numpy(sums).permute(0, 3, 1, 2), {"ihc": zi, "post": zp, "bank": zb}

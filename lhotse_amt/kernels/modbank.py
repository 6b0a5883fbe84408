"""CPU kernel for the whole modulation filterbank (``efilt``), one pass per channel.

:mod:`lhotse_amt.kernels.modbank_simd` computes the same bits with 8 channels per vector
and is used instead unless ``LHOTSE_AMT_SIMD=0``; this kernel is its reference in the tests.

The resonator bands of a channel run together, vectorised over the bands (padded to a
multiple of 8 with zero-gain bands).

Pre-filter and low-pass sections run in float64 (their poles lie within ~1e-3 of z = 1),
the resonator bands too (on the float64 low-passed input), and every band is written
straight into the ``(B, C, M, T)`` output: no intermediate tensors, concatenation or dtype
conversions. Same recursions and output rule as
:func:`lhotse_amt.functional.modulation.modulation_filterbank`.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from .cpu import _np, _threads
from .fastmath import assume_distinct_arrays, denormals_off, prefer_wide_vectors, restore_fp_mode

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False)

__all__ = ["modulation_bank"]


_BT = 256  # time block of the band-pass pass (samples)


@njit(**_OPTS)
def _bands_row(bc, C, ub, pr, pi, gr, gi, ab, kb, sr, si, ur, ui, tmp, y):  # pragma: no cover
    # the band-pass resonators of row bc = (b, c) on its low-pass input ub (T,): all bands
    # of a sample in one loop iteration (vectorised over the bands, padded to MP with
    # zero-gain bands; with 8 bands the loop bound MP & 15 tells LLVM the loop is short,
    # so it is not interleaved and the 8 bands fill one 512-bit vector), time in blocks of
    # _BT samples written to tmp (BT, MP) and then into y (B, C, M1 + 1, T). Per band the
    # arithmetic of the band-by-band recursion (results identical). kb (C, MP): band scales
    prefer_wide_vectors()
    assume_distinct_arrays()
    b = bc // C
    c = bc % C
    T = ub.shape[0]
    M1 = sr.shape[2]
    MP = ur.shape[1]
    urr = ur[bc]
    uir = ui[bc]
    tb = tmp[bc]
    par = pr[c]
    pai = pi[c]
    gar = gr[c]
    gai = gi[c]
    kab = ab[c]
    kk = kb[c]
    for m in range(MP):
        urr[m] = sr[b, c, m] if m < M1 else 0.0
        uir[m] = si[b, c, m] if m < M1 else 0.0
    # a bound LLVM knows to be small for the usual 8 padded bands (see above)
    nm = MP & 15 if MP == 8 else MP
    for n0 in range(0, T, _BT):
        nb = min(_BT, T - n0)
        for n in range(nb):
            un = ub[n0 + n]
            for m in range(nm):
                xr = urr[m]
                xi = uir[m]
                nr = par[m] * xr - pai[m] * xi + un
                ni = par[m] * xi + pai[m] * xr
                urr[m] = nr
                uir[m] = ni
                yr = gar[m] * nr - gai[m] * ni
                yi = gar[m] * ni + gai[m] * nr
                mag = math.sqrt(yr * yr + yi * yi)
                tb[n, m] = kk[m] * (mag if kab[m] else yr)
        for m in range(M1):
            ym = y[b, c, m + 1]
            if kk[m] == 0.0:
                for n in range(nb):
                    ym[n0 + n] = 0.0
            else:
                for n in range(nb):
                    ym[n0 + n] = tb[n, m]
    for m in range(M1):
        sr[b, c, m] = urr[m]
        si[b, c, m] = uir[m]


@njit(parallel=True, **_OPTS)
def _kernel(x, pre, zpre, lp, zlp, pr, pi, gr, gi, ab, sc, sr, si, y):  # pragma: no cover
    # x (B, C, T); pre/lp (S, 6), states (B, C, S, 2) float64; bands pr.. (C, MP) padded;
    # states sr/si (B, C, M1); scale sc (C, MP + 1) -> band scale kb (C, MP); y (B, C, M1 + 1, T)
    B, C, T = x.shape
    MP = pr.shape[1]
    ur = np.empty((B * C, MP))
    ui = np.empty((B * C, MP))
    tmp = np.empty((B * C, _BT, MP))
    kb = np.ascontiguousarray(sc[:, 1:])
    for bc in prange(B * C):
        fp = denormals_off()
        b = bc // C
        c = bc % C
        uu = np.empty(T, np.float64)
        zp = zpre[b, c]
        zl = zlp[b, c]
        s0 = sc[c, 0]
        for n in range(T):
            v = np.float64(x[b, c, n])
            for s in range(pre.shape[0]):
                out = pre[s, 0] * v + zp[s, 0]
                zp[s, 0] = pre[s, 1] * v - pre[s, 4] * out + zp[s, 1]
                zp[s, 1] = pre[s, 2] * v - pre[s, 5] * out
                v = out
            uu[n] = v
            for s in range(lp.shape[0]):
                out = lp[s, 0] * v + zl[s, 0]
                zl[s, 0] = lp[s, 1] * v - lp[s, 4] * out + zl[s, 1]
                zl[s, 1] = lp[s, 2] * v - lp[s, 5] * out
                v = out
            y[b, c, 0, n] = s0 * v
        _bands_row(bc, C, uu, pr, pi, gr, gi, ab, kb, sr, si, ur, ui, tmp, y)
        restore_fp_mode(fp)


def state_arrays(
    state: dict | None, B: int, C: int, SP: int, SL: int, M1: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The states of :func:`modulation_bank` (keys ``pre``, ``lp``, ``bp``; a missing key:
    at rest) as new arrays: the pre-filter's and the low-pass's section states ``(B, C,
    SP, 2)``, ``(B, C, SL, 2)`` float64 and the resonators' ``(B, C, M1)`` complex128.
    The resonator states stay float64 (the recursion runs in float64 on the float64
    low-passed input), so chunked processing equals one-shot processing exactly."""
    state = state or {}

    def zi(key: str, S: int) -> np.ndarray:
        if key in state:
            return _np(state[key]).astype(np.float64).reshape(B, C, S, 2).copy()
        return np.zeros((B, C, S, 2))

    if "bp" in state:
        bp = _np(state["bp"]).reshape(B, C, M1).astype(np.complex128)
    else:
        bp = np.zeros((B, C, M1), np.complex128)
    return zi("pre", SP), zi("lp", SL), bp


def modulation_bank(
    x: torch.Tensor, filters: tuple, state: dict | None
) -> tuple[torch.Tensor, dict]:
    """``x (..., C, T)`` through the bank's ``filters = (lp_sos, prefilter_sos, pole, gain,
    use_abs, scale)`` (the filters of every modulation-bank kernel): low-pass sections
    ``lp_sos (SL, 6)``, prefilter sections ``prefilter_sos (SP, 6)`` or ``None``, band-pass
    ``pole``/``gain`` complex ``(C, M-1)``, ``use_abs (C, M-1)`` and ``scale (C, M)`` for
    all bands. Returns ``(..., C, M, T)`` in ``x``'s dtype and the state (keys ``pre``,
    ``lp``, ``bp`` as the unfused function)."""
    lp_sos, prefilter_sos, pole, gain, use_abs, scale = filters
    _threads()
    lead = x.shape[:-2]
    C, T = x.shape[-2], x.shape[-1]
    xn = _np(x.reshape(math.prod(lead), C, T))
    B = xn.shape[0]
    dt = xn.dtype
    M1 = pole.shape[-1]
    pre = np.zeros((0, 6)) if prefilter_sos is None else _np(prefilter_sos).astype(np.float64)
    lp = _np(lp_sos).astype(np.float64)
    zpre, zlp, s = state_arrays(state, B, C, pre.shape[0], lp.shape[0], M1)
    sr, si = np.ascontiguousarray(s.real), np.ascontiguousarray(s.imag)
    p, g = _np(pole), _np(gain)
    # coefficients as stored (complex64 for float32 models), evaluated in float64
    # bands padded to a multiple of 8 with zero-gain bands (one vector per 8 bands)
    MP = max(8, -(-M1 // 8) * 8)

    def _pad(a: np.ndarray, dtype) -> np.ndarray:
        out = np.zeros((C, MP), dtype)
        out[:, :M1] = a.reshape(C, M1)
        return out

    pr = _pad(p.real, np.float64)
    pi = _pad(p.imag, np.float64)
    gr = _pad(np.real(g), np.float64)
    gi = _pad(np.imag(g), np.float64)
    sc = np.zeros((C, MP + 1))
    sc[:, : M1 + 1] = _np(scale).astype(np.float64).reshape(C, M1 + 1)
    ab = _pad(_np(use_abs).astype(np.bool_), np.bool_)
    y = _alloc.empty((B, C, M1 + 1, T), dt)
    if T > 0:
        _kernel(
            xn, pre, zpre, lp, zlp,
            pr, pi, gr, gi,
            ab, sc, sr, si, y,
        )  # fmt: skip
    new = {
        "lp": torch.from_numpy(zlp).reshape(*lead, C, lp.shape[0], 2),
        "bp": torch.complex(torch.from_numpy(sr), torch.from_numpy(si)).reshape(*lead, C, M1, 1),
    }
    if prefilter_sos is not None:
        new["pre"] = torch.from_numpy(zpre).reshape(*lead, C, pre.shape[0], 2)
    return torch.from_numpy(y).reshape(*lead, C, M1 + 1, T), new

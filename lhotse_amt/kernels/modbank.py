"""CPU kernel for the whole modulation filterbank (``efilt``), one pass per channel.

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

from .cpu import _np, _threads

__all__ = ["modulation_bank"]


@njit(parallel=True, nogil=True, cache=True, error_model="numpy", boundscheck=False)
def _kernel(x, pre, zpre, lp, zlp, pr, pi, gr, gi, ab, sc, sr, si, y):  # pragma: no cover
    # x (B, C, T); pre/lp (S, 6), states (B, C, S, 2) float64; bands pr.. (C, M1);
    # states sr/si (B, C, M1); scale sc (C, M1 + 1); y (B, C, M1 + 1, T)
    B, C, T = x.shape
    M1 = pr.shape[1]
    for bc in prange(B * C):
        b = bc // C
        c = bc % C
        u = np.empty(T, np.float64)
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
            u[n] = v
            for s in range(lp.shape[0]):
                out = lp[s, 0] * v + zl[s, 0]
                zl[s, 0] = lp[s, 1] * v - lp[s, 4] * out + zl[s, 1]
                zl[s, 1] = lp[s, 2] * v - lp[s, 5] * out
                v = out
            y[b, c, 0, n] = s0 * v
        for m in range(M1):
            k = sc[c, m + 1]
            ym = y[b, c, m + 1]
            if k == 0.0:
                ym[:] = 0.0
                continue
            ar = pr[c, m]
            ai = pi[c, m]
            cr = gr[c, m]
            ci = gi[c, m]
            ur = sr[b, c, m]
            ui = si[b, c, m]
            if ab[c, m]:
                for n in range(T):
                    nr = ar * ur - ai * ui + u[n]
                    ui = ar * ui + ai * ur
                    ur = nr
                    yr = cr * ur - ci * ui
                    yi = cr * ui + ci * ur
                    ym[n] = k * math.sqrt(yr * yr + yi * yi)
            else:
                for n in range(T):
                    nr = ar * ur - ai * ui + u[n]
                    ui = ar * ui + ai * ur
                    ur = nr
                    ym[n] = k * (cr * ur - ci * ui)
            sr[b, c, m] = ur
            si[b, c, m] = ui


def modulation_bank(
    x: torch.Tensor,
    lp_sos: torch.Tensor,
    prefilter_sos: torch.Tensor | None,
    pole: torch.Tensor,
    gain: torch.Tensor,
    use_abs: torch.Tensor,
    scale: torch.Tensor,
    state: dict | None,
) -> tuple[torch.Tensor, dict]:
    """``x (..., C, T)``; band-pass ``pole``/``gain`` complex ``(C, M-1)``, ``use_abs``
    ``(C, M-1)``; ``scale (C, M)`` for all bands. Returns ``(..., C, M, T)`` in ``x``'s
    dtype and the state (keys ``pre``, ``lp``, ``bp`` as the unfused function)."""
    _threads()
    lead = x.shape[:-2]
    C, T = x.shape[-2], x.shape[-1]
    xn = _np(x.reshape(-1, C, T))
    B = xn.shape[0]
    dt = xn.dtype
    M1 = pole.shape[-1]
    state = state or {}
    pre = np.zeros((0, 6)) if prefilter_sos is None else _np(prefilter_sos).astype(np.float64)
    lp = _np(lp_sos).astype(np.float64)

    def _zi(key: str, S: int) -> np.ndarray:
        if key in state:
            return _np(state[key]).astype(np.float64).reshape(B, C, S, 2).copy()
        return np.zeros((B, C, S, 2))

    zpre, zlp = _zi("pre", pre.shape[0]), _zi("lp", lp.shape[0])
    # resonator states stay float64 (the recursion runs in float64 on the float64 low-passed
    # input), so chunked processing equals one-shot processing exactly
    if "bp" in state:
        s = _np(state["bp"]).reshape(B, C, M1).astype(np.complex128)
        sr, si = np.ascontiguousarray(s.real), np.ascontiguousarray(s.imag)
    else:
        sr, si = np.zeros((B, C, M1)), np.zeros((B, C, M1))
    p, g = _np(pole), _np(gain)
    # coefficients as stored (complex64 for float32 models), evaluated in float64
    pr = np.ascontiguousarray(p.real.astype(np.float64))
    pi = np.ascontiguousarray(p.imag.astype(np.float64))
    gr = np.ascontiguousarray(np.real(g).astype(np.float64))
    gi = np.ascontiguousarray(np.imag(g).astype(np.float64))
    y = np.empty((B, C, M1 + 1, T), dt)
    if T > 0:
        _kernel(
            xn, pre, zpre, lp, zlp,
            pr, pi, gr, gi,
            _np(use_abs).astype(np.bool_), _np(scale).astype(np.float64), sr, si, y,
        )  # fmt: skip
    new = {
        "lp": torch.from_numpy(zlp).reshape(*lead, C, lp.shape[0], 2),
        "bp": torch.complex(torch.from_numpy(sr), torch.from_numpy(si)).reshape(*lead, C, M1, 1),
    }
    if prefilter_sos is not None:
        new["pre"] = torch.from_numpy(zpre).reshape(*lead, C, pre.shape[0], 2)
    return torch.from_numpy(y).reshape(*lead, C, M1 + 1, T), new

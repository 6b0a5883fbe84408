"""Direct-form (transfer-function) IIR filtering with per-channel coefficients (numba).

Transposed direct form II with the operation order of :func:`scipy.signal.lfilter`:
``y = z0 + b0 x``; ``z_i = z_{i+1} + b_{i+1} x - a_{i+1} y``. Used only where a reference
implementation ran the expanded polynomial (the King 2019 modulation band-passes under
``preset="amt-1.4"``); second-order sections are the accurate form everywhere else.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from .cpu import _NOPY, _np, _threads


@njit(parallel=True, **_NOPY)
def _lfilter_kernel(x, b, a, z, y):  # pragma: no cover - compiled
    N, T = x.shape
    K = b.shape[1] - 1
    for c in prange(N):
        zz = z[c].copy()
        for n in range(T):
            xn = x[c, n]
            yn = zz[0] + b[c, 0] * xn
            for i in range(K - 1):
                zz[i] = zz[i + 1] + xn * b[c, i + 1] - yn * a[c, i + 1]
            zz[K - 1] = xn * b[c, K] - yn * a[c, K]
            y[c, n] = yn
        z[c] = zz


def lfilter(
    x: torch.Tensor, b: torch.Tensor, a: torch.Tensor, zi: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (N, T)``, ``b``/``a`` ``(N, K + 1)`` (``a[:, 0] == 1``), ``zi (N, K)`` ->
    ``y (N, T)``, ``zf (N, K)``."""
    _threads()
    xn = _np(x)
    dt = xn.dtype
    bn = _np(b).astype(dt, copy=False)
    an = _np(a).astype(dt, copy=False)
    N, K = bn.shape[0], bn.shape[1] - 1
    z = np.zeros((N, K), dt) if zi is None else _np(zi).astype(dt, copy=True)
    y = np.empty_like(xn)
    if xn.shape[1] > 0 and K > 0:
        _lfilter_kernel(xn, bn, an, z, y)
    elif K == 0:
        y[:] = xn * bn[:, :1]
    return torch.from_numpy(y), torch.from_numpy(z)


@njit(parallel=True, **_NOPY)
def _sos_bank_kernel(x, sos, z, y):  # pragma: no cover - compiled
    # x (N, T); sos (M, S, 6) float64; z (N, M, S, 2) float64; y (N, M, T)
    N, T = x.shape
    M, S = sos.shape[0], sos.shape[1]
    for c in prange(N):
        for m in range(M):
            zz = z[c, m].copy()
            for n in range(T):
                v = np.float64(x[c, n])
                for s in range(S):
                    out = sos[m, s, 0] * v + zz[s, 0]
                    zz[s, 0] = sos[m, s, 1] * v - sos[m, s, 4] * out + zz[s, 1]
                    zz[s, 1] = sos[m, s, 2] * v - sos[m, s, 5] * out
                    v = out
                y[c, m, n] = v
            z[c, m] = zz


def sos_bank(
    x: torch.Tensor, sos: torch.Tensor, zi: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """A bank of ``M`` SOS filters sharing one input: ``x (N, T)`` (any float dtype),
    ``sos (M, S, 6)``, ``zi (N, M, S, 2)`` -> ``y (N, M, T)`` in ``x``'s dtype and
    ``zf (N, M, S, 2)`` float64. The recursion runs in float64 (as
    :func:`scipy.signal.sosfilt` with float64 coefficients) without copying the input
    per band."""
    _threads()
    xn = _np(x)
    sn = _np(sos).astype(np.float64, copy=False)
    N, T = xn.shape
    M, S = sn.shape[0], sn.shape[1]
    z = np.zeros((N, M, S, 2)) if zi is None else _np(zi).astype(np.float64, copy=True)
    y = np.empty((N, M, T), xn.dtype)
    if T > 0:
        _sos_bank_kernel(xn, sn, z, y)
    return torch.from_numpy(y), torch.from_numpy(z)

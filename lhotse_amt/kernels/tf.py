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

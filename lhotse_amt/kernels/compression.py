"""CPU kernels (numba) of the broken-stick compression operator
(:mod:`lhotse_amt.ops.compression`): forward and analytic backward, one pass each.

With the knee ``K`` and the exponent ``n``, above the knee (``|x| > K``, ``r = (|x| /
K)^n``): ``y = sign(x) K r``, ``dy/dx = n r / (|x| / K)``, ``dy/dn = y log(|x| / K)``;
below it ``y = x``, ``dy/dx = 1``, ``dy/dn = 0`` (King et al. 2019, eq. 1). Everything runs
in float64 whatever the tensor dtype. ``precise`` (float64 tensors) takes the library
``pow`` and ``log``; otherwise the inline, vectorisable ``exp``/``log`` of
:mod:`lhotse_amt.kernels.fastmath` (1e-9 relative, far below float32 resolution), as the
fused King2019 inference kernel does.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from .cpu import _threads
from .fastmath import KERNEL_OPTS, exp_inline, log_pos_inline

__all__ = ["broken_stick_forward", "broken_stick_backward"]

_OPTS = KERNEL_OPTS
#: samples per parallel chunk (and per partial sum of the exponent's gradient)
_CH = 1 << 16
_LANES = 16


@njit(inline="always", **_OPTS)
def _ratio_pow(q, n, precise):  # pragma: no cover - compiled
    # log(q) and q^n for q = |x| / K >= 1
    if precise:
        lg = math.log(q)
        return lg, math.pow(q, n)
    lg = log_pos_inline(q)
    return lg, exp_inline(n * lg)


@njit(**_OPTS)
def _fwd_chunk(x, knee, n, precise, y):  # pragma: no cover - compiled
    # one chunk (its own function: the loop vectorises)
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        q = abs(v) / knee
        # below the knee the ratio is clamped to 1 (finite, unused)
        _, r = _ratio_pow(q if q > 1.0 else 1.0, n, precise)
        y[i] = math.copysign(knee * r, v) if q > 1.0 else v


@njit(inline="always", **_OPTS)
def _bwd_at(g, x, i, knee, n, precise, gx):  # pragma: no cover - compiled
    # gx[i] = g dy/dx at sample i; returns g dy/dn there
    v = np.float64(x[i])
    gi = np.float64(g[i])
    q = abs(v) / knee
    above = q > 1.0
    qq = q if above else 1.0
    lg, r = _ratio_pow(qq, n, precise)
    gx[i] = gi * (n * r / qq) if above else gi
    return gi * math.copysign(knee * r, v) * lg if above else 0.0


@njit(**_OPTS)
def _bwd_chunk(g, x, knee, n, precise, gx, acc):  # pragma: no cover - compiled
    # one chunk: gx = g dy/dx; the sum of g dy/dn in _LANES partial sums acc (sample i
    # into sum i % _LANES: the loop over the lanes vectorises)
    N = x.shape[0]
    full = N - N % _LANES
    for i0 in range(0, full, _LANES):
        for k in range(_LANES):
            acc[k] += _bwd_at(g, x, i0 + k, knee, n, precise, gx)
    for i in range(full, N):
        acc[i - full] += _bwd_at(g, x, i, knee, n, precise, gx)


@njit(parallel=True, **_OPTS)
def _fwd(x, knee, n, precise, y):  # pragma: no cover - compiled
    N = x.shape[0]
    for c in prange((N + _CH - 1) // _CH):
        a, b = c * _CH, min(N, (c + 1) * _CH)
        _fwd_chunk(x[a:b], knee, n, precise, y[a:b])


@njit(parallel=True, **_OPTS)
def _bwd(g, x, knee, n, precise, gx, gn):  # pragma: no cover - compiled
    # gx = g dy/dx; gn[c] = sum over chunk c of g dy/dn
    N = x.shape[0]
    for c in prange((N + _CH - 1) // _CH):
        a, b = c * _CH, min(N, (c + 1) * _CH)
        acc = np.zeros(_LANES)
        _bwd_chunk(g[a:b], x[a:b], knee, n, precise, gx[a:b], acc)
        gn[c] = acc.sum()


def _flat(t: torch.Tensor) -> np.ndarray:
    return t.detach().contiguous().reshape(-1).numpy()


def broken_stick_forward(x: torch.Tensor, exponent: float, knee: float) -> torch.Tensor:
    """``x`` (any shape, float32/float64) -> ``y`` shaped like ``x``."""
    _threads()
    y = _alloc.empty_tensor(tuple(x.shape), x.dtype)
    precise = x.dtype == torch.float64
    _fwd(_flat(x), float(knee), float(exponent), precise, y.view(-1).numpy())
    return y


def broken_stick_backward(
    g: torch.Tensor, x: torch.Tensor, exponent: float, knee: float
) -> tuple[torch.Tensor, float]:
    """``dL/dx`` shaped like ``x`` (its dtype) and ``dL/dn`` (float) from ``g = dL/dy``."""
    _threads()
    gx = _alloc.empty_tensor(tuple(x.shape), x.dtype)
    gn = np.zeros((x.numel() + _CH - 1) // _CH)
    precise = x.dtype == torch.float64
    _bwd(_flat(g), _flat(x), float(knee), float(exponent), precise, gx.view(-1).numpy(), gn)
    return gx, float(gn.sum())

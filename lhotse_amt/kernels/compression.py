"""CPU kernels (numba) of the compression operators (:mod:`lhotse_amt.ops.compression`):
forward and analytic backward, one pass each.

**Broken stick** (King2019).
With the knee ``K`` and the exponent ``n``, above the knee (``|x| > K``, ``r = (|x| /
K)^n``): ``y = sign(x) K r``, ``dy/dx = n r / (|x| / K)``, ``dy/dn = y log(|x| / K)``;
below it ``y = x``, ``dy/dx = 1``, ``dy/dn = 0`` (King et al. 2019, eq. 1). Everything runs
in float64 whatever the tensor dtype. ``precise`` (float64 tensors) takes the library
``pow`` and ``log``; otherwise the inline, vectorisable ``exp``/``log`` of
:mod:`lhotse_amt.kernels.fastmath` (1e-9 relative, far below float32 resolution), as the
fused King2019 inference kernel does.

**DRNL compression** (Paulick2024's nonlinear path, Lopez-Poveda & Meddis 2001, eq. 1):
``y = u min(a, b |u|^(c - 1))`` per channel (``a``, ``b``) with ``|u|`` bounded below by
1e-30, as :func:`lhotse_amt.functional.drnl.broken_stick`. With ``t = b |u|^(c - 1)``: on
the linear branch (``a <= t``) ``dy/du = a``, ``dy/da = u``; on the compressive one
``dy/du = c t`` (``t`` where the bound acts), ``dy/db = u |u|^(c - 1)``, ``dy/dc = u t
log|u|``. float64 arithmetic with the library ``pow`` and ``log``; the parameter gradients
summed per row in order, so they do not depend on the thread count.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from .cpu import _threads
from .fastmath import KERNEL_OPTS, exp_inline, log_pos_inline

__all__ = [
    "broken_stick_forward",
    "broken_stick_backward",
    "drnl_compression_forward",
    "drnl_compression_backward",
]

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


#: the lower bound of ``|u|`` in the DRNL compression (keeps ``|u|^(c - 1)`` finite)
_TINY = 1e-30


@njit(parallel=True, **_OPTS)
def _drnl_fwd(u, a, b, c, y):  # pragma: no cover - compiled
    # u, y: (R, T), row r in channel r % C; a, b: (C,) float64
    R, T = u.shape
    C = a.shape[0]
    cm1 = c - 1.0
    for r in prange(R):
        ar, br = a[r % C], b[r % C]
        for i in range(T):
            v = np.float64(u[r, i])
            mag = abs(v)
            t = br * math.pow(mag if mag > _TINY else _TINY, cm1)
            y[r, i] = v * (ar if ar <= t else t)


@njit(parallel=True, **_OPTS)
def _drnl_bwd(g, u, a, b, c, gu, sums):  # pragma: no cover - compiled
    # gu = g dy/du; sums[r] = row r's sums of g dy/da, g dy/db, g dy/dc
    R, T = u.shape
    C = a.shape[0]
    cm1 = c - 1.0
    for r in prange(R):
        ar, br = a[r % C], b[r % C]
        sa = 0.0
        sb = 0.0
        sc = 0.0
        for i in range(T):
            v = np.float64(u[r, i])
            gi = np.float64(g[r, i])
            mag = abs(v)
            bounded = mag < _TINY
            mag = _TINY if bounded else mag
            p = math.pow(mag, cm1)
            t = br * p
            if ar <= t:
                gu[r, i] = gi * ar
                sa += gi * v
            else:
                gu[r, i] = gi * (t if bounded else t + cm1 * t)
                gv = gi * v
                sb += gv * p
                sc += gv * t * math.log(mag)
        sums[r, 0] = sa
        sums[r, 1] = sb
        sums[r, 2] = sc


def _rows(u: torch.Tensor) -> np.ndarray:
    return u.detach().contiguous().reshape(-1, u.shape[-1]).numpy()


def _params(a: torch.Tensor, b: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    return tuple(t.detach().to(torch.float64).contiguous().numpy() for t in (a, b))


def drnl_compression_forward(
    u: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: float
) -> torch.Tensor:
    """``u (..., C, T)`` (float32/float64), ``a``, ``b`` ``(C,)``, the exponent ``c`` ->
    ``y`` shaped like ``u``."""
    _threads()
    y = _alloc.empty_tensor(tuple(u.shape), u.dtype)
    if u.numel():
        _drnl_fwd(_rows(u), *_params(a, b), float(c), y.view(-1, u.shape[-1]).numpy())
    return y


def drnl_compression_backward(
    g: torch.Tensor, u: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """From ``g = dL/dy``: ``dL/du`` shaped like ``u`` (its dtype), ``dL/da``, ``dL/db``
    ``(C,)`` and ``dL/dc`` (0-d), float64."""
    _threads()
    gu = _alloc.empty_tensor(tuple(u.shape), u.dtype)
    C = a.shape[0]
    rows = u.numel() // u.shape[-1] if u.shape[-1] else 0
    sums = np.zeros((rows, 3))
    if u.numel():
        ap, bp = _params(a, b)
        _drnl_bwd(
            _rows(g.to(u.dtype)), _rows(u), ap, bp, float(c), gu.view(-1, u.shape[-1]).numpy(), sums
        )
    per_channel = torch.from_numpy(sums.reshape(-1, C, 3).sum(0))
    return gu, per_channel[:, 0], per_channel[:, 1], per_channel[:, 2].sum()

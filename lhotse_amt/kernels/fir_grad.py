"""CPU kernels (numba) of the strided FIR operator (:mod:`lhotse_amt.ops.fir`):
``y[r, i] = sum_k w[k] x[r, start + i stride + k]`` and its backward, float64 accumulation
whatever the tensor dtype.

The backward runs once over the output gradient: ``dL/dx[r, start + i stride + k] +=
w[k] g[r, i]`` (per row, into a float64 row buffer) and ``dL/dw[k] += g[r, i]
x[r, start + i stride + k]`` (per row, summed over rows afterwards); both inner loops run
over the taps ``k`` on contiguous memory.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from .cpu import _threads
from .fastmath import denormals_off, restore_fp_mode

__all__ = ["fir_forward", "fir_backward"]

_WO = 8  # outputs per block of the forward kernel
_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"})


@njit(parallel=True, **_OPTS)
def _fwd(x, w, start, stride, y):  # pragma: no cover - compiled
    # _WO outputs at a time: independent accumulators (each output sums its taps in
    # ascending order, so the result does not depend on the blocking)
    R, n_out = y.shape
    K = w.shape[0]
    W = _WO
    for r in prange(R):
        fp = denormals_off()
        acc = np.empty(W)
        for i0 in range(0, n_out, W):
            m = min(W, n_out - i0)
            for j in range(W):
                acc[j] = 0.0
            if m == W:
                for k in range(K):
                    wk = w[k]
                    for j in range(W):
                        acc[j] += wk * np.float64(x[r, start + (i0 + j) * stride + k])
            else:
                for k in range(K):
                    for j in range(m):
                        acc[j] += w[k] * np.float64(x[r, start + (i0 + j) * stride + k])
            for j in range(m):
                y[r, i0 + j] = acc[j]
        restore_fp_mode(fp)


@njit(parallel=True, **_OPTS)
def _bwd(g, x, w, start, stride, want_x, want_w, gx, gw):  # pragma: no cover - compiled
    R, n_out = g.shape
    Tx = x.shape[1]
    K = w.shape[0]
    for r in prange(R):
        fp = denormals_off()
        row = np.zeros(Tx if want_x else 0)
        acc = np.zeros(K if want_w else 0)
        for i in range(n_out):
            gi = np.float64(g[r, i])
            t0 = start + i * stride
            if want_x:
                for k in range(K):
                    row[t0 + k] += w[k] * gi
            if want_w:
                for k in range(K):
                    acc[k] += gi * np.float64(x[r, t0 + k])
        if want_x:
            for t in range(Tx):
                gx[r, t] = row[t]
        if want_w:
            for k in range(K):
                gw[r, k] = acc[k]
        restore_fp_mode(fp)


def fir_forward(
    x: torch.Tensor, w: torch.Tensor, start: int, stride: int, n_out: int
) -> torch.Tensor:
    """``x (R, Tx)``, taps ``w (K,)`` -> ``y (R, n_out)`` in ``x``'s dtype."""
    _threads()
    y = torch.empty((x.shape[0], n_out), dtype=x.dtype)
    if n_out > 0 and x.shape[0] > 0:
        _fwd(x.numpy(), w.double().numpy(), start, stride, y.numpy())
    return y


def fir_backward(
    g: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    start: int,
    stride: int,
    want_x: bool,
    want_w: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``gx (R, Tx)`` in ``x``'s dtype (``(R, 0)`` unless ``want_x``) and the per-row
    ``gw (R, K)`` float64 (``(R, 0)`` unless ``want_w``)."""
    _threads()
    R, Tx = x.shape
    K = w.shape[0]
    gx = torch.empty((R, Tx if want_x else 0), dtype=x.dtype)
    gw = torch.empty((R, K if want_w else 0), dtype=torch.float64)
    if R > 0 and g.shape[1] > 0:
        _bwd(
            g.numpy(),
            x.numpy(),
            w.double().numpy(),
            start,
            stride,
            want_x,
            want_w,
            gx.numpy(),
            gw.numpy(),
        )
    else:
        gx.zero_()
        gw.zero_()
    return gx, gw

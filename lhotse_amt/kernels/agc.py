"""Compiled kernels for the attack/release AGC of the loudness models.

Semantics (identical to :func:`lhotse_amt.functional.loudness.agc_reference`), per row ``r``::

    s = 0
    for t in range(T):
        a = attack if x[r, t] > s else release
        s = s + a * (x[r, t] - s)
        y[r, t] = s

* :func:`agc_numba`: numba CPU kernel (``@njit(cache=True)``), one row per loop iteration,
  float32 or float64 (computed in the input dtype); :func:`agc_numba_cols` runs the same
  recursion down the columns of ``(N, T, C)`` arrays (frames x channels, vectorised over
  channels).
* :func:`agc_numba_state`: the rows of ``(N, T)`` from a state, streamed.

They do not track gradients. On CUDA the recursion runs as the Triton kernel of the
differentiable operator ``lhotse_amt::agc`` (:mod:`lhotse_amt.kernels.triton_agc`).
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from .. import _alloc
from .fastmath import NO_CFUNC, denormals_off, prefer_wide_vectors, restore_fp_mode

__all__ = ["agc_numba", "agc_numba_cols", "agc_numba_state"]


@njit(cache=True, nogil=True, **NO_CFUNC)
def _agc_kernel(x, attack, release, zero, y):  # pragma: no cover - compiled
    fp = denormals_off()
    n_rows, n_t = x.shape
    for r in range(n_rows):
        s = zero
        for t in range(n_t):
            v = x[r, t]
            a = attack if v > s else release
            s = s + a * (v - s)
            y[r, t] = s
    restore_fp_mode(fp)


@njit(cache=True, nogil=True, **NO_CFUNC)
def _agc_kernel_state(x, attack, release, state, y):  # pragma: no cover - compiled
    fp = denormals_off()
    n_rows, n_t = x.shape
    for r in range(n_rows):
        s = state[r]
        for t in range(n_t):
            v = x[r, t]
            a = attack if v > s else release
            s = s + a * (v - s)
            y[r, t] = s
        state[r] = s
    restore_fp_mode(fp)


@njit(cache=True, nogil=True, **NO_CFUNC)
def _agc_kernel_cols(x, attack, release, zero, y):  # pragma: no cover - compiled
    # x (N, T, C): the recursion runs along T for every column c; the channel loop is inner
    # (contiguous, vectorised, branch-free select), the arithmetic per element is that of
    # _agc_kernel, so the results are identical
    fp = denormals_off()
    prefer_wide_vectors()
    n, n_t, n_c = x.shape
    s = np.empty(n_c, x.dtype)
    for b in range(n):
        for c in range(n_c):
            s[c] = zero
        for t in range(n_t):
            for c in range(n_c):
                v = x[b, t, c]
                sc = s[c]
                a = attack if v > sc else release
                sc = sc + a * (v - sc)
                s[c] = sc
                y[b, t, c] = sc
    restore_fp_mode(fp)


def agc_numba_cols(x: torch.Tensor, attack: float, release: float) -> torch.Tensor:
    """AGC along axis 1 of ``x (N, T, C)`` (every column ``x[n, :, c]`` a signal) on the CPU;
    same values as :func:`agc_numba` on the transposed rows, without transposing copies."""
    if x.dim() != 3:
        raise ValueError(f"expected (N, T, C), got {tuple(x.shape)}")
    return _run(_agc_kernel_cols, x, attack, release)


def _run(kernel, x: torch.Tensor, attack: float, release: float) -> torch.Tensor:
    # x -> contiguous float numpy array, kernel(x, attack, release, 0, y) in its dtype
    xn = np.ascontiguousarray(x.detach().cpu().numpy())
    if xn.dtype not in (np.float32, np.float64):
        raise ValueError(f"unsupported dtype {xn.dtype}")
    y = _alloc.empty_like(xn)
    if xn.size:
        t = xn.dtype.type
        kernel(xn, t(attack), t(release), t(0.0), y)
    return torch.from_numpy(y).to(x.device)


def agc_numba_state(x: np.ndarray, attack: float, release: float, state: np.ndarray) -> np.ndarray:
    """Streaming AGC of each row of ``x (N, T)`` (numpy) starting from ``state (N,)``.

    ``state`` is updated in place to the last output of each row, so consecutive calls on
    consecutive blocks equal one call on the whole signal (``state = 0`` initially).
    """
    xn = np.ascontiguousarray(x)
    y = _alloc.empty_like(xn)
    if xn.shape[1] > 0:
        t = xn.dtype.type
        _agc_kernel_state(xn, t(attack), t(release), state, y)
    return y


def agc_numba(x: torch.Tensor, attack: float, release: float) -> torch.Tensor:
    """AGC of each row of ``x (N, T)`` on the CPU with the numba kernel."""
    if x.dim() != 2:
        raise ValueError(f"expected (N, T), got {tuple(x.shape)}")
    return _run(_agc_kernel, x, attack, release)

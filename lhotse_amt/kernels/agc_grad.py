"""CPU kernels (numba) of the differentiable attack/release AGC operator ``lhotse_amt::agc``.

The AGC of the loudness models (Glasberg & Moore 2002, Sec. 2.6; Moore et al. 2016,
Eqs. 4–5) is, for every column ``(b, c)`` of ``x (B, T, C)`` (the recursion runs along
``T``)::

    S[-1] = zi[b, c]
    a[t]  = attack[b, c] if x[b, t, c] > S[t-1] else release[b, c]
    S[t]  = S[t-1] + a[t] (x[b, t, c] - S[t-1])            (y[b, t, c] = S[t])

The forward computes in the dtype of ``x`` with the arithmetic of
:func:`lhotse_amt.functional.loudness.agc_reference` and of the no-grad kernels in
:mod:`lhotse_amt.kernels.agc` (same values, bit for bit), so a model gives the same
loudness with and without gradient.

**Backward.** The branch ``a(x[t], S[t-1])`` is piecewise constant, so almost everywhere
``dS[t]/dx[t] = a[t]``, ``dS[t]/dS[t-1] = 1 - a[t]`` and ``dS[t]/d attack`` (or
``d release``, the branch taken) ``= x[t] - S[t-1]``. With ``lam[t] = dL/dS[t]`` (the output
gradient plus what flows back from ``t + 1``) the adjoint recursion runs backwards in time::

    gx[t] = a[t] lam[t];  g_attack or g_release += lam[t] (x[t] - S[t-1])
    lam[t-1] = gy[t-1] + (1 - a[t]) lam[t];                 gzi = (1 - a[0]) lam[0]

It needs the states ``S[t-1]``, which *are* the forward's output ``y`` (shifted by one
frame): the operator saves ``y`` for its backward and nothing else, so, unlike the
sample-rate recursions of :mod:`lhotse_amt.kernels.autodiff`, there is no checkpoint and
no recomputation (the models run the AGC at 1000 frames/s; ``y`` is kept by autograd
anyway when a later stage needs it). Since ``y`` holds ``S`` exactly as the forward
computed it, the backward reproduces every branch decision of the forward. The adjoint
runs in float64 whatever the dtype of ``x``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from numba import njit, prange

from .fastmath import denormals_off, restore_fp_mode
from .rows import KernelPair, dense, numba_launch

__all__ = ["AgcKernels", "agc_forward", "agc_backward"]

_OPTS = dict(nogil=True, cache=True, boundscheck=False)


@njit(parallel=True, **_OPTS)
def _agc_fwd(x, attack, release, zi, y):  # pragma: no cover - compiled
    # columns of (B, T, C): the channel loop is inner (contiguous); arithmetic in x's
    # dtype, no contraction (the same rounding as the torch reference)
    n_b, n_t, n_c = x.shape
    for b in prange(n_b):
        fp = denormals_off()
        s = np.empty(n_c, x.dtype)
        for c in range(n_c):
            s[c] = zi[b, c]
        for t in range(n_t):
            for c in range(n_c):
                v = x[b, t, c]
                sc = s[c]
                a = attack[b, c] if v > sc else release[b, c]
                sc = sc + a * (v - sc)
                s[c] = sc
                y[b, t, c] = sc
        restore_fp_mode(fp)


@njit(parallel=True, **_OPTS)
def _agc_bwd(gy, x, y, attack, release, zi, gx, ga, gr, gzi, want_x):  # pragma: no cover
    # adjoint recursion backwards in time; the state before frame t is y[t - 1] (zi at 0)
    n_b, n_t, n_c = x.shape
    for b in prange(n_b):
        fp = denormals_off()
        lam = np.zeros(n_c)
        gat = np.zeros(n_c)
        grl = np.zeros(n_c)
        for t in range(n_t - 1, -1, -1):
            for c in range(n_c):
                sp = y[b, t - 1, c] if t > 0 else zi[b, c]
                v = x[b, t, c]
                lt = lam[c] + np.float64(gy[b, t, c])
                d = np.float64(v) - np.float64(sp)
                if v > sp:
                    a = np.float64(attack[b, c])
                    gat[c] += lt * d
                else:
                    a = np.float64(release[b, c])
                    grl[c] += lt * d
                if want_x:
                    gx[b, t, c] = a * lt
                lam[c] = (1.0 - a) * lt
        for c in range(n_c):
            ga[b, c] = gat[c]
            gr[b, c] = grl[c]
            gzi[b, c] = lam[c]
        restore_fp_mode(fp)


def _check(x: torch.Tensor, attack: torch.Tensor, release: torch.Tensor, zi: torch.Tensor) -> None:
    if x.dim() != 3:
        raise ValueError(f"agc: x must be (B, T, C), got shape {tuple(x.shape)}")
    if x.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"agc: x must be float32 or float64, got {x.dtype}")
    want = (x.shape[0], x.shape[2])
    for name, t in (("attack", attack), ("release", release), ("zi", zi)):
        if tuple(t.shape) != want:
            raise ValueError(f"agc: {name} must have shape (B, C) = {want}, got {tuple(t.shape)}")
        if t.dtype != x.dtype:
            raise TypeError(f"agc: {name} must have the dtype of x ({x.dtype}), got {t.dtype}")


class AgcKernels(KernelPair):
    """The host functions of the AGC kernel pair on one backend: the input checks, the
    outputs and the launches ``forward(x, attack, release, zi, y)`` and
    ``backward(gy, x, y, attack, release, zi, gx, ga, gr, gzi, want_x)`` (tensors dense,
    gradient outputs zeros on entry; only for a non-empty ``x``). The backend check runs
    after the input checks; keyword options go to the launch (Triton: ``block``)."""

    def _prepare(
        self, x: torch.Tensor, attack: torch.Tensor, release: torch.Tensor, zi: torch.Tensor
    ) -> None:
        _check(x, attack, release, zi)
        self._ready()

    def forward(
        self, x: torch.Tensor, attack: torch.Tensor, release: torch.Tensor, zi: torch.Tensor,
        **opts: Any,
    ) -> torch.Tensor:  # fmt: skip
        """AGC along axis 1 of ``x (B, T, C)`` with per-column ``attack``, ``release`` and
        initial state ``zi`` ``(B, C)`` (all of the dtype of ``x``) -> ``y (B, T, C)``."""
        self._prepare(x, attack, release, zi)
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        if x.numel():
            self._forward(dense(x), dense(attack), dense(release), dense(zi), y, **opts)
        return y

    def backward(
        self, gy: torch.Tensor, x: torch.Tensor, y: torch.Tensor, attack: torch.Tensor,
        release: torch.Tensor, zi: torch.Tensor, want_x: bool, **opts: Any,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
        """Gradients of ``sum(gy * agc(x, attack, release, zi))`` from the forward's output
        ``y``: ``gx (B, T, C)`` in the dtype of ``x`` (``(B, 0, C)`` unless ``want_x``) and
        ``g_attack``, ``g_release``, ``g_zi`` ``(B, C)`` float64."""
        self._prepare(x, attack, release, zi)
        B, T, C = x.shape
        dev = x.device
        gx = torch.zeros((B, T, C) if want_x else (B, 0, C), dtype=x.dtype, device=dev)
        ga, gr, gzi = (torch.zeros((B, C), dtype=torch.float64, device=dev) for _ in range(3))
        if x.numel():
            args = (dense(gy), dense(x), dense(y), dense(attack), dense(release), dense(zi))
            self._backward(*args, gx, ga, gr, gzi, bool(want_x), **opts)
        return gx, ga, gr, gzi


KERNELS = AgcKernels(numba_launch(_agc_fwd), numba_launch(_agc_bwd))
#: :meth:`AgcKernels.forward` on the CPU
agc_forward = KERNELS.forward
#: :meth:`AgcKernels.backward` on the CPU
agc_backward = KERNELS.backward

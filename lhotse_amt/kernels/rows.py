"""Host side of the row-wise recursion kernels, written once for both backends.

Every differentiable sample-rate recursion (:mod:`~lhotse_amt.kernels.sos_grad`,
:mod:`~lhotse_amt.kernels.resonator_grad`, :mod:`~lhotse_amt.kernels.adaptation_grad`,
:mod:`~lhotse_amt.kernels.ihc_paulick_grad`) has a numba kernel pair (CPU) and a Triton
kernel pair (CUDA: :mod:`~lhotse_amt.kernels.triton_sos`, ...). All of them follow one
argument convention, so the checks, conversions, output buffers and the launch are this
module's :class:`RowKernels`; a backend module only says how its kernels are launched.

**Rows.** Output row ``r`` filters input row ``xrow[r]`` of ``x (Rx, T)`` with coefficient
row ``crow[r]`` and starts from state row ``zi[r]`` (see :mod:`lhotse_amt.kernels.autodiff`).
An operator's arguments are ``x, xrow, *coefs, zi``: ``coefs`` are its coefficient
tensors (row ``crow[r]``), ``crow`` and its numbers, in the operator's order.

**Launch convention.** ``forward(x, xrow, *coefs, zi, y, zf, ck)`` with ``x`` in its dtype,
the row maps int64, floating coefficients float64, other tensors (modes) and numbers as
given, ``zi (R, ...)`` float64; it writes ``y (R, T)`` (dtype of ``x``), the final states
``zf`` (float64, shaped like ``zi``, holding a copy of ``zi`` on entry, so a kernel may
advance the states in place) and, when ``ck`` has blocks, the states at the start of every
block of :data:`~lhotse_amt.kernels.autodiff.CHECKPOINT_BLOCK` samples into
``ck (R, nb, ...)``. ``backward(gy, gzf, x, xrow, *coefs, zi, ck, gx, *gcoefs, gzi, want_x,
want_c)`` writes the input gradient ``gx (R, T)`` (``(R, 0)`` unless ``want_x``), one
float64 gradient ``(R, ...)`` per floating coefficient tensor (zeros on entry) and the
initial-state gradient ``gzi`` (holding a copy of ``gzf`` on entry). A launch only runs
for ``R > 0`` and ``T > 0``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .. import _alloc
from .autodiff import checkpoint_blocks
from .cpu import _np, _threads

__all__ = ["KernelPair", "RowKernels", "numba_launch"]

#: a backend's kernel launch: the prepared arguments of the convention above
Launch = Callable[..., None]


def signal_buffer(shape: tuple[int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """An uninitialised signal-sized output ``(R, T)``: on the CPU from the host cache
    (:mod:`lhotse_amt._alloc`; where it is on, a training step reuses the previous step's
    pages instead of faulting in fresh ones), elsewhere from PyTorch's allocator. Taken
    for the backward's input gradient only: a cached forward output would stay resident
    from the forward into the backward and raise a step's peak memory."""
    return _alloc.empty_tensor(shape, dtype, device)


def f64(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, float64, contiguous."""
    return t.detach().to(torch.float64).contiguous()


def dense(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached and contiguous (its dtype kept)."""
    return t.detach().contiguous()


def i64(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, int64, contiguous (row maps)."""
    return t.detach().to(torch.int64).contiguous()


def _arg(v: Any) -> Any:
    # a coefficient argument as the kernels take it: floating tensors float64, other
    # tensors (row maps, modes) dense, flags as they are, other numbers as floats
    if isinstance(v, torch.Tensor):
        return f64(v) if v.is_floating_point() else dense(v)
    return v if isinstance(v, bool) else float(v)


def check_ck(ck: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """The forward's checkpoints as float64, after checking their shape."""
    if tuple(ck.shape) != shape:
        raise ValueError(
            f"ck: expected the forward's checkpoints of shape {shape}, got {tuple(ck.shape)}"
        )
    return f64(ck)


def numba_launch(kernel: Callable[..., None]) -> Launch:
    """The launch of a numba kernel: the kernel threads set, tensors passed as arrays."""

    def launch(*args: Any) -> None:
        _threads()
        kernel(*(_np(a) if isinstance(a, torch.Tensor) else a for a in args))

    return launch


class KernelPair:
    """An operator's forward and backward kernel launches on one backend, and the check
    that the backend can run (the Triton backend's availability check)."""

    def __init__(
        self, forward: Launch, backward: Launch, check: Callable[[], None] | None = None
    ) -> None:
        self._forward = forward
        self._backward = backward
        self._check = check

    def _ready(self) -> None:
        if self._check is not None:
            self._check()


class RowKernels(KernelPair):
    """The host functions of one row-wise recursion operator's kernel pair on one backend.

    ``forward`` and ``backward`` launch the kernels (convention above); the backend check
    runs before anything else. Keyword options of the host functions other than ``keep``
    go to the launch (Triton: ``block``).
    """

    def forward(
        self, x: torch.Tensor, xrow: torch.Tensor, *args: Any, keep: bool = True, **opts: Any
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(x, xrow, *coefs, zi)`` -> ``y (R, T)`` in ``x``'s dtype, the final states
        shaped like ``zi`` in ``zi``'s dtype and (``keep``) the backward's checkpoints
        ``(R, checkpoint_blocks(T), ...)`` float64 (else ``(R, 0, ...)``)."""
        self._ready()
        *coefs, zi = args
        R, T = xrow.shape[0], x.shape[1]
        dev = x.device
        y = torch.empty((R, T), dtype=x.dtype, device=dev)
        zf = f64(zi).clone()
        nb = checkpoint_blocks(T) if keep else 0
        ck = torch.empty((R, nb, *zi.shape[1:]), dtype=torch.float64, device=dev)
        if R > 0 and T > 0:
            prepared = [_arg(c) for c in coefs]
            self._forward(dense(x), i64(xrow), *prepared, f64(zi), y, zf, ck, **opts)
        return y, zf.to(zi.dtype), ck

    def backward(
        self, gy: torch.Tensor, gzf: torch.Tensor, x: torch.Tensor, xrow: torch.Tensor,
        *args: Any, **opts: Any,
    ) -> tuple[torch.Tensor, ...]:  # fmt: skip
        """``(gy, gzf, x, xrow, *coefs, zi, ck, want_x, want_c)`` -> per-row ``gx (R, T)``
        in ``x``'s dtype (``(R, 0)`` unless ``want_x``), one float64 gradient
        ``(R, *c.shape[1:])`` per floating coefficient tensor ``c`` (zeros unless
        ``want_c``) and the initial-state gradient shaped like ``zi`` (float64)."""
        self._ready()
        *coefs, zi, ck, want_x, want_c = args
        R, T = gy.shape
        dev = x.device
        gx = signal_buffer((R, T) if want_x else (R, 0), x.dtype, dev)
        gc = [
            torch.zeros((R, *c.shape[1:]), dtype=torch.float64, device=dev)
            for c in coefs
            if isinstance(c, torch.Tensor) and c.is_floating_point()
        ]
        gzi = f64(gzf).clone()
        if R > 0 and T > 0:
            ck = check_ck(ck, (R, checkpoint_blocks(T), *zi.shape[1:]))
            prepared = [_arg(c) for c in coefs]
            self._backward(
                dense(gy), f64(gzf), dense(x), i64(xrow), *prepared, f64(zi), ck, gx, *gc, gzi,
                bool(want_x), bool(want_c), **opts,
            )  # fmt: skip
            if not want_c:
                for g in gc:
                    g.zero_()
        return (gx, *gc, gzi)

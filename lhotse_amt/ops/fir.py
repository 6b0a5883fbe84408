"""The strided FIR correlation as a registered operator, ``lhotse_amt::strided_fir``.

``y[r, i] = sum_k w[k] x[r, start + i stride + k]``: an FIR filter followed by keeping
every ``stride``-th output (Paulick et al. 2024's decimation of the IHC output). The
plain-torch reference is ``torch.nn.functional.conv1d(x[:, None, start:], w[None, None],
stride=stride)``, whose strided backward is slow on the CPU; this operator has

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.fir_grad`: float64 accumulation), a CUDA
  kernel (Triton, :mod:`lhotse_amt.kernels.triton_fir`) and the ``conv1d`` reference on
  other devices (the choice: :class:`lhotse_amt.ops.rowop.DeviceKernels`),
* a fake implementation (``torch.compile`` / ``torch.export`` trace through it),
* a backward operator (``lhotse_amt::strided_fir_backward``) that computes the input and
  tap gradients in one pass over the output gradient.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from .._validation import check_int
from ..kernels import fir_grad as _cpu
from . import check_input
from .rowop import DeviceKernels

__all__ = ["strided_fir_rows", "strided_fir"]

_LIB = "lhotse_amt"


def _conv(x: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    y = torch.nn.functional.conv1d(x[:, None, start:], w.to(x.dtype)[None, None], stride=stride)
    return y[:, 0, :n_out]


def _conv_backward(
    g: Tensor, x: Tensor, w: Tensor, start: int, stride: int, want_x: bool, want_w: bool
) -> tuple[Tensor, Tensor]:
    """The kernels' ``fir_backward`` by ``conv1d``'s autograd; the tap gradient comes
    summed over the rows already, ``(1, K)``."""
    with torch.enable_grad():
        xx = x.detach().requires_grad_(want_x)
        ww = w.detach().double().requires_grad_(want_w)
        y = _conv(xx, ww, start, stride, g.shape[1])
        wrt = [t for t, want in ((xx, want_x), (ww, want_w)) if want]
        grads = list(torch.autograd.grad(y, wrt, g)) if wrt else []
    gx = grads.pop(0) if want_x else x.new_empty((x.shape[0], 0))
    gw = grads.pop(0)[None] if want_w else w.new_zeros((1, 0), dtype=torch.float64)
    return gx, gw


#: the FIR kernels: numba on the CPU, Triton on CUDA, ``conv1d`` on other devices
_KERNELS = DeviceKernels(
    _cpu,
    "triton_fir",
    attr=None,
    other=SimpleNamespace(fir_forward=_conv, fir_backward=_conv_backward),
)


def _backward_rows(
    k: Any, g: Tensor, x: Tensor, w: Tensor, start: int, stride: int, want_x: bool, want_w: bool
) -> tuple[Tensor, Tensor]:
    """The backward operator with the kernel functions ``k``: the input gradient and the
    per-row tap gradients summed."""
    gx, gw = k.fir_backward(g, x, w, start, stride, want_x, want_w)
    return gx, gw.sum(0) if want_w else w.new_zeros((0,), dtype=torch.float64)


@torch.library.custom_op(f"{_LIB}::strided_fir", mutates_args=())
def strided_fir_rows(x: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    """``x (R, Tx)`` real, taps ``w (K,)`` -> ``y (R, n_out)`` in ``x``'s dtype, with
    ``start + (n_out - 1) stride + K <= Tx``."""
    return _KERNELS.on(x).fir_forward(x, w, start, stride, n_out)


@strided_fir_rows.register_fake
def _(x: Tensor, w: Tensor, start: int, stride: int, n_out: int):
    return x.new_empty((x.shape[0], n_out))


@torch.library.custom_op(f"{_LIB}::strided_fir_backward", mutates_args=())
def _strided_fir_backward(
    g: Tensor, x: Tensor, w: Tensor, start: int, stride: int, want_x: bool, want_w: bool
) -> tuple[Tensor, Tensor]:
    return _backward_rows(_KERNELS.on(x), g, x, w, start, stride, want_x, want_w)


@_strided_fir_backward.register_fake
def _(g: Tensor, x: Tensor, w: Tensor, start: int, stride: int, want_x: bool, want_w: bool):
    return (
        x.new_empty((x.shape[0], x.shape[1] if want_x else 0)),
        w.new_empty((w.shape[0] if want_w else 0,), dtype=torch.float64),
    )


def _setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, w, start, stride, _ = inputs
    ctx.start, ctx.stride = start, stride
    ctx.save_for_backward(x, w)


def _backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None, None, None, None]:
    x, w = ctx.saved_tensors
    want_x, want_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
    gx, gw = _strided_fir_backward(g.contiguous(), x, w, ctx.start, ctx.stride, want_x, want_w)
    return (gx if want_x else None), (gw.to(w.dtype) if want_w else None), None, None, None


strided_fir_rows.register_autograd(_backward, setup_context=_setup)


def strided_fir(x: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    """``y[r, i] = sum_k w[k] x[r, start + i stride + k]`` for ``x (R, Tx)`` (real,
    floating) and taps ``w (K,)`` (operator ``lhotse_amt::strided_fir``); ``y (R, n_out)``
    in ``x``'s dtype. ``x`` and ``w`` float32/float64 (``K >= 1``), ``start``, ``stride``,
    ``n_out`` integers (``TypeError``/``ValueError`` naming the argument otherwise)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() != 2:
        raise TypeError(f"x must be a real floating tensor (R, T), got {getattr(x, 'shape', x)}")
    if not isinstance(w, Tensor) or not w.is_floating_point() or w.dim() != 1:
        raise TypeError(f"w must be a real floating tensor (K,), got {getattr(w, 'shape', w)}")
    check_input(x, min_dim=2)
    check_input(w, name="w")
    if w.shape[0] == 0:
        raise ValueError("w must have at least one tap, got shape (0,)")
    for name, v in (("start", start), ("stride", stride), ("n_out", n_out)):
        if not isinstance(v, torch.SymInt):  # symbolic sizes under torch.compile pass
            check_int(name, v)
    start, stride, n_out = int(start), int(stride), int(n_out)
    if start < 0 or stride < 1 or n_out < 0:
        raise ValueError(
            f"need start >= 0, stride >= 1, n_out >= 0; got start={start}, stride={stride}, "
            f"n_out={n_out}"
        )
    need = start + (n_out - 1) * stride + w.shape[0] if n_out else 0
    if need > x.shape[1]:
        raise ValueError(
            f"x has {x.shape[1]} samples; start={start}, stride={stride}, n_out={n_out} and "
            f"{w.shape[0]} taps read {need}"
        )
    return strided_fir_rows(x.contiguous(), w.contiguous(), start, stride, n_out)

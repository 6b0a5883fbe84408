"""The broken-stick compression as a registered operator, ``lhotse_amt::broken_stick``.

King et al. (2019, eq. 1; AMT ``compression_brokenstick``), sign-preserving: with the
knee amplitude ``K`` and the exponent ``n``, ``y = x`` for ``|x| <= K`` and
``y = sign(x) K (|x| / K)^n`` above. The plain-torch reference that defines it is
:func:`lhotse_amt.functional.compression.broken_stick_compression` with
``backend="reference"`` (six elementwise torch operations forward, more backward); this
operator gives the same values and gradients with

* one compiled pass forward and one backward: numba on the CPU
  (:mod:`lhotse_amt.kernels.compression`), Triton on CUDA
  (:mod:`lhotse_amt.kernels.triton_compression`), plain torch on other devices (the
  choice: :class:`lhotse_amt.ops.rowop.DeviceKernels`),
* a fake implementation (``torch.compile`` / ``torch.export`` trace through it),
* an analytic backward (operator ``lhotse_amt::broken_stick_backward``, recomputing
  ``(|x| / K)^n`` from ``x`` instead of saving it): ``dy/dx = n (|x| / K)^(n - 1)`` and
  ``dy/dn = y log(|x| / K)`` above the knee, ``1`` and ``0`` below.

Reference: A. King, L. Varnet, C. Lorenzi (2019), JASA 145, 2277-2293.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from ..kernels import compression as _cpu
from .rowop import DeviceKernels

__all__ = ["broken_stick"]

_LIB = "lhotse_amt"


def _forward_torch(x: Tensor, n: float, knee: float) -> Tensor:
    q = x.abs() / knee
    above = q > 1.0
    r = torch.where(above, q, 1.0) ** n
    return torch.where(above, torch.sign(x) * knee * r, x)


def _backward_torch(g: Tensor, x: Tensor, n: float, knee: float) -> tuple[Tensor, Tensor]:
    q = x.abs() / knee
    above = q > 1.0
    qq = torch.where(above, q, 1.0)
    r = qq**n
    gx = torch.where(above, g * (n * r / qq), g)
    gn = torch.where(above, g * torch.sign(x) * knee * r * torch.log(qq), 0.0)
    return gx, gn.sum(dtype=torch.float64)


#: the kernels: numba on the CPU, Triton on CUDA, plain torch on other devices
_KERNELS = DeviceKernels(
    _cpu,
    "triton_compression",
    attr=None,
    other=SimpleNamespace(
        broken_stick_forward=_forward_torch, broken_stick_backward=_backward_torch
    ),
)


@torch.library.custom_op(f"{_LIB}::broken_stick", mutates_args=())
def broken_stick_op(x: Tensor, exponent: Tensor, knee: float) -> Tensor:
    """``x`` (any shape, real floating), ``exponent`` a 0-d tensor of ``x``'s dtype, the
    knee amplitude ``knee`` -> the compressed ``x`` (same shape and dtype)."""
    return _KERNELS.on(x).broken_stick_forward(x, float(exponent), knee)


@broken_stick_op.register_fake
def _(x: Tensor, exponent: Tensor, knee: float) -> Tensor:
    return torch.empty_like(x)


@torch.library.custom_op(f"{_LIB}::broken_stick_backward", mutates_args=())
def _broken_stick_backward(
    g: Tensor, x: Tensor, exponent: Tensor, knee: float
) -> tuple[Tensor, Tensor]:
    gx, gn = _KERNELS.on(x).broken_stick_backward(g, x, float(exponent), knee)
    return gx, torch.as_tensor(gn, dtype=exponent.dtype, device=exponent.device)


@_broken_stick_backward.register_fake
def _(g: Tensor, x: Tensor, exponent: Tensor, knee: float) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), torch.empty_like(exponent)


def _setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    x, exponent, knee = inputs
    ctx.knee = knee
    ctx.save_for_backward(x, exponent)


def _backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, Tensor | None, None]:
    x, exponent = ctx.saved_tensors
    gx, gn = _broken_stick_backward(g.contiguous(), x, exponent, ctx.knee)
    return (
        gx if ctx.needs_input_grad[0] else None,
        gn if ctx.needs_input_grad[1] else None,
        None,
    )


broken_stick_op.register_autograd(_backward, setup_context=_setup)


def broken_stick(x: Tensor, exponent: Tensor, knee: float) -> Tensor:
    """Broken-stick compression of ``x`` (operator ``lhotse_amt::broken_stick``) with a
    scalar ``exponent`` (0-d or one-element tensor, cast to ``x``'s dtype) and the knee
    amplitude ``knee``; returns a tensor shaped like ``x``."""
    if exponent.numel() != 1:
        raise ValueError(f"exponent must have one element, got shape {tuple(exponent.shape)}")
    if not knee > 0.0:
        raise ValueError(f"knee must be a positive amplitude, got {knee!r}")
    return broken_stick_op(x, exponent.reshape(()).to(x.dtype), float(knee))

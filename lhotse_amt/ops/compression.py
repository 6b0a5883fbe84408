"""The compressive nonlinearities as registered operators: the broken stick of King2019,
``lhotse_amt::broken_stick``, and the DRNL compression of Paulick2024's nonlinear path,
``lhotse_amt::drnl_compression``.

**Broken stick.**
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

**DRNL compression.** ``y = u min(a, b |u|^(c - 1))`` per channel (Lopez-Poveda & Meddis
2001, JASA 110, 3107-3118, eq. 1), whose plain-torch reference is
:func:`lhotse_amt.functional.drnl.broken_stick` (seven elementwise operations forward,
more backward, each over the whole ``(..., C, T)`` signal); the operator computes the
values in one pass and the gradients w.r.t. ``u``, ``a``, ``b`` and ``c`` in one more
(operator ``lhotse_amt::drnl_compression_backward``, recomputing ``|u|^(c - 1)``), with the
kernels of the same modules as the broken stick.
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from .._validation import check_number, check_tensor
from ..kernels import compression as _cpu
from . import check_input
from .rowop import DeviceKernels

__all__ = ["broken_stick", "drnl_compression"]

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


def _drnl_terms(u: Tensor, a: Tensor, b: Tensor, c: float) -> tuple:
    mag = u.abs()
    bounded = mag < 1e-30
    mag = mag.clamp_min(1e-30)
    p = mag ** (c - 1.0)
    t = b[:, None] * p
    return bounded, mag, p, t, a[:, None] <= t


def _drnl_forward_torch(u: Tensor, a: Tensor, b: Tensor, c: float) -> Tensor:
    a, b = a.to(torch.float64), b.to(torch.float64)
    _, _, _, t, lin = _drnl_terms(u.to(torch.float64), a, b, c)
    return (u * torch.where(lin, a[:, None], t)).to(u.dtype)


def _drnl_backward_torch(
    g: Tensor, u: Tensor, a: Tensor, b: Tensor, c: float
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    a, b, u64 = a.to(torch.float64), b.to(torch.float64), u.to(torch.float64)
    bounded, mag, p, t, lin = _drnl_terms(u64, a, b, c)
    d = torch.where(lin, a[:, None], torch.where(bounded, t, t + (c - 1.0) * t))
    gv = g.to(torch.float64) * u64
    dims = tuple(range(u.dim() - 2)) + (u.dim() - 1,)
    ga = torch.where(lin, gv, 0.0).sum(dims)
    gb = torch.where(lin, 0.0, gv * p).sum(dims)
    gc = torch.where(lin, 0.0, gv * t * mag.log()).sum()
    return (g * d).to(u.dtype), ga, gb, gc


#: the kernels: numba on the CPU, Triton on CUDA, plain torch on other devices
_KERNELS = DeviceKernels(
    _cpu,
    "triton_compression",
    attr=None,
    other=SimpleNamespace(
        broken_stick_forward=_forward_torch,
        broken_stick_backward=_backward_torch,
        drnl_compression_forward=_drnl_forward_torch,
        drnl_compression_backward=_drnl_backward_torch,
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
    amplitude ``knee``; returns a tensor shaped like ``x``. ``x`` float32/float64,
    ``exponent`` a floating tensor, ``knee`` a finite number > 0 (``TypeError``/``ValueError``
    naming the argument otherwise)."""
    check_input(x, min_dim=0)
    check_tensor("exponent", exponent)
    if exponent.numel() != 1:
        raise ValueError(f"exponent must have one element, got shape {tuple(exponent.shape)}")
    k = check_number("knee", knee, finite=False)
    if not 0.0 < k < math.inf:
        raise ValueError(f"knee must be a positive amplitude (finite), got {knee!r}")
    return broken_stick_op(x, exponent.reshape(()).to(x.dtype), k)


@torch.library.custom_op(f"{_LIB}::drnl_compression", mutates_args=())
def drnl_compression_op(u: Tensor, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``u (..., C, T)`` (real floating), ``a``, ``b`` ``(C,)`` and the exponent ``c`` (0-d),
    all of ``u``'s dtype -> the compressed ``u`` (same shape and dtype)."""
    return _KERNELS.on(u).drnl_compression_forward(u, a, b, float(c))


@drnl_compression_op.register_fake
def _(u: Tensor, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    return torch.empty_like(u)


@torch.library.custom_op(f"{_LIB}::drnl_compression_backward", mutates_args=())
def _drnl_compression_backward(
    g: Tensor, u: Tensor, a: Tensor, b: Tensor, c: Tensor
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    gu, ga, gb, gc = _KERNELS.on(u).drnl_compression_backward(g, u, a, b, float(c))
    # copies: the kernels' parameter gradients may be views of one array
    return (
        gu,
        ga.to(device=a.device, dtype=a.dtype, copy=True),
        gb.to(device=b.device, dtype=b.dtype, copy=True),
        gc.to(device=c.device, dtype=c.dtype, copy=True),
    )


@_drnl_compression_backward.register_fake
def _(g: Tensor, u: Tensor, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, ...]:
    return torch.empty_like(u), torch.empty_like(a), torch.empty_like(b), torch.empty_like(c)


def _drnl_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(*inputs)


def _drnl_backward(ctx: Any, g: Tensor) -> tuple[Tensor | None, ...]:
    u, a, b, c = ctx.saved_tensors
    grads = _drnl_compression_backward(g.contiguous(), u, a, b, c)
    return tuple(gr if need else None for gr, need in zip(grads, ctx.needs_input_grad))


drnl_compression_op.register_autograd(_drnl_backward, setup_context=_drnl_setup)


def drnl_compression(u: Tensor, a: Tensor, b: Tensor, c: Tensor | float) -> Tensor:
    """DRNL compression ``u min(a, b |u|^(c - 1))`` of ``u (..., C, T)`` per channel
    (operator ``lhotse_amt::drnl_compression``): ``a``, ``b`` ``(C,)`` and the exponent
    ``c`` (a number or a one-element tensor), cast to ``u``'s dtype. ``u`` float32/float64,
    ``a``, ``b``, ``c`` real floating (``TypeError``/``ValueError`` naming the argument
    otherwise)."""
    if torch.is_tensor(u) and u.dim() < 2:
        raise ValueError(f"u must be (..., C, T), got shape {tuple(u.shape)}")
    check_input(u, name="u", min_dim=2)
    C = u.shape[-2]
    for name, v in (("a", a), ("b", b)):
        check_tensor(name, v)
        if tuple(v.shape) != (C,):
            raise ValueError(
                f"{name} must have shape ({C},) (one per channel), got {tuple(v.shape)}"
            )
    if torch.is_tensor(c):
        c_t = check_tensor("c", c)
    else:
        c_t = torch.tensor(check_number("c", c), dtype=u.dtype, device=u.device)
    if c_t.numel() != 1:
        raise ValueError(f"c must have one element, got shape {tuple(c_t.shape)}")
    return drnl_compression_op(u, a.to(u.dtype), b.to(u.dtype), c_t.reshape(()).to(u.dtype))

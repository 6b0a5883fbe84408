"""The IHC operator of Paulick et al. (2024), ``lhotse_amt::ihc_paulick``.

The membrane recursion of :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference`
(Paulick, Relaño-Iborra & Dau 2024) as a registered operator, in the style of
:mod:`lhotse_amt.ops.recursions`:

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.ihc_paulick_grad`),
* a CUDA kernel (Triton, ``lhotse_amt.kernels.triton_autodiff.ihc_paulick_forward``),
* a fake implementation (``torch.compile`` / ``torch.export`` trace through it),
* an autograd formula whose backward is the operator ``lhotse_amt::ihc_paulick_backward``:
  the adjoint recursion run backwards in time over block-wise recomputed states, with
  gradients of the input, of the 12 step constants and of the initial state.

Rows: output row ``r`` reads input row ``xrow[r]`` and constant row ``crow[r]`` and starts
from state ``zi[r]``; gradients of rows that share an input or constant row are summed.
:func:`ihc_paulick_recursion` builds the row maps from broadcast shapes.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from ..kernels import ihc_paulick_grad as _cpu
from ..kernels.ihc_paulick_grad import IHC_STEP_KEYS
from .recursions import _gpu, _incoming, _sum_rows

__all__ = ["IHC_STEP_KEYS", "ihc_paulick_rows", "ihc_paulick_recursion"]

_LIB = "lhotse_amt"


@torch.library.custom_op(f"{_LIB}::ihc_paulick", mutates_args=(), device_types="cpu")
def ihc_paulick_rows(
    x: Tensor, xrow: Tensor, consts: Tensor, crow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """IHC membrane recursion on the deviation ``W = V - V_pre`` (volts).

    ``x (Rx, T)`` basilar-membrane velocity, ``xrow (R,)`` int64, ``consts (Rc, 12)`` step
    constants in the order of :data:`IHC_STEP_KEYS`, ``crow (R,)`` int64, ``zi (R,)``
    states ``W[-1]`` -> ``W (R, T)`` (dtype of ``x``), the final states ``(R,)`` (dtype of
    ``zi``) and the states at the start of every block of the backward's recomputation
    ``(R, ceil(T / 512))`` float64 (no gradient).
    """
    return _cpu.ihc_forward(x, xrow, consts, crow, zi)


@ihc_paulick_rows.register_kernel("cuda")
def _(x: Tensor, xrow: Tensor, consts: Tensor, crow: Tensor, zi: Tensor):
    return _gpu().ihc_paulick_forward(x, xrow, consts, crow, zi)


@ihc_paulick_rows.register_fake
def _(x: Tensor, xrow: Tensor, consts: Tensor, crow: Tensor, zi: Tensor):
    R, T = xrow.shape[0], x.shape[1]
    ck = zi.new_empty((R, _cpu.checkpoint_blocks(T)), dtype=torch.float64)
    return x.new_empty((R, T)), torch.empty_like(zi), ck


@torch.library.custom_op(f"{_LIB}::ihc_paulick_backward", mutates_args=(), device_types="cpu")
def _ihc_paulick_backward(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    consts: Tensor,
    crow: Tensor,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    return _cpu.ihc_backward(gy, gzf, x, xrow, consts, crow, zi, ck, want_x, want_c)


@_ihc_paulick_backward.register_kernel("cuda")
def _(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    consts: Tensor,
    crow: Tensor,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
):
    return _gpu().ihc_paulick_backward(gy, gzf, x, xrow, consts, crow, zi, ck, want_x, want_c)


@_ihc_paulick_backward.register_fake
def _(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    consts: Tensor,
    crow: Tensor,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
):
    R, T = gy.shape
    f64 = torch.float64
    return (
        x.new_empty((R, T) if want_x else (R, 0)),
        consts.new_empty((R, consts.shape[1]), dtype=f64),
        zi.new_empty((R,), dtype=f64),
    )


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(*inputs, output[2])


def _backward(ctx: Any, gy: Tensor, gzf: Tensor, _gck: Tensor):
    x, xrow, consts, crow, zi, ck = ctx.saved_tensors
    want_x, want_c = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    gy, gzf = _incoming(gy, gzf, x, xrow, zi)
    gxr, gcr, gzi = _ihc_paulick_backward(gy, gzf, x, xrow, consts, crow, zi, ck, want_x, want_c)
    gx = _sum_rows(gxr, xrow, x.shape[0], x.dtype) if want_x else None
    gc = _sum_rows(gcr, crow, consts.shape[0], consts.dtype) if want_c else None
    return gx, None, gc, None, gzi.to(zi.dtype)


ihc_paulick_rows.register_autograd(_backward, setup_context=_setup)


def _row_map(shape: torch.Size, lead: torch.Size, device: torch.device) -> Tensor:
    idx = torch.arange(math.prod(shape), device=device).reshape(tuple(shape))
    return idx.expand(lead).reshape(-1)


def ihc_paulick_recursion(
    x: Tensor, consts: dict[str, Tensor] | Tensor, state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """IHC membrane recursion of Paulick et al. (2024) (operator ``lhotse_amt::ihc_paulick``).

    The semantics of :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference`,
    computed in float64 with a compiled backward.

    Args:
        x: ``(..., T)`` basilar-membrane velocity (DRNL output).
        consts: the step constants of
            :func:`~lhotse_amt.functional.ihc_paulick.ihc_step_constants` (a dict with the
            keys :data:`IHC_STEP_KEYS`; extra keys are ignored), each a scalar or a tensor
            broadcasting with ``x.shape[:-1]``; or one tensor ``(..., 12)`` in that order.
        state: ``W (...)`` before the first sample (0, the pre-charged rest, if ``None``).

    Returns:
        ``W = V - V_pre`` ``(lead..., T)`` in volts (dtype of ``x``) and the final state
        ``(lead...)``.
    """
    T = x.shape[-1]
    if isinstance(consts, dict):
        missing = [k for k in IHC_STEP_KEYS if k not in consts]
        if missing:
            raise ValueError(f"IHC step constants miss {missing}; need {list(IHC_STEP_KEYS)}")
        cs = [torch.as_tensor(consts[k], device=x.device) for k in IHC_STEP_KEYS]
        cdt = torch.promote_types(torch.float64, cs[0].dtype)
        c = torch.stack(torch.broadcast_tensors(*[v.to(cdt) for v in cs]), -1)
    else:
        c = consts
    if c.shape[-1] != len(IHC_STEP_KEYS):
        raise ValueError(
            f"IHC step constants must have {len(IHC_STEP_KEYS)} entries on the last axis, "
            f"got shape {tuple(c.shape)}"
        )
    cshape = c.shape[:-1]
    shapes = [x.shape[:-1], cshape] + ([] if state is None else [state.shape])
    lead = torch.broadcast_shapes(*shapes)
    sdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if state is None:
        z = x.new_zeros((math.prod(lead),), dtype=sdt)
    else:
        z = state.to(sdt).expand(lead).reshape(-1).contiguous()
    xrow = _row_map(x.shape[:-1], lead, x.device)
    crow = _row_map(cshape, lead, x.device)
    cr = c.reshape(-1, len(IHC_STEP_KEYS)).contiguous()
    y, zf, _ = ihc_paulick_rows(x.reshape(-1, T).contiguous(), xrow, cr, crow, z)
    return y.reshape(*lead, T), zf.reshape(lead)

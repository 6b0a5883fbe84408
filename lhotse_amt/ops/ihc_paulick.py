"""The IHC operator of Paulick et al. (2024), ``lhotse_amt::ihc_paulick``.

The membrane recursion of :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference`
(Paulick, Relaño-Iborra & Dau 2024) as a registered operator, in the style of
:mod:`lhotse_amt.ops.recursions`:

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.ihc_paulick_grad`),
* a CUDA kernel (Triton, :mod:`lhotse_amt.kernels.triton_ihc_paulick`),
* a fake implementation (``torch.compile`` / ``torch.export`` trace through it),
* an autograd formula whose backward is the operator ``lhotse_amt::ihc_paulick_backward``:
  the adjoint recursion run backwards in time over block-wise recomputed states, with
  gradients of the input, of the 12 step constants and of the initial state
  (registrations: :func:`lhotse_amt.ops.rowop.row_operator`).

Rows: output row ``r`` reads input row ``xrow[r]`` and constant row ``crow[r]`` and starts
from state ``zi[r]``; gradients of rows that share an input or constant row are summed.
:func:`ihc_paulick_recursion` builds the row maps from broadcast shapes.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._validation import check_broadcast, check_number, check_tensor
from ..kernels import ihc_paulick_grad
from ..kernels.ihc_paulick_grad import IHC_STEP_KEYS
from . import _rows, check_input, row_map
from .rowop import DeviceKernels, row_operator

__all__ = ["IHC_STEP_KEYS", "ihc_paulick_rows", "ihc_paulick_recursion"]

_LIB = "lhotse_amt"


_IHC = DeviceKernels(ihc_paulick_grad.KERNELS, "triton_ihc_paulick")


@row_operator("ihc_paulick", _IHC, grads=("consts",))
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
    return _IHC.on(x).forward(x, xrow, consts, crow, zi)


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

    Raises:
        TypeError, ValueError: ``x`` not float32/float64 with time last, constants or
            ``state`` not real floating (constants given as numbers: finite), a missing
            constant, shapes that do not broadcast.
    """
    check_input(x)
    T = x.shape[-1]
    if isinstance(consts, dict):
        missing = [k for k in IHC_STEP_KEYS if k not in consts]
        if missing:
            raise ValueError(f"IHC step constants miss {missing}; need {list(IHC_STEP_KEYS)}")
        for k in IHC_STEP_KEYS:
            v = consts[k]
            if torch.is_tensor(v):
                check_tensor(f"consts[{k!r}]", v)
            else:
                check_number(f"consts[{k!r}]", v)
        cs = [torch.as_tensor(consts[k], device=x.device) for k in IHC_STEP_KEYS]
        check_broadcast(*((f"consts[{k!r}]", v.shape) for k, v in zip(IHC_STEP_KEYS, cs)))
        cdt = torch.promote_types(torch.float64, cs[0].dtype)
        c = torch.stack(torch.broadcast_tensors(*[v.to(cdt) for v in cs]), -1)
    else:
        c = check_tensor("consts", consts)
    if c.dim() == 0 or c.shape[-1] != len(IHC_STEP_KEYS):
        raise ValueError(
            f"IHC step constants must have {len(IHC_STEP_KEYS)} entries on the last axis, "
            f"got shape {tuple(c.shape)}"
        )
    check_tensor("state", state, allow_none=True)
    cshape = c.shape[:-1]
    shapes = [("x", x.shape[:-1]), ("consts", cshape)]
    lead = check_broadcast(*shapes, *([] if state is None else [("state", state.shape)]))
    sdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    if state is None:
        z = x.new_zeros((math.prod(lead),), dtype=sdt)
    else:
        z = state.to(sdt).expand(lead).reshape(-1).contiguous()
    xrow = row_map(x.shape[:-1], lead, x.device)
    crow = row_map(cshape, lead, x.device)
    cr = c.reshape(-1, len(IHC_STEP_KEYS)).contiguous()
    y, zf, _ = ihc_paulick_rows(_rows(x, T), xrow, cr, crow, z)
    return y.reshape(*lead, T), zf.reshape(lead)

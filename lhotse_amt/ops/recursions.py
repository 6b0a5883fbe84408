"""The recursion operators, registered with ``torch.library`` under ``lhotse_amt::``.

Every sequential recursion of the models is one operator with

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.autodiff`: one module per operator),
* a CUDA kernel (Triton, :mod:`lhotse_amt.kernels.triton_autodiff`),
* a fake implementation (shapes only: ``torch.compile`` and ``torch.export`` trace
  through the operator without a graph break),
* an autograd formula whose backward is another operator of the same kind: the adjoint
  recursion run backwards in time over block-wise recomputed forward values.

The torch dispatcher picks the kernel by device; nothing else chooses an implementation.
The plain-torch references that define the semantics live in :mod:`lhotse_amt.functional`
(``backend="reference"``); tests compare every kernel and gradient with them.

Operators take rows: output row ``r`` filters input row ``xrow[r]`` with coefficient row
``crow[r]`` and starts from state row ``r``. This expresses broadcasting (a filterbank
applies many filters to one input row) without copying inputs; the gradients of rows that
share an input or coefficient row are summed. The public wrappers in :mod:`lhotse_amt.ops`
build the row maps from broadcast shapes.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ..kernels import adaptation_grad, resonator_grad, sos_grad
from ..kernels.autodiff import CHECKPOINT_BLOCK

__all__ = ["sosfilt_rows", "resonator_rows", "adaptation_rows"]

_LIB = "lhotse_amt"


def _gpu():
    from ..kernels import triton_autodiff

    return triton_autodiff


def _blocks(T: int) -> int:
    """Checkpoints a forward keeps for its backward (one per block of recomputation)."""
    return (T + CHECKPOINT_BLOCK - 1) // CHECKPOINT_BLOCK


def _incoming(
    gy: Tensor | None, gzf: Tensor | None, x: Tensor, xrow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor]:
    """The gradients arriving at an operator's signal and final-state outputs, dense and
    contiguous (zeros for an output that received none)."""
    gy = gy.contiguous() if gy is not None else x.new_zeros((xrow.shape[0], x.shape[1]))
    gzf = gzf.contiguous() if gzf is not None else torch.zeros_like(zi)
    return gy, gzf


def _sum_rows(g: Tensor, rows: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """Sum per-output-row gradients ``g (R, ...)`` into ``n`` rows by ``rows (R,)``."""
    out = g.new_zeros((n, *g.shape[1:]))
    return out.index_add_(0, rows, g).to(dtype)


# --------------------------------------------------------------------------------------
# second-order sections
# --------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::sosfilt", mutates_args=(), device_types="cpu")
def sosfilt_rows(
    x: Tensor, xrow: Tensor, sos: Tensor, crow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Second-order sections (transposed direct form II, as :func:`scipy.signal.sosfilt`).

    ``x (Rx, T)``, ``xrow (R,)`` int64, ``sos (Rc, S, 6)``, ``crow (R,)`` int64,
    ``zi (R, S, 2)`` -> ``y (R, T)`` (dtype of ``x``), ``zf (R, S, 2)`` (dtype of ``zi``)
    and the section states at the start of every block of the backward's recomputation
    ``(R, ceil(T / 512), S, 2)`` float64 (no gradient).
    """
    return sos_grad.sos_forward(x, xrow, sos, crow, zi)


@sosfilt_rows.register_kernel("cuda")
def _(x, xrow, sos, crow, zi):
    return _gpu().sos_forward(x, xrow, sos, crow, zi)


@sosfilt_rows.register_fake
def _(x, xrow, sos, crow, zi):
    R, T = xrow.shape[0], x.shape[1]
    ck = zi.new_empty((R, _blocks(T), sos.shape[1], 2), dtype=torch.float64)
    return x.new_empty((R, T)), torch.empty_like(zi), ck


@torch.library.custom_op(f"{_LIB}::sosfilt_backward", mutates_args=(), device_types="cpu")
def _sosfilt_backward(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    sos: Tensor,
    crow: Tensor,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[Tensor, Tensor, Tensor]:
    return sos_grad.sos_backward(gy, gzf, x, xrow, sos, crow, zi, ck, want_x, want_c)


@_sosfilt_backward.register_kernel("cuda")
def _(gy, gzf, x, xrow, sos, crow, zi, ck, want_x: bool, want_c: bool):
    return _gpu().sos_backward(gy, gzf, x, xrow, sos, crow, zi, ck, want_x, want_c)


@_sosfilt_backward.register_fake
def _(gy, gzf, x, xrow, sos, crow, zi, ck, want_x: bool, want_c: bool):
    R, T = gy.shape
    S = sos.shape[1]
    f64 = torch.float64
    return (
        x.new_empty((R, T) if want_x else (R, 0)),
        sos.new_empty((R, S, 6), dtype=f64),
        zi.new_empty((R, S, 2), dtype=f64),
    )


def _sos_setup(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(*inputs, output[2])


def _sos_backward(ctx, gy: Tensor, gzf: Tensor, _gck: Tensor):
    x, xrow, sos, crow, zi, ck = ctx.saved_tensors
    want_x, want_c = ctx.needs_input_grad[0], ctx.needs_input_grad[2]
    gy, gzf = _incoming(gy, gzf, x, xrow, zi)
    gxr, gsr, gzi = _sosfilt_backward(gy, gzf, x, xrow, sos, crow, zi, ck, want_x, want_c)
    gx = _sum_rows(gxr, xrow, x.shape[0], x.dtype) if want_x else None
    gs = _sum_rows(gsr, crow, sos.shape[0], sos.dtype) if want_c else None
    return gx, None, gs, None, gzi.to(zi.dtype)


sosfilt_rows.register_autograd(_sos_backward, setup_context=_sos_setup)


# --------------------------------------------------------------------------------------
# complex one-pole cascades with a real output (gammatone, modulation resonators)
# --------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::resonator", mutates_args=(), device_types="cpu")
def resonator_rows(
    x: Tensor, xrow: Tensor, pole: Tensor, gain: Tensor, mode: Tensor, crow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``K`` identical complex one-pole sections and a complex gain, real output.

    ``u_k[n] = p u_k[n-1] + u_{k-1}[n]`` (``u_0 = x``), ``w = g u_K``, ``y = Re w``
    (``mode 0``) or ``|w|`` (``mode 1``). ``x (Rx, T)``; ``pole``, ``gain`` ``(Rc, 2)``
    as (real, imaginary); ``mode (Rc,)`` int8; ``zi (R, K, 2)`` section states ``u_k[-1]``.
    Returns ``y (R, T)``, ``zf (R, K, 2)`` and the section states at the start of every
    block of the backward's recomputation ``(R, ceil(T / 512), K, 2)`` float64 (no
    gradient).
    """
    return resonator_grad.resonator_forward(x, xrow, pole, gain, mode, crow, zi)


@resonator_rows.register_kernel("cuda")
def _(x, xrow, pole, gain, mode, crow, zi):
    return _gpu().resonator_forward(x, xrow, pole, gain, mode, crow, zi)


@resonator_rows.register_fake
def _(x, xrow, pole, gain, mode, crow, zi):
    R, T = xrow.shape[0], x.shape[1]
    ck = zi.new_empty((R, _blocks(T), zi.shape[1], 2), dtype=torch.float64)
    return x.new_empty((R, T)), torch.empty_like(zi), ck


@torch.library.custom_op(f"{_LIB}::resonator_backward", mutates_args=(), device_types="cpu")
def _resonator_backward(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    pole: Tensor,
    gain: Tensor,
    mode: Tensor,
    crow: Tensor,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return resonator_grad.resonator_backward(
        gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x, want_c
    )


@_resonator_backward.register_kernel("cuda")
def _(gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x: bool, want_c: bool):
    return _gpu().resonator_backward(
        gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x, want_c
    )


@_resonator_backward.register_fake
def _(gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x: bool, want_c: bool):
    R, T = gy.shape
    f64 = torch.float64
    return (
        x.new_empty((R, T) if want_x else (R, 0)),
        pole.new_empty((R, 2), dtype=f64),
        pole.new_empty((R, 2), dtype=f64),
        zi.new_empty(zi.shape, dtype=f64),
    )


def _res_setup(ctx, inputs, output) -> None:
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(*inputs, output[2])


def _res_backward(ctx, gy: Tensor, gzf: Tensor, _gck: Tensor):
    x, xrow, pole, gain, mode, crow, zi, ck = ctx.saved_tensors
    want_x = ctx.needs_input_grad[0]
    want_c = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
    gy, gzf = _incoming(gy, gzf, x, xrow, zi)
    gxr, gpr, ggr, gzi = _resonator_backward(
        gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, want_x, want_c
    )
    gx = _sum_rows(gxr, xrow, x.shape[0], x.dtype) if want_x else None
    gp = _sum_rows(gpr, crow, pole.shape[0], pole.dtype) if ctx.needs_input_grad[2] else None
    gg = _sum_rows(ggr, crow, gain.shape[0], gain.dtype) if ctx.needs_input_grad[3] else None
    return gx, None, gp, gg, None, None, gzi.to(zi.dtype)


resonator_rows.register_autograd(_res_backward, setup_context=_res_setup)


# --------------------------------------------------------------------------------------
# adaptation loops
# --------------------------------------------------------------------------------------


@torch.library.custom_op(f"{_LIB}::adaptation_loops", mutates_args=(), device_types="cpu")
def adaptation_rows(
    x: Tensor,
    xrow: Tensor,
    a: Tensor,
    m: Tensor,
    crow: Tensor,
    minlvl: float,
    use_limit: bool,
    zi: Tensor,
) -> tuple[Tensor, Tensor, Tensor]:
    """Adaptation loops (raw loop output, before the model-unit scaling).

    ``x (Rx, T)``; ``a``, ``m`` ``(Rc, J)`` loop coefficients and limiter constants;
    ``zi (R, J)`` loop states. Returns ``v (R, T)``, the final states ``(R, J)`` and the
    states at the start of every block of the backward's recomputation
    ``(R, ceil(T / 512), J)`` float64 (no gradient).
    """
    return adaptation_grad.adaptation_forward(x, xrow, a, m, crow, minlvl, use_limit, zi)


@adaptation_rows.register_kernel("cuda")
def _(x, xrow, a, m, crow, minlvl: float, use_limit: bool, zi):
    return _gpu().adaptation_forward(x, xrow, a, m, crow, minlvl, use_limit, zi)


@adaptation_rows.register_fake
def _(x, xrow, a, m, crow, minlvl: float, use_limit: bool, zi):
    R, T = xrow.shape[0], x.shape[1]
    ck = zi.new_empty((R, _blocks(T), zi.shape[1]), dtype=torch.float64)
    return x.new_empty((R, T)), torch.empty_like(zi), ck


@torch.library.custom_op(f"{_LIB}::adaptation_loops_backward", mutates_args=(), device_types="cpu")
def _adaptation_backward(
    gy: Tensor,
    gzf: Tensor,
    x: Tensor,
    xrow: Tensor,
    a: Tensor,
    m: Tensor,
    crow: Tensor,
    minlvl: float,
    use_limit: bool,
    zi: Tensor,
    ck: Tensor,
    want_x: bool,
    want_c: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return adaptation_grad.adaptation_backward(
        gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, want_x, want_c
    )


@_adaptation_backward.register_kernel("cuda")
def _(
    gy, gzf, x, xrow, a, m, crow, minlvl: float, use_limit: bool, zi, ck, want_x: bool, want_c: bool
):
    return _gpu().adaptation_backward(
        gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, want_x, want_c
    )


@_adaptation_backward.register_fake
def _(
    gy, gzf, x, xrow, a, m, crow, minlvl: float, use_limit: bool, zi, ck, want_x: bool, want_c: bool
):
    R, T = gy.shape
    J = zi.shape[1]
    f64 = torch.float64
    return (
        x.new_empty((R, T) if want_x else (R, 0)),
        a.new_empty((R, J), dtype=f64),
        a.new_empty((R, J), dtype=f64),
        zi.new_empty((R, J), dtype=f64),
    )


def _adapt_setup(ctx, inputs, output) -> None:
    x, xrow, a, m, crow, minlvl, use_limit, zi = inputs
    ctx.minlvl, ctx.use_limit = minlvl, use_limit
    ctx.mark_non_differentiable(output[2])
    ctx.save_for_backward(x, xrow, a, m, crow, zi, output[2])


def _adapt_backward(ctx, gy: Tensor, gzf: Tensor, _gck: Tensor):
    x, xrow, a, m, crow, zi, ck = ctx.saved_tensors
    want_x = ctx.needs_input_grad[0]
    want_c = ctx.needs_input_grad[2] or ctx.needs_input_grad[3]
    gy, gzf = _incoming(gy, gzf, x, xrow, zi)
    gxr, gar, gmr, gzi = _adaptation_backward(
        gy, gzf, x, xrow, a, m, crow, ctx.minlvl, ctx.use_limit, zi, ck, want_x, want_c
    )
    gx = _sum_rows(gxr, xrow, x.shape[0], x.dtype) if want_x else None
    ga = _sum_rows(gar, crow, a.shape[0], a.dtype) if ctx.needs_input_grad[2] else None
    gm = _sum_rows(gmr, crow, m.shape[0], m.dtype) if ctx.needs_input_grad[3] else None
    return gx, None, ga, gm, None, None, None, gzi.to(zi.dtype)


adaptation_rows.register_autograd(_adapt_backward, setup_context=_adapt_setup)

"""The recursion operators, registered with ``torch.library`` under ``lhotse_amt::``.

Every sequential recursion of the models is one operator with

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.autodiff`: one module per operator),
* a CUDA kernel (Triton, :mod:`lhotse_amt.kernels.triton_autodiff`),
* a fake implementation (shapes only: ``torch.compile`` and ``torch.export`` trace
  through the operator without a graph break),
* an autograd formula whose backward is another operator of the same kind: the adjoint
  recursion run backwards in time over block-wise recomputed forward values.

All but the forward itself is registered by :func:`lhotse_amt.ops.rowop.row_operator`.

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

from torch import Tensor

from ..kernels import adaptation_grad, resonator_grad, sos_grad
from .rowop import DeviceKernels, row_operator

__all__ = ["sosfilt_rows", "resonator_rows", "adaptation_rows"]


_SOS = DeviceKernels(sos_grad.KERNELS, "triton_sos")
_RESONATOR = DeviceKernels(resonator_grad.KERNELS, "triton_resonator")
_ADAPTATION = DeviceKernels(adaptation_grad.KERNELS, "triton_adaptation")


@row_operator("sosfilt", _SOS, grads=("sos",))
def sosfilt_rows(
    x: Tensor, xrow: Tensor, sos: Tensor, crow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """Second-order sections (transposed direct form II, as :func:`scipy.signal.sosfilt`).

    ``x (Rx, T)``, ``xrow (R,)`` int64, ``sos (Rc, S, 6)``, ``crow (R,)`` int64,
    ``zi (R, S, 2)`` -> ``y (R, T)`` (dtype of ``x``), ``zf (R, S, 2)`` (dtype of ``zi``)
    and the section states at the start of every block of the backward's recomputation
    ``(R, ceil(T / 512), S, 2)`` float64 (no gradient).
    """
    return _SOS.on(x).forward(x, xrow, sos, crow, zi)


@row_operator("resonator", _RESONATOR, grads=("pole", "gain"))
def resonator_rows(
    x: Tensor, xrow: Tensor, pole: Tensor, gain: Tensor, mode: Tensor, crow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``K`` identical complex one-pole sections and a complex gain, real output.

    ``u_k[n] = p u_k[n-1] + u_{k-1}[n]`` (``u_0 = x``), ``w = g u_K``, ``y = Re w``
    (``mode 0``) or ``|w|`` (``mode 1``). ``x (Rx, T)``; ``pole``, ``gain`` ``(Rc, 2)``
    as (real, imaginary); ``mode (Rc,)`` int8; ``zi (R, K, 2)`` section states ``u_k[-1]``.
    Returns ``y (R, T)``, ``zf (R, K, 2)`` and the section states at the start of every
    block of the backward's recomputation ``(R, ceil(T / 512), K, 2)`` float64 (no
    gradient). The gradients of ``pole`` and ``gain`` are complex gradients as PyTorch
    defines them (``dL/dRe + i dL/dIm``).
    """
    return _RESONATOR.on(x).forward(x, xrow, pole, gain, mode, crow, zi)


@row_operator("adaptation_loops", _ADAPTATION, grads=("a", "m"))
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
    return _ADAPTATION.on(x).forward(x, xrow, a, m, crow, minlvl, use_limit, zi)

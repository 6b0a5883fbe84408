"""Which kernels an operator runs on which device (:class:`DeviceKernels`: every operator
with compiled kernels picks them here, the row-wise recursions as well as
:mod:`lhotse_amt.ops.envelope`, :mod:`lhotse_amt.ops.fir`, :mod:`lhotse_amt.ops.loudness`
and :mod:`lhotse_amt.ops.paulick`), and what the row-wise recursion operators share: everything
that follows from an operator's forward (fake implementation, backward operator, autograd
formula).

A row-wise recursion operator (:mod:`lhotse_amt.ops.recursions`,
:mod:`lhotse_amt.ops.ihc_paulick`) takes ``x, xrow, *coefs, zi`` and returns
``y (R, T)``, the final states ``zf`` (shaped like ``zi``) and the backward's checkpoints
``ck (R, ceil(T / 512), *zi.shape[1:])`` float64 (no gradient); its arguments and kernels
follow the convention of :mod:`lhotse_amt.kernels.rows`. :func:`row_operator` registers
such an operator from its forward function and derives

* the fake implementation (shapes only: ``torch.compile`` and ``torch.export`` trace
  through the operator without a graph break),
* the backward operator ``<name>_backward(gy, gzf, x, xrow, *coefs, zi, ck, want_x,
  want_c) -> (gx, *gcoefs, gzi)``: the adjoint recursion run backwards in time over
  block-wise recomputed forward values, with its fake implementation,
* the autograd formula: the per-row gradients of rows that share an input or coefficient
  row summed into that row.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from ..kernels.autodiff import checkpoint_blocks

__all__ = ["DeviceKernels", "row_operator"]

_LIB = "lhotse_amt"


class DeviceKernels:
    """An operator's host functions per device, the one place that picks an implementation.

    ``cpu`` (the numba kernels) on the CPU; on CUDA the attribute ``attr`` of the Triton
    module ``lhotse_amt.kernels.<cuda>`` (imported at first use; ``attr=None``: the module
    itself), or ``cuda`` itself where it is not a module name (host code of the operator's
    own module that launches Triton kernels); on any other device ``other`` (plain torch),
    or the CUDA functions where ``other`` is ``None`` (operators registered for the CPU and
    CUDA only)."""

    def __init__(
        self, cpu: Any, cuda: str | Any, attr: str | None = "KERNELS", other: Any = None
    ) -> None:
        self._cpu = cpu
        self._cuda = cuda
        self._attr = attr
        self._other = other

    def for_device(self, device_type: str) -> Any:
        """The host functions for the device type ``device_type`` (``"cpu"``, ``"cuda"``,
        ...): the CUDA ones can thus also run on CPU tensors in Triton's interpreter."""
        if device_type == "cpu":
            return self._cpu
        if device_type != "cuda" and self._other is not None:
            return self._other
        if not isinstance(self._cuda, str):
            return self._cuda
        mod = importlib.import_module(f"lhotse_amt.kernels.{self._cuda}")
        return mod if self._attr is None else getattr(mod, self._attr)

    def on(self, t: Tensor) -> Any:
        """The host functions for the device of ``t``."""
        return self.for_device(t.device.type)


def incoming(
    gy: Tensor | None, gzf: Tensor | None, x: Tensor, xrow: Tensor, zi: Tensor
) -> tuple[Tensor, Tensor]:
    """The gradients arriving at an operator's signal and final-state outputs, dense and
    contiguous (zeros for an output that received none)."""
    gy = gy.contiguous() if gy is not None else x.new_zeros((xrow.shape[0], x.shape[1]))
    gzf = gzf.contiguous() if gzf is not None else torch.zeros_like(zi)
    return gy, gzf


def sum_rows(g: Tensor, rows: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """Sum per-output-row gradients ``g (R, ...)`` into ``n`` rows by ``rows (R,)``."""
    out = g.new_zeros((n, *g.shape[1:]))
    return out.index_add_(0, rows, g).to(dtype)


def _fake_forward(x: Tensor, xrow: Tensor, *args: Any) -> tuple[Tensor, Tensor, Tensor]:
    zi = args[-1]
    R, T = xrow.shape[0], x.shape[1]
    ck = zi.new_empty((R, checkpoint_blocks(T), *zi.shape[1:]), dtype=torch.float64)
    return x.new_empty((R, T)), torch.empty_like(zi), ck


def row_operator(
    name: str, kernels: DeviceKernels, grads: tuple[str, ...]
) -> Callable[[Callable[..., Any]], Any]:
    """Decorator: the forward function (the operator's signature, documentation and CPU and
    CUDA implementation) as the operator ``lhotse_amt::<name>``, with the registrations
    above. ``grads`` names its differentiable coefficient arguments (each gets a gradient
    output of the backward operator, in this order); ``kernels`` runs the backward."""

    def register(fn: Callable[..., Any]) -> Any:
        op = torch.library.custom_op(
            f"{_LIB}::{name}", fn, mutates_args=(), device_types=("cpu", "cuda")
        )
        op.register_fake(_fake_forward)
        names = list(inspect.signature(fn).parameters)
        gi = [names.index(g) for g in grads]
        ci = names.index("crow")
        fwd_args = torch.library.infer_schema(fn, mutates_args=())[1:].split(") ->")[0]
        results = ", ".join(["Tensor"] * (len(grads) + 2))
        schema = (
            f"(Tensor gy, Tensor gzf, {fwd_args}, Tensor ck, bool want_x, bool want_c)"
            f" -> ({results})"
        )

        def backward_impl(gy: Tensor, gzf: Tensor, *args: Any) -> tuple:
            return kernels.on(args[0]).backward(gy, gzf, *args)

        def backward_fake(gy: Tensor, gzf: Tensor, *args: Any) -> tuple:
            *inputs, _ck, want_x, _want_c = args  # the forward's (x, xrow, *coefs, zi)
            R, T = gy.shape
            f64 = torch.float64
            gc = [inputs[i].new_empty((R, *inputs[i].shape[1:]), dtype=f64) for i in gi]
            gx = inputs[0].new_empty((R, T) if want_x else (R, 0))
            return (gx, *gc, inputs[-1].new_empty(inputs[-1].shape, dtype=f64))

        bwd = torch.library.custom_op(
            f"{_LIB}::{name}_backward",
            backward_impl,
            mutates_args=(),
            device_types=("cpu", "cuda"),
            schema=schema,
        )
        bwd.register_fake(backward_fake)

        def setup(ctx: Any, inputs: tuple, output: tuple) -> None:
            ctx.mark_non_differentiable(output[2])
            # tensors saved for the backward, numbers (and flags) kept as they are
            ctx.numbers = [None if isinstance(v, Tensor) else v for v in inputs]
            ctx.save_for_backward(*[v for v in inputs if isinstance(v, Tensor)], output[2])

        def backward(ctx: Any, gy: Tensor, gzf: Tensor, _gck: Tensor) -> tuple:
            *saved, ck = ctx.saved_tensors
            tensors = iter(saved)
            args = [next(tensors) if v is None else v for v in ctx.numbers]
            x, xrow, zi, crow = args[0], args[1], args[-1], args[ci]
            need = ctx.needs_input_grad
            want_x = need[0]
            gy, gzf = incoming(gy, gzf, x, xrow, zi)
            gxr, *gcr, gzi = bwd(gy, gzf, *args, ck, want_x, any(need[i] for i in gi))
            out: list[Tensor | None] = [None] * len(args)
            if want_x:
                out[0] = sum_rows(gxr, xrow, x.shape[0], x.dtype)
            for i, g in zip(gi, gcr, strict=True):
                if need[i]:
                    out[i] = sum_rows(g, crow, args[i].shape[0], args[i].dtype)
            out[-1] = gzi.to(zi.dtype)
            return tuple(out)

        op.register_autograd(backward, setup_context=setup)
        return op

    return register

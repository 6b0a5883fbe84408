"""Which implementation a call runs: the one place that decides.

Every block of the package has a differentiable path (the registered operators of
:mod:`lhotse_amt.ops`: compiled forward and backward kernels, fake implementations, so
autograd, ``torch.compile`` and ``torch.export`` see through them) and, for inference, the
no-grad operators (the fused chains and fused filterbanks of :mod:`lhotse_amt.ops.fused`,
:mod:`lhotse_amt.ops.filterbanks`, :mod:`lhotse_amt.ops.paulick`: one compiled pass, no
saved states). :func:`no_grad_kernels` says which of the two a call takes; within either,
the torch dispatcher picks the operator's kernel by device (numba on the CPU, Triton on
CUDA). The plain-torch references (``backend="torch"``) define the semantics and run only
when asked for, or on devices without compiled kernels.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["grad_recorded", "kernel_device", "no_grad_kernels"]


def grad_recorded(*tensors: Tensor | None) -> bool:
    """Whether autograd records an operation on ``tensors`` (grad mode on and one of
    them requires grad)."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def kernel_device(device: torch.device) -> bool:
    """Whether the package's operators have kernels for ``device``: the CPU (numba), and
    CUDA where Triton imports."""
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        from .kernels import triton_module

        return triton_module() is not None
    return False


def no_grad_kernels(*tensors: Tensor | None) -> bool:
    """Whether a call on ``tensors`` runs the no-grad operators: eager (not traced by
    ``torch.compile``/``torch.export``), no gradient recorded on any of them, and all on
    one device with compiled kernels (:func:`kernel_device`). Otherwise the
    differentiable operators run (or, on other devices, the plain-torch reference)."""
    ts = [t for t in tensors if t is not None]
    if torch.compiler.is_compiling() or grad_recorded(*ts):
        return False
    devices = {t.device for t in ts}
    return len(devices) <= 1 and all(kernel_device(d) for d in devices)

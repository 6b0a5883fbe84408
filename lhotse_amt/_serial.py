"""Whole-signal checks and copies on the calling thread.

A torch CPU operation on more than ~32k elements opens an OpenMP parallel region over
``torch.get_num_threads()`` threads. On a machine whose cores are busy with other
processes, the region ends only when its slowest thread has been scheduled again, and the
threads that finished first spin meanwhile: one elementwise pass over a few seconds of audio
then costs tens of milliseconds of CPU time instead of a fraction of one. The extractors'
per-signal bookkeeping (finiteness checks, scaling, padded copies) is memory-bound and gains
nothing from a second thread, so these helpers do it with numpy, on the calling thread; the
models' compiled kernels decide their own parallelism.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["all_finite", "scaled_copy"]


def all_finite(x: Tensor) -> bool:
    """Whether every element of ``x`` is finite (numpy on the calling thread for CPU tensors)."""
    if x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64):
        return bool(np.isfinite(x.detach().numpy()).all())
    return bool(torch.isfinite(x).all())


def scaled_copy(x: Tensor, gain: float, dtype: torch.dtype, length: int | None = None) -> Tensor:
    """``x * gain`` as a new contiguous CPU tensor of ``dtype``, zero-padded (or cut) along
    the last axis to ``length`` samples, computed by numpy on the calling thread."""
    xn = x.detach().cpu().numpy()
    n = xn.shape[-1] if length is None else int(length)
    out = np.zeros((*xn.shape[:-1], n), dtype=torch.empty(0, dtype=dtype).numpy().dtype)
    k = min(n, xn.shape[-1])
    np.multiply(xn[..., :k], gain, out=out[..., :k], casting="unsafe")
    return torch.from_numpy(out)

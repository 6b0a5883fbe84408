"""Output arrays of the CPU kernels, allocated by PyTorch's CPU allocator.

The sample-rate outputs of the models are hundreds of MB. Allocated with ``np.empty``
(glibc ``mmap``), each is faulted in 4-kB pages on first write; allocated by PyTorch
they take its huge-page setting (``THP_MEM_ALLOC_ENABLE``, which the package turns on by
default), are 64-byte aligned, and ``torch.from_numpy`` of the result shares the memory.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["empty", "empty_like"]

_TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}


def empty(shape: tuple[int, ...], dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Uninitialised C-contiguous numpy array of ``shape`` and ``dtype`` (64-byte aligned)."""
    return torch.empty(tuple(int(n) for n in shape), dtype=_TORCH_DTYPES[np.dtype(dtype)]).numpy()


def empty_like(a: np.ndarray) -> np.ndarray:
    """:func:`empty` with the shape and dtype of ``a``."""
    return empty(a.shape, a.dtype)

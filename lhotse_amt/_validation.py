"""Input validation shared by the models and extractors: clear errors, never silent
wrong answers."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

__all__ = ["as_float_tensor", "check_signal"]


def as_float_tensor(x: np.ndarray | Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Convert numpy/torch audio to a floating tensor; reject integer PCM and bool."""
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(
                f"audio must be floating point (got numpy dtype {x.dtype}); integer PCM must be "
                "scaled to [-1, 1] first (e.g. x / 32768 for int16)"
            )
        x = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, Tensor):
        if not x.is_floating_point():
            raise ValueError(
                f"audio must be floating point (got torch dtype {x.dtype}); integer PCM must be "
                "scaled to [-1, 1] first (e.g. x / 32768 for int16)"
            )
    else:
        raise TypeError(f"audio must be a numpy array or torch tensor, got {type(x).__name__}")
    return x if dtype is None else x.to(dtype)


def check_signal(x: Tensor, min_samples: int = 1, max_dim: int = 2, what: str = "signal") -> None:
    """Raise ``ValueError`` for empty/too-short, non-finite or badly shaped input."""
    if x.dim() == 0 or x.dim() > max_dim:
        raise ValueError(
            f"{what} must have 1 to {max_dim} dimensions with time last, got shape {tuple(x.shape)}"
        )
    if x.shape[-1] < min_samples:
        raise ValueError(f"{what} is too short: {x.shape[-1]} samples, need at least {min_samples}")
    if x.numel() == 0:
        raise ValueError(f"{what} is an empty batch (shape {tuple(x.shape)})")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{what} contains NaN or infinite samples")

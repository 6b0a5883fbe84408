"""Shared machinery of the sample-rate (CASP-family) models: input checks, streaming
through stateful stages, and the torch_amt output conventions."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from .._validation import as_float_tensor, check_signal
from ..functional.iir import grad_recorded

__all__ = ["StreamingModel", "merge_preset"]


def merge_preset(preset_kwargs: dict | None, user_kwargs: dict | None) -> dict:
    """Preset values overridden by explicitly given keyword arguments."""
    out = dict(preset_kwargs or {})
    out.update(user_kwargs or {})
    return out


class StreamingModel(nn.Module):
    """Base for models made of a chain of stateful stages.

    Subclasses implement :meth:`_stages`, which runs the chain on a chunk and returns the
    stage outputs and new states. :meth:`stream` processes a long signal chunk by chunk
    with the states carried explicitly, so the result equals one-shot processing;
    calling the model twice on the same input gives the same output (no hidden state).
    """

    fs: float
    dtype: torch.dtype
    return_stages: bool
    #: stage names in processing order (keys of the ``return_stages`` dict)
    stage_names: tuple[str, ...] = ()

    def _prepare(self, x: Tensor, min_samples: int = 1) -> tuple[Tensor, bool]:
        x = as_float_tensor(x)
        check_signal(x, min_samples=min_samples, max_dim=2, what=f"{type(self).__name__} input")
        squeeze = x.dim() == 1
        if squeeze:
            x = x.unsqueeze(0)
        ref = next(iter(self.buffers()), None)
        device = ref.device if ref is not None else x.device
        return x.to(device=device, dtype=self.dtype), squeeze

    def _needs_grad(self, x: Tensor) -> bool:
        """Whether autograd records this call (input or a parameter requires grad)."""
        return grad_recorded(x, *self.parameters())

    @staticmethod
    def _itemwise(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        """``fn`` (batch in, batch out; items independent) applied to ``x (B, T)`` one
        item at a time, the results written into one output tensor: peak memory is the
        output plus one item's intermediates, not ``B`` items' (inference only)."""
        first = fn(x[:1])
        if x.shape[0] == 1:
            return first
        out = first.new_empty((x.shape[0], *first.shape[1:]))
        out[:1] = first
        del first
        for b in range(1, x.shape[0]):
            out[b : b + 1] = fn(x[b : b + 1])
        return out

    def _stages(
        self, x: Tensor, state: dict[str, Any] | None, upto: str | None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:  # pragma: no cover - abstract
        raise NotImplementedError

    def stream(
        self, x: Tensor, state: dict[str, Any] | None = None, upto: str | None = None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Run the stages on one chunk ``x (B, T)`` from ``state`` (``None``: the model's
        initial state). Returns ``(stage outputs, new state)``; pass the new state with
        the next chunk. ``upto`` stops after the named stage."""
        if upto is not None and upto not in self.stage_names:
            raise ValueError(f"unknown stage {upto!r}; stages are {self.stage_names}")
        return self._stages(x, state, upto)

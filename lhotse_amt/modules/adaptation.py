"""Adaptation-loop module."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validation import check_bool, check_dtype, check_number, check_preset, check_rate
from ..functional.adaptation import ADAPTATION_PRESETS, adaptation_loops
from ._common import register_coefficients


class AdaptationLoops(nn.Module):
    """Five divisive adaptation loops with overshoot limitation (Dau et al. 1996a, 1997;
    Münkner et al. 1996). See :mod:`lhotse_amt.functional.adaptation` for the equations.

    Args:
        fs: sampling rate (Hz).
        tau: time constants in seconds (``None``: the preset's, 5/50/129/253/500 ms).
        limit: overshoot limitation factor (``None``: the preset's; ``<= 1`` disables).
        minspl: minimum level in dB SPL (``None``: the preset's, 0 dB).
        preset: ``"dau1997"`` (limit 10), ``"osses2021"`` (limit 5), ``"dau1996"`` (no
            limitation) or ``"paulick2024"`` (limit 5). Explicit arguments override it.
        dboffset: dB SPL of a signal of rms 1 (AMT convention: 100).
        learnable: the time constants become parameters (gradients run through the
            plain-torch reference, which is slow: use short signals).

    Shapes: ``(..., T)`` -> ``(..., T)`` in model units.
    """

    def __init__(
        self,
        fs: float,
        tau: list[float] | Tensor | None = None,
        limit: float | None = None,
        minspl: float | None = None,
        preset: str = "dau1997",
        dboffset: float = 100.0,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        p = ADAPTATION_PRESETS[check_preset("adaptation preset", preset, ADAPTATION_PRESETS)]
        self.fs = check_rate("fs", fs)
        self.preset = preset
        self.limit = check_number("limit", p["limit"] if limit is None else limit)
        self.dboffset = check_number("dboffset", dboffset)
        self.minspl = check_number(
            "minspl",
            p["minspl"] if minspl is None else minspl,
            max=self.dboffset,
            max_inclusive=False,
            unit="dB SPL (dboffset)",
        )
        check_bool("learnable", learnable)
        t = torch.as_tensor(p["tau"] if tau is None else tau, dtype=check_dtype("dtype", dtype))
        if t.dim() != 1 or t.numel() == 0 or not bool(torch.isfinite(t).all() & (t > 0).all()):
            raise ValueError("tau must be a 1-D sequence of positive time constants (s)")
        register_coefficients(self, learnable, tau=t)

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        return adaptation_loops(
            x,
            self.fs,
            self.tau,
            self.limit,
            self.minspl,
            self.dboffset,
            state,
            return_state=return_state,
        )

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, limit={self.limit:g}, minspl={self.minspl:g}"


#: name used by the torch_amt documentation
AdaptLoop = AdaptationLoops

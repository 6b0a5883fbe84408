"""Physiological inner-hair-cell module of Paulick et al. (2024)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validation import check_dtype
from ..functional.ihc_paulick import (
    IHC_PAULICK_CONSTANTS,
    ihc_paulick,
    precharge_level,
    resting_potential,
)
from ._common import register_coefficients

__all__ = ["IHCPaulick2024"]


class IHCPaulick2024(nn.Module):
    """MET conductance + membrane circuit (see :mod:`lhotse_amt.functional.ihc_paulick`).

    Args:
        fs: sampling rate (Hz); must be above about 5.6 kHz (forward-Euler stability).
        learnable: the 13 constants become parameters (gradients through the operator
            ``lhotse_amt::ihc_paulick``: compiled kernels with a compiled backward).
        dtype: accepted for API compatibility; the constants are kept in float64 (they
            span 1e-12 ... 1e-1) and cast to the input's dtype when used.
        precharge_duration: pre-charge length (s), 50 ms.
        constants: overrides of :data:`~lhotse_amt.functional.ihc_paulick.IHC_PAULICK_CONSTANTS`.

    Input ``(..., T)`` basilar-membrane velocity (DRNL output); output ``(..., T)`` receptor
    potential relative to the pre-charged resting level, in volts. Streaming state:
    ``W = V - V_pre`` of the last sample, ``(...)``.
    """

    def __init__(
        self,
        fs: float,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
        *,
        precharge_duration: float = 0.05,
        constants: dict[str, float] | None = None,
    ) -> None:
        super().__init__()
        check_dtype("dtype", dtype)
        self.fs = float(fs)
        self.learnable = learnable
        self.dtype = dtype
        self.precharge_duration = float(precharge_duration)
        vals = dict(IHC_PAULICK_CONSTANTS)
        unknown = set(constants or {}) - set(vals)
        if unknown:
            raise ValueError(f"unknown IHC constant(s) {sorted(unknown)}; valid: {sorted(vals)}")
        vals.update(constants or {})
        self._names = tuple(vals)
        tensors = {k: torch.tensor(float(v), dtype=torch.float64) for k, v in vals.items()}
        register_coefficients(self, learnable, **tensors)
        # validates fs (raises for too low rates); the plain-torch path: one sample needs no
        # compiled kernel (compiling it would cost seconds at construction)
        ihc_paulick(
            torch.zeros(1, 1, dtype=torch.float64), self.fs, self.constants(), backend="torch"
        )

    def constants(self) -> dict[str, Tensor]:
        """The 13 constants as a dict of 0-d tensors (SI units)."""
        return {k: getattr(self, k) for k in self._names}

    @property
    def V_pre(self) -> Tensor:
        """Potential after the pre-charge (V): the zero of the output."""
        return precharge_level(self.constants(), self.fs, self.precharge_duration)

    @property
    def V_ss(self) -> Tensor:
        """Steady-state (resting) potential of the circuit at ``G_precharge`` (V)."""
        return resting_potential(self.constants())

    def forward(
        self,
        vel: Tensor,
        state: Tensor | None = None,
        return_state: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``vel``: basilar-membrane velocity ``(..., T)`` (the DRNL output, m/s); returns
        the receptor potential ``(..., T)`` (V, relative to the pre-charged level).
        :func:`~lhotse_amt.functional.ihc_paulick.ihc_paulick` chooses the kernel (its
        ``backend`` argument forces one)."""
        return ihc_paulick(
            vel,
            self.fs,
            self.constants(),
            state,
            precharge_duration=self.precharge_duration,
            return_state=return_state,
        )

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, learnable={self.learnable}"

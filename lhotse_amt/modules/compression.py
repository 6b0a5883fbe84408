"""Compression modules of the King et al. (2019) model; see
:mod:`lhotse_amt.functional.compression`."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validation import check_dtype, check_positive_finite
from ..functional.compression import broken_stick_compression, knee_amplitude, power_compression
from ._common import register_coefficients

__all__ = ["BrokenStickCompression", "PowerCompression"]


class BrokenStickCompression(nn.Module):
    """Sign-preserving broken-stick compression (King et al. 2019; AMT
    ``compression_brokenstick``): linear below the knee, ``sign(x) K (|x|/K)^n`` above.

    Args:
        knee_db: knee level in dB SPL (30).
        exponent: compression exponent ``n`` (0.3).
        dboffset: dB SPL of an rms of 1 (AMT convention 100; AMT 1.4's own default would
            be 93.98, see the reference README section 3.1).
        learnable: the exponent becomes a parameter.

    Shapes: ``(...)`` -> ``(...)``.
    """

    def __init__(
        self,
        knee_db: float = 30.0,
        exponent: float = 0.3,
        dboffset: float = 100.0,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        knee_amplitude(knee_db, dboffset)  # checks both levels
        self.knee_db = float(knee_db)
        self.dboffset = float(dboffset)
        n = check_positive_finite("exponent", exponent)
        register_coefficients(
            self, learnable, exponent=torch.tensor(n, dtype=check_dtype("dtype", dtype))
        )

    @property
    def knee(self) -> float:
        """Knee amplitude ``10^((knee_db - dboffset) / 20)``."""
        return knee_amplitude(self.knee_db, self.dboffset)

    def forward(self, x: Tensor) -> Tensor:
        return broken_stick_compression(x, self.knee_db, self.exponent, self.dboffset)

    def extra_repr(self) -> str:
        return f"knee_db={self.knee_db:g}, dboffset={self.dboffset:g}, n={float(self.exponent):g}"


class PowerCompression(nn.Module):
    """``sign(x) |x|^n`` (torch_amt's ``'power'`` option, sign kept as in AMT's
    broken stick)."""

    def __init__(
        self, exponent: float = 0.3, learnable: bool = False, dtype: torch.dtype = torch.float32
    ) -> None:
        super().__init__()
        n = check_positive_finite("exponent", exponent)
        register_coefficients(
            self, learnable, exponent=torch.tensor(n, dtype=check_dtype("dtype", dtype))
        )

    def forward(self, x: Tensor) -> Tensor:
        return power_compression(x, self.exponent)

    def extra_repr(self) -> str:
        return f"n={float(self.exponent):g}"

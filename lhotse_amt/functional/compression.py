"""Instantaneous compression of the King, Varnet & Lorenzi (2019) model (AMT
``compression_brokenstick``), sign-preserving.

Broken stick (King et al. 2019, eq. 1; AMT): with the knee amplitude
``K = 10^((knee_db - dboffset) / 20)`` (``knee_db`` in dB SPL on the scale where rms 1 =
``dboffset`` dB SPL; 3.1623e-4 for 30 dB with ``dboffset = 100``):

    y = x                                  for |x| <= K
    y = sign(x) K (|x| / K)^n              for |x| >  K      (n = 0.3)

Power law (option): ``y = sign(x) |x|^n``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import (
    check_broadcast,
    check_level_db,
    check_number,
    check_positive_finite,
    check_signal,
    require,
)

__all__ = ["knee_amplitude", "broken_stick_compression", "power_compression"]


def knee_amplitude(knee_db: float = 30.0, dboffset: float = 100.0) -> float:
    """Amplitude of the knee: ``10^((knee_db - dboffset) / 20)``."""
    check_number("knee_db", knee_db, min=-300.0, max=300.0)
    check_level_db("dboffset", dboffset)
    return 10.0 ** ((knee_db - dboffset) / 20.0)


def broken_stick_compression(
    x: Tensor,
    knee_db: float = 30.0,
    exponent: float | Tensor = 0.3,
    dboffset: float = 100.0,
    *,
    backend: str = "auto",
) -> Tensor:
    """Broken-stick compression of ``x (...)`` (shape kept): linear below the knee,
    ``sign(x) K (|x|/K)^n`` above it. ``exponent`` may be a (learnable) tensor
    broadcasting with ``x``.

    ``backend="auto"`` runs a scalar exponent (a number, or a one-element tensor of
    ``x``'s dtype) as the operator ``lhotse_amt::broken_stick`` (one compiled pass forward
    and one backward, :mod:`lhotse_amt.ops.compression`); ``"reference"`` (and other
    exponents) the plain-torch expression below, which defines the semantics."""
    check_signal(x, min_samples=0, min_dim=0, max_dim=None, allow_empty=True, name="x")
    _check_exponent(x, exponent)
    if backend not in ("auto", "reference"):
        raise ValueError(f"backend must be 'auto' or 'reference', got {backend!r}")
    K = knee_amplitude(knee_db, dboffset)
    scalar = not isinstance(exponent, Tensor) or (
        exponent.numel() == 1 and exponent.dtype == x.dtype and exponent.dim() <= x.dim()
    )
    if backend == "auto" and scalar and x.numel() > 0:
        from .. import ops

        n = exponent if isinstance(exponent, Tensor) else x.new_tensor(float(exponent))
        return ops.broken_stick(x, n, K)
    ax = x.abs()
    # clamp keeps the unused branch finite (and its gradient zero) below the knee
    comp = torch.sign(x) * K * (ax.clamp(min=K) / K) ** exponent
    return torch.where(ax > K, comp, x)


def power_compression(x: Tensor, exponent: float | Tensor = 0.3) -> Tensor:
    """``sign(x) |x|^n`` (the derivative is unbounded at 0)."""
    check_signal(x, min_samples=0, min_dim=0, max_dim=None, allow_empty=True, name="x")
    _check_exponent(x, exponent)
    return torch.sign(x) * x.abs() ** exponent


def _check_exponent(x: Tensor, exponent: float | Tensor) -> None:
    """A positive finite compression exponent (a number, or a floating tensor that
    broadcasts with ``x`` to ``x``'s shape)."""
    if isinstance(exponent, Tensor):
        if not exponent.is_floating_point():
            raise ValueError(f"exponent must be a floating tensor, got dtype {exponent.dtype}")
        if check_broadcast(("x", x.shape), ("exponent", exponent.shape)) != x.shape:
            raise ValueError(
                f"exponent of shape {tuple(exponent.shape)} must broadcast to the shape of x "
                f"{tuple(x.shape)}"
            )
        require(
            (torch.isfinite(exponent) & (exponent > 0)).all(),
            "exponent must be finite and > 0 everywhere",
        )
        return
    check_positive_finite("exponent", exponent)

"""Plans of the loudness models' no-grad CPU kernels (:mod:`lhotse_amt.kernels.loudness_fused`):
which components the excitation stage keeps, and the per-channel constants of the
specific-loudness kernel. Plain frozen dataclasses (no numba import), built once per model
by its stage modules (:mod:`lhotse_amt.modules.loudness`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["KeepRule", "TailConstants"]


@dataclass(frozen=True)
class KeepRule:
    """Which spectral components enter the excitation stage: with ``prune``, ``I > max(max_k I,
    threshold) * 1e-6`` (:func:`lhotse_amt.functional.loudness.prune_components`, Cambridge/AMT
    rule, ``threshold`` 1000); otherwise ``I > threshold``."""

    prune: bool
    threshold: float


@dataclass(frozen=True)
class TailConstants:
    """Per-channel constants of :func:`lhotse_amt.kernels.loudness_fused.specific_loudness_tail`,
    ``(C,)`` arrays in the dtype of the excitation: ``g``, ``a``, ``alpha``, ``e_thrq`` of the
    specific-loudness law (MGB 1997 / ANSI S3.4-2007), ``a_alpha = a ** alpha`` and ``mask``
    (0: ``N' = 0`` in that channel)."""

    g: np.ndarray
    a: np.ndarray
    alpha: np.ndarray
    e_thrq: np.ndarray
    a_alpha: np.ndarray
    mask: np.ndarray

"""Thin ``nn.Module`` wrappers around :mod:`lhotse_amt.functional`: coefficients are
designed once in ``__init__`` and stored as buffers (or parameters with ``learnable=True``)."""

from .adaptation import AdaptationLoops, AdaptLoop
from .gammatone import GammatoneFilterbank
from .ihc import IHCEnvelope
from .modulation import ModulationFilterbank

__all__ = [
    "AdaptationLoops",
    "AdaptLoop",
    "GammatoneFilterbank",
    "IHCEnvelope",
    "ModulationFilterbank",
]

"""Thin ``nn.Module`` wrappers around :mod:`lhotse_amt.functional`: coefficients are
designed once in ``__init__`` and stored as buffers (or parameters with ``learnable=True``)."""

from .adaptation import AdaptationLoops, AdaptLoop
from .compression import BrokenStickCompression, PowerCompression
from .ear import HeadphoneFilter, MiddleEarFilter
from .gammatone import GammatoneFilterbank
from .ihc import IHCEnvelope
from .king2019_modulation import ButterworthFilter, King2019ModulationFilterbank
from .modulation import ModulationFilterbank

__all__ = [
    "AdaptationLoops",
    "AdaptLoop",
    "BrokenStickCompression",
    "ButterworthFilter",
    "GammatoneFilterbank",
    "HeadphoneFilter",
    "IHCEnvelope",
    "King2019ModulationFilterbank",
    "MiddleEarFilter",
    "ModulationFilterbank",
    "PowerCompression",
]

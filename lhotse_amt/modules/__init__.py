"""Thin ``nn.Module`` wrappers around :mod:`lhotse_amt.functional`: coefficients are
designed once in ``__init__`` and stored as buffers (or parameters with ``learnable=True``)."""

from .adaptation import AdaptationLoops, AdaptLoop
from .compression import BrokenStickCompression, PowerCompression
from .drnl import DRNLFilterbank
from .ear import HeadphoneFilter, MiddleEarFilter
from .gammatone import GammatoneFilterbank
from .ihc import IHCEnvelope
from .ihc_paulick import IHCPaulick2024
from .king2019_modulation import ButterworthFilter, King2019ModulationFilterbank
from .modulation import ModulationFilterbank

__all__ = [
    "AdaptationLoops",
    "AdaptLoop",
    "BrokenStickCompression",
    "ButterworthFilter",
    "DRNLFilterbank",
    "GammatoneFilterbank",
    "HeadphoneFilter",
    "IHCEnvelope",
    "IHCPaulick2024",
    "King2019ModulationFilterbank",
    "MiddleEarFilter",
    "ModulationFilterbank",
    "PowerCompression",
]

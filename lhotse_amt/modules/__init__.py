"""Thin ``nn.Module`` wrappers around :mod:`lhotse_amt.functional`: coefficients are
designed once in ``__init__`` and stored as buffers (or parameters with ``learnable=True``)."""

from .adaptation import AdaptationLoops, AdaptLoop
from .compression import BrokenStickCompression, PowerCompression
from .drnl import DRNLFilterbank
from .ear import HeadphoneFilter, MiddleEarFilter
from .gammatone import GammatoneFilterbank
from .ihc import IHCEnvelope
from .ihc_paulick import IHCPaulick2024
from .king2019_modulation import (
    ButterworthFilter,
    FastKing2019ModulationFilterbank,
    King2019ModulationFilterbank,
)
from .loudness import (
    BinauralInhibition,
    ERBIntegration,
    ExcitationPattern,
    LoudnessAGC,
    LoudnessIntegration,
    MultiResolutionSpectrum,
    OuterMiddleEarFilter,
    SpecificLoudness,
)
from .modulation import FastModulationFilterbank, ModulationFilterbank

__all__ = [
    "AdaptationLoops",
    "AdaptLoop",
    "BinauralInhibition",
    "BrokenStickCompression",
    "ButterworthFilter",
    "DRNLFilterbank",
    "ERBIntegration",
    "ExcitationPattern",
    "FastKing2019ModulationFilterbank",
    "FastModulationFilterbank",
    "GammatoneFilterbank",
    "HeadphoneFilter",
    "IHCEnvelope",
    "IHCPaulick2024",
    "King2019ModulationFilterbank",
    "LoudnessAGC",
    "LoudnessIntegration",
    "MiddleEarFilter",
    "ModulationFilterbank",
    "MultiResolutionSpectrum",
    "OuterMiddleEarFilter",
    "PowerCompression",
    "SpecificLoudness",
]

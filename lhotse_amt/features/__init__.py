"""Registered Lhotse feature extractors (importing this module registers them)."""

from .base import AuditoryConfig, AuditoryExtractor
from .casp import (
    Dau1997Config,
    Dau1997Extractor,
    King2019Config,
    King2019Extractor,
    Osses2021Config,
    Osses2021Extractor,
    Paulick2024Config,
    Paulick2024Extractor,
)
from .loudness import (
    Glasberg2002Config,
    Glasberg2002Extractor,
    Moore2016Config,
    Moore2016Extractor,
)

__all__ = ["AuditoryConfig", "AuditoryExtractor", "Dau1997Config", "Dau1997Extractor"]
__all__ += [
    "Glasberg2002Config",
    "Glasberg2002Extractor",
    "Moore2016Config",
    "Moore2016Extractor",
]
__all__ += ["King2019Config", "King2019Extractor", "Osses2021Config", "Osses2021Extractor"]
__all__ += ["Paulick2024Config", "Paulick2024Extractor"]

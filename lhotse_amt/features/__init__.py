"""Registered Lhotse feature extractors (importing this module registers them).

One module per extractor (its config, model building and column names):
:mod:`.dau1997`, :mod:`.osses2021`, :mod:`.king2019`, :mod:`.paulick2024`,
:mod:`.glasberg2002`, :mod:`.moore2016`; the shared machinery in :mod:`.base` (input
handling and the one chunk-and-pool loop), :mod:`.frames`, :mod:`.casp_base`,
:mod:`.loudness_base` and the feature-domain mixing schemes in :mod:`.mixing`.
"""

from .base import AuditoryConfig, AuditoryExtractor
from .dau1997 import Dau1997Config, Dau1997Extractor
from .glasberg2002 import Glasberg2002Config, Glasberg2002Extractor
from .king2019 import King2019Config, King2019Extractor
from .moore2016 import Moore2016Config, Moore2016Extractor
from .osses2021 import Osses2021Config, Osses2021Extractor
from .paulick2024 import Paulick2024Config, Paulick2024Extractor

__all__ = ["AuditoryConfig", "AuditoryExtractor", "Dau1997Config", "Dau1997Extractor"]
__all__ += [
    "Glasberg2002Config",
    "Glasberg2002Extractor",
    "Moore2016Config",
    "Moore2016Extractor",
]
__all__ += ["King2019Config", "King2019Extractor", "Osses2021Config", "Osses2021Extractor"]
__all__ += ["Paulick2024Config", "Paulick2024Extractor"]

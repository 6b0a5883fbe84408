"""lhotse_amt: computational auditory models as Lhotse feature extractors.

Importing the package registers the ``amt-*`` extractors with Lhotse (cheaply: no model
is built and no GPU is touched until features are computed).

Importing it also asks PyTorch to back large CPU tensors (2 MB and more) with transparent
huge pages (``THP_MEM_ALLOC_ENABLE=1``, a PyTorch allocator setting) unless that variable
is already set: the sample-rate outputs of the models are hundreds of MB, and faulting
them in 2-MB pages instead of 4-kB ones cuts the kernel's share of their cost by about
five times. PyTorch reads the setting at its first large allocation; set
``THP_MEM_ALLOC_ENABLE=0`` to keep the default.

The models' large CPU outputs (16 MB and more) come from a host cache that keeps the
memory of freed outputs for the next call, like PyTorch's CUDA caching allocator: a
second forward of the same size faults in no fresh pages. It holds at most
:func:`host_cache_limit` bytes (a quarter of the physical memory, or
``LHOTSE_AMT_HOST_CACHE_MB``; 0 turns it off); :func:`empty_host_cache` releases it.
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")

from ._alloc import empty_host_cache, host_cache_bytes, host_cache_limit
from .features import (
    AuditoryConfig,
    AuditoryExtractor,
    Dau1997Config,
    Dau1997Extractor,
    Glasberg2002Config,
    Glasberg2002Extractor,
    King2019Config,
    King2019Extractor,
    Moore2016Config,
    Moore2016Extractor,
    Osses2021Config,
    Osses2021Extractor,
    Paulick2024Config,
    Paulick2024Extractor,
)
from .models import Dau1997
from .models.glasberg2002 import Glasberg2002
from .models.king2019 import King2019
from .models.moore2016 import Moore2016
from .models.osses2021 import Osses2021
from .models.paulick2024 import Paulick2024
from .modules import (
    DRNLFilterbank,
    FastKing2019ModulationFilterbank,
    FastModulationFilterbank,
    IHCEnvelope,
    IHCPaulick2024,
    King2019ModulationFilterbank,
    ModulationFilterbank,
)
from .padding import (
    PrecomputedAuditoryFeatures,
    collate_features,
    pad_cut,
    pad_cuts,
    pad_value,
)

__version__ = "0.1.0"

__all__ = [
    "AuditoryConfig",
    "AuditoryExtractor",
    "Dau1997",
    "Dau1997Config",
    "Dau1997Extractor",
    "King2019",
    "King2019Config",
    "King2019Extractor",
    "Osses2021",
    "Osses2021Config",
    "Osses2021Extractor",
    "Paulick2024",
    "Paulick2024Config",
    "Paulick2024Extractor",
    "DRNLFilterbank",
    "FastKing2019ModulationFilterbank",
    "FastModulationFilterbank",
    "IHCEnvelope",
    "IHCPaulick2024",
    "King2019ModulationFilterbank",
    "ModulationFilterbank",
    "__version__",
    "worker_init_fn",
    "empty_host_cache",
    "host_cache_bytes",
    "host_cache_limit",
    "PrecomputedAuditoryFeatures",
    "collate_features",
    "pad_cut",
    "pad_cuts",
    "pad_value",
]
__all__ += [
    "Glasberg2002",
    "Glasberg2002Config",
    "Glasberg2002Extractor",
    "Moore2016",
    "Moore2016Config",
    "Moore2016Extractor",
]


def worker_init_fn(worker_id: int) -> None:
    """``DataLoader(worker_init_fn=lhotse_amt.worker_init_fn)``: makes sure spawned worker
    processes have the ``amt-*`` extractors registered (pickling this function imports
    the package in the worker), which Lhotse needs to mix precomputed features lazily."""
    del worker_id

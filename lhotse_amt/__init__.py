"""lhotse_amt: computational auditory models as Lhotse feature extractors.

Importing the package registers the ``amt-*`` extractors with Lhotse (cheaply: no model
is built and no GPU is touched until features are computed).

Importing changes nothing global (no environment variable, no PyTorch or numba setting).
Four process-wide settings speed up feature extraction and are turned on explicitly (the
``lhotse-amt`` CLI turns all four on at start):

* :func:`enable_huge_pages`: large CPU tensors in transparent huge pages (PyTorch's
  ``THP_MEM_ALLOC_ENABLE``; only before the process's first CPU tensor).
* :func:`enable_host_cache`: the models' large CPU outputs (16 MB and more) come from a
  host cache that keeps the memory of freed outputs for the next call, like PyTorch's CUDA
  caching allocator (off by default; each process has its own; ``LHOTSE_AMT_HOST_CACHE_MB``
  sets it for every process that inherits the environment). :func:`empty_host_cache`
  releases it.
* :func:`use_fork_safe_threading`: numba prefers threading layers that survive ``fork``.
* :func:`skip_exit_collection`: the interpreter's exit skips its garbage collections
  (~0.5-1 CPU-s less per process after kernel compiles).

Compiled kernels are cached on disk (see :mod:`lhotse_amt.kernels`);
``lhotse-amt amt warmup`` compiles them ahead of time.
"""

from ._alloc import (
    empty_host_cache,
    enable_host_cache,
    enable_huge_pages,
    host_cache_bytes,
    host_cache_limit,
)
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
from .kernels import skip_exit_collection, use_fork_safe_threading
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
    "enable_host_cache",
    "enable_huge_pages",
    "host_cache_bytes",
    "host_cache_limit",
    "skip_exit_collection",
    "use_fork_safe_threading",
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

"""lhotse_amt: computational auditory models as Lhotse feature extractors.

Importing the package registers the ``amt-*`` extractors with Lhotse (cheaply: no model
is built and no GPU is touched until features are computed).
"""

from .features import AuditoryConfig, AuditoryExtractor, Dau1997Config, Dau1997Extractor
from .models import Dau1997

__version__ = "0.1.0"

__all__ = [
    "AuditoryConfig",
    "AuditoryExtractor",
    "Dau1997",
    "Dau1997Config",
    "Dau1997Extractor",
    "__version__",
    "worker_init_fn",
]


def worker_init_fn(worker_id: int) -> None:
    """``DataLoader(worker_init_fn=lhotse_amt.worker_init_fn)``: makes sure spawned worker
    processes have the ``amt-*`` extractors registered (pickling this function imports
    the package in the worker), which Lhotse needs to mix precomputed features lazily."""
    del worker_id

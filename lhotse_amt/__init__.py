"""lhotse_amt: computational auditory models as Lhotse feature extractors."""

from .models import Dau1997

__version__ = "0.1.0"

__all__ = ["Dau1997", "__version__"]

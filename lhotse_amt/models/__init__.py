"""Complete auditory models."""

from .dau1997 import Dau1997

__all__ = ["Dau1997"]

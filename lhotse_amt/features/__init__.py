"""Registered Lhotse feature extractors (importing this module registers them)."""

from .base import AuditoryConfig, AuditoryExtractor
from .casp import Dau1997Config, Dau1997Extractor

__all__ = ["AuditoryConfig", "AuditoryExtractor", "Dau1997Config", "Dau1997Extractor"]

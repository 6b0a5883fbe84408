"""Read-only properties that forward an attribute of a member object (a model's stage
submodule, an extractor's config, a wrapped writer)."""

from __future__ import annotations

import operator

__all__ = ["forwarded_attribute"]


def forwarded_attribute(path: str, doc: str) -> property:
    """Read-only property: the attribute ``path`` of a member, dotted from the instance
    (e.g. ``"spectrum.prune"``, ``"config.frame_shift"``), documented by ``doc``."""
    return property(operator.attrgetter(path), doc=doc)

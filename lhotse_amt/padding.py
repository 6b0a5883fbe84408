"""Padding auditory features with silence.

Lhotse pads feature matrices with a value that means silence for log-energy features:
``cut.pad()``, ``CutSet.pad()`` and the collation of ``PrecomputedFeatures`` (which pads
every cut of a batch to the longest) fill ``LOG_EPSILON`` = -23.03 unless
``pad_feat_value`` is given, and a padded cut's ``load_features()`` returns that value
without consulting any extractor. For the auditory features -23.03 is not silence: it is
a strongly negative model-unit value (the undershoot after a loud offset) or an impossible
negative loudness. Silence is ``0.0`` for every ``amt-*`` feature type (0 MU, 0 compressed
units, 0 sone; ``AuditoryExtractor.padding_value``).

Where Lhotse does consult the extractor, padding already becomes silence: a ``MixedCut``
with more than one real track is mixed by ``FeatureMixer`` through the extractor's ``mix``
hook, which reads Lhotse's padding values (-23.03 and ``FeatureMixer``'s -1000) as silence.
Everywhere else, use these helpers:

* :func:`pad_value` - the silence value of a feature type;
* :func:`pad_cut` / :func:`pad_cuts` - ``cut.pad`` / ``CutSet.pad`` with that value;
* :func:`collate_features` and :class:`PrecomputedAuditoryFeatures` - Lhotse's feature
  collation and input strategy, padding with that value (``K2SpeechRecognitionDataset(
  input_strategy=PrecomputedAuditoryFeatures())``).

Padded frames should still be masked by the returned lengths where the model allows it.
"""

from __future__ import annotations

from concurrent.futures import Executor
from typing import Any

import torch
from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.dataset.input_strategies import PrecomputedFeatures, _get_executor
from lhotse.features.base import FEATURE_EXTRACTORS
from lhotse.utils import LOG_EPSILON

from .features.base import AuditoryExtractor

__all__ = [
    "PrecomputedAuditoryFeatures",
    "collate_features",
    "pad_cut",
    "pad_cuts",
    "pad_value",
]

_DIRECTIONS = ("right", "left", "both")


def pad_value(feature_type: str) -> float:
    """The feature value that means silence for ``feature_type`` (a registered Lhotse
    feature type name).

    ``amt-*`` types: their extractor's ``padding_value`` (0.0). Other registered types
    (Lhotse's own log-domain features): Lhotse's default ``LOG_EPSILON`` (-23.03).

    Raises:
        TypeError: ``feature_type`` is not a string.
        ValueError: no extractor of that name is registered (``import lhotse_amt`` registers
            the ``amt-*`` ones).
    """
    if not isinstance(feature_type, str):
        raise TypeError(f"feature_type must be a string, got {type(feature_type).__name__}")
    cls = FEATURE_EXTRACTORS.get(feature_type)
    if cls is None:
        amt = sorted(k for k in FEATURE_EXTRACTORS if k.startswith("amt-"))
        raise ValueError(
            f"unknown feature type {feature_type!r}: no Lhotse extractor of that name is "
            f"registered (auditory types: {amt})"
        )
    if isinstance(cls, type) and issubclass(cls, AuditoryExtractor):
        return float(cls.padding_value)
    return float(LOG_EPSILON)


def _check_pad_args(duration: Any, num_frames: Any, num_samples: Any, direction: str) -> None:
    lengths = {"duration": duration, "num_frames": num_frames, "num_samples": num_samples}
    given = [name for name, v in lengths.items() if v is not None]
    if len(given) > 1:
        raise ValueError(f"give at most one of duration, num_frames, num_samples; got {given}")
    if direction not in _DIRECTIONS:
        raise ValueError(f"direction must be one of {_DIRECTIONS}, got {direction!r}")


#: the padding arguments of :func:`pad_cut` and :func:`pad_cuts` (those of Lhotse's ``pad``)
_PAD_ARGS = ("duration", "num_frames", "num_samples", "direction", "preserve_id")


def _pad_with_silence(target: Any, feature_type: str | None, args: dict[str, Any]) -> Any:
    """``target.pad(...)`` (a Cut or CutSet) with the padding arguments ``args`` and the
    padded feature frames set to :func:`pad_value` of ``feature_type`` (``None``: no
    features, Lhotse's padding)."""
    kwargs = {k: args[k] for k in _PAD_ARGS}
    if feature_type is not None:
        kwargs["pad_feat_value"] = pad_value(feature_type)
    return target.pad(**kwargs)


def pad_cut(
    cut: Cut,
    duration: float | None = None,
    num_frames: int | None = None,
    num_samples: int | None = None,
    direction: str = "right",
    preserve_id: bool = False,
) -> Cut:
    """``cut.pad(...)`` whose padded feature frames are silence for the cut's feature type
    (:func:`pad_value`; audio is padded with zeros as always). Exactly one of ``duration``
    (s), ``num_frames``, ``num_samples`` gives the padded length; ``direction`` is
    ``"right"``, ``"left"`` or ``"both"``. A cut without features is padded as by Lhotse.
    """
    if not isinstance(cut, Cut):
        raise TypeError(f"pad_cut needs a Lhotse Cut, got {type(cut).__name__}")
    _check_pad_args(duration, num_frames, num_samples, direction)
    if duration is None and num_frames is None and num_samples is None:
        raise ValueError("pad_cut needs one of duration, num_frames, num_samples")
    return _pad_with_silence(cut, cut.features_type if cut.has_features else None, locals())


def _single_feature_type(cuts: CutSet) -> str | None:
    types = {c.features_type for c in cuts if c.has_features}
    if len(types) > 1:
        raise ValueError(
            f"the cuts hold features of different types {sorted(types)}; pad each type separately"
        )
    return next(iter(types), None)


def pad_cuts(
    cuts: CutSet,
    duration: float | None = None,
    num_frames: int | None = None,
    num_samples: int | None = None,
    direction: str = "right",
    preserve_id: bool = False,
) -> CutSet:
    """``cuts.pad(...)`` with silence (:func:`pad_value`) in the padded feature frames; all
    cuts with features must have one feature type. Without a length, every cut is padded to
    the longest (as ``CutSet.pad``)."""
    if not isinstance(cuts, CutSet):
        raise TypeError(f"pad_cuts needs a Lhotse CutSet, got {type(cuts).__name__}")
    _check_pad_args(duration, num_frames, num_samples, direction)
    return _pad_with_silence(cuts, _single_feature_type(cuts), locals())


def collate_features(
    cuts: CutSet,
    pad_direction: str = "right",
    executor: Executor | None = None,
    features_dtype: torch.dtype | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Lhotse's ``collate_features`` with silence padding: ``(features (B, T, F),
    lengths (B,))``, every cut padded to the longest with :func:`pad_value` of the batch's
    feature type (one type per batch)."""
    if not isinstance(cuts, CutSet):
        raise TypeError(f"collate_features needs a Lhotse CutSet, got {type(cuts).__name__}")
    if pad_direction not in _DIRECTIONS:
        raise ValueError(f"pad_direction must be one of {_DIRECTIONS}, got {pad_direction!r}")
    missing = [c.id for c in cuts if not c.has_features]
    if missing:
        raise ValueError(f"cuts without features cannot be collated: {missing[:5]}")
    lens = torch.tensor([c.num_frames for c in cuts], dtype=torch.int)
    if len(lens) == 0:
        raise ValueError("collate_features got an empty CutSet")
    padded = pad_cuts(cuts, num_frames=int(lens.max()), direction=pad_direction)
    first = next(iter(padded))
    out = torch.empty(len(padded), first.num_frames, first.num_features, dtype=features_dtype)
    loaded = map(_load, padded) if executor is None else executor.map(_load, padded)
    for i, f in enumerate(loaded):
        out[i] = f
    return out, lens


def _load(cut: Cut) -> torch.Tensor:
    return torch.from_numpy(cut.load_features())


class PrecomputedAuditoryFeatures(PrecomputedFeatures):
    """Lhotse's ``PrecomputedFeatures`` input strategy, padding batches with silence
    (:func:`collate_features`) instead of -23.03."""

    def __call__(
        self, cuts: CutSet, pad_direction: str | None = "right"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return collate_features(
            cuts,
            pad_direction=pad_direction or "right",
            executor=_get_executor(self.num_workers, executor_type=self._executor_type),
        )

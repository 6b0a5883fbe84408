"""Finding the splits of a ``lhotse prepare`` output directory and building extractors
from short specs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lhotse import CutSet, RecordingSet, SupervisionSet
from lhotse.features.base import FEATURE_EXTRACTORS, FeatureExtractor

import lhotse_amt  # noqa: F401  registers the amt-* extractors

__all__ = ["cuts_from_manifests", "find_splits", "make_extractor", "spec_tag"]

_REC = re.compile(r"^(?P<prefix>.*?)_?recordings_?(?P<split>.*?)\.jsonl(\.gz)?$")


def find_splits(
    manifest_dir: str | Path, prefix: str | None = None
) -> dict[str, tuple[Path, Path | None]]:
    """``{split: (recordings, supervisions or None)}`` for every ``*recordings*.jsonl[.gz]``
    in ``manifest_dir`` (e.g. ``librispeech_recordings_train-clean-100.jsonl.gz`` ->
    split ``train-clean-100``; the supervisions file is the same name with
    ``supervisions``; a recordings-only manifest such as ``noise_recordings.jsonl.gz`` is
    split ``noise``). ``prefix`` keeps only files whose name starts with it. Two corpora
    with the same split name in one directory are told apart as ``{prefix}_{split}``."""
    found = []
    for rec in sorted(Path(manifest_dir).glob("*recordings*.jsonl*")):
        m = _REC.match(rec.name)
        if m is None or (prefix is not None and not rec.name.startswith(prefix)):
            continue
        sup = rec.with_name(rec.name.replace("recordings", "supervisions"))
        found.append((m.group("prefix"), m.group("split") or m.group("prefix") or "all", rec, sup))
    names = [s for _, s, _, _ in found]
    out: dict[str, tuple[Path, Path | None]] = {}
    for pre, split, rec, sup in found:
        key = f"{pre}_{split}" if names.count(split) > 1 and pre else split
        out[key] = (rec, sup if sup.exists() else None)
    if not out:
        raise FileNotFoundError(f"no *recordings*.jsonl[.gz] manifests in {manifest_dir}")
    return out


def cuts_from_manifests(
    recordings: str | Path, supervisions: str | Path | None = None, trim: bool = False
) -> CutSet:
    """A CutSet from a recordings (+ supervisions) manifest pair; ``trim`` cuts it to the
    supervision segments (one cut per utterance, as ASR training wants)."""
    recs = RecordingSet.from_file(recordings)
    sups = SupervisionSet.from_file(supervisions) if supervisions else None
    cuts = CutSet.from_manifests(recordings=recs, supervisions=sups)
    if trim and sups is not None:
        cuts = cuts.trim_to_supervisions(keep_overlapping=False)
    return cuts.to_eager()


def _value(v: str) -> Any:
    low = v.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("none", "null"):
        return None
    for t in (int, float):
        try:
            return t(v)
        except ValueError:
            pass
    return v


def make_extractor(spec: str, **overrides: Any) -> FeatureExtractor:
    """An extractor from ``NAME``, ``NAME:key=value,key=value`` (e.g.
    ``amt-dau1997:stage=adaptation``) or a YAML config path (``*.yaml``/``*.yml``)."""
    if spec.endswith((".yaml", ".yml")):
        ex = FeatureExtractor.from_yaml(spec)
        cfg = ex.config
    else:
        name, _, rest = spec.partition(":")
        if name not in FEATURE_EXTRACTORS:
            known = ", ".join(sorted(FEATURE_EXTRACTORS))
            raise ValueError(f"unknown extractor {name!r}; registered: {known}")
        cls = FEATURE_EXTRACTORS[name]
        cfg = cls().config
        for kv in filter(None, rest.split(",")):
            k, _, v = kv.partition("=")
            if not hasattr(cfg, k):
                raise ValueError(f"{name} has no config key {k!r}")
            setattr(cfg, k, _value(v))
        ex = None
    for k, v in overrides.items():
        if v is not None and hasattr(cfg, k):
            setattr(cfg, k, v)
    cls = FEATURE_EXTRACTORS[ex.name if ex is not None else spec.partition(":")[0]]
    return cls(cfg)


def spec_tag(spec: str) -> str:
    """A file-name-safe tag for a feature spec (``amt-dau1997:stage=adaptation`` ->
    ``amt-dau1997_stage-adaptation``)."""
    if spec.endswith((".yaml", ".yml")):
        return Path(spec).stem
    return re.sub(r"[^A-Za-z0-9.+-]+", "_", spec.replace("=", "-")).strip("_")

"""Resumable, atomic feature extraction over CutSets.

:func:`extract_cuts` computes and stores features cut by cut (optionally in worker
processes). Every finished cut is appended to ``<output>.partial.jsonl`` (flushed and
fsync'ed), so an interrupted run continues where it stopped without recomputing or
duplicating finished cuts; the final manifest is written to a temporary file and renamed
into place, so a failure never leaves a half-written manifest.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.features.base import FeatureExtractor
from lhotse.features.io import get_writer
from tqdm.auto import tqdm

__all__ = ["extract_cuts", "partial_manifest_path"]


def partial_manifest_path(output_manifest: str | Path) -> Path:
    """Where :func:`extract_cuts` keeps its progress for ``output_manifest``."""
    p = Path(output_manifest)
    return p.with_name(p.name + ".partial.jsonl")


def _read_partial(path: Path) -> dict[str, dict]:
    done: dict[str, dict] = {}
    if not path.exists():
        return done
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                d = json.loads(line)
            except json.JSONDecodeError:
                break  # a line cut short by the interruption: recompute that cut
            done[d["id"]] = d
    return done


def _compute_one(
    cut: Cut, extractor: FeatureExtractor, storage_path: str, storage_type: str
) -> dict:
    import lhotse_amt  # noqa: F401  (registers the extractors in spawned workers)

    with get_writer(storage_type)(storage_path, mode="a") as writer:
        out = cut.compute_and_store_features(extractor, writer)
    return out.to_dict()


def _chunks(cuts: Iterable[Cut], size: int) -> Iterable[list[Cut]]:
    buf: list[Cut] = []
    for c in cuts:
        buf.append(c)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


def _compute_many(
    cuts: list[Cut], extractor: FeatureExtractor, storage_path: str, storage_type: str
) -> list[dict]:
    return [_compute_one(c, extractor, storage_path, storage_type) for c in cuts]


def _completed(futures: list[Any]) -> Iterable[Any]:
    """Futures in completion order (concurrent.futures or Dask), else submission order."""
    if all(isinstance(f, Future) for f in futures):
        return as_completed(futures)
    try:
        from distributed import as_completed as dask_as_completed

        return dask_as_completed(futures)
    except ImportError:  # pragma: no cover - any other submit() executor
        return futures


def extract_cuts(
    cuts: CutSet,
    extractor: FeatureExtractor,
    storage_path: str | Path,
    output_manifest: str | Path,
    num_jobs: int = 1,
    storage_type: str = "numpy_files",
    progress_bar: bool = True,
    executor: Any | None = None,
    chunk_size: int = 8,
) -> CutSet:
    """Compute and store features for ``cuts`` and write ``output_manifest`` atomically.

    Resumes from ``<output_manifest>.partial.jsonl`` when it exists. Work runs in this
    process (``num_jobs=1``), in ``num_jobs`` spawned worker processes, or on ``executor``:
    anything with ``submit(fn, *args)`` returning futures, e.g. a
    ``concurrent.futures`` executor or a Dask ``distributed.Client`` (its workers need
    ``lhotse_amt`` installed and the audio and storage paths visible). Cuts are sent in
    chunks of ``chunk_size``. Returns the cuts with features, in the input order.
    """
    output_manifest = Path(output_manifest)
    output_manifest.parent.mkdir(parents=True, exist_ok=True)
    Path(storage_path).mkdir(parents=True, exist_ok=True)
    partial = partial_manifest_path(output_manifest)
    done = _read_partial(partial)
    ids = [c.id for c in cuts]
    if len(set(ids)) != len(ids):
        raise ValueError("the CutSet has duplicate cut IDs; resuming needs unique IDs")
    todo = [c for c in cuts if c.id not in done]
    bar = tqdm(
        total=len(ids),
        initial=len(ids) - len(todo),
        desc="Extracting features",
        disable=not progress_bar,
    )
    with open(partial, "a") as log:

        def record(d: dict) -> None:
            log.write(json.dumps(d) + "\n")
            log.flush()
            os.fsync(log.fileno())
            done[d["id"]] = d
            bar.update(1)

        if executor is None and num_jobs <= 1:
            for c in todo:
                record(_compute_one(c, extractor, str(storage_path), storage_type))
        else:
            own = executor is None
            pool = executor or ProcessPoolExecutor(num_jobs, mp_context=get_context("spawn"))
            try:
                futs = [
                    pool.submit(_compute_many, chunk, extractor, str(storage_path), storage_type)
                    for chunk in _chunks(todo, chunk_size)
                ]
                for fut in _completed(futs):
                    for d in fut.result():
                        record(d)
            finally:
                if own:
                    pool.shutdown()
    bar.close()
    result = CutSet.from_dicts([done[i] for i in ids])
    tmp = output_manifest.with_name(
        output_manifest.name + ".tmp" + "".join(output_manifest.suffixes)
    )
    result.to_file(tmp)
    os.replace(tmp, output_manifest)
    partial.unlink()
    return result

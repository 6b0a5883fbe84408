"""Storage, log and verification of resumable extraction runs
(:func:`lhotse_amt.pipeline.extract_cuts`; the design is described there).

* file naming and the writer of one file per cut (``<cut id>.<run token>``),
* durability (fsync of files and directories, atomic replacement),
* the output lock (``flock`` on ``<output>.lock``),
* the fingerprint of a run and the differences that make a resume conflict,
* the partial log (``<output>.partial.jsonl``): reading, checking finished entries against
  their files, discarding a previous run.
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import json
import logging
import os
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from lhotse.cut import Cut, MixedCut
from lhotse.cut.set import deserialize_cut
from lhotse.features.base import FeatureExtractor
from lhotse.features.io import FeaturesWriter, get_writer

from ._attributes import forwarded_attribute

__all__ = [
    "OutputLockedError",
    "RESUMABLE_STORAGE_TYPES",
    "ResumeConflictError",
    "done_record_path",
    "lock_path",
    "partial_manifest_path",
]

logger = logging.getLogger("lhotse_amt.pipeline")

#: Storage types that write one file per array (what a resumable run needs to own its files).
RESUMABLE_STORAGE_TYPES: dict[str, str] = {"numpy_files": ".npy", "lilcom_files": ".llc"}

_FORMAT = 1  # version of the partial-log header and of the done record
_HEADER_KEY = "lhotse_amt_partial"
#: Test hook (private): after this many cuts are logged the process SIGKILLs itself, so
#: tests can interrupt a run at a deterministic point. Never set it outside tests.
_KILL_AFTER_ENV = "_LHOTSE_AMT_KILL_AFTER"


class ResumeConflictError(ValueError):
    """The partial log or the finished output of ``output_manifest`` was made with other
    settings (extractor, storage or cuts) than this run; pass ``overwrite=True`` to start
    over."""


class OutputLockedError(RuntimeError):
    """Another live process is extracting into the same output manifest."""


def partial_manifest_path(output_manifest: str | Path) -> Path:
    """Where :func:`extract_cuts` keeps its progress for ``output_manifest``."""
    p = Path(output_manifest)
    return p.with_name(p.name + ".partial.jsonl")


def done_record_path(output_manifest: str | Path) -> Path:
    """The record :func:`extract_cuts` leaves next to a finished ``output_manifest``."""
    p = Path(output_manifest)
    return p.with_name(p.name + ".done.json")


def lock_path(output_manifest: str | Path) -> Path:
    """The lock file held while :func:`extract_cuts` writes ``output_manifest``."""
    p = Path(output_manifest)
    return p.with_name(p.name + ".lock")


# --------------------------------------------------------------------------- durability


def _fsync_path(path: str | Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: str | Path) -> None:
    with contextlib.suppress(OSError):  # some file systems cannot fsync directories
        _fsync_path(path)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + f".tmp{os.getpid()}")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


# --------------------------------------------------------------------------- the lock


@contextlib.contextmanager
def _output_lock(output: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<output>.lock`` (with this PID in it) while inside.

    The file is removed on exit while still locked; a process that opened the old file
    meanwhile sees that the path now names another file (or none) and tries again.
    """
    import fcntl

    path = lock_path(output)
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            try:
                pid = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            finally:
                os.close(fd)
            raise OutputLockedError(
                f"another extraction is writing {output} (pid {pid}); wait for it to finish "
                f"(its lock is {path})"
            ) from None
        try:
            same = os.fstat(fd).st_ino == os.stat(path).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # we locked a file its owner has just removed: take the new one
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)


# --------------------------------------------------------------------------- fingerprint


def _fingerprint(
    extractor: FeatureExtractor, storage_path: Path, storage_type: str, ids: list[str]
) -> dict:
    digest = hashlib.sha256("\n".join(sorted(ids)).encode()).hexdigest()
    fp = {
        "extractor": extractor.to_dict(),
        "storage_path": str(storage_path.resolve()),
        "storage_type": storage_type,
        "cuts": {"count": len(ids), "sha256": digest},
    }
    return json.loads(json.dumps(fp, sort_keys=True, default=str))  # as read back from disk


def _differences(old: Any, new: Any, where: str = "") -> list[str]:
    """Human-readable differences ``where: old -> new`` between two JSON values."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            w = f"{where}.{k}" if where else str(k)
            if k not in old:
                out.append(f"{w}: (absent) -> {new[k]!r}")
            elif k not in new:
                out.append(f"{w}: {old[k]!r} -> (absent)")
            else:
                out += _differences(old[k], new[k], w)
        return out
    return [] if old == new else [f"{where or 'value'}: {old!r} -> {new!r}"]


def _conflict(what: str, diffs: list[str]) -> ResumeConflictError:
    return ResumeConflictError(
        f"{what} was made with other settings than this run (previous -> now): "
        + "; ".join(diffs)
        + ". Use the same settings to continue, or overwrite=True (CLI: --overwrite) to "
        "start over (this deletes that run's feature files)."
    )


# --------------------------------------------------------------------------- file naming


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def _file_stem(cut_id: str, run: str) -> str:
    """A file name for ``cut_id``'s features in run ``run`` (safe on any file system)."""
    safe = _SAFE.sub("_", cut_id)[:80]
    if safe.startswith(".") or safe.startswith("-"):
        safe = "_" + safe
    if safe != cut_id:
        safe += "-" + hashlib.sha1(cut_id.encode()).hexdigest()[:10]
    return f"{safe}.{run}"


def _run_file_re(run: str) -> re.Pattern:
    suffixes = "|".join(re.escape(s) for s in RESUMABLE_STORAGE_TYPES.values())
    return re.compile(rf"^.+\.{re.escape(run)}(\.\d+)?({suffixes})$")


def _run_files(storage_root: Path, run: str) -> list[Path]:
    """Every file of run ``run`` under ``storage_root`` (its files sit one level down)."""
    pattern = _run_file_re(run)
    found: list[Path] = []
    if not storage_root.is_dir():
        return found
    with os.scandir(storage_root) as top:
        subdirs = [e.path for e in top if e.is_dir(follow_symlinks=False)]
    for d in subdirs:
        with os.scandir(d) as it:
            found += [Path(e.path) for e in it if e.is_file() and pattern.match(e.name)]
    return found


class _CutFilesWriter(FeaturesWriter):
    """Writes one cut's arrays to files named by the cut ID and run token (Lhotse's own
    writers name them with random UUIDs) and fsyncs each file and its directory."""

    def __init__(self, storage_type: str, storage_path: str, stem: str) -> None:
        self._inner = get_writer(storage_type)(storage_path)
        self._stem = stem
        self._count = 0

    name = forwarded_attribute("_inner.name", "Storage type of the inner writer.")
    storage_path = forwarded_attribute("_inner.storage_path", "Storage path of the inner writer.")

    def write(self, key: str, value: np.ndarray) -> str:
        stem = self._stem if self._count == 0 else f"{self._stem}.{self._count}"
        self._count += 1
        storage_key = self._inner.write(stem, value)
        path = Path(self._inner.storage_path) / storage_key
        _fsync_path(path)
        _fsync_dir(path.parent)
        return storage_key


# --------------------------------------------------------------------------- the log


def _read_partial(path: Path) -> tuple[dict | None, dict[str, dict]]:
    """The header and the entries (last one per cut ID) of a partial log.

    Lines that are not a JSON object with an ``id`` are skipped with a warning, except a
    torn last line (no newline: the run was killed while writing it), which is normal.
    """
    header: dict | None = None
    entries: dict[str, dict] = {}
    raw = path.read_bytes()
    lines = raw.split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        torn = i == len(lines) - 1  # not terminated by a newline
        try:
            d = json.loads(line)
            if not isinstance(d, dict):
                raise ValueError("not a JSON object")
            if i == 0 and _HEADER_KEY in d:
                header = d
                continue
            if not isinstance(d.get("id"), str) or "type" not in d:
                raise ValueError("no cut 'id'/'type'")
        except ValueError as e:  # json.JSONDecodeError is a ValueError
            if torn:
                logger.info("%s: ignoring the torn last line", path)
            else:
                warnings.warn(
                    f"{path}, line {i + 1}: skipping a malformed line ({e}); that cut is "
                    "recomputed",
                    RuntimeWarning,
                    stacklevel=3,
                )
            continue
        entries[d["id"]] = d
    return header, entries


def _feature_manifests(cut: Cut) -> list:
    if isinstance(cut, MixedCut):
        return [t.cut.features for t in cut.tracks if getattr(t.cut, "features", None)]
    f = getattr(cut, "features", None)
    return [f] if f is not None else []


def _check_entry(d: dict, storage_root: Path, storage_type: str, run: str) -> str | None:
    """Why the finished entry ``d`` cannot be kept (None when its features are sound)."""
    try:
        cut = deserialize_cut(copy.deepcopy(d))
    except Exception as e:  # noqa: BLE001 - any damage means: recompute
        return f"unreadable manifest ({type(e).__name__}: {e})"
    feats = _feature_manifests(cut)
    if not feats:
        return "no features in its manifest"
    pattern = _run_file_re(run)
    for f in feats:
        path = Path(f.storage_path) / f.storage_key
        if f.storage_type != storage_type or not pattern.match(path.name):
            return f"its features {path} are not a file of this run"
        if path.resolve().parent.parent != storage_root:
            return f"its features {path} are not under {storage_root}"
        if not path.is_file():
            return f"missing feature file {path}"
        if path.stat().st_size == 0:
            return f"empty feature file {path}"
        try:
            arr = f.load()
        except Exception as e:  # noqa: BLE001
            return f"feature file {path} does not load ({type(e).__name__}: {e})"
        if tuple(arr.shape) != (f.num_frames, f.num_features):
            return (
                f"feature file {path} has shape {tuple(arr.shape)}, its manifest says "
                f"({f.num_frames}, {f.num_features})"
            )
    return None


def _entry_files(d: dict) -> list[Path]:
    with contextlib.suppress(Exception):
        return [
            Path(f.storage_path) / f.storage_key
            for f in _feature_manifests(deserialize_cut(copy.deepcopy(d)))
        ]
    return []


def _remove(paths: Iterable[Path]) -> int:
    n = 0
    for p in paths:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
            n += 1
    return n


def _discard_previous(output: Path) -> None:
    """Remove the partial log, the finished manifest and its record, and every feature file
    of the runs they describe (the runs' own files only)."""
    partial = partial_manifest_path(output)
    done = done_record_path(output)
    runs: list[tuple[str, str]] = []  # (storage path, run token)
    files: list[Path] = []
    if done.exists():
        with contextlib.suppress(Exception):
            rec = json.loads(done.read_text())
            runs.append((rec["fingerprint"]["storage_path"], rec["run"]))
    if partial.exists():
        header, entries = _read_partial(partial)
        if header is not None:
            runs.append((header["fingerprint"]["storage_path"], header["run"]))
        else:  # a log without a header: the files its entries name were written by that run
            for d in entries.values():
                files += _entry_files(d)
    # the record first: a crash from here on leaves no claim of a finished output
    for p in (done, output, partial):
        with contextlib.suppress(FileNotFoundError):
            p.unlink()
    for root, run in runs:
        files += _run_files(Path(root), run)
    n = _remove(files)
    logger.info("overwrite: removed the previous run's log, manifest and %d feature files", n)
    _fsync_dir(output.parent)


def _new_log(partial: Path, header: dict, entries: Iterable[dict]) -> None:
    body = "".join(json.dumps(d) + "\n" for d in [header, *entries])
    _write_atomic(partial, body.encode())

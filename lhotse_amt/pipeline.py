"""Resumable, atomic feature extraction over CutSets.

:func:`extract_cuts` computes and stores features cut by cut (optionally in worker
processes) and keeps its progress in ``<output>.partial.jsonl``, so that an interrupted run
(killed, crashed, power loss) continues where it stopped. The design makes a resume safe by
construction:

* **Fingerprint.** The log's first line records the extractor (``extractor.to_dict()``,
  feature type included), the storage (absolute path and type) and the cut IDs. A resume
  whose settings differ is refused with :class:`ResumeConflictError` naming each difference;
  ``overwrite=True`` starts over and removes the old log and the feature files of that run.
* **Durability.** Each cut's features go to their own file (``numpy_files`` or
  ``lilcom_files``), which is fsync'ed (with its directory) before the cut's manifest line is
  appended to the log and fsync'ed. A cut counts as done only once its line is on disk.
* **Ownership.** The files are named ``<cut id>.<run token>`` (the token is recorded in the
  log), so the files of a run are known: on resume, files of the run that no finished cut
  references (written by the interrupted run) are removed, and ``overwrite=True`` removes all
  of them. Other runs sharing the storage directory are never touched.
* **Verification.** On resume every finished entry is checked: its files exist, load, and
  have the shape its manifest states; damaged, empty or missing ones are recomputed.
  Malformed log lines are skipped with a warning (a torn last line is normal).
* **Exclusion.** ``<output>.lock`` is held with ``flock`` for the whole run; a second run on
  the same output fails with :class:`OutputLockedError`. The lock dies with its process, so a
  killed run never blocks the next one.
* **Workers.** Own worker processes use the spawn context, set ``torch.set_num_threads`` and
  exit when their parent dies (``PR_SET_PDEATHSIG`` on Linux, plus a parent-PID watcher).
* **Completion.** The manifest is written to a temporary file and renamed into place, then
  ``<output>.done.json`` records the fingerprint and the manifest's SHA-256; running again
  with the same settings returns the finished manifest at once. The log and the lock are
  removed on success.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import threading
import time
import uuid
import warnings
from collections.abc import Iterable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from lhotse import CutSet
from lhotse.cut import Cut
from lhotse.features.base import FeatureExtractor
from tqdm.auto import tqdm

from .pipeline_storage import (  # noqa: F401  (re-exported)
    _FORMAT,
    _HEADER_KEY,
    _KILL_AFTER_ENV,
    RESUMABLE_STORAGE_TYPES,
    OutputLockedError,
    ResumeConflictError,
    _check_entry,
    _conflict,
    _CutFilesWriter,
    _differences,
    _discard_previous,
    _entry_files,
    _file_stem,
    _fingerprint,
    _fsync_dir,
    _fsync_path,
    _new_log,
    _output_lock,
    _read_partial,
    _remove,
    _run_files,
    _sha256_file,
    _write_atomic,
    done_record_path,
    lock_path,
    partial_manifest_path,
)

__all__ = [
    "OutputLockedError",
    "ResumeConflictError",
    "RESUMABLE_STORAGE_TYPES",
    "done_record_path",
    "extract_cuts",
    "lock_path",
    "partial_manifest_path",
]

logger = logging.getLogger(__name__)


# --------------------------------------------------------------------------- workers


def _compute_one(
    cut: Cut, extractor: FeatureExtractor, storage_path: str, storage_type: str, run: str
) -> dict:
    import lhotse_amt  # noqa: F401  (registers the extractors in spawned workers)

    # Cut by cut, not CutSet.compute_and_store_features: that one warns when num_jobs > 1
    # and torch uses several threads; here each worker sets its own thread count instead.
    writer = _CutFilesWriter(storage_type, storage_path, _file_stem(cut.id, run))
    return cut.compute_and_store_features(extractor, writer).to_dict()


def _compute_many(
    cuts: list[Cut], extractor: FeatureExtractor, storage_path: str, storage_type: str, run: str
) -> list[dict]:
    return [_compute_one(c, extractor, storage_path, storage_type, run) for c in cuts]


def _watch_parent(parent_pid: int) -> None:
    while True:
        if os.getppid() != parent_pid:
            os._exit(1)
        time.sleep(0.5)


def _worker_init(parent_pid: int, num_threads: int) -> None:
    """Initializer of the own worker processes: exit with the parent, and use
    ``num_threads`` threads (torch, and the numba kernels that follow it)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes
            import signal

            pr_set_pdeathsig = 1
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(pr_set_pdeathsig, int(signal.SIGKILL), 0, 0, 0)
    if os.getppid() != parent_pid:  # the parent died before the signal was armed
        os._exit(1)
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    import torch

    torch.set_num_threads(num_threads)


def _chunks(cuts: Iterable[Cut], size: int) -> Iterable[list[Cut]]:
    buf: list[Cut] = []
    for c in cuts:
        buf.append(c)
        if len(buf) == size:
            yield buf
            buf = []
    if buf:
        yield buf


def _completed(futures: list[Any]) -> Iterable[Any]:
    """Futures in completion order (concurrent.futures or Dask), else submission order."""
    if all(isinstance(f, Future) for f in futures):
        return as_completed(futures)
    try:
        from distributed import as_completed as dask_as_completed

        return dask_as_completed(futures)
    except ImportError:  # pragma: no cover - any other submit() executor
        return futures


# --------------------------------------------------------------------------- entry point


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
    overwrite: bool = False,
    num_threads: int | None = None,
) -> CutSet:
    """Compute and store features for ``cuts`` and write ``output_manifest`` atomically.

    Resumes from ``<output_manifest>.partial.jsonl`` when it exists (see the module
    docstring for what makes this safe); a finished output made with the same settings is
    returned at once. Work runs in this process (``num_jobs=1``), in ``num_jobs`` spawned
    worker processes, or on ``executor``: anything with ``submit(fn, *args)`` returning
    futures, e.g. a ``concurrent.futures`` executor or a Dask ``distributed.Client`` (its
    workers need ``lhotse_amt`` installed and the audio and storage paths visible). Cuts are
    sent in chunks of ``chunk_size``.

    :param storage_type: one of :data:`RESUMABLE_STORAGE_TYPES` (one file per cut; archive
        types such as ``lilcom_chunky`` cannot be resumed safely and are refused).
    :param overwrite: start over: delete the partial log or the finished output of
        ``output_manifest`` and the feature files of the run(s) that wrote them.
    :param num_threads: torch (and numba) threads per own worker process; default: the CPU
        count divided by ``num_jobs`` (at least 1). With ``num_jobs=1`` and no executor it
        applies for the duration of the call. Ignored for an ``executor``.
    :return: the cuts with features, in the input order.
    :raises ResumeConflictError: the partial log or finished output was made with another
        extractor configuration, storage or cut set (the message names each difference).
    :raises OutputLockedError: another process is extracting into ``output_manifest``.
    """
    if storage_type not in RESUMABLE_STORAGE_TYPES:
        raise ValueError(
            f"storage_type={storage_type!r} cannot be resumed safely (an archive shared by "
            "all cuts can be left damaged by an interruption and written by several workers "
            f"at once); use one of {sorted(RESUMABLE_STORAGE_TYPES)}"
        )
    if "://" in str(storage_path):
        raise ValueError(
            f"storage_path={str(storage_path)!r}: resumable extraction needs a local directory"
        )
    if not isinstance(num_jobs, int) or num_jobs < 1:
        raise ValueError(f"num_jobs={num_jobs!r}: must be an integer >= 1")
    if not isinstance(chunk_size, int) or chunk_size < 1:
        raise ValueError(f"chunk_size={chunk_size!r}: must be an integer >= 1")
    if num_threads is not None and (not isinstance(num_threads, int) or num_threads < 1):
        raise ValueError(f"num_threads={num_threads!r}: must be None or an integer >= 1")
    output = Path(output_manifest)
    output.parent.mkdir(parents=True, exist_ok=True)
    storage_path = Path(storage_path)
    ids = [c.id for c in cuts]
    if len(set(ids)) != len(ids):
        raise ValueError("the CutSet has duplicate cut IDs; resuming needs unique IDs")
    fp = _fingerprint(extractor, storage_path, storage_type, ids)
    partial = partial_manifest_path(output)
    done_rec = done_record_path(output)

    def say(msg: str) -> None:
        logger.info(msg)
        if progress_bar:
            print(msg, file=sys.stderr)

    with _output_lock(output):
        if overwrite:
            _discard_previous(output)
        elif not partial.exists():
            if done_rec.exists():
                try:
                    rec = json.loads(done_rec.read_text())
                    diffs = _differences(rec["fingerprint"], fp)
                    sha = rec["manifest_sha256"]
                except (ValueError, KeyError, TypeError) as e:
                    diffs, sha = [f"{done_rec} is unreadable ({type(e).__name__}: {e})"], None
                if not output.exists():
                    diffs.append(f"{output} was removed after the extraction wrote it")
                elif sha is not None and _sha256_file(output) != sha:
                    diffs.append(f"{output} was changed after the extraction wrote it")
                if diffs:
                    raise _conflict(f"The finished output {output}", diffs)
                say(
                    f"{output} is already complete for these settings; nothing to do "
                    "(overwrite=True / --overwrite recomputes it)"
                )
                return CutSet.from_file(output)
            if output.exists():
                raise ResumeConflictError(
                    f"{output} exists but has no record of a finished extraction "
                    f"({done_rec.name}); pass overwrite=True (CLI: --overwrite) to replace it"
                )
        storage_root = storage_path.resolve()
        done: dict[str, dict] = {}
        header: dict | None = None
        if partial.exists():
            header, entries = _read_partial(partial)
            if header is None and entries:
                raise ResumeConflictError(
                    f"{partial} has no settings header (written by an older lhotse_amt), so "
                    "it cannot be checked against this run; pass overwrite=True (CLI: "
                    "--overwrite) to start over"
                )
            if header is not None:
                diffs = _differences(header.get("fingerprint"), fp)
                if diffs:
                    raise _conflict(f"The interrupted run in {partial}", diffs)
                run = header["run"]
                for cid, d in entries.items():
                    problem = _check_entry(d, storage_root, storage_type, run)
                    if problem is None:
                        done[cid] = d
                    else:
                        warnings.warn(
                            f"{partial}: cut {cid!r} is recomputed: {problem}",
                            RuntimeWarning,
                            stacklevel=2,
                        )
                keep = {p.resolve() for d in done.values() for p in _entry_files(d)}
                orphans = [p for p in _run_files(storage_root, run) if p.resolve() not in keep]
                if orphans:
                    logger.info("removing %d unfinished feature files", _remove(orphans))
        if header is None:
            header = {_HEADER_KEY: _FORMAT, "run": uuid.uuid4().hex[:12], "fingerprint": fp}
        run = header["run"]
        storage_path.mkdir(parents=True, exist_ok=True)
        _new_log(partial, header, done.values())  # drops bad lines and any torn tail
        todo = [c for c in cuts if c.id not in done]
        kill_after = int(os.environ.get(_KILL_AFTER_ENV, "0") or 0)
        bar = tqdm(
            total=len(ids),
            initial=len(done),
            desc="Extracting features",
            disable=not progress_bar,
        )
        with open(partial, "a") as log:
            logged = 0

            def record(d: dict) -> None:
                nonlocal logged
                log.write(json.dumps(d) + "\n")
                log.flush()
                os.fsync(log.fileno())
                done[d["id"]] = d
                bar.update(1)
                logged += 1
                if kill_after and logged >= kill_after:  # test hook, see _KILL_AFTER_ENV
                    import signal

                    os.kill(os.getpid(), signal.SIGKILL)

            args = (extractor, str(storage_path), storage_type, run)
            if executor is None and num_jobs == 1:
                import torch

                threads = torch.get_num_threads()
                if num_threads is not None:
                    torch.set_num_threads(num_threads)
                try:
                    for c in todo:
                        record(_compute_one(c, *args))
                finally:
                    torch.set_num_threads(threads)
            elif todo:
                own = executor is None
                if own:
                    per_job = num_threads or max(1, (os.cpu_count() or 1) // num_jobs)
                    pool = ProcessPoolExecutor(
                        num_jobs,
                        mp_context=get_context("spawn"),
                        initializer=_worker_init,
                        initargs=(os.getpid(), per_job),
                    )
                else:
                    pool = executor
                try:
                    futs = [
                        pool.submit(_compute_many, chunk, *args)
                        for chunk in _chunks(todo, chunk_size)
                    ]
                    for fut in _completed(futs):
                        for d in fut.result():
                            record(d)
                finally:
                    if own:
                        pool.shutdown(wait=True, cancel_futures=True)
        bar.close()
        result = CutSet.from_dicts([done[i] for i in ids])
        tmp = output.with_name(output.name + ".tmp" + "".join(output.suffixes))
        result.to_file(tmp)
        _fsync_path(tmp)
        os.replace(tmp, output)
        _fsync_dir(output.parent)
        record_ = {"format": _FORMAT, "run": run, "fingerprint": fp}
        record_["manifest_sha256"] = _sha256_file(output)
        _write_atomic(done_rec, (json.dumps(record_, indent=1) + "\n").encode())
        partial.unlink()
        _fsync_dir(output.parent)
    return result

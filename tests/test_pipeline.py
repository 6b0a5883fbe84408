"""Resumable feature extraction (lhotse_amt.pipeline): settings fingerprint, verification of
finished cuts, malformed logs, the output lock, worker lifetime, finished outputs and the
files of interrupted runs. Lhotse's Fbank on 0.5-s synthetic cuts keeps them fast."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import psutil
import pytest
from corpus import make_cuts
from lhotse import CutSet, Fbank, FbankConfig, validate

from lhotse_amt.pipeline import (
    OutputLockedError,
    ResumeConflictError,
    done_record_path,
    extract_cuts,
    lock_path,
    partial_manifest_path,
)

N_CUTS = 5


class _Counting(Fbank):
    """Fbank that counts its calls and raises on call ``fail_at`` (an interrupted run)."""

    def __init__(self, config: FbankConfig | None = None, fail_at: int | None = None):
        super().__init__(config)
        self.calls = 0
        self.fail_at = fail_at

    def extract(self, samples, sampling_rate):
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise RuntimeError("stopped by the test")
        return super().extract(samples, sampling_rate)


class _ThreadProbe(Fbank):
    """Fbank whose first column is the worker's ``torch.get_num_threads()``."""

    def extract(self, samples, sampling_rate):
        import torch

        feats = super().extract(samples, sampling_rate)
        feats[:, 0] = torch.get_num_threads()
        return feats


SLOW_SCRIPT = """
import os, sys, time
from lhotse import CutSet, Fbank
from lhotse_amt.pipeline import extract_cuts


class SlowFbank(Fbank):
    def extract(self, samples, sampling_rate):
        time.sleep(float(sys.argv[4]))
        gate = sys.argv[6] if len(sys.argv) > 6 else None
        t0 = time.monotonic()
        while gate and not os.path.exists(gate) and time.monotonic() - t0 < 300:
            time.sleep(0.05)  # hold every cut until the test opens the gate
        return super().extract(samples, sampling_rate)


if __name__ == "__main__":
    extract_cuts(CutSet.from_file(sys.argv[1]), SlowFbank(), sys.argv[2], sys.argv[3],
                 num_jobs=int(sys.argv[5]), chunk_size=1, progress_bar=False)
"""


@pytest.fixture(scope="module")
def cuts(tmp_path_factory) -> CutSet:
    root = tmp_path_factory.mktemp("pipeline")
    cs = make_cuts(root / "audio", n=N_CUTS, speech=False, max_duration=0.5)
    cs.to_file(root / "cuts.jsonl.gz")
    return cs


def _cuts_file(cuts: CutSet) -> Path:
    return Path(cuts[0].recording.sources[0].source).parent.parent / "cuts.jsonl.gz"


def _feature_files(storage: Path) -> set[Path]:
    return {p.resolve() for p in storage.rglob("*") if p.is_file()}


def _referenced(cs: CutSet) -> set[Path]:
    return {(Path(c.features.storage_path) / c.features.storage_key).resolve() for c in cs}


def _log_entries(out: Path) -> list[dict]:
    lines = partial_manifest_path(out).read_text().splitlines()
    return [json.loads(x) for x in lines[1:]]


def _interrupt(cuts: CutSet, storage: Path, out: Path, done: int, **kw) -> None:
    """Run until ``done`` cuts are finished, then fail (as a crash would)."""
    with pytest.raises(RuntimeError, match="stopped by the test"):
        extract_cuts(cuts, _Counting(fail_at=done + 1, **kw), storage, out, progress_bar=False)
    assert len(_log_entries(out)) == done and not out.exists()


def _cli() -> list[str]:
    exe = shutil.which("lhotse-amt")
    return [exe] if exe else [sys.executable, "-m", "lhotse_amt.cli"]


def _slow_run(
    tmp_path: Path, cuts: CutSet, out: Path, sleep: float, jobs: int, gate: Path | None = None
):
    script = tmp_path / "slow_extract.py"
    script.write_text(SLOW_SCRIPT)
    args = [str(_cuts_file(cuts)), str(tmp_path / "feats"), str(out), str(sleep), str(jobs)]
    if gate is not None:
        args.append(str(gate))
    return subprocess.Popen(
        [sys.executable, str(script), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for(cond, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while not cond():
        if proc.poll() is not None:
            pytest.fail(f"the extraction ended early: {proc.communicate()[1][-3000:]}")
        if time.monotonic() - t0 > timeout:
            proc.kill()
            pytest.fail("timed out waiting for the extraction")
        time.sleep(0.05)


def test_killed_run_with_changed_config_is_refused_then_overwritten(cuts, tmp_path):
    cfg23, cfg40 = tmp_path / "fbank23.yaml", tmp_path / "fbank40.yaml"
    Fbank(FbankConfig(num_mel_bins=23)).to_yaml(cfg23)
    Fbank(FbankConfig(num_mel_bins=40)).to_yaml(cfg40)
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    io = [str(_cuts_file(cuts)), str(out), str(feats)]
    env = dict(os.environ, _LHOTSE_AMT_KILL_AFTER="2")  # the pipeline's private test hook
    cmd = [*_cli(), "feat", "extract-cuts"]
    r = subprocess.run([*cmd, "-f", str(cfg23), *io], env=env, capture_output=True, text=True)
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    assert len(_log_entries(out)) == 2 and not out.exists()
    assert lock_path(out).exists()  # left by the killed process: must not block
    old_files = _feature_files(feats)
    assert len(old_files) == 2

    r = subprocess.run([*cmd, "-f", str(cfg40), *io], capture_output=True, text=True)
    assert r.returncode != 0
    assert "extractor.num_filters: 23 -> 40" in r.stderr and "--overwrite" in r.stderr
    assert len(_log_entries(out)) == 2  # the refused run changed nothing

    r = subprocess.run([*cmd, "-f", str(cfg40), "--restart", *io], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-3000:]
    res = CutSet.from_file(out)
    validate(res, read_data=True)
    assert sorted(res.ids) == sorted(cuts.ids)
    assert {c.features.num_features for c in res} == {40}
    assert _feature_files(feats) == _referenced(res)  # nothing of the 23-bin run is left
    assert not old_files & _feature_files(feats)
    assert not partial_manifest_path(out).exists() and not lock_path(out).exists()


def test_changed_storage_is_named_in_the_refusal(cuts, tmp_path):
    out = tmp_path / "out.jsonl.gz"
    _interrupt(cuts, tmp_path / "feats", out, done=1)
    with pytest.raises(ResumeConflictError, match="storage_type: 'numpy_files' -> 'lilcom_files'"):
        extract_cuts(
            cuts, Fbank(), tmp_path / "feats", out, storage_type="lilcom_files", progress_bar=False
        )
    with pytest.raises(ResumeConflictError, match=r"storage_path: .*feats' -> .*other'"):
        extract_cuts(cuts, Fbank(), tmp_path / "other", out, progress_bar=False)
    with pytest.raises(ResumeConflictError, match=r"cuts\.count: 5 -> 4"):
        extract_cuts(cuts.subset(first=4), Fbank(), tmp_path / "feats", out, progress_bar=False)


@pytest.mark.parametrize("damage", ["truncated", "empty", "missing"])
def test_damaged_feature_file_of_a_finished_cut_is_recomputed(cuts, tmp_path, damage):
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    _interrupt(cuts, feats, out, done=3)
    entry = _log_entries(out)[1]
    path = Path(entry["features"]["storage_path"]) / entry["features"]["storage_key"]
    if damage == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:
        path.unlink()
    ex = _Counting()
    with pytest.warns(RuntimeWarning, match=f"cut '{entry['id']}' is recomputed"):
        res = extract_cuts(cuts, ex, feats, out, progress_bar=False)
    assert ex.calls == N_CUTS - 3 + 1  # the unfinished cuts and the damaged one
    validate(CutSet.from_file(out), read_data=True)
    ref = Fbank()
    for c in res:
        np.testing.assert_allclose(
            c.load_features(), ref.extract(cuts[c.id].load_audio(), c.sampling_rate), atol=1e-5
        )
    assert _feature_files(feats) == _referenced(res)


def test_malformed_log_lines_are_skipped_with_a_warning(cuts, tmp_path):
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    _interrupt(cuts, feats, out, done=2)
    log = partial_manifest_path(out)
    header, first, second = log.read_text().splitlines()
    bad = ["this is not JSON", "[1, 2, 3]", '{"no_id": true}']
    log.write_text("\n".join([header, first, *bad, second, second[:30]]))  # + a torn last line
    ex = _Counting()
    with pytest.warns(RuntimeWarning, match="malformed line") as rec:
        res = extract_cuts(cuts, ex, feats, out, progress_bar=False)
    assert len([w for w in rec if "malformed" in str(w.message)]) == len(bad)  # torn: quiet
    assert ex.calls == N_CUTS - 2  # both finished cuts were kept
    assert list(res.ids) == list(cuts.ids)
    validate(CutSet.from_file(out), read_data=True)


def test_log_without_settings_header_is_refused(cuts, tmp_path):
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    _interrupt(cuts, feats, out, done=1)
    log = partial_manifest_path(out)
    log.write_text("\n".join(log.read_text().splitlines()[1:]) + "\n")
    with pytest.raises(ResumeConflictError, match="no settings header"):
        extract_cuts(cuts, Fbank(), feats, out, progress_bar=False)
    res = extract_cuts(cuts, Fbank(), feats, out, progress_bar=False, overwrite=True)
    assert _feature_files(feats) == _referenced(res)  # the old entries' files are gone


def test_second_concurrent_run_is_refused(cuts, tmp_path):
    out = tmp_path / "out.jsonl.gz"
    gate = tmp_path / "gate"  # the first run holds its cuts until the refusals are checked
    first = _slow_run(tmp_path, cuts, out, sleep=0.0, jobs=1, gate=gate)
    lock = lock_path(out)
    _wait_for(lambda: lock.exists() and lock.read_text().strip(), first)
    msg = f"another extraction is writing {out} (pid {first.pid})"
    r = subprocess.run(
        [*_cli(), "feat", "extract-cuts", str(_cuts_file(cuts)), str(out), str(tmp_path / "f")],
        capture_output=True,
        text=True,
    )
    assert r.returncode != 0 and msg in r.stderr
    with pytest.raises(OutputLockedError) as err:
        extract_cuts(cuts, Fbank(), tmp_path / "feats", out, progress_bar=False)
    assert msg in str(err.value)
    assert first.poll() is None  # the refusals came while the first run was working
    gate.touch()
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    res = CutSet.from_file(out)
    validate(res, read_data=True)
    assert list(res.ids) == list(cuts.ids)
    assert _feature_files(tmp_path / "feats") == _referenced(res)
    assert not lock.exists() and not partial_manifest_path(out).exists()


def test_workers_exit_when_the_parent_is_killed(cuts, tmp_path):
    out = tmp_path / "out.jsonl.gz"
    parent = _slow_run(tmp_path, cuts, out, sleep=3.0, jobs=2)
    log = partial_manifest_path(out)
    _wait_for(lambda: log.exists() and len(log.read_text().splitlines()) >= 2, parent)
    children = psutil.Process(parent.pid).children(recursive=True)
    workers = [p for p in children if "spawn_main" in " ".join(p.cmdline())]
    assert len(workers) == 2
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    _, alive = psutil.wait_procs(children, timeout=10)
    survivors = [(p.pid, " ".join(p.cmdline())) for p in alive]
    for p in alive:  # leave nothing behind when the test fails
        p.kill()
    assert not survivors, survivors


def test_workers_use_the_given_threads_without_lhotse_thread_warning(cuts, tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        res = extract_cuts(
            cuts, _ThreadProbe(), tmp_path / "feats", tmp_path / "out.jsonl.gz",
            num_jobs=2, num_threads=3, chunk_size=1, progress_bar=False,
        )  # fmt: skip
    for c in res:
        assert np.all(c.load_features()[:, 0] == 3)
    assert not [r for r in caplog.records if "number of threads" in r.getMessage()]


def test_finished_output_is_not_recomputed(cuts, tmp_path, capsys):
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    first = extract_cuts(cuts, Fbank(), feats, out, progress_bar=False)
    assert done_record_path(out).exists()
    assert not partial_manifest_path(out).exists() and not lock_path(out).exists()
    stamps = {p: p.stat().st_mtime_ns for p in _feature_files(feats) | {out.resolve()}}
    ex = _Counting(fail_at=1)  # any call fails the test
    again = extract_cuts(cuts, ex, feats, out, progress_bar=True)
    assert ex.calls == 0 and "already complete" in capsys.readouterr().err
    assert [c.to_dict() for c in again] == [c.to_dict() for c in first]
    assert {p: p.stat().st_mtime_ns for p in stamps} == stamps
    with pytest.raises(ResumeConflictError, match="extractor.num_filters: 80 -> 30"):
        extract_cuts(cuts, Fbank(FbankConfig(num_mel_bins=30)), feats, out, progress_bar=False)
    ex = _Counting()
    res = extract_cuts(cuts, ex, feats, out, progress_bar=False, overwrite=True)
    assert ex.calls == N_CUTS
    assert _feature_files(feats) == _referenced(res)
    assert not _feature_files(feats) & set(stamps)  # the old run's files were removed


def test_changed_finished_manifest_is_refused(cuts, tmp_path):
    out = tmp_path / "out.jsonl.gz"
    extract_cuts(cuts, Fbank(), tmp_path / "feats", out, progress_bar=False)
    CutSet.from_file(out).subset(first=2).to_file(out)
    with pytest.raises(ResumeConflictError, match="was changed after"):
        extract_cuts(cuts, Fbank(), tmp_path / "feats", out, progress_bar=False)
    other = tmp_path / "other.jsonl.gz"
    other.write_text("")
    with pytest.raises(ResumeConflictError, match="no record of a finished extraction"):
        extract_cuts(cuts, Fbank(), tmp_path / "feats", other, progress_bar=False)


def test_orphan_files_of_an_interrupted_run_are_removed(cuts, tmp_path):
    out, feats = tmp_path / "out.jsonl.gz", tmp_path / "feats"
    with ThreadPoolExecutor(1) as pool:  # one chunk of all cuts: files written, none logged
        with pytest.raises(RuntimeError, match="stopped by the test"):
            extract_cuts(
                cuts, _Counting(fail_at=3), feats, out, executor=pool, chunk_size=N_CUTS,
                progress_bar=False,
            )  # fmt: skip
    assert _log_entries(out) == []
    written = _feature_files(feats)
    assert len(written) == 2  # the orphans of the interrupted run
    run = json.loads(partial_manifest_path(out).read_text().splitlines()[0])["run"]
    stray = feats / "gon" / f"gone.{run}.npy"  # a file of this run no cut will rewrite
    stray.parent.mkdir()
    stray.write_bytes(b"partial")
    foreign = feats / "utt" / "utt0.0123456789ab.npy"  # another run's file: kept
    foreign.parent.mkdir(exist_ok=True)
    foreign.write_bytes(b"not ours")
    res = extract_cuts(cuts, Fbank(), feats, out, progress_bar=False)
    assert not stray.exists()
    assert _feature_files(feats) == _referenced(res) | {foreign.resolve()}
    validate(res, read_data=True)


def test_archive_storage_is_refused(cuts, tmp_path):
    with pytest.raises(ValueError, match="storage_type='lilcom_chunky' cannot be resumed"):
        extract_cuts(
            cuts, Fbank(), tmp_path / "f", tmp_path / "o.jsonl.gz", storage_type="lilcom_chunky"
        )
    r = subprocess.run(
        [*_cli(), "feat", "extract-cuts", "--storage-type", "lilcom_chunky",
         str(_cuts_file(cuts)), str(tmp_path / "o.jsonl.gz"), str(tmp_path / "f")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode != 0 and "cannot be resumed" in r.stderr

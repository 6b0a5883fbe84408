"""The ``lhotse-amt`` command line, run as a subprocess on a small CutSet, and the
resumable extraction behind ``feat extract-cuts``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from corpus import make_cuts
from lhotse import CutSet, validate

from lhotse_amt import Dau1997Config, Dau1997Extractor
from lhotse_amt.pipeline import extract_cuts, partial_manifest_path

CLI = [sys.executable, "-m", "lhotse_amt.cli"]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lhotse-amt")
    cmd = [exe, *args] if exe else [*CLI, *args]
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return r


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    cuts = make_cuts(root / "audio", n=3)
    cuts.to_file(root / "cuts.jsonl.gz")
    return root, cuts


def test_cli_end_to_end(corpus):
    root, cuts = corpus
    r = run("amt", "list", cwd=root)
    assert "amt-dau1997" in r.stdout
    run("feat", "write-default-config", "-f", "amt-dau1997", "cfg.yaml", cwd=root)
    assert "feature_type: amt-dau1997" in (root / "cfg.yaml").read_text()
    cfg = (root / "cfg.yaml").read_text().replace("stage: modulation", "stage: adaptation")
    (root / "cfg.yaml").write_text(cfg)
    r = run("amt", "describe", "-f", "cfg.yaml", cwd=root)
    assert "feature_dim: 31" in r.stdout
    run(
        "feat",
        "extract-cuts",
        "-f",
        "cfg.yaml",
        "-j",
        "1",
        "cuts.jsonl.gz",
        "out.jsonl.gz",
        str(root / "feats"),
        cwd=root,
    )
    out = CutSet.from_file(root / "out.jsonl.gz")
    validate(out, read_data=True)
    ex = Dau1997Extractor(Dau1997Config(stage="adaptation"))
    for c in out:
        np.testing.assert_allclose(
            c.load_features(), ex.extract(cuts[c.id].load_audio(), 16000), rtol=1e-5, atol=1e-4
        )
    run(
        "feat",
        "extract-cuts-batch",
        "--device",
        "cpu",
        "-f",
        "cfg.yaml",
        "-j",
        "0",
        "cuts.jsonl.gz",
        "outb.jsonl.gz",
        str(root / "featsb"),
        cwd=root,
    )
    validate(CutSet.from_file(root / "outb.jsonl.gz"), read_data=True)
    run("amt", "plot", "out.jsonl.gz", "cut.png", "-f", "cfg.yaml", cwd=root)
    assert (root / "cut.png").stat().st_size > 10_000


def test_plain_lhotse_flags_are_kept(corpus):
    root, _ = corpus
    r = run("feat", "extract-cuts", "--help", cwd=root)
    for opt in ("--feature-manifest", "--storage-type", "--num-jobs"):
        assert opt in r.stdout


class _Flaky(Dau1997Extractor):
    """Fails on the second cut, as if the run were killed there."""

    name = "amt-dau1997"  # same features type (not registered: no decorator)
    calls = 0

    def extract(self, samples, sampling_rate):
        type(self).calls += 1
        if type(self).calls == 2:
            raise KeyboardInterrupt
        return super().extract(samples, sampling_rate)


class _Counting(Dau1997Extractor):
    name = "amt-dau1997"
    calls = 0

    def extract(self, samples, sampling_rate):
        type(self).calls += 1
        return super().extract(samples, sampling_rate)


def test_interrupted_extraction_resumes(corpus, tmp_path):
    _, cuts = corpus
    out = tmp_path / "out.jsonl.gz"
    cfg = Dau1997Config(stage="adaptation")
    with pytest.raises(KeyboardInterrupt):
        extract_cuts(cuts, _Flaky(cfg), tmp_path / "feats", out, progress_bar=False)
    assert not out.exists()  # no half-written manifest
    assert len(partial_manifest_path(out).read_text().splitlines()) == 2  # header + 1 cut
    res = extract_cuts(cuts, _Counting(cfg), tmp_path / "feats", out, progress_bar=False)
    assert _Counting.calls == 2  # only the unfinished cuts were computed
    assert list(res.ids) == list(cuts.ids) == list(CutSet.from_file(out).ids)
    assert not partial_manifest_path(out).exists()
    validate(CutSet.from_file(out), read_data=True)


def test_truncated_progress_line_is_recomputed(corpus, tmp_path):
    _, cuts = corpus
    out = tmp_path / "o.jsonl.gz"
    cfg = Dau1997Config(stage="adaptation")
    _Flaky.calls = 0
    with pytest.raises(KeyboardInterrupt):
        extract_cuts(cuts, _Flaky(cfg), tmp_path / "f", out, progress_bar=False)
    log = partial_manifest_path(out)
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines) + "\n" + lines[-1][:40])  # killed while writing a line
    res = extract_cuts(cuts, Dau1997Extractor(cfg), tmp_path / "f", out, progress_bar=False)
    assert len(res) == 3 and len(set(res.ids)) == 3
    validate(res, read_data=True)


def test_unknown_model_name_is_a_usage_error(corpus):
    root, _ = corpus
    exe = shutil.which("lhotse-amt")
    cmd = [exe] if exe else CLI
    r = subprocess.run(
        [*cmd, "amt", "describe", "amt-nope"], cwd=root, capture_output=True, text=True
    )
    assert r.returncode != 0 and "unknown extractor" in r.stderr


def test_extract_cuts_on_an_executor(corpus, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    _, cuts = corpus
    ex = Dau1997Extractor(Dau1997Config(stage="adaptation"))
    with ThreadPoolExecutor(2) as pool:
        res = extract_cuts(
            cuts, ex, tmp_path / "f", tmp_path / "o.jsonl.gz", progress_bar=False,
            executor=pool, chunk_size=1,
        )  # fmt: skip
    assert list(res.ids) == list(cuts.ids)
    for c in res:
        np.testing.assert_array_equal(c.load_features(), ex.extract(cuts[c.id].load_audio(), 16000))


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    exe = shutil.which("lhotse-amt")
    cmd = [exe, *args] if exe else [*CLI, *args]
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def test_help_says_what_the_tool_is(tmp_path):
    r = _cli("--help", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "computational auditory models as Lhotse feature extractors" in r.stdout
    for model in ("Dau1997", "Osses2021", "King2019", "Paulick2024", "Glasberg2002", "Moore2016"):
        assert model in r.stdout
    assert "lhotse-amt amt demo" in r.stdout


def test_plot_reads_the_model_from_stored_features(corpus, tmp_path):
    from lhotse_amt import Glasberg2002Config, Glasberg2002Extractor

    _, cuts = corpus
    # stored at 16 kHz (the default config is 32 kHz): the plot must read them, not recompute
    ex = Glasberg2002Extractor(Glasberg2002Config(sampling_rate=16000))
    stored = cuts.subset(first=1).compute_and_store_features(ex, tmp_path / "f")
    stored.to_file(tmp_path / "g.jsonl.gz")
    r = _cli("amt", "plot", "g.jsonl.gz", "g.png", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "stored amt-glasberg2002 features" in r.stdout
    assert (tmp_path / "g.png").stat().st_size > 10_000


def test_plot_computes_another_model_from_the_audio(corpus, tmp_path):
    root, cuts = corpus
    r = _cli(
        "amt", "plot", str(root / "cuts.jsonl.gz"), "k.png", "-m", "amt-king2019", cwd=tmp_path
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "amt-king2019 features computed from the audio at 16000 Hz" in r.stdout
    assert (tmp_path / "k.png").stat().st_size > 10_000


def test_plot_without_a_model_names_what_is_missing(corpus, tmp_path):
    root, cuts = corpus
    r = _cli("amt", "plot", str(root / "cuts.jsonl.gz"), "x.png", cwd=tmp_path)
    assert r.returncode == 2 and "has no stored features" in r.stderr and "-m MODEL" in r.stderr
    # stored features whose layout is not the default config's: asks for the YAML
    ex = Dau1997Extractor(Dau1997Config(stage="adaptation"))
    cuts.subset(first=1).compute_and_store_features(ex, tmp_path / "f").to_file(
        tmp_path / "a.jsonl.gz"
    )
    r = _cli("amt", "plot", "a.jsonl.gz", "a.png", cwd=tmp_path)
    assert r.returncode == 2 and "stores 31 amt-dau1997 columns" in r.stderr
    assert "-f CONFIG.yaml" in r.stderr and not (tmp_path / "a.png").exists()
    r = _cli("amt", "plot", "a.jsonl.gz", "a.png", "--cut-id", "nope", cwd=tmp_path)
    assert r.returncode == 2 and "no cut 'nope'" in r.stderr


def test_command_line_turns_on_the_process_settings():
    # what the entry point sets before running a command: every opt-in of the package
    code = (
        "import os, lhotse_amt, numba\n"
        "from lhotse_amt import cli, kernels\n"
        "cli._enable_process_settings()\n"
        "print(os.environ.get('THP_MEM_ALLOC_ENABLE'), lhotse_amt.host_cache_limit() > 0,\n"
        "      numba.config.THREADING_LAYER_PRIORITY[-1], kernels._EXIT_HOOK)\n"
    )
    clean = ("THP_MEM_ALLOC_ENABLE", "LHOTSE_AMT_HOST_CACHE_MB")
    env = {k: v for k, v in os.environ.items() if k not in clean}
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["1", "True", "omp", "[True]"]

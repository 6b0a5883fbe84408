"""The FSDD digit recipe (``recipes/digits``): manifests, noise, and an end-to-end smoke run
on the real recordings. The FSDD recordings are read from ``../shared/fsdd`` next to the
repository (or ``$LHOTSE_AMT_FSDD``); the tests are skipped only when that directory is
absent."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

RECIPES = Path(__file__).resolve().parents[1] / "recipes"
FSDD = Path(
    os.environ.get(
        "LHOTSE_AMT_FSDD", Path(__file__).resolve().parents[1] / ".." / "shared" / "fsdd"
    )
)

needs_fsdd = pytest.mark.skipif(
    not (FSDD / "recordings").is_dir(),
    reason=f"FSDD recordings not found at {FSDD} (set LHOTSE_AMT_FSDD)",
)

if str(RECIPES) not in sys.path:
    sys.path.insert(0, str(RECIPES))

from digits import noise as dnoise  # noqa: E402
from digits.prepare import parse_name, prepare_fsdd  # noqa: E402


@needs_fsdd
def test_prepare_fsdd(tmp_path):
    m = prepare_fsdd(FSDD, tmp_path)
    recs, sups = m["recordings"], m["supervisions"]
    assert len(recs) == len(sups) == 2000
    assert {s.speaker for s in sups} == {"george", "jackson", "lucas", "nicolas"}
    s = sups["7_lucas_12"]
    assert (s.text, s.speaker, s.custom["digit"], s.custom["index"]) == ("seven", "lucas", 7, 12)
    r = recs["7_lucas_12"]
    assert r.sampling_rate == 8000 and s.duration == pytest.approx(r.duration)
    assert (tmp_path / "fsdd_recordings.jsonl.gz").exists()
    assert (tmp_path / "fsdd_supervisions.jsonl.gz").exists()
    from lhotse import RecordingSet

    assert len(RecordingSet.from_file(tmp_path / "fsdd_recordings.jsonl.gz")) == 2000


def test_prepare_fsdd_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not a directory"):
        prepare_fsdd(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="no \\*.wav"):
        prepare_fsdd(tmp_path)
    with pytest.raises(ValueError, match="digit"):
        parse_name("x_george_1")
    assert parse_name("0_nicolas_49") == (0, "nicolas", 49)


def test_noise_types():
    fs = 8000
    rng = np.random.default_rng(0)
    t = np.arange(4000) / fs
    # "speech": low-pass harmonic tones, so the long-term spectrum falls with frequency
    speech = [np.sin(2 * np.pi * 150 * k * t) / k for k in (1, 2, 3)]
    speech = [sum(speech) * (1 + 0.1 * i) for i in range(3)]
    out = {}
    for kind in dnoise.NOISE_TYPES:
        x = dnoise.synthesize_noise(kind, 2.0, fs, speech, np.random.default_rng(1))
        assert x.shape == (16000,) and np.sqrt(np.mean(x**2)) == pytest.approx(1.0)
        y = dnoise.synthesize_noise(kind, 2.0, fs, speech, np.random.default_rng(1))
        np.testing.assert_array_equal(x, y)  # reproducible
        out[kind] = x
    f = np.fft.rfftfreq(16000, 1 / fs)
    p = np.abs(np.fft.rfft(out["pink"])) ** 2
    lo, hi = p[(f > 100) & (f < 200)].mean(), p[(f > 1600) & (f < 3200)].mean()
    assert 5 < lo / hi < 30  # 1/f: 16x between the two octave bands' centres
    ps = np.abs(np.fft.rfft(out["ssn"])) ** 2
    assert ps[(f > 100) & (f < 500)].mean() > 100 * ps[(f > 2000)].mean()
    env = np.abs(out["am"]).reshape(-1, 100).mean(1)  # 12.5-ms blocks
    assert env.max() > 5 * env.min()  # 100 % modulated
    with pytest.raises(ValueError, match="unknown noise kind"):
        dnoise.synthesize_noise("white", 1.0, fs, speech, rng)


@needs_fsdd
def test_digits_smoke(tmp_path):
    from digits import run as drun

    exp = tmp_path / "exp"
    a = drun.get_args(["--fsdd-dir", str(FSDD), "--exp-dir", str(exp), "--smoke", "--quiet"])
    res = drun.run(a)
    on_disk = json.loads((exp / "results.json").read_text())
    assert on_disk["accuracy"] == res["accuracy"]
    conds = {"clean", "snr20", "snr10", "snr5", "snr0", "snr-5"}
    feats = {"kaldi-fbank", "amt-dau1997", "amt-osses2021", "amt-king2019", "amt-paulick2024"}
    for key in ("accuracy", "accuracy_std", "accuracy_multi", "accuracy_multi_std"):
        assert set(on_disk[key]) == feats
        for feat in feats:
            assert set(on_disk[key][feat]) == conds
            assert all(0.0 <= v <= 1.0 for v in on_disk[key][feat].values())
    for feat in ("kaldi-fbank", "amt-dau1997"):
        assert on_disk["accuracy"][feat]["clean"] > 0.1, feat
    # one run per (feature, training condition, seed); dev selection never sees the test set
    runs = on_disk["runs"]
    assert len(runs) == len(feats) * 2
    assert all(r["fold"] == "george" and 1 <= r["best_epoch"] <= r["epochs"] for r in runs)
    assert len(runs[0]["test"]) == 1 + 2 * 5  # clean + 2 noise types (smoke) x 5 SNRs
    # the test speaker is only in the test sets, the training speakers never there
    from lhotse import CutSet

    man = exp / "test-george" / "manifests"
    for name in ("train-clean", "dev-clean", "train-multi", "dev-multi"):
        assert "george" not in {
            c.supervisions[0].speaker for c in CutSet.from_file(man / f"{name}.jsonl.gz")
        }
    test = CutSet.from_file(man / "test-ssn-snr0.jsonl.gz")
    assert {c.supervisions[0].speaker for c in test} == {"george"}
    assert all(type(c).__name__ == "MixedCut" for c in test)
    md = (exp / "results.md").read_text()
    assert "avg 0-20" in md and "amt-paulick2024" in md
    assert (exp / "accuracy.png").stat().st_size > 10_000


def test_folds_and_summary():
    from digits import run as drun

    spk = ["george", "jackson", "lucas", "nicolas"]
    assert drun._folds(None, spk) == [["george"]]
    assert drun._folds(["lucas,george", "nicolas"], spk) == [["george", "lucas"], ["nicolas"]]
    assert drun._folds(["each"], spk) == [[s] for s in spk]
    with pytest.raises(ValueError, match="unknown speaker"):
        drun._folds(["bob"], spk)
    with pytest.raises(ValueError, match="no training speaker"):
        drun._folds([",".join(spk)], spk)
    # two seeds of two features; accuracy of a noisy condition = mean over noise types
    kinds = ["babble", "pink"]

    def run(feature, seed, clean, noisy):
        test = {"test-clean": clean}
        for k, kind in enumerate(kinds):
            for snr in drun.TEST_SNRS:
                test[f"test-{kind}-{drun.cond_key(snr)}"] = noisy + 0.1 * k
        return dict(feature=feature, training="clean", seed=seed, test=test)

    runs = [run("kaldi-fbank", 0, 0.8, 0.5), run("kaldi-fbank", 1, 0.6, 0.3)]
    runs += [run("amt-dau1997", 0, 0.9, 0.7), run("amt-dau1997", 1, 0.9, 0.7)]
    s = drun.summarize(runs, ["kaldi-fbank", "amt-dau1997"], kinds)["clean"]
    assert s["accuracy"]["kaldi-fbank"]["clean"] == pytest.approx(0.7)
    assert s["accuracy_std"]["kaldi-fbank"]["clean"] == pytest.approx(0.1)
    assert s["accuracy"]["kaldi-fbank"]["snr0"] == pytest.approx(0.45)  # (0.55 + 0.35) / 2
    assert s["accuracy_by_noise"]["amt-dau1997"]["pink"]["snr-5"] == pytest.approx(0.8)
    assert s["aurora_avg"]["amt-dau1997"] == pytest.approx(0.75)
    # error 0.25 vs 0.55: relative change -0.545
    rel = s["relative_error_change_vs_fbank"]["amt-dau1997"]["aurora_avg"]
    assert rel == pytest.approx(0.25 / 0.55 - 1)
    assert s["relative_error_change_vs_fbank"]["kaldi-fbank"]["aurora_avg"] == 0.0

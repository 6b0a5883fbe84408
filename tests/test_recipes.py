"""End-to-end smoke runs of the recipes under ``recipes/`` on tiny synthetic corpora
(espeak-ng speech; the tests are skipped when espeak-ng is not installed)."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from lhotse import CutSet, validate

RECIPES = Path(__file__).resolve().parents[1] / "recipes"

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None,
    reason="espeak-ng is not installed (apt-get install espeak-ng): the recipe smoke tests "
    "synthesise their corpus with it",
)


def _load(rel: str, name: str):
    path = RECIPES / rel
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    sys.path.insert(0, str(RECIPES))
    from common.synth import make_noise, make_speech_corpus

    root = tmp_path_factory.mktemp("corpus")
    make_speech_corpus(root, {"train": 4, "dev": 2}, max_words=3, progress_bar=False)
    make_noise(root, num=1, duration=3.0)
    return root


@needs_espeak
def test_compute_features_smoke(corpus, tmp_path):
    cf = _load("compute_features/compute_features.py", "recipe_compute_features")
    out = tmp_path / "feats"
    args = [
        "--manifest-dir",
        str(corpus),
        "--output-dir",
        str(out),
        "-j",
        "1",
        "--quiet",
        "--model",
        "amt-dau1997:stage=adaptation,flow=500,fhigh=4000",
        "--model",
        "kaldi-fbank",
        "--plot-cuts",
        "2",
    ]
    written = cf.run(cf.get_args(args))
    assert set(written) == {"amt-dau1997_stage-adaptation_flow-500_fhigh-4000", "kaldi-fbank"}
    for tag, splits in written.items():
        assert set(splits) == {"train", "dev", "noise"}
        for split, manifest in splits.items():
            cuts = CutSet.from_file(manifest)
            validate(cuts, read_data=True)
            assert all(c.has_features for c in cuts)
            assert (out / tag / f"features_{split}.png").stat().st_size > 1000
    # resumable: a rerun reuses the finished manifests
    again = cf.run(cf.get_args(args))
    assert again == written
    # the batch path (extract_batch; what --device cuda uses) on one split
    bargs = [
        "--manifest-dir",
        str(corpus),
        "--output-dir",
        str(tmp_path / "batch"),
        "--quiet",
        "--splits",
        "dev",
        "--batch",
        "--model",
        "amt-dau1997:flow=500,fhigh=4000",
    ]
    (manifest,) = cf.run(cf.get_args(bargs))["amt-dau1997_flow-500_fhigh-4000"].values()
    validate(CutSet.from_file(manifest), read_data=True)


@needs_espeak
def test_compute_features_dask(corpus, tmp_path):
    pytest.importorskip("dask.distributed")
    cf = _load("compute_features/compute_features.py", "recipe_compute_features")
    args = [
        "--manifest-dir",
        str(corpus),
        "--output-dir",
        str(tmp_path),
        "--dask",
        "-j",
        "1",
        "--splits",
        "dev",
        "--quiet",
        "--plot-cuts",
        "0",
        "--model",
        "amt-dau1997:stage=adaptation,flow=500,fhigh=4000",
    ]
    (manifest,) = cf.run(cf.get_args(args))[
        "amt-dau1997_stage-adaptation_flow-500_fhigh-4000"
    ].values()
    cuts = CutSet.from_file(manifest)
    validate(cuts, read_data=True)
    assert len(cuts) == 2


@needs_espeak
def test_asr_smoke(tmp_path):
    tr = _load("asr/train.py", "recipe_asr_train")
    exp = tmp_path / "exp"
    base = ["--smoke", "--quiet", "--data-dir", str(tmp_path / "data"), "--min-words", "1"]
    # (a) precomputed features, lazy feature-domain noise mixing + exact mixed-audio test
    out = tr.main(
        base
        + [
            "--exp-dir",
            str(exp),
            "--snrs",
            "10",
            "--exact-mix-eval",
            "--features",
            "kaldi-fbank",
            "amt-dau1997:stage=adaptation",
        ]
    )
    for r in out["results"]:
        assert r["losses"][-1] < r["losses"][0]  # main() also asserts the smoothed fall
        assert set(r["test"]) == {"clean", "snr10"}
        assert all(0.0 <= e["cer"] <= 1.5 for e in r["test"].values())
        assert "cer_exact_mix" in r["test"]["snr10"]
    md = (exp / "results.md").read_text()
    assert "kaldi-fbank" in md and "amt-dau1997:stage=adaptation" in md
    assert (exp / "cer.png").stat().st_size > 1000
    feats = CutSet.from_file(exp / "feats" / "amt-dau1997_stage-adaptation" / "cuts_train.jsonl.gz")
    validate(feats, read_data=True)
    # (b) on-the-fly features + the learnable Dau1997 front end (tiny: 4 kHz, 300-1500 Hz)
    out = tr.main(
        base
        + [
            "--exp-dir",
            str(tmp_path / "otf"),
            "--snrs",
            "0",
            "--input-strategy",
            "on-the-fly",
            "--max-steps",
            "12",
            "--features",
            "amt-dau1997:stage=adaptation,flow=200,fhigh=6000",
            "--learnable-frontend",
            "--learnable-fs",
            "4000",
            "--learnable-flow",
            "300",
            "--learnable-fhigh",
            "1500",
        ]
    )
    r, lf = out["results"]
    assert r["input_strategy"] == "on-the-fly" and set(r["test"]) == {"clean", "snr0"}
    assert lf["feature"] == "dau1997-learnable" and lf["input_strategy"] == "raw audio"
    assert lf["steps"] == 12 and set(lf["test"]) == {"clean", "snr0"}
    assert lf["losses"][-1] < lf["losses"][0]
    # every front-end stage's parameters receive finite, non-zero gradients, and move
    g0 = lf["frontend_grad_abs_sum"][0]
    assert set(g0) == {
        "filterbank.fc",
        "filterbank.erb_scale",
        "ihc.sos",
        "adaptation.tau",
        "modulation.poles",
        "modulation.gains",
    }
    for step in lf["frontend_grad_abs_sum"]:
        assert all(math.isfinite(v) and v > 0 for v in step.values()), step
    assert lf["skipped_steps"] == 0 and lf["fc_change_rel_max"] > 0
    assert 0 < lf["frontend_seconds"] < lf["step_seconds"]
    assert "Learnable front end" in (tmp_path / "otf" / "results.md").read_text()
    json.dumps(out)


def test_asr_learnable_frontend_matches_extractor():
    """At its initial parameters the learnable front end gives the ``amt-dau1997``
    features (frame pooling, frame counts, column layout), for every item of a padded
    batch; its gradients reach every stage."""
    tr = _load("asr/train.py", "recipe_asr_train")
    from lhotse_amt.features import Dau1997Config, Dau1997Extractor

    fs = 4000
    fe = tr.AuditoryFrontEnd(fs, 300.0, 1500.0)
    ex = Dau1997Extractor(Dau1997Config(sampling_rate=fs, flow=300.0, fhigh=1500.0))
    g = torch.Generator().manual_seed(0)
    x = 0.05 * torch.randn(2, 4000, generator=g)
    lens = torch.tensor([4000, 2917])  # the second item ends inside a frame
    with torch.no_grad():
        feats, flens = fe(x, lens)
    assert feats.shape[-1] == fe.num_features == ex.feature_dim(fs)
    for b in range(2):
        ref = ex.extract(x[b, : int(lens[b])].numpy(), fs)
        assert int(flens[b]) == ref.shape[0]
        got = feats[b, : int(flens[b])].numpy()
        assert np.abs(got - ref).max() <= 1e-4 * np.abs(ref).max()
    feats, flens = fe(x, lens)
    feats.square().mean().backward()
    grads = tr.frontend_grads(fe)
    assert all(math.isfinite(v) and v > 0 for v in grads.values()), grads


def test_perception_loudness(tmp_path):
    lg = _load("perception/loudness_growth.py", "recipe_loudness_growth")
    res = lg.run([30.0, 60.0, 90.0], tmp_path, progress=False)
    for model in ("glasberg2002", "moore2016"):
        assert res["checks"][model]["within_bounds"], res[model]
    assert (tmp_path / "loudness_growth.png").exists()


def test_perception_tmtf(tmp_path):
    tm = _load("perception/tmtf.py", "recipe_tmtf")
    res = tm.run(
        [4.0, 16.0, 256.0], [float(d) for d in range(-36, -3, 4)], 10, tmp_path, progress=False
    )
    assert res["checks"]["within_bounds"], res["checks"]
    assert (tmp_path / "tmtf.png").exists()

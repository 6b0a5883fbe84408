"""Storage, datasets, executors and Shar with the amt extractors (issue: Lhotse integration)."""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import torch
from corpus import make_cuts
from lhotse import CutSet, validate
from lhotse.dataset import K2SpeechRecognitionDataset, OnTheFlyFeatures, PrecomputedFeatures
from lhotse.dataset.sampling import SimpleCutSampler

import lhotse_amt
from lhotse_amt import Dau1997Config, Dau1997Extractor


@pytest.fixture(scope="module")
def cuts(tmp_path_factory) -> CutSet:
    return make_cuts(tmp_path_factory.mktemp("corpus"), n=3)


@pytest.fixture(scope="module")
def extractor() -> Dau1997Extractor:
    return Dau1997Extractor(Dau1997Config(stage="adaptation"))


def _check_features(cuts_with_feats: CutSet, extractor, original: CutSet):
    validate(cuts_with_feats, read_data=True)
    for c in cuts_with_feats:
        assert c.has_features and c.features.type == extractor.name
        f = c.load_features()
        ref = extractor.extract(original[c.id].load_audio(), c.sampling_rate)
        np.testing.assert_allclose(f, ref, rtol=1e-5, atol=1e-4)


def test_compute_and_store_features(cuts, extractor, tmp_path):
    out = cuts.compute_and_store_features(extractor, tmp_path / "feats", progress_bar=True)
    _check_features(out, extractor, cuts)


def test_compute_and_store_features_process_pool(cuts, extractor, tmp_path):
    out = cuts.compute_and_store_features(extractor, tmp_path / "feats", num_jobs=2)
    _check_features(out.to_eager(), extractor, cuts)


def test_compute_and_store_features_dask(cuts, extractor, tmp_path):
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        with distributed.Client(cluster) as client:
            out = cuts.compute_and_store_features(extractor, tmp_path / "feats", executor=client)
    _check_features(out.to_eager(), extractor, cuts)


@pytest.mark.parametrize("collate", [False, True])
def test_compute_and_store_features_batch(cuts, extractor, tmp_path, collate):
    out = cuts.compute_and_store_features_batch(
        extractor, tmp_path / "feats", num_workers=0, collate=collate, batch_duration=2.0
    )
    _check_features(out, extractor, cuts)
    # a batch of one cut
    one = cuts.subset(first=1).compute_and_store_features_batch(
        extractor, tmp_path / "feats1", num_workers=0, collate=collate
    )
    _check_features(one, extractor, cuts)


def test_batch_extraction_resumes(cuts, extractor, tmp_path):
    manifest = tmp_path / "cuts.jsonl.gz"
    first = cuts.subset(first=2).compute_and_store_features_batch(
        extractor, tmp_path / "feats", manifest_path=manifest, num_workers=0
    )
    assert len(first) == 2
    done = CutSet.from_file(manifest)
    full = cuts.compute_and_store_features_batch(
        extractor, tmp_path / "feats", manifest_path=manifest, num_workers=0
    )
    assert sorted(full.ids) == sorted(cuts.ids)
    assert len(CutSet.from_file(manifest)) == 3 and set(done.ids) <= set(full.ids)


def test_lossless_default_storage(cuts, extractor, tmp_path):
    out = cuts.subset(first=1).compute_and_store_features(extractor, tmp_path / "f")
    assert out[0].features.storage_type == "numpy_files"
    c = out[0]
    np.testing.assert_array_equal(c.load_features(), extractor.extract(cuts[0].load_audio(), 16000))


def _dataset_batch(cuts, strategy, num_workers=0):
    ds = K2SpeechRecognitionDataset(input_strategy=strategy)
    sampler = SimpleCutSampler(cuts, max_cuts=2)
    dl = torch.utils.data.DataLoader(
        ds,
        sampler=sampler,
        batch_size=None,
        num_workers=num_workers,
        multiprocessing_context="spawn" if num_workers else None,
        worker_init_fn=lhotse_amt.worker_init_fn if num_workers else None,
    )
    return list(dl)


def test_on_the_fly_features_in_dataset(cuts, extractor):
    batches = _dataset_batch(cuts, OnTheFlyFeatures(extractor))
    b = batches[0]
    assert b["inputs"].shape[-1] == extractor.feature_dim(16000)
    assert b["supervisions"]["num_frames"].min() > 0


def test_precomputed_features_spawned_workers_with_mixing(cuts, extractor, tmp_path):
    feats = cuts.compute_and_store_features(extractor, tmp_path / "f")
    noise = feats.subset(first=1)
    mixed = CutSet.from_cuts(
        [c.mix(noise[0], offset_other_by=0.1, snr=10, allow_padding=True) for c in feats]
    )
    for strategy, data in ((PrecomputedFeatures(), mixed), (OnTheFlyFeatures(extractor), mixed)):
        batches = _dataset_batch(data, strategy, num_workers=2)
        x = torch.cat([b["inputs"].flatten(0, 1) for b in batches])
        assert x.shape[-1] == extractor.feature_dim(16000)
        assert torch.isfinite(x).all()


def test_mixed_cut_lazy_vs_eager(cuts, extractor, tmp_path):
    feats = cuts.compute_and_store_features(extractor, tmp_path / "f")
    a, b = feats[0], feats[1]
    mix = a.mix(b, offset_other_by=0.2, snr=5)
    lazy = mix.load_features()
    eager = extractor.extract(mix.load_audio(), 16000)
    assert lazy.shape == eager.shape
    # no -1000 padding sentinel leaks into the values: before the second cut starts (0.2 s)
    # it is padding, i.e. silence, and the mix is the first cut's features
    assert lazy.min() > -999.0
    np.testing.assert_allclose(lazy[:20], a.load_features()[:20], rtol=1e-5, atol=1e-4)
    # the approximation error reported in the README (mean |lazy - eager| / mean |eager|)
    rel = np.abs(lazy - eager).mean() / np.abs(eager).mean()
    assert rel < 0.9, rel
    stored = CutSet.from_cuts([mix]).compute_and_store_features(
        extractor, tmp_path / "m", mix_eagerly=False
    )
    assert stored[0].load_features().shape == eager.shape
    stored_eager = CutSet.from_cuts([mix]).compute_and_store_features(
        extractor, tmp_path / "e", mix_eagerly=True
    )
    np.testing.assert_allclose(stored_eager[0].load_features(), eager, rtol=1e-5, atol=1e-4)


def test_padding_with_documented_value(cuts, extractor, tmp_path):
    feats = cuts.compute_and_store_features(extractor, tmp_path / "f")
    c = feats[2].pad(duration=2.0, pad_feat_value=extractor.padding_value)
    f = c.load_features()
    assert f.shape[0] == 200
    assert (f[int(feats[2].duration * 100) + 1 :] == 0.0).all()


def test_mixing_hooks_handle_sentinels():
    f = np.full((5, 3), 40.0, np.float32)
    pad = np.full((5, 3), -1000.0, np.float32)
    np.testing.assert_allclose(Dau1997Extractor.mix(f, pad, 1.0), f, rtol=1e-6, atol=1e-3)
    np.testing.assert_allclose(Dau1997Extractor.mix(pad, f, 1.0), f, rtol=1e-6, atol=1e-3)
    assert Dau1997Extractor.compute_energy(np.full((2, 2), -23.03, np.float32)) > 0
    assert (Dau1997Extractor.mix(pad, pad, 1.0) == 0).all()
    # equal-energy mix of identical features is +3 dB in intensity
    e = Dau1997Extractor.compute_energy(f)
    m = Dau1997Extractor.mix(f, f, 1.0)
    assert abs(Dau1997Extractor.compute_energy(m) / e - 2.0) < 1e-3
    s = Dau1997Extractor.scale(f, 4.0)
    assert abs(Dau1997Extractor.compute_energy(s) / e - 4.0) < 1e-3


def test_shar_compute_features(cuts, tmp_path):
    """``lhotse-amt shar compute-features`` in a fresh process, as users run it (Lhotse forks
    its workers: forking a process that already ran multi-threaded torch code can hang in
    GNU OpenMP, so this must not run inside the test process)."""
    import shutil
    import subprocess
    import sys

    shar_dir = tmp_path / "shar"
    shar_dir.mkdir()
    cuts.to_shar(shar_dir, fields={"recording": "wav"}, shard_size=2)
    cfg = tmp_path / "cfg.yaml"
    Dau1997Extractor(Dau1997Config(stage="adaptation")).to_yaml(cfg)
    exe = shutil.which("lhotse-amt")
    cmd = [exe] if exe else [sys.executable, "-m", "lhotse_amt.cli"]
    r = subprocess.run(
        [*cmd, "shar", "compute-features", str(shar_dir), "-f", str(cfg), "-j", "2"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    back = CutSet.from_shar(in_dir=shar_dir)
    n = 0
    for c in back:
        assert c.load_features().shape[1] == 31
        n += 1
    assert n == 3


def test_unwritable_storage_path_is_an_error(cuts, extractor, tmp_path):
    from lhotse_amt.pipeline import extract_cuts

    blocker = tmp_path / "not_a_dir"
    blocker.write_text("a file where a directory should be")  # unwritable even for root
    with pytest.raises(OSError):
        cuts.compute_and_store_features(extractor, blocker / "feats", progress_bar=False)
    out = tmp_path / "out.jsonl.gz"
    with pytest.raises(OSError):
        extract_cuts(cuts, extractor, blocker / "feats", out, progress_bar=False)
    assert not out.exists()  # nothing half-written


def test_extractor_is_picklable_and_cheap(extractor):
    import pickle

    extractor.extract(np.zeros((1, 1600), np.float32) + 1e-3, 16000)
    blob = pickle.dumps(extractor)
    assert len(blob) < 10_000  # the cached model is not pickled
    back = pickle.loads(blob)
    assert back.config == extractor.config
    with ProcessPoolExecutor(1) as ex:
        assert ex.submit(len, Path("x").name).result() == 1

"""The Lhotse extractor contract, for every registered ``amt-*`` extractor.

Mirrors Lhotse's own ``test/features`` tests: construction by name, YAML round-trip,
shapes and exact frame counts, uneven batches, batch/single parity, chunked/one-shot
equality, bad input. New extractors are picked up automatically from the registry; a
class may name a faster configuration for these tests with a ``test_config()`` classmethod.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lhotse.features.base import (
    FEATURE_EXTRACTORS,
    FeatureExtractor,
    create_default_feature_extractor,
)
from lhotse.utils import compute_num_frames_from_samples

import lhotse_amt  # noqa: F401  (registers the extractors)

NAMES = sorted(n for n in FEATURE_EXTRACTORS if n.startswith("amt-"))


def make_extractor(name: str, **overrides) -> FeatureExtractor:
    cls = FEATURE_EXTRACTORS[name]
    cfg = cls.test_config() if hasattr(cls, "test_config") else cls.config_type()
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cls(cfg)


def audio(ex, seconds: float, seed: int = 0, batch: int | None = None) -> np.ndarray:
    """Noise at about 65 dB SPL on the extractor's scale, shaped for its channel count."""
    sr = ex.config.sampling_rate
    n = int(round(seconds * sr))
    rng = np.random.default_rng(seed)
    level = 10 ** ((65 - getattr(ex.config, "full_scale_db_spl", 100.0)) / 20)
    shape = (ex.input_channels, n) if batch is None else (batch, ex.input_channels, n)
    return (rng.standard_normal(shape) * level).astype(np.float32)


def test_every_model_is_registered():
    assert {"amt-dau1997"} <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_default_construction_by_name(name):
    ex = create_default_feature_extractor(name)
    assert ex.name == name
    assert ex.frame_shift > 0 and ex.device == "cpu"
    assert ex.feature_dim(ex.config.sampling_rate) > 0


@pytest.mark.parametrize("name", NAMES)
def test_yaml_round_trip(name, tmp_path):
    ex = make_extractor(name)
    path = tmp_path / "cfg.yaml"
    ex.to_yaml(path)
    back = FeatureExtractor.from_yaml(path)
    assert type(back) is type(ex) and back.config == ex.config
    d = ex.to_dict()
    assert d["feature_type"] == name
    assert FeatureExtractor.from_dict(dict(d)).config == ex.config


@pytest.mark.parametrize("name", NAMES)
def test_unknown_config_key_is_a_clear_error(name, tmp_path):
    path = tmp_path / "cfg.yaml"
    path.write_text(f"feature_type: {name}\nframe_shfit: 0.02\n")
    with pytest.raises(ValueError, match="frame_shfit"):
        FeatureExtractor.from_yaml(path)


@pytest.mark.parametrize("name", NAMES)
def test_shapes_frame_counts_and_dtype(name):
    ex = make_extractor(name)
    sr = ex.config.sampling_rate
    dim = ex.feature_dim(sr)
    assert len(ex.feature_names()) == dim
    for seconds in (0.2, 0.3567, 0.5):
        x = audio(ex, seconds)
        f = ex.extract(x, sr)
        assert isinstance(f, np.ndarray) and f.dtype == np.float32
        assert f.shape == (compute_num_frames_from_samples(x.shape[-1], ex.frame_shift, sr), dim)
        assert np.isfinite(f).all()
    ft = ex.extract(torch.from_numpy(x), sr)
    assert isinstance(ft, torch.Tensor) and ft.dtype == torch.float32
    np.testing.assert_array_equal(ft.numpy(), f)
    if ex.input_channels == 1:  # 1-D input is accepted by mono models
        np.testing.assert_array_equal(ex.extract(x[0], sr), f)


@pytest.mark.parametrize("name", NAMES)
def test_uneven_batch_equals_single(name):
    ex = make_extractor(name)
    sr = ex.config.sampling_rate
    xs = [audio(ex, s, seed=i) for i, s in enumerate((0.31, 0.2, 0.4567))]
    singles = [ex.extract(x, sr) for x in xs]
    batch = ex.extract_batch(xs, sampling_rate=sr)
    assert isinstance(batch, list) and len(batch) == 3
    for b, s in zip(batch, singles):
        assert b.shape == s.shape
        np.testing.assert_allclose(b, s, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(s).max()))
    # padded batch with lengths, as collate=True passes it
    T = max(x.shape[-1] for x in xs)
    padded = np.zeros((3, ex.input_channels, T), np.float32)
    for i, x in enumerate(xs):
        padded[i, :, : x.shape[-1]] = x
    if ex.input_channels == 1:
        padded = padded[:, 0]
    lens = torch.tensor([x.shape[-1] for x in xs], dtype=torch.int32)
    out = ex.extract_batch(torch.from_numpy(padded), sampling_rate=sr, lengths=lens)
    assert isinstance(out, list)
    for b, s in zip(out, singles):
        assert isinstance(b, torch.Tensor)
        np.testing.assert_allclose(b.numpy(), s, rtol=1e-5, atol=1e-5 * max(1.0, np.abs(s).max()))
    one = ex.extract_batch([xs[0]], sampling_rate=sr)
    assert isinstance(one, list) and one[0].shape == singles[0].shape


@pytest.mark.parametrize("name", NAMES)
def test_chunked_equals_one_shot(name):
    ex = make_extractor(name)
    sr = ex.config.sampling_rate
    x = audio(ex, 0.9)
    ref = ex.extract(x, sr)
    small = make_extractor(name, chunk_duration=0.13)
    np.testing.assert_allclose(small.extract(x, sr), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


@pytest.mark.parametrize("name", NAMES)
def test_same_input_twice_same_output(name):
    ex = make_extractor(name)
    x = audio(ex, 0.25)
    a = ex.extract(x, ex.config.sampling_rate)
    b = ex.extract(x, ex.config.sampling_rate)
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_level_calibration(name):
    ex = make_extractor(name)
    sr = ex.config.sampling_rate
    x = audio(ex, 0.3)
    ref = ex.extract(x, sr)
    # declaring the full scale 20 dB higher is the same as a 20-dB louder signal
    louder = make_extractor(name, full_scale_db_spl=ex.config.full_scale_db_spl + 20.0)
    np.testing.assert_allclose(
        louder.extract(x, sr), ex.extract(x * 10.0, sr), rtol=1e-4, atol=1e-4 * np.abs(ref).max()
    )
    norm = make_extractor(name, target_level_db_spl=60.0)
    np.testing.assert_allclose(
        norm.extract(x, sr), norm.extract(x * 0.01, sr), rtol=1e-4, atol=1e-4 * np.abs(ref).max()
    )


@pytest.mark.parametrize("name", NAMES)
def test_bad_input(name):
    ex = make_extractor(name)
    sr = ex.config.sampling_rate
    x = audio(ex, 0.2)
    with pytest.raises(ValueError, match="resample"):
        ex.extract(x, sr // 2)
    with pytest.raises(ValueError, match="empty"):
        ex.extract(x[..., :0], sr)
    with pytest.raises(ValueError, match="shorter than one frame"):
        ex.extract(x[..., :3], sr)
    bad = x.copy()
    bad[..., 10] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        ex.extract(bad, sr)
    bad[..., 10] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        ex.extract(bad, sr)
    with pytest.raises(ValueError, match="floating point"):
        ex.extract((x * 32767).astype(np.int16), sr)
    wrong = np.concatenate([x, x, x], axis=0)
    with pytest.raises(ValueError, match="channel"):
        ex.extract(wrong, sr)


@pytest.mark.parametrize("sr", [8000, 22050, 44100, 48000])
def test_dau1997_at_several_sampling_rates(sr):
    frame_shift = 0.01 if sr != 22050 else 0.02
    ex = make_extractor(
        "amt-dau1997", sampling_rate=sr, frame_shift=frame_shift, fhigh=min(8000.0, 0.45 * sr)
    )
    for seconds in (0.25, 0.4321):
        x = audio(ex, seconds)
        f = ex.extract(x, sr)
        n = compute_num_frames_from_samples(x.shape[-1], frame_shift, sr)
        assert f.shape == (n, ex.feature_dim(sr))
    with pytest.raises(ValueError, match="integer"):
        make_extractor("amt-dau1997", sampling_rate=22050, frame_shift=0.01)


def test_mono_channel_policy():
    ex = make_extractor("amt-dau1997")
    x = audio(ex, 0.2)
    stereo = np.concatenate([x, 0.5 * x], axis=0)
    with pytest.raises(ValueError, match="downmix"):
        ex.extract(stereo, 16000)
    np.testing.assert_array_equal(
        make_extractor("amt-dau1997", channel=1).extract(stereo, 16000), ex.extract(0.5 * x, 16000)
    )
    np.testing.assert_allclose(
        make_extractor("amt-dau1997", downmix=True).extract(stereo, 16000),
        ex.extract(0.75 * x, 16000),
        rtol=1e-5,
        atol=1e-4,
    )


def test_dau1997_layouts_and_names():
    compact = make_extractor("amt-dau1997", preset="amt-1.4")
    padded = make_extractor("amt-dau1997", preset="amt-1.4", layout="padded")
    adapt = make_extractor("amt-dau1997", preset="amt-1.4", stage="adaptation")
    assert compact.feature_dim(16000) == sum(
        [
            4,
            5,
            6,
            6,
            6,
            7,
            7,
            7,
            8,
            8,
            8,
            9,
            9,
            9,
            9,
            10,
            10,
            10,
            10,
            11,
            11,
            11,
            11,
            11,
            12,
            12,
            12,
            12,
            12,
            12,
        ]
    )
    assert padded.feature_dim(16000) == 30 * 12
    assert adapt.feature_dim(16000) == 30
    assert compact.feature_names()[0] == "fc=107.7Hz/mfc=0.00Hz"
    x = audio(compact, 0.3)
    fc, fp = compact.extract(x, 16000), padded.extract(x, 16000)
    mask = np.array(["none" not in n for n in padded.feature_names()])
    np.testing.assert_array_equal(fp[:, mask], fc)
    assert (fp[:, ~mask] == 0).all()


def test_frame_pooling_definition():
    """Frame j is the mean of the model output over samples [j*hop, (j+1)*hop)."""
    ex = make_extractor("amt-dau1997", stage="adaptation", dtype="float64")
    x = audio(ex, 0.1234)
    model = lhotse_amt.Dau1997(16000, dtype=torch.float64, return_stages=True)
    _, st = model(torch.from_numpy(x.astype(np.float64)))
    a = st["adaptation"][0].numpy()
    f = ex.extract(x, 16000)
    n = x.shape[-1]
    F = compute_num_frames_from_samples(n, 0.01, 16000)
    for j in range(F):
        np.testing.assert_allclose(
            f[j], a[:, j * 160 : min((j + 1) * 160, n)].mean(-1), rtol=1e-5, atol=1e-4
        )


def test_import_is_cheap():
    import subprocess
    import sys

    code = (
        "import lhotse_amt, torch, sys\n"
        "from lhotse.features.base import FEATURE_EXTRACTORS\n"
        "ex = FEATURE_EXTRACTORS['amt-dau1997']()\n"
        "assert ex._models == {}\n"
        "assert not torch.cuda.is_initialized()\n"
        "assert 'numba' not in sys.modules, 'kernels compiled at import'\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("name", NAMES)
def test_cuda_extract_batch_matches_cpu(name):
    ex = make_extractor(name)
    gpu = make_extractor(name, device="cuda")
    xs = [audio(ex, s, seed=i) for i, s in enumerate((0.31, 0.2))]
    for a, b in zip(
        ex.extract_batch(xs, ex.config.sampling_rate),
        gpu.extract_batch(xs, ex.config.sampling_rate),
    ):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3 * np.abs(a).max())

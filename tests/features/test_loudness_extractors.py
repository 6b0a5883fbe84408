"""Lhotse extractors ``amt-glasberg2002`` and ``amt-moore2016``: layout, pooling, channels."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from lhotse import validate
from lhotse.utils import compute_num_frames_from_samples

from lhotse_amt.features import (
    Glasberg2002Config,
    Glasberg2002Extractor,
    Moore2016Config,
    Moore2016Extractor,
)

SR = 32000


def tone(seconds=0.3, level=60.0, freq=1000.0):
    n = int(seconds * SR)
    # digital scale: rms 1 = 100 dB SPL
    return (
        np.sqrt(2) * 10 ** ((level - 100) / 20) * np.sin(2 * np.pi * freq * np.arange(n) / SR)
    ).astype(np.float32)


def test_names_and_grid_match_models():
    g = Glasberg2002Extractor(Glasberg2002Config(include_stl=True, include_ltl=True))
    names = g.feature_names()
    assert len(names) == g.feature_dim(SR) == 151 and names[-2:] == ["stl", "ltl"]
    m = g.model()
    assert names[0] == f"fc={m.erb_fc_hz[0]:.1f}Hz" and len(m.erb_fc_hz) == 149
    mo = Moore2016Extractor()
    names = mo.feature_names()
    assert len(names) == mo.feature_dim(SR) == 300
    assert names[0].startswith("left/fc=") and names[150].startswith("right/fc=")
    assert np.allclose(mo._channel_fc(), mo.model().erb_fc_hz)


def test_pooling_is_mean_of_model_frames_glasberg():
    ex = Glasberg2002Extractor(Glasberg2002Config(include_stl=True, include_ltl=True))
    x = tone(0.2537)
    f = ex.extract(x, SR)
    n_out = compute_num_frames_from_samples(len(x), 0.01, SR)
    assert f.shape == (n_out, 151)
    with torch.no_grad():
        st = ex.model().compute(torch.tensor(x, dtype=torch.float32) * 2.0)  # 2 Pa per unit
    spec = st["specific_loudness"][64:].numpy()  # frames j >= 0
    stl, ltl = st["stl"][64:].numpy(), st["ltl"][64:].numpy()
    j = np.arange(spec.shape[0]) // 10  # model frame i (centre i ms) -> Lhotse frame i // 10
    for k in (0, 7, n_out - 1):
        sel = j == k
        np.testing.assert_allclose(f[k, :149], spec[sel].mean(0), rtol=1e-4, atol=1e-6)
        np.testing.assert_allclose(f[k, 149], stl[sel].mean(), rtol=1e-4)
        np.testing.assert_allclose(f[k, 150], ltl[sel].mean(), rtol=1e-4)
    assert f[:, :149].max() > 0.1  # a 60-dB tone is clearly audible


def test_moore_stereo_diotic_mono_error_and_extras():
    ex = Moore2016Extractor(Moore2016Config(include_stl=True, include_ltl=True))
    x = tone(0.2)
    stereo = np.stack([x, x])
    f = ex.extract(stereo, SR)
    assert f.shape == (20, 302)
    np.testing.assert_allclose(f[:, :150], f[:, 150:300], rtol=1e-6, atol=1e-9)  # diotic input
    with torch.no_grad():
        st = ex.model().compute(torch.tensor(stereo) * 2.0)
    ref_stl = st["stl"].numpy()[:200].reshape(20, 10).mean(1)
    ref_ltl = st["ltl"].numpy()[:200].reshape(20, 10).mean(1)
    np.testing.assert_allclose(f[:, 300], ref_stl, rtol=1e-4)
    np.testing.assert_allclose(f[:, 301], ref_ltl, rtol=1e-4)
    with pytest.raises(ValueError, match="diotic=True"):
        ex.extract(x, SR)
    di = Moore2016Extractor(Moore2016Config(include_stl=True, include_ltl=True, diotic=True))
    np.testing.assert_allclose(di.extract(x, SR), f, rtol=1e-6, atol=1e-9)
    # short-term pattern, other rate (resampled to 32 kHz inside)
    st_ex = Moore2016Extractor(Moore2016Config(specific="short_term", sampling_rate=16000))
    g = st_ex.extract(stereo[:, ::2].copy(), 16000)
    assert g.shape == (20, 300) and np.isfinite(g).all()
    with pytest.raises(ValueError, match="specific"):
        Moore2016Extractor(Moore2016Config(specific="nope"))


def test_mixing_hooks_sentinel_safe():
    a = np.full((4, 3), 0.5, np.float32)
    pad = np.full((4, 3), -1000.0, np.float32)
    np.testing.assert_allclose(Moore2016Extractor.mix(a, pad, 1.0), a, rtol=1e-6)
    np.testing.assert_allclose(
        Moore2016Extractor.mix(a, np.full_like(a, -23.03), 3.0), a, rtol=1e-6
    )
    # the mid-level law N' = C ((E + A)^0.2 - A^0.2) inverted, excitations added
    c, big_a = Moore2016Extractor.mix_c, 4.72096
    e = (0.5 / c + big_a**0.2) ** 5 - big_a
    both = Moore2016Extractor.mix(a, a, 1.0)
    np.testing.assert_allclose(both, c * ((2 * e + big_a) ** 0.2 - big_a**0.2), rtol=1e-5)
    assert (both > a).all() and (both < 2 * a).all()
    assert Moore2016Extractor.compute_energy(np.zeros((3, 3))) > 0
    c = Glasberg2002Extractor.mix_c
    e = (0.5 / c + big_a**0.2) ** 5 - big_a
    np.testing.assert_allclose(
        Glasberg2002Extractor.scale(a, 32.0), c * ((32 * e + big_a) ** 0.2 - big_a**0.2), rtol=1e-5
    )
    assert Glasberg2002Extractor.padding_value == 0.0


def test_stereo_multicut_compute_and_store(tmp_path):
    from corpus import make_cuts
    from lhotse import NumpyFilesWriter

    cuts = make_cuts(tmp_path / "audio", n=2, sr=SR, channels=2, speech=False, max_duration=0.4)
    ex = Moore2016Extractor()
    cuts = cuts.compute_and_store_features(
        ex, storage_path=tmp_path / "feats", storage_type=NumpyFilesWriter
    )
    validate(cuts, read_data=True)
    for c in cuts:
        f = c.load_features()
        assert f.shape == (c.num_frames, 300) and c.num_features == 300
        assert np.isfinite(f).all() and f.max() > 0
    mono = make_cuts(tmp_path / "mono", n=1, sr=SR, channels=1, speech=False, max_duration=0.3)
    with pytest.raises(ValueError, match="exactly 2 channels"):
        ex.extract(mono[0].load_audio(), SR)


@pytest.mark.parametrize(
    "cls, cfg, rate",
    [
        (Glasberg2002Extractor, Glasberg2002Config, SR),
        (Glasberg2002Extractor, Glasberg2002Config, 16000),
        (Moore2016Extractor, Moore2016Config, SR),
    ],
)
def test_batched_blocks_equal_items_one_by_one(cls, cfg, rate):
    # the batch path (CUDA: one model call per block for all items) on the CPU: items of
    # different lengths across several blocks, resampled or not, AGC states per item
    conf = dict(sampling_rate=rate, chunk_duration=0.05, include_stl=True, include_ltl=True)
    if cls is Moore2016Extractor:
        conf["diotic"] = True
    ex = cls(cfg(specific="short_term", **conf))
    rng = np.random.default_rng(3)
    lengths = [int(0.031 * rate), int(0.17 * rate) + 5, int(0.11 * rate)]
    x = np.zeros((3, 2 if cls is Moore2016Extractor else 1, max(lengths)), np.float32)
    for k, n in enumerate(lengths):
        x[k, :, :n] = rng.standard_normal(n) * 10 ** ((60 - 100) / 20)
    with torch.inference_mode():
        batched = ex._compute_items(torch.from_numpy(x), lengths)
        one_by_one = ex._compute(torch.from_numpy(x), lengths)
    for k, n in enumerate(lengths):
        assert batched[k].shape == (
            compute_num_frames_from_samples(n, 0.01, rate),
            ex.feature_dim(rate),
        )
        assert batched[k].abs().max() > 0.01
        torch.testing.assert_close(batched[k], one_by_one[k], rtol=1e-5, atol=1e-6)


def test_blocks_on_cuda_are_sized_by_memory():
    from lhotse_amt.features.loudness_base import CUDA_BLOCK_FRAMES, block_frames

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert block_frames(2.0, 0.01, cpu, 8) == 200
    # 8 rows share the budget: CUDA_BLOCK_FRAMES / 8 model frames of 1 ms
    assert block_frames(2.0, 0.01, cuda, 8) == int(CUDA_BLOCK_FRAMES // 8 * 0.1)
    assert block_frames(2.0, 0.01, cuda, 8) > 1000
    # a batch too large for the budget keeps chunk_duration's blocks
    assert block_frames(2.0, 0.01, cuda, 10**6) == 200
    assert block_frames(2.0, 0.01, cuda, 0) >= 200

"""Glasberg2002 against the deeuu/loudness "GM2002" reference outputs and published anchors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import LOUDNESS_STIMULI, load_loudness

from lhotse_amt.models.glasberg2002 import Glasberg2002

P0 = 20e-6
FS = 32000


def _ref(name):
    return load_loudness("glasberg2002", name)


def _rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


def tone(freq, level_db, seconds=0.3, ramp=0.01):
    n = int(seconds * FS)
    x = np.sqrt(2) * P0 * 10 ** (level_db / 20) * np.sin(2 * np.pi * freq * np.arange(n) / FS)
    r = int(ramp * FS)
    w = 0.5 * (1 - np.cos(np.pi * np.arange(r) / r))
    x[:r] *= w
    x[-r:] *= w[::-1]
    return x


@pytest.fixture(scope="module")
def model():
    return Glasberg2002(dtype=torch.float32)


@pytest.mark.parametrize("name", LOUDNESS_STIMULI)
def test_fidelity_vs_primary(model, name):
    d = _ref(name)
    out = model.compute(torch.tensor(d["x_pa"]))
    assert out["stl"].shape == d["stl"].shape
    assert np.allclose(out["frame_times_s"].numpy(), d["frame_times_s"])
    for key, tol in (("stl", 0.03), ("ltl", 0.03), ("inst", 0.05)):
        err = _rel(out[key].numpy(), d[key])
        assert err < tol, (name, key, err)
    assert abs(float(out["max_ltl"]) / float(d["max_ltl"]) - 1) < 0.03
    spec = out["specific_loudness"].numpy()[d["spec_frames"] + 64]
    assert _rel(spec, d["specific_loudness"]) < 0.05
    np.testing.assert_allclose(model.erb_fc_hz, d["erb_fc_hz"], rtol=1e-6)


@pytest.fixture(scope="module")
def m64():
    return Glasberg2002(dtype=torch.float64)


def _loud(model, x):
    return float(model.compute(torch.tensor(x))["ltl"].max())


def test_anchors(m64):
    # ~1 sone at 40 dB SPL (the reference gives 1.066, see the data README), doubling per 10 dB
    l40 = _loud(m64, tone(1000, 40, 0.5))
    assert abs(l40 - 1.0) < 0.10
    table = {50: 1.97, 60: 3.9, 70: 7.6, 80: 14.8}
    for level, ref in table.items():
        got = _loud(m64, tone(1000, level, 0.3))
        assert abs(got / ref - 1) < 0.12, (level, got, ref)


def test_silence_subthreshold_and_frequency(m64):
    assert _loud(m64, np.zeros(6400)) == 0.0
    assert _loud(m64, tone(1000, 0, 0.2)) < 1e-3
    contours = {40: {250: 48.8, 1000: 40.0, 4000: 35.5}, 60: {250: 66.3, 1000: 60.0, 4000: 56.6}}
    for phon, pts in contours.items():
        vals = {f: _loud(m64, tone(f, lv, 0.3)) for f, lv in pts.items()}
        for f, v in vals.items():
            assert 1 / 1.5 < v / vals[1000] < 1.5, (phon, f, vals)


def test_validation_determinism_api():
    m = Glasberg2002()
    with pytest.raises(ValueError, match="expects"):
        m(torch.zeros(1, 2, 100))
    with pytest.raises(ValueError, match="NaN or inf"):
        m(torch.tensor([0.0, float("inf")] * 100))
    with pytest.raises(ValueError, match="too short"):
        m(torch.zeros(5))
    with pytest.raises(ValueError, match="empty batch"):
        m(torch.zeros(0, 3200))
    x = torch.tensor(np.stack([tone(1000, 60, 0.1), tone(500, 50, 0.1)])).float()
    a, b = m(x), m(x)
    assert a.shape == (2, m.n_frames(x.shape[-1])) and torch.equal(a, b)
    feats = m.specific_loudness_frames(x[0])
    assert feats["specific_loudness"].shape == (m.n_frames(x.shape[-1]), 149)
    assert m.n_features == 149 and m.frame_rate == 1000


def test_compute_without_integration():
    # integrate=False drops stl/ltl/max_ltl and leaves every other stage as it was
    m = Glasberg2002()
    x = torch.tensor(np.stack([tone(1000, 60, 0.1), tone(3000, 70, 0.1)])).float()
    full, bare = m.compute(x), m.compute(x, integrate=False)
    assert set(full) - set(bare) == {"stl", "ltl", "max_ltl"}
    for k, v in bare.items():
        assert torch.equal(v, full[k]), k


def test_gradients_flow():
    m = Glasberg2002(dtype=torch.float64, learnable=True)
    x = torch.tensor(tone(1000, 50, 0.04), requires_grad=True)
    m(x).sum().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0 and m.c.grad is not None

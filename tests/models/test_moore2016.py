"""Moore2016 against the AMT 1.4 reference outputs and published loudness anchors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import LOUDNESS_STIMULI, load_loudness

from lhotse_amt.models.moore2016 import Moore2016

P0 = 20e-6
FS = 32000


def _ref(name):
    return load_loudness("moore2016", name)


def _rel(a, b):
    return float(np.abs(np.asarray(a) - b).max() / np.abs(b).max())


def tone(freq, level_db, seconds=0.3, ramp=0.01):
    n = int(seconds * FS)
    t = np.arange(n) / FS
    x = np.sqrt(2) * P0 * 10 ** (level_db / 20) * np.sin(2 * np.pi * freq * t)
    r = int(ramp * FS)
    w = 0.5 * (1 - np.cos(np.pi * np.arange(r) / r))
    x[:r] *= w
    x[-r:] *= w[::-1]
    return x


@pytest.fixture(scope="module")
def models():
    return {
        (dt, preset): Moore2016(
            dtype=dt, preset=preset, specific_loudness_kwargs={"lowest_channel": "zero"}
        )
        for dt in (torch.float64, torch.float32)
        for preset in ("amt-1.4", "moore2016-original")
    }


@pytest.mark.parametrize("name", LOUDNESS_STIMULI)
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-5), (torch.float32, 1e-3)])
def test_fidelity_vs_amt(models, name, dtype, tol):
    d = _ref(name)
    x = torch.tensor(d["x_pa"].T)  # (2, T): left, right
    variants = [("amt-1.4", "")]
    if dtype == torch.float64 or name == "burst1k_60dB":  # 2016 AGC: f64 all files, f32 one
        variants.append(("moore2016-original", "_2016"))
    for preset, suffix in variants:
        out = models[(dtype, preset)].compute(x)
        assert out["stl"].shape == (len(d["frame_index"]),)
        for key in ("stl", "ltl", "stl_left", "stl_right", "ltl_left", "ltl_right"):
            stage = key.replace("_left", "_loud_left").replace("_right", "_loud_right")
            err = _rel(out[stage].double().numpy(), d[key + suffix])
            assert err < tol, (name, preset, key, err)
        if not suffix:
            for ear in ("left", "right"):
                assert _rel(out[f"inst_{ear}"].double().numpy(), d[f"inst_{ear}"]) < tol
            spec = torch.stack([out["inst_spec_loud_left"], out["inst_spec_loud_right"]], 1)
            spec = spec.double().numpy()[d["inst_spec_all_frames"]]
            assert _rel(spec, d["inst_spec_all"]) < tol
            stl_spec = out["stl_spec_loud_left"].double().numpy()[d["spec_frames"]]
            assert _rel(stl_spec, d["stl_spec"][:, 0]) < tol
            exc = out["excitation_left"].double().numpy()[d["spec_frames"]]
            ref_exc = d["excitation_db"][:, 0]
            ok = np.isfinite(ref_exc) & (ref_exc > -90.0)  # below: the model floors E at -100 dB
            assert np.abs(exc - ref_exc)[ok].max() < (1e-4 if dtype == torch.float64 else 1e-2)


def test_meta_calibration_matches_readme():
    d = _ref("tone1k_40dB")
    meta = json.loads(str(d["meta_json"]))
    assert meta  # provenance present
    assert np.allclose(d["erb_fc_hz"], Moore2016().erb_fc_hz, rtol=1e-6)


@pytest.fixture(scope="module")
def m64():
    return Moore2016(dtype=torch.float64)


def _loud(model, x_mono, ears="both"):
    x = np.stack([x_mono, x_mono])
    if ears == "left":
        x[1] = 0.0
    return float(model.compute(torch.tensor(x))["ltl"].max())


def test_one_sone_at_40_db(m64):
    assert abs(_loud(m64, tone(1000, 40, 0.5)) - 1.0) < 0.05


def test_phon_sone_table(m64):
    # ANSI S3.4-2007 / ISO 532-2 loudness of a 1-kHz binaural tone (sone) at 40 ... 90 phon
    table = {40: 1.0, 50: 1.97, 60: 3.9, 70: 7.6, 80: 14.8, 90: 28.8}
    for level, ref in table.items():
        got = _loud(m64, tone(1000, level, 0.3))
        assert abs(got / ref - 1) < 0.10, (level, got, ref)


def test_monaural_vs_diotic(m64):
    x = tone(1000, 60, 0.3)
    ratio = _loud(m64, x) / _loud(m64, x, "left")
    assert 1.35 < ratio < 1.65  # binaural inhibition: diotic ~1.5 x monaural


def test_silence_and_subthreshold(m64):
    z = np.zeros(8000)
    assert _loud(m64, z) == 0.0
    assert _loud(m64, tone(1000, 0, 0.25)) < 1e-3
    assert _loud(m64, tone(100, 20, 0.25)) < 1e-2  # below threshold at 100 Hz (~25 dB)


def test_frequency_dependence_equal_loudness(m64):
    # ISO 226:2003 equal-loudness contours (dB SPL) at 40 and 60 phon. The model's own contours
    # (ANSI S3.4-2007 ear transfer) differ by a few phon (at 4 kHz the ISO level is ~5 phon
    # louder in the model), so "roughly equal" = within a factor 1.5 (about +-6 phon); the
    # failure modes this guards against are off by factors >> 2.
    contours = {40: {250: 48.8, 1000: 40.0, 4000: 35.5}, 60: {250: 66.3, 1000: 60.0, 4000: 56.6}}
    for phon, pts in contours.items():
        vals = {f: _loud(m64, tone(f, lv, 0.3)) for f, lv in pts.items()}
        ref = vals[1000]
        for f, v in vals.items():
            assert 1 / 1.5 < v / ref < 1.5, (phon, f, vals)


def test_input_validation():
    m = Moore2016()
    with pytest.raises(ValueError, match="2 ear channels"):
        m(torch.zeros(3, 1000))
    with pytest.raises(ValueError, match="channels first"):
        m(torch.zeros(1000))
    with pytest.raises(ValueError, match="NaN or inf"):
        x = torch.zeros(2, 1000)
        x[0, 3] = float("nan")
        m(x)
    with pytest.raises(ValueError, match="too short"):
        m(torch.zeros(2, 10))
    with pytest.raises(ValueError, match="empty batch"):
        m(torch.zeros(0, 2, 3200))
    with pytest.raises(ValueError, match="unknown preset"):
        Moore2016(preset="nope")


def test_shapes_determinism_and_api():
    m = Moore2016()
    x = torch.tensor(np.stack([tone(1000, 60, 0.1), tone(2000, 50, 0.1)])).float()
    batch = torch.stack([x, x.flip(0)])
    stl, ltl, mx = m(batch)
    assert stl.shape == (2, m.n_frames(x.shape[-1])) and mx.shape == (2,)
    stl2, ltl2, _ = m(batch)
    assert torch.equal(stl, stl2) and torch.equal(ltl, ltl2)
    # swapping ears swaps the per-ear outputs; binaural loudness unchanged
    assert torch.allclose(stl[0], stl[1], rtol=1e-5, atol=1e-7)
    feats = m.specific_loudness_frames(x)
    assert feats["specific_loudness"].shape == (m.n_frames(x.shape[-1]), 300)
    assert m.n_features == 300 and len(m.erb_fc_hz) == 150 and m.frame_rate == 1000


def test_resampling_input():
    m = Moore2016(fs=16000, dtype=torch.float64)
    x16 = tone(1000, 40, 0.5)[::2]
    ltl = m.compute(torch.tensor(np.stack([x16, x16])))["ltl"]
    assert abs(float(ltl.max()) - 1.0) < 0.06


def test_gradients_flow():
    m = Moore2016(dtype=torch.float64, learnable=True)
    x = torch.tensor(np.stack([tone(1000, 50, 0.05)] * 2), requires_grad=True)
    stl, ltl, mx = m(x)
    ltl.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    assert m.c.grad is not None and m.inhibition_p.grad is not None

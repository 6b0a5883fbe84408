"""Osses2021 against the reference AMT 1.4 outputs, stage by stage (reference README
sections 5.4 and 6), plus the ear-filter designs, streaming and the extractor."""

import numpy as np
import pytest
import torch
from conftest import load_reference, pick, rel_err

from lhotse_amt.features import Osses2021Extractor
from lhotse_amt.functional.ear import headphone_fir, middle_ear_fir
from lhotse_amt.models.osses2021 import Osses2021

FILES = [(s, fs) for fs in (16000, 44100) for s in ("tone1k", "am8")]
FE = (("filterbank", "gt"), ("ihc", "ihc"), ("adaptation", "adapt"))


def _run(d, dtype, **kw):
    model = Osses2021(d["fs"], preset="amt-1.4", return_stages=True, dtype=dtype, **kw)
    chans, stages = model(torch.from_numpy(d["x"]).to(dtype))
    return model, chans, stages


def _mod_padded(chans):
    return torch.stack([torch.nn.functional.pad(c, (0, 0, 0, 12 - c.shape[0])) for c in chans])


@pytest.mark.parametrize("fs", [16000, 44100])
def test_ear_filter_design(fs):
    d = load_reference(f"osses2021_tone1k_fs{fs}.npz")
    assert rel_err(headphone_fir(fs, phase="linear"), d["hp_fir"]) <= 1e-12
    me = middle_ear_fir(fs, phase="minimum", normalize=False)
    assert rel_err(me, d["me_fir"]) <= 1e-12
    gain_db = 20 * np.log10(np.abs(np.fft.rfft(me, 16384)[:8192]).max())
    assert abs(gain_db - d["me_gain_TF_dB"]) <= 1e-9


@pytest.mark.parametrize("signal,fs", FILES)
def test_float64_every_stage(signal, fs):
    d = load_reference(f"osses2021_{signal}_fs{fs}.npz")
    tol = 1e-6 if fs == 16000 else 1e-5
    model, chans, stages = _run(d, torch.float64)
    assert np.allclose(model.fc.numpy(), d["fc_all"], rtol=1e-12)
    ear = stages["middleear"].numpy()[d["t_index"]]
    assert rel_err(ear, d["ear"]) <= tol
    for stage, ref in FE:
        assert rel_err(pick(stages[stage].numpy(), d), d[ref]) <= tol, stage
    for i, c in enumerate(d["channel_index"]):
        nb = d["n_mfc"][i]
        assert chans[c].shape == (nb, len(d["x"]))
        np.testing.assert_allclose(model.mfc[c].numpy(), d["mfc"][i, :nb], rtol=1e-12)
        y = chans[c].numpy()[:, d["t_index_mod"]]
        assert rel_err(y, d["mod"][i, :nb]) <= tol, c


@pytest.mark.parametrize("signal,fs", FILES)
def test_float32_every_stage(signal, fs):
    d = load_reference(f"osses2021_{signal}_fs{fs}.npz")
    _, chans, stages = _run(d, torch.float32)
    ear = stages["middleear"].numpy()[d["t_index"]]
    assert rel_err(ear, d["ear"]) <= 1e-3
    for stage, ref in FE:
        assert rel_err(pick(stages[stage].numpy(), d), d[ref]) <= 1e-3, stage
    y = pick(_mod_padded(chans).numpy(), d, mod=True)
    mask = np.arange(12)[None, :] < d["n_mfc"][:, None]
    assert np.abs(y - d["mod"])[mask].max() / np.abs(d["mod"]).max() <= 1e-3


def test_batched_inference_equals_stage_keeping_path_and_reference():
    """Without autograd a batch runs item by item through the fused kernel into one
    output: each item equals the single-signal call, the stage-keeping
    (``return_stages``) run to rounding, and still matches AMT."""
    d = load_reference("osses2021_am8_fs16000.npz")
    x = torch.from_numpy(d["x"])
    model, chans, _ = _run(d, torch.float64)
    fast = Osses2021(d["fs"], preset="amt-1.4", dtype=torch.float64)
    with torch.no_grad():
        batch = fast(torch.stack([x, 0.3 * x.flip(0), x]))
        single = fast(0.3 * x.flip(0))
    assert len(batch) == len(chans)
    for c, ref in enumerate(chans):
        assert batch[c].shape == (3, *ref.shape)
        # two float64 implementations (fused kernel, stage operators): rounding only
        assert rel_err(batch[c][0].numpy(), ref.numpy()) <= 1e-11
        assert torch.equal(batch[c][2], batch[c][0])
        assert torch.equal(batch[c][1], single[c])
    i, c = 0, int(d["channel_index"][0])
    y = batch[c][0].numpy()[:, d["t_index_mod"]]
    assert rel_err(y, d["mod"][i, : d["n_mfc"][i]]) <= 1e-6


@pytest.mark.parametrize("preset", ["amt-1.4", None])
def test_chunked_stream_equals_one_shot(preset):
    fs = 16000
    model = Osses2021(fs, preset=preset, flow=500, fhigh=4000, dtype=torch.float64)
    x = torch.randn(2, 3000, dtype=torch.float64) * 0.01
    lengths = [3000, 2100]
    x[1, 2100:] = 0
    ref = [model.run(x[b : b + 1, :n]) for b, n in enumerate(lengths)]
    D = model.lookahead
    assert D == (514 if preset else 0)
    xp = torch.nn.functional.pad(x, (0, D))
    state = model.initial_stream_state(lengths)
    outs = []
    for a, b in ((0, 700), (700, 1234), (1234, 3000 + D)):
        o, state = model.stream(xp[:, a:b], state)
        outs.append(o["modulation"])
    y = torch.cat(outs, -1)
    assert y.shape[-1] == 3000
    for b, n in enumerate(lengths):
        torch.testing.assert_close(y[b, ..., :n], ref[b]["modulation"][0], rtol=1e-9, atol=1e-9)


def test_extractor_equals_pooled_model_output():
    fs = 16000
    ex = Osses2021Extractor(
        Osses2021Extractor.config_type(
            preset="amt-1.4", flow=500.0, fhigh=4000.0, dtype="float64", chunk_duration=0.05
        )
    )
    x = (np.random.default_rng(1).standard_normal(2405) * 0.01).astype(np.float64)
    feats = ex.extract(x, fs)
    model = ex.model()
    y = model.run(torch.from_numpy(x)[None])["modulation"][0]  # (C, M, T)
    hop = ex.hop
    nf = feats.shape[0]
    cols = np.flatnonzero(~np.isnan(model.modulation.mfc_padded.numpy().reshape(-1)))
    y = y.reshape(-1, y.shape[-1])[cols].numpy()
    pooled = np.stack([y[:, j * hop : (j + 1) * hop].mean(-1) for j in range(nf)])
    np.testing.assert_allclose(feats, pooled, rtol=1e-5, atol=1e-6 * np.abs(pooled).max())
    assert len(ex.feature_names()) == feats.shape[1]


def test_options_and_presets():
    fs = 16000
    x = torch.randn(1000) * 0.01
    trim = Osses2021(fs, compensation="trim", flow=1000, fhigh=2000)
    assert trim(x)[0].shape[-1] == 1000 - 512
    lin = Osses2021(fs, phase_type="linear", flow=1000, fhigh=2000)
    h = lin.headphone.h.numpy()
    assert np.allclose(h, h[::-1]) and lin.lookahead == 0
    # explicit keyword arguments override the preset
    m = Osses2021(fs, preset="amt-1.4", compensation="none", flow=1000, fhigh=2000)
    assert m.lookahead == 0 and m.headphone.phase == "linear"
    m = Osses2021(fs, preset="amt-1.4", modulation_kwargs={"preset": "jepsen2008"})
    assert float(m.modulation.max_mfc) == 150.0
    assert Osses2021(fs).phase_type == "minimum"


def test_bad_input_and_determinism():
    fs = 16000
    model = Osses2021(fs, flow=1000, fhigh=2000)
    x = torch.randn(800) * 0.01
    a, b = model(x), model(x)
    for u, v in zip(a, b):
        assert torch.equal(u, v)
    for bad in (torch.full((100,), float("nan")), torch.tensor([0.0, float("inf")] * 50)):
        with pytest.raises(ValueError, match="NaN or infinite"):
            model(bad)
    with pytest.raises(ValueError, match="dimensions"):
        model(torch.zeros(1, 1, 100))
    with pytest.raises(ValueError, match="empty batch"):
        model(torch.zeros(0, 100))
    with pytest.raises(ValueError, match="Nyquist"):
        Osses2021(16000, fhigh=9000)
    with pytest.raises(ValueError, match="phase_type"):
        Osses2021(fs, phase_type="zero")
    with pytest.raises(ValueError, match="preset"):
        Osses2021(fs, preset="nope")

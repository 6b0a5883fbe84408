"""Dau1997 against the reference AMT outputs, stage by stage (reference README sections
5.2 and 6)."""

import numpy as np
import pytest
import torch
from conftest import load_reference, pick, rel_err

from lhotse_amt import Dau1997

FILES = [(s, fs) for fs in (16000, 44100) for s in ("tone1k", "am8")]
# (preset, stored array, band-count key)
PRESETS = [
    ("amt-1.4", "mod_default", "n_mfc_default"),
    ("amt-1.4-mfb-dau1997", "mod_mfbdau", "n_mfc_mfbdau"),
    ("amt-0.9.10", "mod_mfbdau", "n_mfc_default"),
]


def _run(d, preset, dtype):
    model = Dau1997(d["fs"], preset=preset, return_stages=True, dtype=dtype)
    chans, stages = model(torch.from_numpy(d["x"]).to(dtype))
    return model, chans, stages


@pytest.mark.parametrize("signal,fs", FILES)
@pytest.mark.parametrize("preset,key,nkey", PRESETS)
def test_float64_every_stage(signal, fs, preset, key, nkey):
    d = load_reference(f"dau1997_{signal}_fs{fs}.npz")
    tol = 1e-6 if fs == 16000 else 1e-5
    model, chans, stages = _run(d, preset, torch.float64)
    assert np.allclose(model.fc.numpy(), d["fc_all"], rtol=1e-12)
    for stage, ref in (("filterbank", "gt"), ("ihc", "ihc"), ("adaptation", "adapt")):
        err = rel_err(pick(stages[stage].numpy(), d), d[ref])
        assert err <= tol, (stage, err)
    n_bands = model.modulation.n_bands.numpy()[d["channel_index"]]
    assert (n_bands == d[nkey]).all()
    for i, c in enumerate(d["channel_index"]):
        nb = d[nkey][i]
        assert chans[c].shape == (nb, len(d["x"]))
        y = chans[c].numpy()[:, d["t_index_mod"]]
        mfc = model.mfc[c].numpy()
        np.testing.assert_allclose(mfc, d[key.replace("mod", "mfc")][i, :nb], rtol=1e-12)
        assert rel_err(y, d[key][i, :nb]) <= tol, (c, rel_err(y, d[key][i, :nb]))


@pytest.mark.parametrize("signal,fs", FILES)
def test_float32_every_stage(signal, fs):
    d = load_reference(f"dau1997_{signal}_fs{fs}.npz")
    model, chans, stages = _run(d, "amt-1.4", torch.float32)
    for stage, ref in (("filterbank", "gt"), ("ihc", "ihc"), ("adaptation", "adapt")):
        assert rel_err(pick(stages[stage].numpy(), d), d[ref]) <= 1e-3
    # relative to the stage's max |value| (channels far from the tone carry only roundoff)
    mod = torch.stack([torch.nn.functional.pad(c, (0, 0, 0, 12 - c.shape[0])) for c in chans])
    y = pick(mod.numpy(), d, mod=True)
    mask = np.arange(12)[None, :] < d["n_mfc_default"][:, None]
    diff = np.abs(y - d["mod_default"])[mask]
    assert diff.max() / np.abs(d["mod_default"]).max() <= 1e-3


def test_gammatone_impulse_response():
    for fs in (16000, 44100):
        d = load_reference(f"gammatone_impulse_fs{fs}.npz")
        model = Dau1997(fs, preset="amt-1.4", dtype=torch.float64)
        y = model.filterbank(torch.from_numpy(d["x"]).double()).numpy()
        assert rel_err(pick(y, d), d["gt_impulse"]) <= 1e-6

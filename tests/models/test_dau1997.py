"""Dau1997: documented shapes, defaults, presets, streaming, gradients and bad input."""

import numpy as np
import pytest
import torch

from lhotse_amt import Dau1997


def _tone(fs, dur=0.2, level=60.0, f=1000.0):
    t = torch.arange(int(dur * fs), dtype=torch.float64) / fs
    return np.sqrt(2) * 10 ** ((level - 100) / 20) * torch.sin(2 * np.pi * f * t)


def test_default_layout_follows_documentation():
    m = Dau1997(44100, return_stages=True)
    assert m.num_channels == 31
    x = torch.randn(2, 4410) * 0.01
    out, stages = m(x)
    assert len(out) == 31 and all(o.shape == (2, 8, 4410) for o in out)
    assert set(stages) == {"filterbank", "ihc", "adaptation"}
    assert all(v.shape == (2, 31, 4410) for v in stages.values())
    mono = Dau1997(44100)(x[0])
    assert mono[0].shape == (8, 4410)


def test_presets_and_overrides():
    m = Dau1997(16000, preset="amt-1.4")
    assert m.num_channels == 30 and abs(float(m.fc[12]) - 1000) < 1e-3
    assert m.modulation.use_lp150_prefilter and abs(m.modulation.att_factor - 2**-0.5) < 1e-12
    assert [len(b) for b in m.mfc][:3] == [4, 5, 6]
    m2 = Dau1997(16000, preset="amt-1.4", modulation_kwargs={"att_factor": 1.0})
    assert m2.modulation.att_factor == 1.0 and m2.modulation.use_lp150_prefilter
    assert all(len(b) == 12 for b in Dau1997(16000, preset="amt-1.4-mfb-dau1997").mfc)
    with pytest.raises(ValueError, match="preset"):
        Dau1997(16000, preset="amt-9")


def test_level_dependence_in_model_units():
    m = Dau1997(16000, return_stages=True, dtype=torch.float64)
    lv = []
    for level in (40.0, 60.0, 80.0):
        _, st = m(_tone(16000, 0.5, level))
        lv.append(float(st["adaptation"][..., 4000:].mean(-1).max()))
    assert lv[0] < lv[1] < lv[2]
    _, st = m(torch.zeros(1600, dtype=torch.float64))
    assert st["adaptation"].abs().max() < 1e-9  # silence = 0 MU


def test_streaming_equals_one_shot_and_no_hidden_state():
    m = Dau1997(16000, dtype=torch.float64)
    x = torch.randn(2, 3000, dtype=torch.float64) * 0.01
    full, _ = m.stream(x)
    a, s = m.stream(x[:, :1234])
    b, _ = m.stream(x[:, 1234:], s)
    joined = torch.cat([a["modulation"], b["modulation"]], -1)
    assert torch.allclose(joined, full["modulation"], rtol=1e-10, atol=1e-10)
    y1 = m(x)
    y2 = m(x)
    assert all(torch.equal(p, q) for p, q in zip(y1, y2))


def test_batched_inference_equals_graph_path():
    """Without autograd a batch runs item by item into one output tensor (compiled
    kernels): item for item the values of the autograd path (plain-torch recursions,
    rounding differences only) and of the single-signal call (identical)."""
    m = Dau1997(16000, dtype=torch.float64)
    x = torch.randn(3, 2500, dtype=torch.float64) * 0.01
    with torch.no_grad():
        fast = m(x)
    graph = m(x.clone().requires_grad_(True))
    assert all(g.requires_grad for g in graph) and not any(f.requires_grad for f in fast)
    for f, g in zip(fast, graph):
        torch.testing.assert_close(f, g.detach(), rtol=1e-8, atol=1e-12)
    with torch.no_grad():
        one = m(x[1])
    for f, o in zip(fast, one):
        assert torch.equal(f[1], o)


def test_backward_through_whole_model():
    m = Dau1997(8000, fhigh=3000, learnable=True, dtype=torch.float64)
    x = torch.randn(1, 200, dtype=torch.float64) * 0.02
    x[:, :50] = 0.0  # silent start: |y| = 0 in the modulation bands must not give NaN
    x.requires_grad_(True)
    loss = sum(o.square().mean() for o in m(x))
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for name, p in m.named_parameters():
        assert (
            p.grad is not None
            and torch.isfinite(torch.view_as_real(p.grad) if p.is_complex() else p.grad).all()
        ), name
    assert m.filterbank.fc.grad.abs().sum() > 0 and m.adaptation.tau.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "bad, match",
    [
        (torch.tensor([0.0, float("nan"), 0.1]), "NaN"),
        (torch.tensor([0.0, float("inf"), 0.1]), "NaN or infinite"),
        (torch.zeros(2, 2, 100), "dimensions"),
        (torch.zeros(0), "too short"),
        (torch.zeros(0, 100), "empty batch"),
        (torch.zeros(100, dtype=torch.int16), "floating point"),
    ],
)
def test_bad_input(bad, match):
    with pytest.raises(ValueError, match=match):
        Dau1997(16000)(bad)


def test_channels_above_nyquist_rejected():
    with pytest.raises(ValueError, match="Nyquist"):
        Dau1997(8000, fhigh=8000)

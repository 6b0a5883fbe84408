"""DRNL filterbank against the AMT 0.9.10 ``lopezpoveda2001`` reference outputs (reference
README sections 5.5 and 6), plus streaming, gradients and input errors."""

import numpy as np
import pytest
import scipy.signal as ss
import torch
from conftest import load_reference, pick, rel_err

from lhotse_amt.functional.drnl import design_drnl, drnl
from lhotse_amt.modules.drnl import DRNLFilterbank

FILES = [(s, fs) for fs in (16000, 44100) for s in ("tone1k", "am8")]
# (stored array, preset, middle-ear FIR key, headphone filter first, float64 tolerance)
RUNS = [
    ("drnl", "jepsen2008", "me_fir", True, 1e-7),
    ("lp2001_drnl", "lopezpoveda2001", "lp2001_me_fir", False, 1e-4),
]


def _stapes(d, me_key, headphone):
    """Plain causal FIRs, as the reference runs applied them (README 5.5)."""
    x = d["x"]
    if headphone:
        x = ss.lfilter(d["hp_fir"], 1.0, x)
    return ss.lfilter(d[me_key], 1.0, x)


@pytest.mark.parametrize("signal,fs", FILES)
@pytest.mark.parametrize("key,preset,me_key,headphone,tol", RUNS)
def test_drnl_float64_matches_amt(signal, fs, key, preset, me_key, headphone, tol):
    d = load_reference(f"drnl_{signal}_fs{fs}.npz")
    fb = DRNLFilterbank(fs, flow=80.0, fhigh=d["fhigh"], preset=preset, dtype=torch.float64)
    np.testing.assert_allclose(fb.fc.numpy(), d["fc_all"], rtol=1e-12)
    x = torch.from_numpy(_stapes(d, me_key, headphone))
    for backend in ("numba", "torch"):
        y = fb(x, backend=backend).numpy()
        err = rel_err(pick(y, d), d[key])
        assert err <= tol, (backend, err)


@pytest.mark.parametrize("signal,fs", FILES)
def test_drnl_float32_matches_amt(signal, fs):
    d = load_reference(f"drnl_{signal}_fs{fs}.npz")
    for key, preset, me_key, headphone, _ in RUNS:
        fb = DRNLFilterbank(fs, flow=80.0, fhigh=d["fhigh"], preset=preset)
        y = fb(torch.from_numpy(_stapes(d, me_key, headphone)).float()).numpy()
        assert rel_err(pick(y, d), d[key]) <= 1e-3


def test_design_parameters():
    d = design_drnl(44100, np.array([500.0, 1000.0, 4000.0]), "jepsen2008")
    p = d.params
    np.testing.assert_allclose(p["lin_gain"], 10**4.20405 * np.array([500, 1000, 4000]) ** -0.47909)
    # compression parameters frozen above 1.5 kHz for jepsen2008 only
    assert p["a"][2] == pytest.approx(10**1.40298 * 1500**0.81916)
    q = design_drnl(44100, np.array([4000.0]), "lopezpoveda2001").params
    assert q["a"][0] == pytest.approx(10**1.40298 * 4000**0.81916)
    assert d.nl_gt.shape == (3, 2, 6) and d.lin_lp.shape == (3, 4, 6) and d.nl_lp.shape == (3, 3, 6)
    # every gammatone is 0 dB at its centre frequency
    w, h = ss.sosfreqz(d.lin_gt[1], worN=[p["lin_fc"][1]], fs=44100)
    assert abs(h[0]) == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_drnl_streaming_equals_one_shot(backend):
    fb = DRNLFilterbank(16000, flow=100, fhigh=5000, dtype=torch.float64)
    x = torch.randn(2, 3000, dtype=torch.float64) * 0.01
    full = fb(x, backend=backend)
    a, s = fb(x[:, :1234], return_state=True, backend=backend)
    b, s = fb(x[:, 1234:1235], s, return_state=True, backend=backend)
    c = fb(x[:, 1235:], s, backend=backend)
    tol = 1e-9 * float(full.abs().max())
    torch.testing.assert_close(torch.cat([a, b, c], -1), full, rtol=0, atol=tol)
    # the numba and torch paths agree, and their states are interchangeable
    other = "torch" if backend == "numba" else "numba"
    c2 = fb(x[:, 1235:], s, backend=other)
    torch.testing.assert_close(c2, c, rtol=0, atol=tol)


def test_drnl_gradcheck():
    fb = DRNLFilterbank(16000, fc=[1200.0], dtype=torch.float64, learnable=True)
    x = (torch.randn(1, 10, dtype=torch.float64) * 1e-3).requires_grad_()

    def f(x, a, g):
        return drnl(x, g, fb.lin_gt, fb.lin_lp, fb.nl_gt, fb.nl_lp, a, fb.b, fb.c)

    assert torch.autograd.gradcheck(
        f, (x, fb.a, fb.lin_gain), eps=1e-9, atol=1e-6, rtol=1e-4, fast_mode=True
    )
    y = fb(x)
    y.square().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in fb.parameters())


def test_drnl_channels_above_nyquist():
    with pytest.raises(ValueError, match="Nyquist"):
        DRNLFilterbank(16000, flow=80, fhigh=8000)  # non-linear path above 8 kHz
    with pytest.raises(ValueError, match="Nyquist"):
        DRNLFilterbank(16000, fc=[7900.0])
    with pytest.raises(ValueError, match="preset"):
        DRNLFilterbank(16000, preset="nope")

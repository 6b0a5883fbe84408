"""Physiological IHC of Paulick et al. (2024): kernels vs the plain-torch definition, a
direct float64 evaluation of the circuit equations, resting state and saturation."""

import math

import numpy as np
import pytest
import torch

from lhotse_amt.functional.ihc_paulick import IHC_PAULICK_CONSTANTS, ihc_paulick
from lhotse_amt.modules.ihc_paulick import IHCPaulick2024
from lhotse_amt.ops import paulick as ops_paulick

P = IHC_PAULICK_CONSTANTS


def _velocity(shape, level=3e-3, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * level


def _direct(v: np.ndarray, fs: float) -> np.ndarray:
    """The documented equations, literally, in float64: pre-charge by iteration from V_rest,
    then forward Euler on V; output V - V_pre."""
    dt = 1.0 / fs
    V = P["V_rest"]
    for _ in range(int(round(0.05 * fs))):
        I = (
            -P["G_precharge"] * (V - P["EP"])
            - P["Gkf"] * (V - P["Ekf"])
            - P["Gks"] * (V - P["Eks"])
        )
        V = V + dt / P["Cm"] * I
    v_pre = V
    out = np.empty_like(v)
    for n, vel in enumerate(v):
        d = P["scaling_factor"] * vel
        G = P["Gmet_max"] / (
            1 + math.exp((P["x0"] - d) / P["s1"]) * (1 + math.exp((P["x0"] - d) / P["s0"]))
        )
        I = -G * (V - P["EP"]) - P["Gkf"] * (V - P["Ekf"]) - P["Gks"] * (V - P["Eks"])
        V = V + dt / P["Cm"] * I
        out[n] = V - v_pre
    return out


@pytest.mark.parametrize("fs", [16000, 44100])
def test_matches_direct_float64_evaluation(fs):
    v = _velocity((400,), level=5e-3).numpy()
    v[200:260] *= 30  # drive into saturation for a while
    ref = _direct(v, fs)
    y = IHCPaulick2024(fs)(torch.from_numpy(v)).numpy()
    assert np.abs(y - ref).max() <= 1e-12 * np.abs(ref).max()


def test_numba_matches_reference():
    x = _velocity((2, 3, 300))
    x[..., 100:150] *= 50
    yr, wr = ihc_paulick(x, 44100, backend="torch", return_state=True)
    yn, wn = ihc_paulick(x, 44100, backend="numba", return_state=True)
    assert (yr - yn).abs().max() <= 1e-13 * yr.abs().max()
    assert (wr - wn).abs().max() <= 1e-15
    y32 = ihc_paulick(x.float(), 44100, backend="numba")
    assert (y32.double() - yr).abs().max() <= 1e-5 * yr.abs().max()
    # streaming
    a, s = ihc_paulick(x[..., :123], 44100, backend="numba", return_state=True)
    b = ihc_paulick(x[..., 123:], 44100, state=s, backend="numba")
    assert torch.equal(torch.cat([a, b], -1), yn)


@pytest.mark.parametrize("shape", [(2, 3, 300), (3, 300), (300,)])
def test_numba_and_triton_backends_run_the_no_grad_operator(shape, monkeypatch):
    # "numba" and "triton" name the no-grad operator lhotse_amt::paulick_ihc (the device
    # picks its kernel); "auto" runs it for eager inference; the kernels run in the
    # signal's dtype
    x = _velocity(shape)
    x[..., 100:150] *= 50
    for dtype in (torch.float64, torch.float32):
        xd = x.to(dtype)
        y, w = ihc_paulick(xd, 44100, backend="numba", return_state=True)
        assert y.dtype == w.dtype == dtype and y.shape == xd.shape and w.shape == shape[:-1]
        for backend in ("triton", "auto"):
            a, s = ihc_paulick(xd, 44100, backend=backend, return_state=True)
            assert torch.equal(a, y) and torch.equal(s, w)
    calls = []
    real = ops_paulick.ihc

    def spy(*args):
        calls.append(args[0].shape)
        return real(*args)

    monkeypatch.setattr(ops_paulick, "ihc", spy)
    ihc_paulick(x, 44100, backend="numba")
    assert calls == [x.shape]


def test_resting_potential_and_silence():
    ihc = IHCPaulick2024(44100)
    # circuit steady state at G_precharge (= G(0)); the pre-charge lands on it
    g, ekf, eks = P["G_precharge"], P["Ekf"], P["Eks"]
    vss = (g * P["EP"] + P["Gkf"] * ekf + P["Gks"] * eks) / (g + P["Gkf"] + P["Gks"])
    assert float(ihc.V_ss) == pytest.approx(vss, rel=1e-12)
    assert float(ihc.V_ss) == pytest.approx(-61.66e-3, abs=0.01e-3)
    assert float(ihc.V_pre) == pytest.approx(vss, rel=1e-12)
    # G_precharge equals the MET conductance at rest to its 5 digits
    g0 = P["Gmet_max"] / (1 + math.exp(P["x0"] / P["s1"]) * (1 + math.exp(P["x0"] / P["s0"])))
    assert g0 == pytest.approx(P["G_precharge"], rel=2e-5)
    for dtype in (torch.float32, torch.float64):
        y = ihc(torch.zeros(2, 4, 2000, dtype=dtype))
        assert y.abs().max() < 1e-8  # volts: far below the adaptation minimum (1e-5)


def test_saturation():
    ihc = IHCPaulick2024(44100)
    vpre = float(ihc.V_pre)
    k = (P["Gkf"], P["Gks"], P["Ekf"], P["Eks"])
    v_hi = (P["Gmet_max"] * P["EP"] + k[0] * k[2] + k[1] * k[3]) / (P["Gmet_max"] + k[0] + k[1])
    v_lo = (k[0] * k[2] + k[1] * k[3]) / (k[0] + k[1])
    # a very loud tone: the potential stays inside the two saturation levels
    t = torch.arange(8820, dtype=torch.float64) / 44100
    y = ihc(1e2 * torch.sin(2 * math.pi * 1000 * t))
    assert float(y.max()) <= v_hi - vpre + 1e-12 and float(y.min()) >= v_lo - vpre - 1e-12
    # constant huge displacements drive it to the limits themselves
    up = ihc(torch.full((2000,), 1e3, dtype=torch.float64))
    down = ihc(torch.full((2000,), -1e3, dtype=torch.float64))
    assert float(up[-1]) == pytest.approx(v_hi - vpre, rel=1e-9)
    assert float(down[-1]) == pytest.approx(v_lo - vpre, rel=1e-9)
    assert float(up[-1]) == pytest.approx(58.07e-3, abs=0.01e-3)
    # float32 kernels saturate without overflow
    assert torch.isfinite(ihc(torch.full((3, 500), -1e30))).all()


def test_gradcheck_and_learnable_constants():
    ihc = IHCPaulick2024(16000, learnable=True)
    assert sum(p.numel() for p in ihc.parameters()) == 13
    x = (_velocity((2, 12), level=4e-3)).requires_grad_()
    assert torch.autograd.gradcheck(lambda v: ihc(v) * 1e3, (x,), eps=1e-7, atol=1e-7)
    ihc(x).sum().backward()
    grads = [p.grad for p in ihc.parameters()]
    assert all(g is not None and torch.isfinite(g) for g in grads)


def test_bad_sampling_rate():
    with pytest.raises(ValueError, match="too low"):
        IHCPaulick2024(4000)

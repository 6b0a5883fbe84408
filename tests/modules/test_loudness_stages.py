"""Loudness stage modules: each equals its functional stage, holds its coefficients as buffers
(parameters when learnable) and refuses bad settings with a clear error."""

import numpy as np
import pytest
import torch

from lhotse_amt.functional import loudness as L
from lhotse_amt.kernels.loudness_plans import KeepRule
from lhotse_amt.modules import loudness as M

D = torch.float64
FC = L.cam_to_hz(np.arange(1.75, 39.01, 0.25))


def _intensity(frames=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return 10.0 ** (6.0 * torch.rand(1, frames, L.N_BINS, dtype=D, generator=g) - 2.0)


def test_outer_middle_ear_filter_is_zero_phase_fir():
    ear = M.OuterMiddleEarFilter(dtype=D)
    assert ear.delay == 2048 and not list(ear.parameters())
    x = torch.zeros(1, 100, dtype=D)
    x[0, 10] = 1.0
    y = ear(x)
    assert y.shape == (1, 100 + 4096)
    assert torch.allclose(y[0, 10 : 10 + 4097], ear.fir, atol=1e-12)
    with pytest.raises(ValueError, match="odd length"):
        M.OuterMiddleEarFilter(np.ones(4))
    with pytest.raises(ValueError, match="finite"):
        M.OuterMiddleEarFilter(np.array([1.0, np.nan, 1.0]))


def test_spectrum_keep_rules():
    i = _intensity()
    pruned = M.MultiResolutionSpectrum("moore2016", prune=True, dtype=D)
    floored = M.MultiResolutionSpectrum("gm2002", floor=1.0, dtype=D)
    assert torch.equal(pruned.kept(i), L.prune_components(i))
    assert torch.equal(floored.kept(i), i > 1.0)
    assert pruned.keep_rule == KeepRule(True, 1000.0)
    assert floored.keep_rule == KeepRule(False, 1.0)
    assert sum(len(b) for b in pruned.bins) == L.N_BINS
    z = 0.01 * torch.randn(1, 6000, dtype=D)
    bases = [(ln, b, torch.tensor(m)) for ln, b, m in L.dft_bases("gm2002")]
    assert torch.equal(floored(z, -100, 0, 20), L.multires_intensity(z, -100, 0, 20, bases))
    with pytest.raises(ValueError, match="variant"):
        M.MultiResolutionSpectrum("nope")


@pytest.mark.parametrize("variant", ["moore2016", "component", "gm2002"])
def test_excitation_stages_equal_functional(variant):
    i = _intensity()
    m = L.excitation_matrices(FC, variant)
    t = [torch.tensor(v) for v in (m.level, m.upper, m.lower_h)]
    erb = M.ERBIntegration(FC, variant, D)
    exc = M.ExcitationPattern(FC, variant, dtype=D)
    level = erb(i)
    assert torch.equal(level, L.erb_level_db(i, t[0]))
    e = exc(i, level)
    if variant == "gm2002":
        assert torch.equal(e, L.excitation_gm2002(i, m)[0])
    else:
        keep = torch.ones_like(i, dtype=torch.bool)
        assert torch.allclose(e, L.excitation_moore2016(i, keep, m)[0], rtol=1e-14)
    # a subset of bins (the sparse-spectrum path) equals zeros in the other bins
    cols = torch.arange(100, 700)
    sub = torch.zeros_like(i)
    sub[..., cols] = i[..., cols]
    e_sub = exc(i[..., cols], erb(i[..., cols], cols), cols)
    assert torch.allclose(e_sub, exc(sub, erb(sub)), rtol=1e-10)
    with_level = M.ExcitationPattern(FC, variant, with_level=True, dtype=D)
    assert torch.equal(with_level(i), e)
    with pytest.raises(ValueError, match="level_db"):
        exc(i)


def test_specific_loudness_module():
    sl = M.SpecificLoudness(FC, 0.0631, "moore2016", "zero", dtype=D)
    e = 10.0 ** torch.linspace(-2, 11, len(FC), dtype=D)
    prm = L.specific_loudness_params(FC)
    ref = L.specific_loudness(
        e,
        L.SpecificLoudnessParams(
            *(torch.tensor(getattr(prm, k)) for k in ("e_thrq", "g", "alpha", "a"))
        ),
        0.0631,
        "moore2016",
    )
    out = sl(e)
    assert out[0] == 0.0 and sl.channel_mask[0] == 0.0  # outside the A(G) table (Octave)
    assert torch.allclose(out[1:], ref[1:], rtol=1e-14)
    learn = M.SpecificLoudness(FC, 0.0631, learnable=True, dtype=D)
    learn(e).sum().backward()
    assert learn.c.grad is not None and float(learn.c.grad) > 0
    with pytest.raises(ValueError, match="high_level"):
        M.SpecificLoudness(FC, 0.0631, high_level="loud")
    with pytest.raises(ValueError, match="c"):
        M.SpecificLoudness(FC, -1.0)


def test_agc_and_integration_modules():
    x = torch.rand(2, 50, dtype=D)
    agc = M.LoudnessAGC(0.045, 0.02)
    assert torch.allclose(agc(x), L.agc_reference(x, 0.045, 0.02), rtol=1e-12)
    li = M.LoudnessIntegration(0.045, 0.02, 0.01, 0.0005, diotic=True)
    spec = torch.rand(2, 50, 7, dtype=D)
    inst, stl, ltl = li(spec)
    assert torch.allclose(inst, spec.sum(-1) / 2.0)
    assert torch.allclose(ltl, L.agc_reference(stl, 0.01, 0.0005), rtol=1e-12)
    with pytest.raises(ValueError, match="attack_alpha"):
        M.LoudnessAGC(1.5, 0.02)


def test_binaural_inhibition_module():
    s_l = torch.rand(4, len(FC), dtype=D) + 0.1
    s_r = 0.5 * s_l
    bi = M.BinauralInhibition(len(FC), learnable=True, dtype=D)
    out = bi(s_l, s_r)
    ref = L.binaural_inhibition_reference(s_l, s_r, bi.smooth, 1.5978)
    assert all(torch.allclose(a, b, rtol=1e-12) for a, b in zip(out, ref))
    assert bool((out[0] < s_l).all())  # the other ear inhibits
    sum(o.sum() for o in out).backward()
    assert bi.p.grad is not None and float(bi.p.grad) != 0.0
    with pytest.raises(ValueError, match="sigma"):
        M.BinauralInhibition(len(FC), sigma=0.0)

"""The torch_amt surface of Glasberg2002 and Moore2016: documented constructor parameters in
the documented order (ours keyword-only after them), stage submodules, ``return_stages`` keys
and methods, each checked for what it does."""

import inspect

import pytest
import torch

from lhotse_amt.functional.loudness import hz_to_cam
from lhotse_amt.models.glasberg2002 import Glasberg2002
from lhotse_amt.models.moore2016 import Moore2016
from lhotse_amt.modules import loudness as M

D = torch.float64

DOCUMENTED = {
    Glasberg2002: [
        "fs",
        "learnable",
        "return_stages",
        "multi_fft_kwargs",
        "erb_kwargs",
        "excitation_kwargs",
        "specific_loudness_kwargs",
        "loudness_integration_kwargs",
    ],
    Moore2016: [
        "fs",
        "learnable",
        "return_stages",
        "dtype",
        "outer_middle_ear_kwargs",
        "spectrum_kwargs",
        "excitation_kwargs",
        "specific_loudness_kwargs",
        "temporal_integration_kwargs",
        "binaural_loudness_kwargs",
        "ltl_agc_kwargs",
    ],
}

STAGES = {
    Glasberg2002: {
        "multi_fft": M.MultiResolutionSpectrum,
        "erb_integration": M.ERBIntegration,
        "excitation_pattern": M.ExcitationPattern,
        "specific_loudness": M.SpecificLoudness,
        "loudness_integration": M.LoudnessIntegration,
    },
    Moore2016: {
        "outer_middle_ear": M.OuterMiddleEarFilter,
        "spectrum": M.MultiResolutionSpectrum,
        "excitation": M.ExcitationPattern,
        "specific_loudness": M.SpecificLoudness,
        "temporal_integration": M.LoudnessAGC,
        "binaural_loudness": M.BinauralInhibition,
        "ltl_agc_left": M.LoudnessAGC,
        "ltl_agc_right": M.LoudnessAGC,
    },
}

STAGE_KEYS = {
    Glasberg2002: {"stl", "specific_loudness", "excitation", "erb_excitation", "psd", "freqs"},
    Moore2016: {
        f"{k}_{ear}"
        for k in (
            "filtered",
            "freqs",
            "levels",
            "excitation",
            "inst_spec_loud",
            "stl_spec_loud",
            "stl_loud",
            "ltl_loud",
        )
        for ear in ("left", "right")
    },
}


def _input(cls, n=3200, batch=2):
    g = torch.Generator().manual_seed(0)
    x = 0.05 * torch.randn(batch, n, dtype=D, generator=g)
    if cls is Moore2016:
        return torch.stack([x, 0.5 * x], 1)
    return x


@pytest.mark.parametrize("cls", DOCUMENTED)
def test_documented_parameters_come_first_and_ours_are_keyword_only(cls):
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    doc = DOCUMENTED[cls]
    assert [p.name for p in params[: len(doc)]] == doc
    assert all(p.kind is p.POSITIONAL_OR_KEYWORD for p in params[: len(doc)])
    assert all(p.kind is p.KEYWORD_ONLY for p in params[len(doc) :])
    with pytest.raises(TypeError):
        cls(32000, False, False, None, None, None, None, None, None, None, None, None)


@pytest.mark.parametrize("cls", STAGES)
def test_stage_submodules(cls):
    model = cls(dtype=D)
    for name, kind in STAGES[cls].items():
        assert isinstance(getattr(model, name), kind), name
    if cls is Glasberg2002:
        assert model.erb_integration.n_erb_bands == model.n_channels == 149
    else:
        assert isinstance(model.excitation.erb_integration, M.ERBIntegration)


@pytest.mark.parametrize("cls", STAGE_KEYS)
def test_return_stages_keys_and_shapes(cls):
    model = cls(dtype=D, return_stages=True)
    x = _input(cls)
    out, stages = model(x)
    assert STAGE_KEYS[cls] <= set(stages)
    f = model.n_frames(x.shape[-1])
    if cls is Glasberg2002:
        assert torch.equal(out, stages["ltl"])
        assert stages["psd"].shape == (2, f, 960) and stages["freqs"].shape == (960,)
        assert float(stages["freqs"][0]) == 15.625 and float(stages["freqs"][-1]) == 15000.0
        # the excitation comes from the spectrum: a louder signal has more power and excitation
        louder = model(2.0 * x)[1]
        assert torch.allclose(louder["psd"], 4.0 * stages["psd"], rtol=1e-9, atol=1e-30)
    else:
        stl, ltl, mx = out
        assert torch.allclose(stl, stages["stl_loud_left"] + stages["stl_loud_right"])
        assert torch.allclose(ltl, stages["ltl_loud_left"] + stages["ltl_loud_right"])
        assert torch.equal(mx, ltl.amax(-1))
        assert stages["filtered_left"].shape == (2, x.shape[-1])
        assert torch.allclose(stages["filtered_right"], 0.5 * stages["filtered_left"])
        lv = stages["levels_left"]
        assert lv.shape == stages["freqs_left"].shape == (2, f, 960)
        # discarded components are -inf; the kept ones are levels in dB SPL
        kept = torch.isfinite(lv)
        assert kept.any() and (~kept).any() and float(lv[kept].max()) < 120.0
        assert torch.allclose(
            stages["levels_right"][kept],
            lv[kept] + 20 * torch.log10(torch.tensor(0.5, dtype=D)),
            atol=1e-9,
        )
    plain = cls(dtype=D)(x)
    for a, b in zip(
        plain if isinstance(plain, tuple) else [plain], out if isinstance(out, tuple) else [out]
    ):
        assert torch.equal(a, b)


@pytest.mark.parametrize("cls", STAGES)
def test_methods(cls):
    model = cls(dtype=D, learnable=True)
    fc = model.get_erb_frequencies()
    assert fc.shape == (model.n_channels,) and bool((fc.diff() > 0).all())
    sone = torch.tensor([0.5, 1.0, 2.0, 4.0])
    assert torch.allclose(model.compute_loudness_level(sone), torch.tensor([30.0, 40, 50, 60]))
    x = _input(cls, batch=1)
    with torch.no_grad():
        first = model(x)
        model.reset_state()  # nothing carried between calls: the same result before and after
        again = model(x)
    for a, b in zip(
        first if isinstance(first, tuple) else [first],
        again if isinstance(again, tuple) else [again],
    ):
        assert torch.equal(a, b)
    learn = model.get_learnable_parameters()
    assert "specific_loudness" in learn and float(learn["specific_loudness"]["c"]) > 0
    if cls is Moore2016:
        assert float(learn["binaural_loudness"]["p"]) == pytest.approx(1.5978)
    assert cls(dtype=D).get_learnable_parameters() == {}
    prm = model.get_parameters()
    assert prm["fs"] == 32000 and prm["learnable"] and not prm["return_stages"]
    assert "fs=32000" in model.extra_repr()


def test_glasberg2002_band_edges_in_hz():
    model = Glasberg2002(erb_kwargs={"f_min": 80.0, "f_max": 12000.0, "erb_step": 0.5})
    fc = model.get_erb_frequencies()
    assert float(fc[0]) == pytest.approx(80.0) and float(fc[-1]) <= 12000.0
    span = float(hz_to_cam(12000.0) - hz_to_cam(80.0))
    assert model.erb_integration.n_erb_bands == len(fc) == int(span / 0.5) + 1
    with pytest.raises(ValueError, match="not both"):
        Glasberg2002(erb_kwargs={"f_min": 80.0, "erb_lower": 2.0})
    with pytest.raises(ValueError, match="f_max"):
        Glasberg2002(erb_kwargs={"f_max": -1.0})

"""Bad arguments of the public functions of lhotse_amt.functional.loudness raise TypeError or
ValueError naming the argument (not a silent result, an error deep inside torch/numpy or a
kernel writing past its output)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.functional import loudness as L

FC = L.cam_to_hz(np.arange(1.75, 3.6, 0.25))  # 8 channels
MATS = L.excitation_matrices(FC, "gm2002")
LEVEL, UPPER, LOWER_H = (torch.tensor(m) for m in (MATS.level, MATS.upper, MATS.lower_h))
I = torch.rand(2, 3, 960, dtype=torch.float64)
DB = torch.zeros(2, 3, 8, dtype=torch.float64)
PRM = L.specific_loudness_params(FC)
PARAMS = L.SpecificLoudnessParams(
    *(torch.tensor(getattr(PRM, k)) for k in ("e_thrq", "g", "alpha", "a"))
)
E = torch.rand(2, 8, dtype=torch.float64) * 1e3
SMOOTH = torch.tensor(L.binaural_smoothing_matrix(8))
S = torch.rand(2, 8, dtype=torch.float64)
Z = torch.randn(1, 3000, dtype=torch.float64)
BASES = [(n, b, torch.tensor(m)) for n, b, m in L.dft_bases("gm2002")]


def _pattern(per_channel=True, **kw):
    args = dict(intensity=I, level_db=DB, upper=UPPER, lower_h=LOWER_H, n_below=MATS.n_below)
    args.update(kw)
    return L.excitation_pattern(**args, per_channel=per_channel)


CASES = {
    "hz_to_cam negative": (ValueError, "f must be finite and >= 0", lambda: L.hz_to_cam(-1000.0)),
    "hz_to_cam nan": (ValueError, "f must be finite", lambda: L.hz_to_cam(float("nan"))),
    "hz_to_cam bool": (TypeError, "f must be real", lambda: L.hz_to_cam(True)),
    "cam_to_hz str": (TypeError, "cam must be real", lambda: L.cam_to_hz("a")),
    "erb_hz negative": (ValueError, "f must be finite", lambda: L.erb_hz(-1000.0)),
    "roex_p negative": (ValueError, "f must be finite", lambda: L.roex_p(-10.0)),
    "roex negative": (ValueError, "u must be finite and >= 0", lambda: L.roex(-1.0)),
    "check_pressure_signal numpy": (
        TypeError,
        "x must be a torch.Tensor",
        lambda: L.check_pressure_signal(np.ones(10), "x", 1),
    ),
    "check_pressure_signal 0-d": (
        ValueError,
        "dimensions",
        lambda: L.check_pressure_signal(torch.tensor(1.0), "x", 1),
    ),
    "check_pressure_signal min_samples str": (
        TypeError,
        "min_samples",
        lambda: L.check_pressure_signal(torch.ones(10), "x", "1"),
    ),
    "fir_filter_full float16": (
        ValueError,
        "x must have dtype",
        lambda: L.fir_filter_full(torch.ones(10, dtype=torch.float16), torch.ones(3)),
    ),
    "band_plan int": (TypeError, "variant", lambda: L.band_plan(1)),
    "window_and_scale variant": (ValueError, "variant", lambda: L.window_and_scale("x", 0)),
    "window_and_scale i 6": (ValueError, "i must be", lambda: L.window_and_scale("gm2002", 6)),
    "window_and_scale i negative": (ValueError, "i must", lambda: L.window_and_scale("gm2002", -1)),
    "window_and_scale i bool": (TypeError, "i must", lambda: L.window_and_scale("gm2002", True)),
    "frame_span z numpy": (TypeError, "z must", lambda: L.frame_span(np.ones(100), 0, 0, 2)),
    "frame_span n_frames 0": (
        ValueError,
        "n_frames",
        lambda: L.frame_span(torch.ones(99), 0, 0, 0),
    ),
    "frame_span t0 float": (TypeError, "t0", lambda: L.frame_span(torch.ones(99), 0.5, 0, 2)),
    "multires_intensity z int": (
        ValueError,
        "z must",
        lambda: L.multires_intensity(Z.long(), 0, 0, 2, BASES),
    ),
    "multires_intensity z float32 bases float64": (
        TypeError,
        r"bases\[0\]",
        lambda: L.multires_intensity(Z.float(), 0, 0, 2, BASES),
    ),
    "multires_intensity n_frames 0": (
        ValueError,
        "n_frames",
        lambda: L.multires_intensity(Z, 0, 0, 0, BASES),
    ),
    "multires_intensity return_autocorr numpy": (
        TypeError,
        "return_autocorr",
        lambda: L.multires_intensity(Z, 0, 0, 2, BASES, np.hanning(64)),
    ),
    "multires_intensity return_autocorr length": (
        ValueError,
        "return_autocorr",
        lambda: L.multires_intensity(Z, 0, 0, 2, BASES, torch.ones(32)),
    ),
    "prune_components int": (
        TypeError,
        "intensity",
        lambda: L.prune_components(torch.ones(3, dtype=torch.int64)),
    ),
    "prune_components empty": (
        ValueError,
        "intensity",
        lambda: L.prune_components(torch.ones(2, 0)),
    ),
    "prune_components floor nan": (
        ValueError,
        "floor",
        lambda: L.prune_components(torch.ones(3), float("nan")),
    ),
    "prune_components rel negative": (
        ValueError,
        "rel",
        lambda: L.prune_components(torch.ones(3), 1000.0, -1.0),
    ),
    "excitation_matrices fc negative": (
        ValueError,
        "fc",
        lambda: L.excitation_matrices(np.array([-100.0]), "gm2002"),
    ),
    "excitation_matrices fc empty": (
        ValueError,
        "fc",
        lambda: L.excitation_matrices(np.array([]), "gm2002"),
    ),
    "excitation_matrices fc 2-d": (
        ValueError,
        "fc",
        lambda: L.excitation_matrices(np.full((2, 2), 1000.0), "gm2002"),
    ),
    "excitation_matrices variant int": (TypeError, "variant", lambda: L.excitation_matrices(FC, 1)),
    "erb_level_db 959 bins": (ValueError, "level", lambda: L.erb_level_db(I[..., :959], LEVEL)),
    "erb_level_db int": (TypeError, "intensity", lambda: L.erb_level_db(I.long(), LEVEL)),
    "erb_level_db level numpy": (TypeError, "level", lambda: L.erb_level_db(I, MATS.level)),
    "erb_level_db level 1-d": (ValueError, "level", lambda: L.erb_level_db(I, LEVEL[:, 0])),
    "erb_level_db dtypes differ": (ValueError, "dtype", lambda: L.erb_level_db(I.float(), LEVEL)),
    "excitation_pattern level_db channels": (
        ValueError,
        "level_db",
        lambda: _pattern(level_db=DB[..., :7]),
    ),
    "excitation_pattern level_db per component": (
        ValueError,
        "level_db",
        lambda: _pattern(per_channel=False),
    ),
    "excitation_pattern lower_h channels": (
        ValueError,
        "lower_h",
        lambda: _pattern(lower_h=LOWER_H[:, :7]),
    ),
    "excitation_pattern n_below short": (
        ValueError,
        "n_below",
        lambda: _pattern(n_below=MATS.n_below[:3]),
    ),
    "excitation_pattern per_channel str": (
        TypeError,
        "per_channel",
        lambda: L.excitation_pattern(I, DB, UPPER, LOWER_H, MATS.n_below, "no"),
    ),
    "excitation_pattern upper numpy": (TypeError, "upper", lambda: _pattern(upper=MATS.upper)),
    "excitation_moore2016 keep float": (
        TypeError,
        "keep",
        lambda: L.excitation_moore2016(I, torch.ones_like(I), MATS),
    ),
    "excitation_moore2016 keep shape": (
        ValueError,
        "keep",
        lambda: L.excitation_moore2016(I, torch.ones(960, dtype=torch.bool), MATS),
    ),
    "excitation_gm2002 int": (
        TypeError,
        "intensity",
        lambda: L.excitation_gm2002(I.long(), MATS),
    ),
    "erb_level_db negative intensity": (
        ValueError,
        "intensity must be finite and >= 0",
        lambda: L.erb_level_db(-I, LEVEL),
    ),
    "excitation_pattern nan intensity": (
        ValueError,
        "intensity must be finite and >= 0",
        lambda: _pattern(intensity=I * float("nan")),
    ),
    "excitation_gm2002 infinite intensity": (
        ValueError,
        "intensity must be finite",
        lambda: L.excitation_gm2002(I * float("inf"), MATS),
    ),
    "specific_loudness negative excitation": (
        ValueError,
        "e must be finite and >= 0",
        lambda: L.specific_loudness(-E, PARAMS, 0.046),
    ),
    "excitation_gm2002 matrices tuple": (
        TypeError,
        "matrices",
        lambda: L.excitation_gm2002(I, (MATS.level, MATS.upper, MATS.lower_h, MATS.n_below)),
    ),
    "specific_loudness_params fc nan": (
        ValueError,
        "fc",
        lambda: L.specific_loudness_params(np.array([np.nan])),
    ),
    "specific_loudness_params fc negative": (
        ValueError,
        "fc",
        lambda: L.specific_loudness_params(np.array([-5.0])),
    ),
    "specific_loudness e int": (
        TypeError,
        "e must",
        lambda: L.specific_loudness(E.long(), PARAMS, 0.05),
    ),
    "specific_loudness e channels": (
        ValueError,
        "e must",
        lambda: L.specific_loudness(E[:, :7], PARAMS, 0.05),
    ),
    "specific_loudness e 0-d": (
        ValueError,
        "e must",
        lambda: L.specific_loudness(torch.tensor(5.0, dtype=torch.float64), PARAMS, 0.05),
    ),
    "specific_loudness e float16": (
        TypeError,
        "e must",
        lambda: L.specific_loudness(E.half(), PARAMS, 0.05),
    ),
    "specific_loudness params tuple": (
        TypeError,
        "params",
        lambda: L.specific_loudness(E, (1, 2, 3, 4), 0.05),
    ),
    "specific_loudness params numpy": (
        TypeError,
        "params",
        lambda: L.specific_loudness(E, PRM, 0.05),
    ),
    "specific_loudness c bool": (TypeError, "c must", lambda: L.specific_loudness(E, PARAMS, True)),
    "specific_loudness c nan": (
        ValueError,
        "c must",
        lambda: L.specific_loudness(E, PARAMS, float("nan")),
    ),
    "specific_loudness c negative": (
        ValueError,
        "c must",
        lambda: L.specific_loudness(E, PARAMS, -1.0),
    ),
    "specific_loudness high_level int": (
        TypeError,
        "high_level",
        lambda: L.specific_loudness(E, PARAMS, 0.05, 1),
    ),
    "binaural_smoothing_matrix n_channels 0": (
        ValueError,
        "n_channels",
        lambda: L.binaural_smoothing_matrix(0),
    ),
    "binaural_smoothing_matrix n_channels float": (
        TypeError,
        "n_channels",
        lambda: L.binaural_smoothing_matrix(2.5),
    ),
    "binaural_smoothing_matrix sigma nan": (
        ValueError,
        "sigma",
        lambda: L.binaural_smoothing_matrix(8, float("nan")),
    ),
    "binaural_smoothing_matrix step 0": (
        ValueError,
        "step",
        lambda: L.binaural_smoothing_matrix(8, 0.08, 0.0),
    ),
    "binaural_smoothing_matrix step negative": (
        ValueError,
        "step",
        lambda: L.binaural_smoothing_matrix(8, 0.08, -0.25),
    ),
    "log_sech numpy": (TypeError, "x must", lambda: L.log_sech(np.ones(3))),
    "binaural_inhibition int": (
        TypeError,
        "s_left",
        lambda: L.binaural_inhibition(S.long(), S.long(), SMOOTH),
    ),
    "binaural_inhibition 0-d": (
        ValueError,
        "s_left",
        lambda: L.binaural_inhibition(torch.tensor(1.0), torch.tensor(2.0), SMOOTH),
    ),
    "binaural_inhibition equal ears smooth size": (
        ValueError,
        "smooth",
        lambda: L.binaural_inhibition(S, S, SMOOTH[:7, :7]),
    ),
    "binaural_inhibition smooth numpy": (
        TypeError,
        "smooth",
        lambda: L.binaural_inhibition(S, S.flip(0), SMOOTH.numpy()),
    ),
    "binaural_inhibition dtypes differ": (
        TypeError,
        "dtype",
        lambda: L.binaural_inhibition(S.float(), S, SMOOTH),
    ),
    "binaural_inhibition p str": (
        TypeError,
        "p must",
        lambda: L.binaural_inhibition(S, S, SMOOTH, "1"),
    ),
    "binaural_inhibition p nan": (
        ValueError,
        "p must",
        lambda: L.binaural_inhibition(S, S.flip(0), SMOOTH, float("nan")),
    ),
    "binaural_inhibition p negative": (
        ValueError,
        "p must",
        lambda: L.binaural_inhibition(S, S.flip(0), SMOOTH, -1.0),
    ),
    "binaural_inhibition_reference shapes": (
        ValueError,
        "s_right",
        lambda: L.binaural_inhibition_reference(S, S[:1, :7], SMOOTH),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_names_it(case: str) -> None:
    error, name, call = CASES[case]
    with pytest.raises(error, match=name):
        call()


@pytest.mark.parametrize("p", [1.5978, torch.tensor(1.5978, dtype=torch.float64)])
def test_binaural_inhibition_broadcasting_ears_match_reference(p) -> None:
    """Ears of different (broadcasting) shapes take the reference instead of the no-grad
    kernel, which assumed equal shapes and wrote past the smaller ear's output."""
    left, right = S, S[:1].flip(-1).clone()
    got = L.binaural_inhibition(left, right, SMOOTH, p)
    want = L.binaural_inhibition_reference(left, right, SMOOTH, p)
    assert got[0].shape == got[1].shape == (2, 8)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)

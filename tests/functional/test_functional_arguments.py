"""Bad arguments of the public functions of lhotse_amt.functional raise TypeError or
ValueError naming the argument (not a silent result or an error deep inside torch/numpy)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.functional import adaptation as A
from lhotse_amt.functional import compression as C
from lhotse_amt.functional import framing, ihc, iir, modulation, resample
from lhotse_amt.functional import gammatone as G
from lhotse_amt.functional import ihc_paulick as P
from lhotse_amt.functional import king2019_modulation as K

X = torch.randn(2, 50, dtype=torch.float64)
SOS = torch.tensor(ihc.ihc_lowpass_sos(16000.0, 1000.0, 2, 1))
FC = torch.tensor([500.0, 1000.0], dtype=torch.float64)
POLE = torch.tensor(0.5 + 0.1j)


def _ss():
    return iir.sos_to_statespace(SOS)


CASES = {
    "sosfilt sos bool": (TypeError, "sos", lambda: iir.sosfilt(X, SOS.bool())),
    "sosfilt sos int": (TypeError, "sos", lambda: iir.sosfilt(X, SOS.long())),
    "sosfilt zi numpy": (TypeError, "zi", lambda: iir.sosfilt(X, SOS, np.zeros((2, 1, 2)))),
    "sosfilt zi complex": (
        TypeError,
        "zi",
        lambda: iir.sosfilt(X, SOS, torch.zeros(2, 1, 2, dtype=torch.complex128)),
    ),
    "sosfilt reference zi shape": (
        ValueError,
        "zi",
        lambda: iir.sosfilt(X, SOS, torch.zeros(2, 3), backend="torch"),
    ),
    "sosfilt reference zi lead": (
        ValueError,
        "zi",
        lambda: iir.sosfilt(X, SOS, torch.zeros(5, 1, 2), backend="torch"),
    ),
    "sosfilt out_dtype str": (TypeError, "out_dtype", lambda: iir.sosfilt(X, SOS, out_dtype="f")),
    "sosfilt block float": (TypeError, "block", lambda: iir.sosfilt(X, SOS, block=2.5)),
    "lti_filter x numpy": (TypeError, "signal x", lambda: iir.lti_filter(np.ones(5), *_ss())),
    "lti_filter A shape": (ValueError, "A", lambda: iir.lti_filter(X, torch.zeros(3), *_ss()[1:])),
    "lti_filter B shape": (
        ValueError,
        "B",
        lambda: iir.lti_filter(X, _ss()[0], torch.zeros(3), *_ss()[2:]),
    ),
    "lti_filter state shape": (
        ValueError,
        "state",
        lambda: iir.lti_filter(X, *_ss(), state=torch.zeros(7)),
    ),
    "lti_filter block 0": (ValueError, "block", lambda: iir.lti_filter(X, *_ss(), block=0)),
    "one_pole_cascade reference zi shape": (
        ValueError,
        "zi",
        lambda: iir.one_pole_cascade(
            X,
            POLE,
            torch.tensor(1.0),
            2,
            torch.zeros(2, 3, dtype=torch.complex128),
            backend="torch",
        ),
    ),
    "sos_to_statespace shape": (ValueError, "sos", lambda: iir.sos_to_statespace(torch.zeros(3))),
    "sos_to_statespace numpy": (TypeError, "sos", lambda: iir.sos_to_statespace(SOS.numpy())),
    "sos_to_statespace a0 0": (
        ValueError,
        "a0",
        lambda: iir.sos_to_statespace(torch.cat([SOS[..., :3], 0 * SOS[..., 3:]], -1)),
    ),
    "sosfilt a0 0": (
        ValueError,
        r"sos\[\.\.\., 3\]",
        lambda: iir.sosfilt(torch.randn(2, 50), torch.tensor([[1.0, 0.0, 0.0, 0.0, 0.1, 0.0]])),
    ),
    "one_pole_cascade_to_statespace order 0": (
        ValueError,
        "order",
        lambda: iir.one_pole_cascade_to_statespace(POLE, torch.tensor(1.0), 0),
    ),
    "gammatone fc list": (TypeError, "fc", lambda: G.gammatone(X, [500.0, 1000.0], 16000.0)),
    "gammatone fc numpy": (TypeError, "fc", lambda: G.gammatone(X, FC.numpy(), 16000.0)),
    "gammatone n 0": (ValueError, "^n must", lambda: G.gammatone(X, FC, 16000.0, n=0)),
    "gammatone n float": (TypeError, "^n must", lambda: G.gammatone(X, FC, 16000.0, n=2.5)),
    "gammatone erb_scale str": (
        TypeError,
        "erb_scale",
        lambda: G.gammatone(X, FC, 16000.0, 4, "1"),
    ),
    "gammatone erb_scale shape": (
        ValueError,
        "erb_scale",
        lambda: G.gammatone(X, FC, 16000.0, 4, torch.ones(3, dtype=torch.float64)),
    ),
    "gammatone_poles fs str": (TypeError, "fs", lambda: G.gammatone_poles(FC, "16000")),
    "ihc_lowpass_sos fs str": (TypeError, "fs", lambda: ihc.ihc_lowpass_sos("16000", 1000.0)),
    "ihc_lowpass_sos fs bool": (TypeError, "fs", lambda: ihc.ihc_lowpass_sos(True, 0.2)),
    "ihc_lowpass_sos cutoff bool": (TypeError, "cutoff", lambda: ihc.ihc_lowpass_sos(16e3, True)),
    "ihc_lowpass_sos iterations 0": (
        ValueError,
        "iterations",
        lambda: ihc.ihc_lowpass_sos(16000.0, 1000.0, 1, 0),
    ),
    "ihc_lowpass_sos iterations bool": (
        TypeError,
        "iterations",
        lambda: ihc.ihc_lowpass_sos(16000.0, 1000.0, 1, True),
    ),
    "adaptation tau 0-d": (
        ValueError,
        "tau",
        lambda: A.adaptation_loops(X, 16000.0, tau=torch.tensor(0.1)),
    ),
    "adaptation tau lead": (
        ValueError,
        "tau",
        lambda: A.adaptation_loops(X, 16000.0, tau=torch.full((3, 5), 0.1)),
    ),
    "adaptation reference state shape": (
        ValueError,
        "state",
        lambda: A.adaptation_loops(X, 16000.0, state=torch.ones(2, 3), backend="reference"),
    ),
    "adaptation minspl at dboffset": (
        ValueError,
        "minspl",
        lambda: A.adaptation_loops(X, 16000.0, minspl=100.0),
    ),
    "adaptation_coefficients tau list": (
        TypeError,
        "tau",
        lambda: A.adaptation_coefficients([0.1], 16000.0, 10.0, 1e-5),
    ),
    "adaptation_initial_state n float": (
        TypeError,
        "n_loops",
        lambda: A.adaptation_initial_state(2.5, 1e-5),
    ),
    "adaptation_initial_state minlvl negative": (
        ValueError,
        "minlvl",
        lambda: A.adaptation_initial_state(5, -1.0),
    ),
    "frame_mean x numpy": (TypeError, "x", lambda: framing.frame_mean(np.ones(10), 2, 5)),
    "frame_mean x int": (
        ValueError,
        "x",
        lambda: framing.frame_mean(torch.ones(10, dtype=torch.int64), 2, 5),
    ),
    "frame_mean x 0-d": (ValueError, "x", lambda: framing.frame_mean(torch.tensor(1.0), 2, 5)),
    "frame_mean lengths list": (
        TypeError,
        "lengths",
        lambda: framing.frame_mean(torch.ones(2, 10), 2, 5, [3, 4]),
    ),
    "frame_mean lengths float": (
        TypeError,
        "lengths",
        lambda: framing.frame_mean(torch.ones(2, 10), 2, 5, torch.tensor([3.5, 4.0])),
    ),
    "frame_mean lengths negative": (
        ValueError,
        "lengths must be >= 0",
        lambda: framing.frame_mean(torch.ones(2, 10), 2, 5, torch.tensor([-3, 4])),
    ),
    "kaiser_lowpass beta negative": (
        ValueError,
        "beta",
        lambda: resample.kaiser_lowpass(11, 0.5, -1.0),
    ),
    "kaiser_lowpass beta nan": (
        ValueError,
        "beta",
        lambda: resample.kaiser_lowpass(11, 0.5, float("nan")),
    ),
    "kaiser_lowpass cutoff str": (
        TypeError,
        "cutoff",
        lambda: resample.kaiser_lowpass(11, "0.5", 5.0),
    ),
    "kaiser_lowpass fs 0": (ValueError, "fs", lambda: resample.kaiser_lowpass(11, 0.5, 5.0, fs=0)),
    "broken_stick exponent shape": (
        ValueError,
        "exponent",
        lambda: C.broken_stick_compression(X, exponent=torch.ones(3, dtype=torch.float64)),
    ),
    "power exponent shape": (
        ValueError,
        "exponent",
        lambda: C.power_compression(X, exponent=torch.ones(3, dtype=torch.float64)),
    ),
    "modulation_center_frequencies Q 0": (
        ValueError,
        "Q",
        lambda: modulation.modulation_center_frequencies(1000.0, Q=0.0),
    ),
    "modulation_center_frequencies Q negative": (
        ValueError,
        "Q",
        lambda: modulation.modulation_center_frequencies(1000.0, Q=-1.0),
    ),
    "design_modulation_bank fs str": (
        TypeError,
        "fs",
        lambda: modulation.design_modulation_bank("16000", [1000.0]),
    ),
    "design_modulation_bank max_bands 0": (
        ValueError,
        "max_bands",
        lambda: modulation.design_modulation_bank(16000.0, [1000.0], max_bands=0),
    ),
    "design_modulation_bank fc nan": (
        ValueError,
        "fc",
        lambda: modulation.design_modulation_bank(16000.0, [float("nan")]),
    ),
    "design_modulation_bank fc empty": (
        ValueError,
        "fc",
        lambda: modulation.design_modulation_bank(16000.0, []),
    ),
    "design_modulation_bank settings dict": (
        TypeError,
        "settings",
        lambda: modulation.design_modulation_bank(16000.0, [1000.0], {"Q": 2.0}),
    ),
    "design_modulation_bank lp_cutoff above Nyquist": (
        ValueError,
        "lp_cutoff",
        lambda: modulation.design_modulation_bank(
            400.0, [100.0], modulation.ModulationSettings(lp_cutoff=250.0, max_mfc=150.0)
        ),
    ),
    "design_modulation_bank max_mfc above Nyquist": (
        ValueError,
        "max_mfc",
        lambda: modulation.design_modulation_bank(
            200.0, [50.0], modulation.ModulationSettings(max_mfc=150.0)
        ),
    ),
    "ModulationSettings Q 0.5": (
        ValueError,
        "Q",
        lambda: modulation.ModulationSettings(Q=0.5),
    ),
    "ModulationSettings att_factor nan": (
        ValueError,
        "att_factor",
        lambda: modulation.ModulationSettings(att_factor=float("nan")),
    ),
    "ModulationSettings lp_cutoff 0": (
        ValueError,
        "lp_cutoff",
        lambda: modulation.ModulationSettings(lp_cutoff=0.0),
    ),
    "ModulationSettings use_upper_limit str": (
        TypeError,
        "use_upper_limit",
        lambda: modulation.ModulationSettings(use_upper_limit="yes"),
    ),
    "ModulationSettings lp150 int": (
        TypeError,
        "lp150",
        lambda: modulation.ModulationSettings(lp150=2),
    ),
    "unpad_bands y 1-d": (ValueError, "y", lambda: modulation.unpad_bands(torch.zeros(5), [1])),
    "tf_filter a rows do not broadcast": (
        ValueError,
        "a \\(4,\\)",
        lambda: K.tf_filter(torch.randn(3, 100), torch.ones(3, 3), torch.ones(4, 3)),
    ),
    "tf_filter b numpy": (
        TypeError,
        "^b must",
        lambda: K.tf_filter(torch.randn(2, 100), np.ones((2, 3)), torch.ones(2, 3)),
    ),
    "tf_filter b int": (
        TypeError,
        "b",
        lambda: K.tf_filter(
            torch.randn(2, 100), torch.ones(2, 3, dtype=torch.int64), torch.ones(2, 3)
        ),
    ),
    "king2019 filterbank sos numpy": (
        TypeError,
        "sos",
        lambda: K.king2019_modulation_filterbank(torch.randn(2, 3, 100), sos=np.zeros((2, 1, 6))),
    ),
    "ihc_paulick state shape": (
        ValueError,
        "state",
        lambda: P.ihc_paulick(torch.randn(2, 50), 16000.0, state=torch.zeros(3)),
    ),
    "one_pole_cascade pole int": (
        TypeError,
        "pole",
        lambda: iir.one_pole_cascade(X, torch.tensor([0]), torch.tensor([1.0])),
    ),
    "one_pole_cascade gain int": (
        TypeError,
        "gain",
        lambda: iir.one_pole_cascade(X, POLE, torch.tensor([1])),
    ),
}
# a string or a number for return_state would be read by truthiness ("no" is true)
CASES |= {
    f"{name} return_state str": (TypeError, "return_state", call)
    for name, call in {
        "sosfilt": lambda: iir.sosfilt(X, SOS, return_state="no"),
        "one_pole_cascade": lambda: iir.one_pole_cascade(X, POLE, POLE, return_state="no"),
        "ihc_envelope": lambda: ihc.ihc_envelope(X, SOS, return_state=1),
        "adaptation_loops": lambda: A.adaptation_loops(X, 16000.0, return_state="no"),
        "gammatone": lambda: G.gammatone(X[:1], FC, 16000.0, return_state="no"),
    }.items()
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_names_it(case: str) -> None:
    error, name, call = CASES[case]
    with pytest.raises(error, match=name):
        call()


def test_valid_calls_unchanged() -> None:
    """The checks let valid streaming and broadcast calls through."""
    y, zf = iir.sosfilt(X, SOS, torch.zeros(2, 1, 2, dtype=torch.float64), return_state=True)
    y_ref = iir.sosfilt(X, SOS, backend="torch")
    torch.testing.assert_close(y, y_ref)
    assert zf.shape == (2, 1, 2)
    out = G.gammatone(X, FC, 16000.0, 4, torch.ones(2, dtype=torch.float64))
    assert out.shape == (2, 2, 50)
    tau = torch.tensor([[0.005, 0.05]], dtype=torch.float64)
    assert A.adaptation_loops(X, 16000.0, tau=tau).shape == X.shape

"""Bad constructor and forward arguments of the lhotse_amt.modules classes raise
TypeError or ValueError naming the argument (not a module that computes nonsense)."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

from lhotse_amt import modules as M

X = torch.randn(2, 200)
#: centre frequencies (Hz) of eight loudness channels, 1.75 ... 3.5 Cam
LOUD_FC = [55.6, 64.2, 73.1, 82.3, 91.8, 101.6, 111.7, 122.1]


def _drnl() -> M.DRNLFilterbank:
    return M.DRNLFilterbank(16000.0, flow=500.0, fhigh=1000.0)


CASES = {
    "GammatoneFilterbank fs bool": (TypeError, "fs", lambda: M.GammatoneFilterbank(True, fc=[0.2])),
    "GammatoneFilterbank fs nan": (ValueError, "fs", lambda: M.GammatoneFilterbank(float("nan"))),
    "GammatoneFilterbank n float": (TypeError, "n", lambda: M.GammatoneFilterbank(16e3, n=2.5)),
    "GammatoneFilterbank n 0": (ValueError, "n", lambda: M.GammatoneFilterbank(16e3, n=0)),
    "GammatoneFilterbank erb_scale negative": (
        ValueError,
        "erb_scale",
        lambda: M.GammatoneFilterbank(16e3, erb_scale=-1.0),
    ),
    "GammatoneFilterbank fc empty": (ValueError, "fc", lambda: M.GammatoneFilterbank(16e3, fc=[])),
    "GammatoneFilterbank fc negative": (
        ValueError,
        "fc",
        lambda: M.GammatoneFilterbank(16e3, fc=[-100.0]),
    ),
    "GammatoneFilterbank fc 2-d": (
        ValueError,
        "fc",
        lambda: M.GammatoneFilterbank(16e3, fc=[[100.0, 200.0]]),
    ),
    "AdaptationLoops fs str": (TypeError, "fs", lambda: M.AdaptationLoops("16000")),
    "AdaptationLoops fs 0": (ValueError, "fs", lambda: M.AdaptationLoops(0.0)),
    "AdaptationLoops tau nan": (
        ValueError,
        "tau",
        lambda: M.AdaptationLoops(16e3, tau=[float("nan")]),
    ),
    "AdaptationLoops tau empty": (ValueError, "tau", lambda: M.AdaptationLoops(16e3, tau=[])),
    "AdaptationLoops limit bool": (TypeError, "limit", lambda: M.AdaptationLoops(16e3, limit=True)),
    "AdaptationLoops limit nan": (
        ValueError,
        "limit",
        lambda: M.AdaptationLoops(16e3, limit=float("nan")),
    ),
    "AdaptationLoops minspl above dboffset": (
        ValueError,
        "minspl",
        lambda: M.AdaptationLoops(16e3, minspl=120.0),
    ),
    "IHCEnvelope fs bool": (TypeError, "fs", lambda: M.IHCEnvelope(True, cutoff=0.1)),
    "IHCEnvelope cutoff str": (TypeError, "cutoff", lambda: M.IHCEnvelope(16e3, cutoff="1000")),
    "IHCEnvelope order float": (TypeError, "order", lambda: M.IHCEnvelope(16e3, order=2.5)),
    "IHCEnvelope iterations 0": (
        ValueError,
        "iterations",
        lambda: M.IHCEnvelope(16e3, iterations=0),
    ),
    "IHCEnvelope iterations float": (
        TypeError,
        "iterations",
        lambda: M.IHCEnvelope(16e3, iterations=2.5),
    ),
    "DRNLFilterbank fs str": (TypeError, "fs", lambda: M.DRNLFilterbank("16000")),
    "DRNLFilterbank n_channels float": (
        TypeError,
        "n_channels",
        lambda: M.DRNLFilterbank(16e3, n_channels=2.5),
    ),
    "DRNLFilterbank n_channels bool": (
        TypeError,
        "n_channels",
        lambda: M.DRNLFilterbank(16e3, n_channels=True),
    ),
    "DRNLFilterbank flow str": (TypeError, "flow", lambda: M.DRNLFilterbank(16e3, flow="100")),
    "DRNLFilterbank params list": (TypeError, "params", lambda: M.DRNLFilterbank(16e3, params=[1])),
    "DRNLFilterbank state shape": (
        ValueError,
        "state",
        lambda: _drnl()(X, {"lin": torch.zeros(3)}),
    ),
    "DRNLFilterbank reference state shape": (
        ValueError,
        "state",
        lambda: _drnl()(X, {"lin": torch.zeros(3)}, backend="torch"),
    ),
    "DRNLFilterbank state list": (TypeError, "state", lambda: _drnl()(X, [1])),
    "DRNLFilterbank state unknown key": (
        TypeError,
        "state",
        lambda: _drnl()(X, {"foo": torch.zeros(3)}),
    ),
    "BrokenStickCompression knee_db str": (
        TypeError,
        "knee_db",
        lambda: M.BrokenStickCompression(knee_db="30"),
    ),
    "BrokenStickCompression exponent negative": (
        ValueError,
        "exponent",
        lambda: M.BrokenStickCompression(exponent=-1.0),
    ),
    "BrokenStickCompression dboffset nan": (
        ValueError,
        "dboffset",
        lambda: M.BrokenStickCompression(dboffset=float("nan")),
    ),
    "PowerCompression exponent bool": (
        TypeError,
        "exponent",
        lambda: M.PowerCompression(exponent=True),
    ),
    "ModulationFilterbank fs str": (
        TypeError,
        "fs",
        lambda: M.ModulationFilterbank("16000", fc=[1000.0]),
    ),
    "ModulationFilterbank fc empty": (
        ValueError,
        "fc",
        lambda: M.ModulationFilterbank(16e3, fc=[]),
    ),
    "ModulationFilterbank x 1-d": (
        ValueError,
        "dimensions",
        lambda: M.ModulationFilterbank(16e3, fc=[1000.0])(torch.randn(100)),
    ),
    "ModulationFilterbank att_factor nan": (
        ValueError,
        "att_factor",
        lambda: M.ModulationFilterbank(16e3, fc=[1000.0], att_factor=float("nan")),
    ),
    "ModulationFilterbank lp150 int": (
        TypeError,
        "lp150",
        lambda: M.ModulationFilterbank(16e3, fc=[1000.0], lp150=2),
    ),
    "ModulationFilterbank use_upper_limit str": (
        TypeError,
        "use_upper_limit",
        lambda: M.ModulationFilterbank(16e3, fc=[1000.0], use_upper_limit="yes"),
    ),
    "ButterworthFilter fs bool": (TypeError, "fs", lambda: M.ButterworthFilter(True, 0.1)),
    "ButterworthFilter fc str": (TypeError, "fc", lambda: M.ButterworthFilter(16e3, "3")),
    "ButterworthFilter order float": (
        TypeError,
        "order",
        lambda: M.ButterworthFilter(16e3, 3.0, order=2.5),
    ),
    "ButterworthFilter order bool": (
        TypeError,
        "order",
        lambda: M.ButterworthFilter(16e3, 3.0, order=True),
    ),
    "ButterworthFilter btype band": (
        ValueError,
        "btype",
        lambda: M.ButterworthFilter(16e3, 3.0, btype="band"),
    ),
    "FastKing2019ModulationFilterbank ir_length_ratio str": (
        TypeError,
        "ir_length_ratio",
        lambda: M.FastKing2019ModulationFilterbank(16e3, ir_length_ratio="0.5"),
    ),
    "FastKing2019ModulationFilterbank amt_coefficients str": (
        TypeError,
        "amt_coefficients",
        lambda: M.FastKing2019ModulationFilterbank(16e3, form="tf", amt_coefficients="no"),
    ),
    "FastKing2019ModulationFilterbank form int": (
        TypeError,
        "form",
        lambda: M.FastKing2019ModulationFilterbank(16e3, form=1),
    ),
    "OuterMiddleEarFilter taps str": (
        TypeError,
        "taps",
        lambda: M.OuterMiddleEarFilter("abc"),
    ),
    "OuterMiddleEarFilter taps bool": (
        TypeError,
        "taps",
        lambda: M.OuterMiddleEarFilter(np.array([True, False, True])),
    ),
    "MultiResolutionSpectrum n_frames float": (
        TypeError,
        "n_frames",
        lambda: M.MultiResolutionSpectrum("gm2002")(torch.randn(1, 3000), 0, 0, 2.5),
    ),
    "ERBIntegration fc negative": (
        ValueError,
        "fc",
        lambda: M.ERBIntegration([-100.0], "gm2002"),
    ),
    "ERBIntegration fc str": (TypeError, "fc", lambda: M.ERBIntegration("abc", "gm2002")),
    "ERBIntegration cols float": (
        TypeError,
        "cols",
        lambda: M.ERBIntegration(LOUD_FC, "gm2002")(torch.rand(2, 3), torch.tensor([1.0, 2, 3])),
    ),
    "ERBIntegration 959 bins": (
        ValueError,
        "level",
        lambda: M.ERBIntegration(LOUD_FC, "gm2002")(torch.rand(2, 959)),
    ),
    "ExcitationPattern with_level str": (
        TypeError,
        "with_level",
        lambda: M.ExcitationPattern(LOUD_FC, "gm2002", with_level="no"),
    ),
    "ExcitationPattern fc nan": (
        ValueError,
        "fc",
        lambda: M.ExcitationPattern([float("nan")], "gm2002"),
    ),
    "ExcitationPattern cols list": (
        TypeError,
        "cols",
        lambda: M.ExcitationPattern(LOUD_FC, "gm2002")(
            torch.rand(2, 3), torch.zeros(2, 8), [1, 2, 3]
        ),
    ),
    "SpecificLoudness fc empty": (ValueError, "fc", lambda: M.SpecificLoudness([], 0.05)),
    "SpecificLoudness e channels": (
        ValueError,
        "e must",
        lambda: M.SpecificLoudness(LOUD_FC, 0.05)(torch.rand(2, 7)),
    ),
    "SpecificLoudness e int": (
        TypeError,
        "e must",
        lambda: M.SpecificLoudness(LOUD_FC, 0.05)(torch.ones(2, 8, dtype=torch.int64)),
    ),
    "LoudnessIntegration specific_loudness int": (
        TypeError,
        "specific_loudness",
        lambda: M.LoudnessIntegration(0.5, 0.5, 0.5, 0.5)(torch.ones(3, 8, dtype=torch.int64)),
    ),
    "LoudnessIntegration specific_loudness 1-d": (
        ValueError,
        "specific_loudness",
        lambda: M.LoudnessIntegration(0.5, 0.5, 0.5, 0.5)(torch.ones(8)),
    ),
    "BinauralInhibition n_channels 0": (ValueError, "n_channels", lambda: M.BinauralInhibition(0)),
    "BinauralInhibition n_channels float": (
        TypeError,
        "n_channels",
        lambda: M.BinauralInhibition(2.5),
    ),
    "BinauralInhibition step negative": (
        ValueError,
        "step",
        lambda: M.BinauralInhibition(8, step=-0.25),
    ),
    "BinauralInhibition channels": (
        ValueError,
        "smooth",
        lambda: M.BinauralInhibition(8)(torch.rand(2, 7), torch.rand(2, 7)),
    ),
    "IHCPaulick2024 state shape": (
        ValueError,
        "state",
        lambda: M.IHCPaulick2024(16e3)(torch.randn(2, 50), torch.zeros(3)),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_names_it(case: str) -> None:
    error, name, call = CASES[case]
    with pytest.raises(error, match=name):
        call()


#: constructor arguments of every module class that takes ``dtype`` or ``learnable``
BUILD_ARGS = {
    "AdaptLoop": (16e3,),
    "AdaptationLoops": (16e3,),
    "BinauralInhibition": (8,),
    "BrokenStickCompression": (),
    "ButterworthFilter": (16e3, 3.0),
    "DRNLFilterbank": (16e3, None, 500.0, 1000.0),
    "ERBIntegration": (LOUD_FC, "gm2002"),
    "ExcitationPattern": (LOUD_FC, "gm2002"),
    "FastKing2019ModulationFilterbank": (16e3,),
    "FastModulationFilterbank": (16e3, torch.tensor([500.0, 1000.0])),
    "GammatoneFilterbank": (16e3,),
    "HeadphoneFilter": (16e3,),
    "IHCEnvelope": (16e3,),
    "IHCPaulick2024": (16e3,),
    "King2019ModulationFilterbank": (16e3,),
    "MiddleEarFilter": (16e3,),
    "ModulationFilterbank": (16e3, torch.tensor([500.0, 1000.0])),
    "MultiResolutionSpectrum": ("gm2002",),
    "OuterMiddleEarFilter": (),
    "PowerCompression": (),
    "SpecificLoudness": (LOUD_FC, 0.05),
}


def _takes(name: str, arg: str) -> bool:
    return arg in inspect.signature(getattr(M, name).__init__).parameters


def test_every_module_with_dtype_or_learnable_is_listed():
    classes = [n for n in M.__all__ if inspect.isclass(getattr(M, n))]
    listed = [n for n in classes if _takes(n, "dtype") or _takes(n, "learnable")]
    assert sorted(listed) == sorted(BUILD_ARGS)


@pytest.mark.parametrize(
    "name, arg, value, error",
    [
        (name, arg, value, error)
        for name in sorted(BUILD_ARGS)
        for arg, value, error in (
            ("dtype", torch.int64, ValueError),
            ("dtype", torch.float16, ValueError),
            ("dtype", "float32", TypeError),
            ("learnable", "no", TypeError),
            ("learnable", 1, TypeError),
        )
        if _takes(name, arg)
    ],
)
def test_dtype_and_learnable_are_checked(name, arg, value, error):
    # an integer or half dtype would round the coefficients; "no" would read as true
    args = BUILD_ARGS[name]
    getattr(M, name)(*args)  # the arguments are valid
    with pytest.raises(error, match=arg):
        getattr(M, name)(*args, **{arg: value})

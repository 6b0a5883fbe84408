"""The local Butterworth design against :func:`scipy.signal.butter`."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal

from lhotse_amt.functional.butter import butter


@pytest.mark.parametrize("order", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("wn", [0.005, 0.1, 0.45, 0.9])
@pytest.mark.parametrize("btype", ["low", "high"])
def test_low_high_match_scipy(order: int, wn: float, btype: str) -> None:
    b, a = butter(order, wn, btype)
    rb, ra = scipy.signal.butter(order, wn, btype)
    np.testing.assert_allclose(b, rb, rtol=1e-9, atol=1e-12 * np.abs(rb).max())
    np.testing.assert_allclose(a, ra, rtol=1e-9, atol=1e-10)
    sos = butter(order, wn, btype, output="sos")
    np.testing.assert_allclose(
        sos, scipy.signal.butter(order, wn, btype, output="sos"), rtol=1e-9, atol=1e-12
    )


@pytest.mark.parametrize("order", [1, 2, 3, 4])
@pytest.mark.parametrize("fs", [8000.0, 44100.0])
@pytest.mark.parametrize("edges", [(2.0, 6.0), (100.0, 300.0), (1000.0, 3500.0)])
def test_bandpass_in_hz_matches_scipy(order: int, fs: float, edges: tuple[float, float]) -> None:
    sos = butter(order, edges, "bandpass", fs=fs, output="sos")
    ref = scipy.signal.butter(order, edges, "bandpass", fs=fs, output="sos")
    np.testing.assert_allclose(sos, ref, rtol=1e-9, atol=1e-12)
    b, a = butter(order, [e / (fs / 2) for e in edges], "bandpass")
    rb, ra = scipy.signal.butter(order, [e / (fs / 2) for e in edges], "bandpass")
    np.testing.assert_allclose(b, rb, rtol=1e-8, atol=1e-12 * np.abs(rb).max())
    np.testing.assert_allclose(a, ra, rtol=1e-9, atol=1e-9)


def test_sections_filter_like_transfer_function() -> None:
    x = np.random.default_rng(0).standard_normal(2000)
    b, a = butter(6, 0.2)
    y_ba = scipy.signal.lfilter(b, a, x)
    y_sos = scipy.signal.sosfilt(butter(6, 0.2, output="sos"), x)
    np.testing.assert_allclose(y_sos, y_ba, atol=1e-9)


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((0, 0.1), {}, "order"),
        ((2.5, 0.1), {}, "order"),
        ((2, 1.0), {}, "Nyquist"),
        ((2, 0.0), {}, "Nyquist"),
        ((2, 5000.0), {"fs": 8000.0}, "4000 Hz"),
        ((2, 0.1, "notch"), {}, "btype"),
        ((2, 0.1), {"output": "zpk"}, "output"),
        ((2, 0.1, "bandpass"), {}, "bandpass needs 2"),
        ((2, (0.3, 0.1), "bandpass"), {}, "increasing"),
        ((2, 0.1), {"fs": -1.0}, "fs"),
    ],
)
def test_bad_input_raises(args: tuple, kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        butter(*args, **kwargs)

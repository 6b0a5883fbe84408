"""The local Kaiser-window low-pass design against :func:`scipy.signal.firwin`, and the
resampler against :func:`scipy.signal.resample_poly`."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.signal
import torch

from lhotse_amt.functional.resample import kaiser_lowpass, resample_poly


@pytest.mark.parametrize("numtaps", [1, 2, 7, 61, 97, 1001])
@pytest.mark.parametrize("beta", [0.0, 5.0, 8.0])
@pytest.mark.parametrize(("cutoff", "fs"), [(0.05, 2.0), (1 / 3, 2.0), (4300.0, 44100.0)])
def test_kaiser_lowpass_matches_firwin(numtaps: int, beta: float, cutoff: float, fs: float):
    h = kaiser_lowpass(numtaps, cutoff, beta, fs)
    ref = scipy.signal.firwin(numtaps, cutoff, window=("kaiser", beta), fs=fs)
    assert h.dtype == np.float64 and h.shape == (numtaps,)
    np.testing.assert_allclose(h, ref, rtol=0, atol=1e-15 * np.abs(ref).max())


@pytest.mark.parametrize("cutoff", [0.0, 1.0, -0.2])
def test_kaiser_lowpass_rejects_cutoff_outside_band(cutoff: float) -> None:
    with pytest.raises(ValueError, match="cutoff"):
        kaiser_lowpass(31, cutoff, 5.0)


@pytest.mark.parametrize(("up", "down"), [(1, 2), (3, 2), (2, 3), (160, 441)])
def test_resample_poly_matches_scipy(up: int, down: int) -> None:
    x = np.random.default_rng(up + down).standard_normal((2, 1000))
    y = resample_poly(torch.from_numpy(x), up, down).numpy()
    ref = scipy.signal.resample_poly(x, up, down, axis=-1)
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12)

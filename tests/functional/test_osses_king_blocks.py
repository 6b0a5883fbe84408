"""Building blocks of Osses2021 / King2019: gradients, streaming, errors."""

import numpy as np
import pytest
import scipy.signal
import torch

from lhotse_amt.functional.compression import broken_stick_compression, power_compression
from lhotse_amt.functional.ear import fir_filter, fir_filter_compensated, minimum_phase_rceps
from lhotse_amt.functional.king2019_modulation import (
    hilbert_envelope,
    king2019_modulation_filterbank,
    king2019_modulation_frequencies,
    phase_insensitivity,
    tf_filter,
)
from lhotse_amt.functional.resample import resample_poly
from lhotse_amt.models.king2019 import King2019
from lhotse_amt.models.osses2021 import Osses2021
from lhotse_amt.modules.ear import HeadphoneFilter, MiddleEarFilter

D64 = dict(dtype=torch.float64)


def test_gradcheck_fir_filter():
    x = torch.randn(2, 12, **D64, requires_grad=True)
    h = torch.randn(5, **D64, requires_grad=True)
    s = torch.randn(2, 4, **D64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, h, s: fir_filter(x, h, s), (x, h, s))
    assert torch.autograd.gradcheck(lambda x, h: fir_filter_compensated(x, h, "amt"), (x, h))


def test_fir_filter_matches_lfilter_and_streams():
    x = np.random.default_rng(0).standard_normal((2, 1000))
    h = np.random.default_rng(1).standard_normal(33)
    y = fir_filter(torch.from_numpy(x), torch.from_numpy(h)).numpy()
    np.testing.assert_allclose(y, scipy.signal.lfilter(h, 1, x), atol=1e-12)
    filt = MiddleEarFilter(16000, compensation="amt", **D64)
    xt = torch.from_numpy(x)
    ref = filt(xt)
    D = filt.lookahead
    xp = torch.nn.functional.pad(xt, (0, D))
    st, outs = None, []
    for a, b in ((0, 100), (100, 600), (600, 1000 + D)):
        o, st = filt.stream(xp[:, a:b], st)
        outs.append(o)
    torch.testing.assert_close(torch.cat(outs, -1), ref)


def test_minimum_phase_keeps_magnitude():
    b = HeadphoneFilter(16000, phase="linear", **D64).h.numpy()
    m = minimum_phase_rceps(b)
    np.testing.assert_allclose(np.abs(np.fft.fft(m)), np.abs(np.fft.fft(b)), rtol=1e-9, atol=1e-12)
    # energy concentrated at the start (minimum phase)
    assert np.sum(m[:64] ** 2) > 0.9 * np.sum(m**2)


def test_gradcheck_compression():
    x = (torch.rand(40, **D64) - 0.5) * 4e-3  # both sides of the knee (3.16e-4)
    x = x[x.abs() > 1e-5].detach().requires_grad_(True)
    n = torch.tensor(0.3, **D64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x, n: broken_stick_compression(x, 30.0, n), (x, n))
    assert torch.autograd.gradcheck(lambda x, n: power_compression(x, n), (x, n))
    y = broken_stick_compression(torch.tensor([-1e-2, -1e-4, 0.0, 1e-4, 1e-2], **D64))
    K = 10 ** (-70 / 20)
    np.testing.assert_allclose(
        y.numpy(), [-K * (1e-2 / K) ** 0.3, -1e-4, 0.0, 1e-4, K * (1e-2 / K) ** 0.3]
    )


def test_gradcheck_king_modulation_and_tf():
    x = torch.randn(1, 2, 16, **D64, requires_grad=True)
    sos = torch.as_tensor(
        np.stack([scipy.signal.butter(2, [0.1, 0.3], "bandpass", output="sos")] * 2), **D64
    ).requires_grad_(True)
    assert torch.autograd.gradcheck(
        lambda x, s: king2019_modulation_filterbank(x, sos=s, backend="torch"), (x, sos)
    )
    b, a = scipy.signal.butter(2, [0.1, 0.3], "bandpass")
    bt = torch.as_tensor(b, **D64).requires_grad_(True)
    at = torch.as_tensor(a, **D64)
    assert torch.autograd.gradcheck(lambda x, b: tf_filter(x, b, at, backend="torch"), (x, bt))


def test_gradcheck_phase_insensitivity_and_resample():
    x = torch.randn(1, 2, 24, **D64, requires_grad=True)
    mfc = np.array([2.0, 13.7])
    assert torch.autograd.gradcheck(lambda x: phase_insensitivity(x, mfc), (x,))
    assert torch.autograd.gradcheck(lambda x: resample_poly(x, 2, 3), (x[:, :1],))
    env = hilbert_envelope(x.detach()).numpy()
    np.testing.assert_allclose(env, np.abs(scipy.signal.hilbert(x.detach().numpy())), atol=1e-12)


@pytest.mark.parametrize("T", [1, 2, 23, 24, 1001])
def test_hilbert_envelope_matches_scipy_odd_and_even_lengths(T):
    x = torch.randn(3, T, **D64)
    expect = np.abs(scipy.signal.hilbert(x.numpy()))
    np.testing.assert_allclose(hilbert_envelope(x).numpy(), expect, rtol=1e-12, atol=1e-12)
    x32 = x.float()
    np.testing.assert_allclose(hilbert_envelope(x32).numpy(), expect, rtol=1e-4, atol=1e-5)
    xg = x.clone().requires_grad_(True)
    np.testing.assert_allclose(hilbert_envelope(xg).detach().numpy(), expect, atol=1e-12)


def test_phase_insensitivity_in_place_equals_out_of_place(monkeypatch):
    from lhotse_amt.kernels import hilbert

    mfc = np.array([2.0, 13.7, 35.9])
    x = torch.randn(2, 5, 3, 301, **D64)
    ref = phase_insensitivity(x, mfc)
    assert torch.equal(ref[..., 0, :], x[..., 0, :]) and not torch.equal(ref, x)
    monkeypatch.setattr(hilbert, "BLOCK_SAMPLES", 3 * 301)  # 3 rows per block: 4 blocks
    for y in (x.clone(), x.clone().transpose(0, 1)):  # evenly and unevenly strided rows
        out = phase_insensitivity(y, mfc, inplace=True)
        assert out is y
        expect = ref if y.shape[0] == 2 else ref.transpose(0, 1)
        torch.testing.assert_close(out, expect, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="autograd"):
        phase_insensitivity(x.clone().requires_grad_(True), mfc, inplace=True)


def test_modulation_frequencies():
    np.testing.assert_allclose(
        king2019_modulation_frequencies(), [2, 5.236068, 13.708204, 35.888544, 93.957428], rtol=1e-6
    )
    assert len(king2019_modulation_frequencies(nmod=7)) == 7


@pytest.mark.parametrize("model_cls", [Osses2021, King2019])
def test_backward_through_model(model_cls):
    model = model_cls(16000, flow=1500, fhigh=2500, learnable=True, return_stages=True)
    x = (torch.randn(1, 160) * 0.02).requires_grad_(True)
    out, stages = model(x)
    if isinstance(out, list):
        # the shared modulation filterbank's |y| = sqrt(re^2 + im^2) has a NaN gradient
        # where y == 0 exactly (silent first samples), for every band; check the chain
        # through the adaptation loops
        loss = stages["adaptation"].square().sum()
    else:
        loss = out.square().sum()
    loss.backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_block_errors():
    with pytest.raises(ValueError, match="compensation"):
        HeadphoneFilter(16000, compensation="half")
    with pytest.raises(ValueError, match="phase"):
        MiddleEarFilter(16000, phase="zero")
    with pytest.raises(ValueError, match="sampling rate"):
        HeadphoneFilter(float("nan"))
    with pytest.raises(ValueError, match="mflow"):
        king2019_modulation_frequencies(10, 5)

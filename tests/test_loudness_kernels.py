"""AGC kernels (numba, triton) against the plain-torch reference; stage helpers."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from lhotse_amt.functional import loudness as L
from lhotse_amt.kernels import agc as kagc


def _signal(dtype, rows=5, t=400):
    g = torch.Generator().manual_seed(0)
    x = torch.rand(rows, t, generator=g, dtype=dtype)
    x[:, 100:200] = 0.0  # release segments
    x[:, 300:] *= 5.0
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_numba_matches_reference(dtype):
    x = _signal(dtype)
    ref = L.agc_reference(x, 0.045, 0.033)
    got = kagc.agc_numba(x, 0.045, 0.033)
    assert got.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-14
    assert torch.allclose(got, ref, rtol=tol, atol=tol)
    # dispatcher: CPU without grad -> numba; along another axis too
    y = L.agc(x.T.contiguous(), 0.045, 0.033, dim=0)
    assert torch.allclose(y.T, ref, rtol=tol, atol=tol)


def test_agc_semantics_first_frame_and_branches():
    x = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    y = L.agc(x, 0.5, 0.1)
    assert torch.allclose(y, torch.tensor([[0.5, 0.75, 0.675]], dtype=torch.float64))


def test_agc_gradcheck():
    x = (torch.rand(2, 12, dtype=torch.float64) + 0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: L.agc(v, 0.3, 0.05), (x,))


def test_triton_unavailable_or_matches():
    if not kagc.HAS_TRITON:
        with pytest.raises(RuntimeError):
            kagc.agc_triton(torch.zeros(1, 3), 0.1, 0.1)
        return
    code = (
        "import torch; from lhotse_amt.kernels import agc as k;"
        "from lhotse_amt.functional import loudness as L;"
        "x=torch.rand(3,50);"
        "y=k.agc_triton(x,0.045,0.02);"
        "assert torch.allclose(y, L.agc_reference(x,0.045,0.02), atol=1e-6)"
    )
    env = dict(os.environ, TRITON_INTERPRET="1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env)


def test_binaural_inhibition_diotic_and_monaural():
    s = torch.rand(4, 150, dtype=torch.float64)
    m = torch.tensor(L.binaural_smoothing_matrix(150))
    left, right = L.binaural_inhibition(s, s, m)
    # equal input: inhibition factor 2 / (1 + sech(1)^p)
    fac = 2.0 / (1.0 + (1.0 / np.cosh(1.0)) ** 1.5978)
    assert torch.allclose(left, s / fac) and torch.allclose(right, s / fac)
    left, right = L.binaural_inhibition(s, torch.zeros_like(s), m)
    assert torch.allclose(left, s / 1.0, rtol=1e-9) and torch.all(right == 0)


def test_fir_filter_full_matches_numpy():
    x = torch.randn(2, 300, dtype=torch.float64)
    h = torch.randn(31, dtype=torch.float64)
    y = L.fir_filter_full(x, h)
    ref = np.stack([np.convolve(r, h.numpy()) for r in x.numpy()])
    assert np.allclose(y.numpy(), ref, atol=1e-12)


def test_ear_filter_and_tables():
    t = L.loudness_tables()
    h = t["ff_32000"]
    assert h.shape == (4097,) and np.allclose(h, h[::-1])
    gain_1k = abs(np.sum(h * np.exp(-2j * np.pi * 1000 * np.arange(4097) / 32000)))
    assert abs(20 * np.log10(gain_1k)) < 0.05
    assert np.allclose(
        L.cam_to_hz(L.hz_to_cam(np.array([50.0, 1000.0, 15000.0]))), [50, 1000, 15000]
    )


def test_full_scale_helper():
    x = torch.ones(1)
    assert torch.allclose(
        L.pa_from_full_scale(x, 100.0),
        torch.tensor([2 * np.sqrt(2.0)], dtype=torch.float32),
        rtol=1e-5,
    )

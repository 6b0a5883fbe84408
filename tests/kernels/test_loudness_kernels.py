"""AGC kernels (numba, triton) against the plain-torch reference; stage helpers."""

from __future__ import annotations

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
    # frames x channels (the models' layout): the column kernel, vectorised over channels,
    # gives the row kernel's values exactly and a contiguous result
    x4 = torch.stack([x.T, 2.0 * x.T]).unsqueeze(0)  # (1, 2, T, N)
    y4 = L.agc(x4, 0.045, 0.033, dim=-2)
    assert y4.is_contiguous() and torch.equal(y4[0, 0], got.T)
    assert torch.equal(y4[0, 1], kagc.agc_numba(2.0 * x, 0.045, 0.033).T)


def test_agc_semantics_first_frame_and_branches():
    x = torch.tensor([[1.0, 1.0, 0.0]], dtype=torch.float64)
    y = L.agc(x, 0.5, 0.1)
    assert torch.allclose(y, torch.tensor([[0.5, 0.75, 0.675]], dtype=torch.float64))


def test_agc_gradcheck():
    x = (torch.rand(2, 12, dtype=torch.float64) + 0.1).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: L.agc(v, 0.3, 0.05), (x,))


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


# ----------------------------------------------------------------------------------------------
# compiled excitation path (numba lower skirt + autocorrelation trick) vs the torch reference
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "slopes",
    [
        (1.0, 0.3, "normal"),  # typical levels
        (0.6, 1.4, "uniform"),  # every frame without the clamp (|v| < 80 everywhere)
        (2.5, 3.5, "uniform"),  # very low levels: the clamp v >= -80 acts
        (-0.3, 0.2, "uniform"),  # extreme levels: negative slopes, v > 0
    ],
)
def test_lower_skirt_kernel_matches_numpy(slopes):
    from lhotse_amt.kernels.loudness import lower_skirt_numpy

    fc = L.cam_to_hz(np.arange(1.75, 39.01, 0.25))
    m = L.excitation_matrices(fc, "moore2016")
    f = np.arange(1, 961) * 15.625
    rng = np.random.default_rng(1)
    n = 6
    inten = rng.random((n, 960)) * 1e5
    inten[2:, 3::5] = 0.0  # not kept (80 %: the compacted path)
    a, b, kind = slopes
    s = a + b * rng.standard_normal((n, 960)) if kind == "normal" else rng.uniform(a, b, (n, 960))
    # rows 0-1: every component kept (a pair of dense frames), row 3: a single dense frame
    inten[3] = rng.random(960) * 1e5
    inten[2, 500:] = 0.0  # sparse frame: only low components
    v = np.maximum(s[:, :, None] * m.lower_h[None], -80.0)
    below = f[:, None] < fc[None, :]
    ref = (inten[:, :, None] * (1 - v) * np.exp(v) * below).sum(1)
    # the same slopes given as levels per ERB: s = a + b log10(X)
    sa, sb = 1.0 + 51.0 * 0.35 / L.P1000, -3.5 / L.P1000
    level = 10.0 ** ((s - sa) / sb)
    checked_levels = False
    for dt, tol in ((np.float64, 1e-13), (np.float32, 1e-5)):
        got = lower_skirt_numpy(inten.astype(dt), s, L.roex_p(fc), fc, f, m.n_below)
        assert got.dtype == dt
        scale = np.abs(ref).max(axis=1, keepdims=True)
        assert (np.abs(got - ref) / scale).max() < tol
        if np.all((level > 1e-30) & (level < 1e30)):  # levels representable in float32
            wide = np.concatenate([level, np.ones((n, 7))], axis=1).astype(dt)  # strided view
            got_lv = lower_skirt_numpy(
                inten.astype(dt), wide[:, :960], L.roex_p(fc), fc, f, m.n_below, (sa, sb)
            )
            assert (np.abs(got_lv - ref) / scale).max() < 10 * tol, slopes
            checked_levels = True
    assert checked_levels


def _noise(n, ch, level=65.0, seed=0):
    x = np.random.default_rng(seed).standard_normal((ch, n)) if ch else None
    x = x / np.sqrt(np.mean(x**2)) * 20e-6 * 10 ** (level / 20)
    return x


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-11), (torch.float32, 2e-5)])
def test_fast_path_matches_torch_reference(dtype, tol):
    from lhotse_amt.models.glasberg2002 import Glasberg2002
    from lhotse_amt.models.moore2016 import Moore2016

    n = 4800
    t = np.arange(n) / 32000
    tone = np.sqrt(2) * 20e-6 * 10**3 * np.sin(2 * np.pi * 1000 * t)
    noise = _noise(n, 1)[0]
    mixed = tone + 0.01 * noise  # partly pruned high band
    # float32: the two paths' spectra differ in the last bits, which can flip a component
    # lying at the pruning threshold (a step in N'), so the partly pruned signal is float64 only
    signals = (tone, noise, mixed) if dtype == torch.float64 else (tone, noise)
    for cls, keys in (
        (Glasberg2002, ("specific_loudness", "stl", "ltl")),
        (Moore2016, ("inst_spec_loud_left", "stl", "ltl")),
    ):
        ref_m, fast_m = cls(dtype=dtype, backend="torch"), cls(dtype=dtype, backend="fast")
        for sig in signals:
            x = torch.tensor(
                sig if cls is Glasberg2002 else np.stack([sig, 0.5 * sig]), dtype=dtype
            )
            with torch.no_grad():
                a, b = ref_m.compute(x), fast_m.compute(x)
            for k in keys:
                err = float((a[k] - b[k]).abs().max() / a[k].abs().max())
                assert err < tol, (cls.__name__, k, err)
    # the automatic choice: fast without gradient, reference with it
    m = Moore2016(dtype=torch.float64)
    x = torch.tensor(np.stack([tone[:1600]] * 2), requires_grad=True)
    assert not m._use_fast(x)
    assert m._use_fast(x.detach())

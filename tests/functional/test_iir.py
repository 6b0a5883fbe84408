"""The linear IIR engine against scipy.signal (float64), on both backends."""

import numpy as np
import pytest
import scipy.signal as ss
import torch

from lhotse_amt.functional.iir import one_pole_cascade, sosfilt

FS = 44100


def _filters():
    return {
        "lp1k": (ss.butter(1, 1000 / (FS / 2), output="sos"), 1e-12),
        "bp4": (ss.butter(4, [100 / (FS / 2), 3000 / (FS / 2)], "band", output="sos"), 1e-10),
        "hp3": (ss.butter(1, 3 / (FS / 2), "high", output="sos"), 1e-10),
        "ihc5x": (np.concatenate([ss.butter(1, 2000 / (FS / 2), output="sos")] * 5), 1e-10),
        # poles within 4e-4 of z = 1: roundoff of any realisation is amplified ~1e7
        "lp2.5": (ss.butter(2, 2.5 / (FS / 2), output="sos"), 1e-8),
    }


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("name", list(_filters()))
def test_sosfilt_matches_scipy(backend, name):
    sos, tol = _filters()[name]
    x = np.random.default_rng(1).standard_normal((2, 3, 3000))
    ref = ss.sosfilt(sos, x)
    y, zf = sosfilt(torch.from_numpy(x), torch.from_numpy(sos), return_state=True, backend=backend)
    assert y.shape == x.shape
    assert np.abs(y.numpy() - ref).max() / np.abs(ref).max() <= tol
    # streaming: two calls with the state carried equal one call
    y1, z1 = sosfilt(
        torch.from_numpy(x[..., :1111]), torch.from_numpy(sos), return_state=True, backend=backend
    )
    y2, z2 = sosfilt(
        torch.from_numpy(x[..., 1111:]),
        torch.from_numpy(sos),
        z1,
        return_state=True,
        backend=backend,
    )
    assert np.abs(torch.cat([y1, y2], -1).numpy() - ref).max() / np.abs(ref).max() <= tol


def test_sosfilt_state_convention_matches_scipy():
    sos = ss.butter(3, 0.1, output="sos")
    x = np.random.default_rng(2).standard_normal(500)
    zi = ss.sosfilt_zi(sos) * 0.3
    ref, zref = ss.sosfilt(sos, x, zi=zi)
    for backend in ("numba", "torch"):
        y, zf = sosfilt(
            torch.from_numpy(x),
            torch.from_numpy(sos),
            torch.from_numpy(zi),
            return_state=True,
            backend=backend,
        )
        np.testing.assert_allclose(y.numpy(), ref, rtol=0, atol=1e-12)
        np.testing.assert_allclose(zf.numpy(), zref, rtol=0, atol=1e-12)


def test_per_channel_coefficients():
    sos = np.stack([ss.butter(2, f, output="sos") for f in (0.05, 0.1, 0.3)])  # (3, 1, 6)
    x = np.random.default_rng(3).standard_normal((4, 3, 800))
    for backend in ("numba", "torch"):
        y = sosfilt(torch.from_numpy(x), torch.from_numpy(sos), backend=backend).numpy()
        for c in range(3):
            np.testing.assert_allclose(y[:, c], ss.sosfilt(sos[c], x[:, c]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("backend", ["numba", "torch"])
@pytest.mark.parametrize("order", [1, 4])
def test_one_pole_cascade_matches_sequential_lfilter(backend, order):
    p = 0.995 * np.exp(-2j * np.pi * 1000 / FS)
    g = 0.37 - 0.2j
    x = np.random.default_rng(4).standard_normal((2, 2000))
    ref = x.astype(complex)
    for _ in range(order):
        ref = ss.lfilter([1.0], [1.0, -p], ref)
    ref = g * ref
    y, z = one_pole_cascade(
        torch.from_numpy(x),
        torch.tensor(p, dtype=torch.complex128),
        torch.tensor(g, dtype=torch.complex128),
        order,
        output="complex",
        return_state=True,
        backend=backend,
    )
    assert np.abs(y.numpy() - ref).max() / np.abs(ref).max() <= 1e-12
    y2 = one_pole_cascade(
        torch.from_numpy(x),
        torch.tensor(p, dtype=torch.complex128),
        torch.tensor(g, dtype=torch.complex128),
        order,
        output="real2",
        backend=backend,
    )
    assert np.abs(y2.numpy() - 2 * ref.real).max() / np.abs(ref).max() <= 1e-12
    a, za = one_pole_cascade(
        torch.from_numpy(x[:, :700]),
        torch.tensor(p, dtype=torch.complex128),
        torch.tensor(g, dtype=torch.complex128),
        order,
        return_state=True,
        backend=backend,
    )
    b = one_pole_cascade(
        torch.from_numpy(x[:, 700:]),
        torch.tensor(p, dtype=torch.complex128),
        torch.tensor(g, dtype=torch.complex128),
        order,
        za,
        backend=backend,
    )
    assert np.abs(torch.cat([a, b], -1).numpy() - ref).max() / np.abs(ref).max() <= 1e-12


def test_backends_agree_in_float32():
    sos = torch.from_numpy(ss.butter(2, [0.01, 0.2], "band", output="sos")).float()
    x = torch.randn(3, 5000)
    a = sosfilt(x, sos, backend="numba")
    b = sosfilt(x, sos, backend="torch")
    assert a.dtype == b.dtype == torch.float32
    assert (a - b).abs().max() / a.abs().max() < 2e-4


@pytest.mark.parametrize("backend", ["numba", "torch"])
def test_sections_are_divided_by_their_a0(backend):
    """A section ``[b, a]`` with ``a0 != 1`` is the filter ``b(z) / a(z)``: the sections
    are normalised as ``scipy.signal.lfilter`` normalises by ``a[0]`` (the kernels took
    ``a0 = 1`` and ignored it)."""
    sos = ss.butter(4, 0.1, output="sos")
    scaled = sos * np.array([[2.0], [0.5]])  # the same filters, a0 = 2 and 0.5
    x = np.random.default_rng(4).standard_normal((2, 400))
    y = sosfilt(torch.from_numpy(x), torch.from_numpy(scaled), backend=backend).numpy()
    np.testing.assert_allclose(y, ss.sosfilt(sos, x), rtol=0, atol=1e-12)
    b, a = ss.sos2tf(sos)
    np.testing.assert_allclose(y, ss.lfilter(b, a, x), rtol=0, atol=1e-10)


def test_gradients_reach_coefficients():
    sos = torch.from_numpy(ss.butter(2, 0.1, output="sos")).requires_grad_(True)
    x = torch.randn(2, 300, dtype=torch.float64, requires_grad=True)
    torch.autograd.gradcheck(lambda x, s: sosfilt(x, s, block=16), (x[:, :60], sos))
    p = torch.tensor(0.9 * np.exp(0.3j), requires_grad=True)
    torch.autograd.gradcheck(
        lambda x, p: one_pole_cascade(
            x, p, torch.tensor(0.1, dtype=torch.float64), 2, output="real2", block=16
        ),
        (x[:, :50], p),
    )


def test_auto_backend_choice():
    from lhotse_amt.functional.iir import resolve_backend

    x = torch.randn(10)
    assert resolve_backend("auto", x) == "numba"  # eager CPU inference: the fused kernel
    assert resolve_backend("auto", torch.zeros(3, device="meta")) == "auto"  # operators
    assert resolve_backend("auto", x.requires_grad_()) == "auto"  # autograd: the operators
    assert resolve_backend("torch", x) == "torch"  # the reference, as asked
    with pytest.raises(ValueError):
        resolve_backend("fast", x)

"""The compression operators ``lhotse_amt::broken_stick`` (King et al. 2019) and
``lhotse_amt::drnl_compression`` (Paulick2024's DRNL): values and gradients (input and
parameters) against the plain-torch reference's autograd, registration
(``torch.library.opcheck``), float64 ``gradcheck``, the plain-torch functions of other
devices against the CPU kernels, argument checks, the dispatch of the functionals and
King2019's model gradients against the reference chain."""

import pytest
import torch
from king2019_chain import assert_king2019_gradients_match

from lhotse_amt import ops
from lhotse_amt.functional.compression import broken_stick_compression, knee_amplitude
from lhotse_amt.functional.drnl import broken_stick as drnl_broken_stick
from lhotse_amt.ops.compression import (
    _backward_torch,
    _drnl_backward_torch,
    _drnl_forward_torch,
    _forward_torch,
    broken_stick_op,
    drnl_compression_op,
)

D = torch.float64
K = knee_amplitude(30.0, 100.0)


def _signal(shape, seed, dtype=D):
    g = torch.Generator().manual_seed(seed)
    # amplitudes on both sides of the knee, both signs, and exact zeros
    x = torch.randn(shape, generator=g, dtype=D) * torch.logspace(-5, -1, shape[-1], dtype=D)
    x[..., ::97] = 0.0
    return x.to(dtype)


def _grads(fn, x, n, g):
    x = x.clone().requires_grad_(True)
    n = n.clone().requires_grad_(True)
    y = fn(x, n)
    return (y, *torch.autograd.grad(y, (x, n), g))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_values_and_gradients_equal_reference_autograd(dtype):
    x = _signal((3, 2, 5000), 0, dtype)
    n = torch.tensor(0.3, dtype=dtype)
    g = _signal((3, 2, 5000), 1, dtype) * 1e3
    got = _grads(lambda v, e: broken_stick_compression(v, 30.0, e, 100.0), x, n, g)
    ref = _grads(
        lambda v, e: broken_stick_compression(v, 30.0, e, 100.0, backend="reference"), x, n, g
    )
    tol = 1e-13 if dtype == D else 2e-6
    for a, b in zip(got, ref, strict=True):
        a, b = a.detach(), b.detach()
        assert a.dtype == b.dtype and a.shape == b.shape
        assert float((a - b).abs().max()) <= tol * float(b.abs().max())
    # below the knee the signal passes unchanged, with unit gradient
    lin = x.abs() <= K
    assert torch.equal(got[0][lin], x[lin]) and torch.equal(got[1][lin], g[lin])


def test_opcheck():
    x = _signal((2, 300), 2)
    n = torch.tensor(0.3, dtype=D)
    torch.library.opcheck(broken_stick_op, (x.requires_grad_(True), n.requires_grad_(True), K))


def test_gradcheck_float64():
    g = torch.Generator().manual_seed(3)
    # below the knee and well above it (no sample within the finite-difference step of the
    # knee), both signs
    mag = torch.where(torch.rand(2, 150, generator=g) < 0.3, 0.5 * K, 50 * K)
    sign = torch.where(torch.rand(2, 150, generator=g) < 0.5, -1.0, 1.0)
    x = (sign * mag * torch.rand(2, 150, generator=g, dtype=D).add(0.5)).requires_grad_(True)
    n = torch.tensor(0.4, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, e: ops.broken_stick(v, e, K), (x, n))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_plain_torch_functions_of_other_devices_equal_the_cpu_kernels(dtype):
    x = _signal((4, 800), 4, dtype)
    n = torch.tensor(0.3, dtype=dtype)
    g = _signal((4, 800), 5, dtype)
    y = broken_stick_op(x, n, K)
    gx, gn = torch.ops.lhotse_amt.broken_stick_backward(g, x, n, K)
    yt = _forward_torch(x, float(n), K)
    gxt, gnt = _backward_torch(g, x, float(n), K)
    gnt = gnt.to(dtype)
    tol = 1e-13 if dtype == D else 2e-6
    for a, b in ((y, yt), (gx, gxt), (gn, gnt)):
        assert a.dtype == b.dtype
        assert float((a - b).abs().max()) <= tol * float(b.abs().max())


def test_argument_errors():
    x = _signal((2, 100), 6)
    with pytest.raises(ValueError, match="one element"):
        ops.broken_stick(x, torch.tensor([0.3, 0.4], dtype=D), K)
    with pytest.raises(ValueError, match="positive amplitude"):
        ops.broken_stick(x, torch.tensor(0.3, dtype=D), 0.0)
    with pytest.raises(ValueError, match="backend"):
        broken_stick_compression(x, backend="numba")


def test_functional_dispatches_scalar_exponents_to_the_operator(monkeypatch):
    calls = []

    def spy(x, exponent, knee):
        calls.append(exponent.shape)
        return x

    monkeypatch.setattr(ops, "broken_stick", spy)
    x = _signal((2, 100), 7)
    broken_stick_compression(x, exponent=0.3)
    broken_stick_compression(x, exponent=torch.tensor([0.3], dtype=D))
    assert len(calls) == 2
    # a per-channel exponent and the reference backend run the plain-torch expression
    broken_stick_compression(x, exponent=torch.tensor([[0.3], [0.4]], dtype=D))
    broken_stick_compression(x, exponent=0.3, backend="reference")
    assert len(calls) == 2


def test_king2019_gradients_equal_reference_chain(monkeypatch):
    def reference(v, exponent, knee):
        q = v.abs() / knee
        return torch.where(q > 1, torch.sign(v) * knee * q.clamp(min=1) ** exponent, v)

    assert_king2019_gradients_match(monkeypatch, "broken_stick", reference, rtol=1e-10)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_operator_on_cuda_equals_cpu(dtype):
    x = _signal((4, 3000), 7, dtype)
    n = torch.tensor(0.3, dtype=dtype)
    g = _signal((4, 3000), 8, dtype)
    cpu = _grads(lambda v, e: ops.broken_stick(v, e, K), x, n, g)
    gpu = _grads(lambda v, e: ops.broken_stick(v, e, K), x.cuda(), n.cuda(), g.cuda())
    tol = 1e-13 if dtype == D else 2e-6
    for a, b in zip(gpu, cpu):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert float((a.cpu() - b).abs().max()) <= tol * float(b.abs().max())


# --------------------------------------------------------------------------------------
# lhotse_amt::drnl_compression (Paulick2024's DRNL nonlinear path)

C_DRNL = 4


def _drnl_inputs(seed, dtype=D, T=3000):
    g = torch.Generator().manual_seed(seed)
    # amplitudes from far below to far above each channel's knee, both signs, exact zeros
    u = torch.randn(2, C_DRNL, T, generator=g, dtype=D) * torch.logspace(-9, 1, T, dtype=D)
    u[..., ::97] = 0.0
    a = torch.rand(C_DRNL, generator=g, dtype=D) * 1e3 + 10.0
    b = torch.rand(C_DRNL, generator=g, dtype=D) * 100.0 + 1.0
    return u.to(dtype), a, b, torch.tensor(0.25, dtype=D)


def _drnl_grads(fn, u, a, b, c, g):
    args = [t.clone().requires_grad_(True) for t in (u, a, b, c)]
    y = fn(*args)
    return (y, *torch.autograd.grad(y, args, g))


def _drnl_reference(u, a, b, c):
    return drnl_broken_stick(u, a.to(u.dtype)[:, None], b.to(u.dtype)[:, None], c.to(u.dtype))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_drnl_compression_values_and_gradients_equal_reference_autograd(dtype):
    u, a, b, c = _drnl_inputs(10, dtype)
    g = torch.randn(u.shape, generator=torch.Generator().manual_seed(11), dtype=D).to(dtype)
    got = _drnl_grads(ops.drnl_compression, u, a, b, c, g)
    ref = _drnl_grads(_drnl_reference, u, a, b, c, g)
    tol = 1e-13 if dtype == D else 1e-6
    for name, x, r in zip(("y", "du", "da", "db", "dc"), got, ref, strict=True):
        x, r = x.detach(), r.detach()
        assert x.dtype == r.dtype and x.shape == r.shape, name
        assert float((x - r).abs().max()) <= tol * float(r.abs().max()), name
    # both branches and the bound on |u| were exercised
    t = b[:, None] * u.to(D).abs().clamp_min(1e-30) ** (c - 1.0)
    lin = a[:, None] <= t
    assert lin.any() and (~lin).any() and (u == 0).any()


def test_drnl_compression_opcheck_and_gradcheck_float64():
    u, a, b, c = _drnl_inputs(12, T=60)
    u = u * 1e-2
    args = (u.requires_grad_(True), a.requires_grad_(True), b.requires_grad_(True))
    args = (*args, c.requires_grad_(True))
    torch.library.opcheck(drnl_compression_op, args)
    assert torch.autograd.gradcheck(ops.drnl_compression, args)


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_drnl_compression_torch_functions_of_other_devices_equal_the_cpu_kernels(dtype):
    u, a, b, c = _drnl_inputs(13, dtype, T=700)
    g = torch.randn(u.shape, generator=torch.Generator().manual_seed(14), dtype=D).to(dtype)
    a, b, c = a.to(dtype), b.to(dtype), c.to(dtype)
    got = (drnl_compression_op(u, a, b, c),)
    got += torch.ops.lhotse_amt.drnl_compression_backward(g, u, a, b, c)
    ref = (_drnl_forward_torch(u, a, b, float(c)),)
    ref += _drnl_backward_torch(g, u, a, b, float(c))
    tol = 1e-13 if dtype == D else 1e-6
    for x, r in zip(got, ref, strict=True):
        x, r = x.to(D), r.to(D)
        assert float((x - r).abs().max()) <= tol * float(r.abs().max())


def test_drnl_compression_argument_errors():
    u, a, b, c = _drnl_inputs(15, T=50)
    with pytest.raises(ValueError, match=r"a must have shape \(4,\)"):
        ops.drnl_compression(u, a[:3], b, c)
    with pytest.raises(ValueError, match="one element"):
        ops.drnl_compression(u, a, b, torch.tensor([0.2, 0.3], dtype=D))
    with pytest.raises(ValueError, match=r"\(\.\.\., C, T\)"):
        ops.drnl_compression(u[0, 0], a, b, c)


def test_drnl_takes_the_operator_with_gradients_and_the_reference_for_torch(monkeypatch):
    from lhotse_amt.modules.drnl import DRNLFilterbank

    calls = []
    real = ops.drnl_compression
    monkeypatch.setattr(ops, "drnl_compression", lambda *a: calls.append(1) or real(*a))
    d = DRNLFilterbank(16000, flow=500.0, fhigh=1000.0, learnable=True, dtype=D)
    x = torch.randn(1, 400, dtype=D, generator=torch.Generator().manual_seed(16)) * 0.05
    y = d(x.clone().requires_grad_(True))  # a gradient is recorded: the operators
    assert calls == [1]
    with torch.no_grad():
        ref = d(x, backend="torch")  # the plain-torch reference
    assert calls == [1]
    assert float((y.detach() - ref).abs().max()) <= 1e-12 * float(ref.abs().max())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_drnl_compression_on_cuda_equals_cpu(dtype):
    u, a, b, c = _drnl_inputs(17, dtype)
    g = torch.randn(u.shape, generator=torch.Generator().manual_seed(18), dtype=D).to(dtype)
    cpu = _drnl_grads(ops.drnl_compression, u, a, b, c, g)
    gpu = _drnl_grads(ops.drnl_compression, *(t.cuda() for t in (u, a, b, c, g)))
    tol = 1e-13 if dtype == D else 1e-6
    for x, r in zip(gpu, cpu, strict=True):
        assert x.dtype == r.dtype and x.shape == r.shape
        assert float((x.detach().cpu() - r.detach()).abs().max()) <= tol * float(r.abs().max())

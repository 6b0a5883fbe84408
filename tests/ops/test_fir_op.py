"""The strided FIR operator ``lhotse_amt::strided_fir`` (Paulick2024's decimation): values
and gradients against ``conv1d``'s autograd, registration (``torch.library.opcheck``),
float64 ``gradcheck``, argument checks, and Paulick2024's model gradients against the
``conv1d`` reference."""

import pytest
import torch

import lhotse_amt
from lhotse_amt import ops
from lhotse_amt.ops.fir import _KERNELS, _backward_rows, strided_fir_rows

D = torch.float64


def _conv(x, w, start, stride, n_out):
    y = torch.nn.functional.conv1d(x[:, None, start:], w[None, None], stride=stride)
    return y[:, 0, :n_out]


@pytest.mark.parametrize("dtype", [D, torch.float32])
@pytest.mark.parametrize("K,stride,start", [(97, 4, 0), (13, 3, 5), (7, 1, 2), (5, 8, 1)])
def test_values_and_gradients_equal_conv1d_autograd(dtype, K, stride, start):
    g = torch.Generator().manual_seed(K + stride)
    x = torch.randn(3, 700, generator=g, dtype=dtype).requires_grad_(True)
    w = torch.randn(K, generator=g, dtype=dtype).requires_grad_(True)
    n_out = (700 - start - K) // stride + 1
    y = ops.strided_fir(x, w, start, stride, n_out)
    ref = _conv(x, w, start, stride, n_out)
    assert y.shape == ref.shape and y.dtype == dtype
    tol = 1e-12 if dtype == D else 1e-5
    scale = float(ref.detach().abs().max())
    assert float((y - ref).detach().abs().max()) <= tol * scale
    gy = torch.randn(ref.shape, generator=g, dtype=dtype)
    gx, gw = torch.autograd.grad(y, [x, w], gy)
    rx, rw = torch.autograd.grad(ref, [x, w], gy)
    assert float((gx - rx).abs().max()) <= tol * float(rx.abs().max())
    assert float((gw - rw).abs().max()) <= tol * float(rw.abs().max())


def test_fewer_outputs_than_the_input_allows_leave_the_tail_without_gradient():
    x = torch.randn(2, 100, dtype=D, requires_grad=True)
    w = torch.randn(9, dtype=D)
    y = ops.strided_fir(x, w, 0, 4, 5)  # reads x[:, :25]
    (gx,) = torch.autograd.grad(y.sum(), x)
    assert torch.equal(gx[:, 25:], torch.zeros(2, 75, dtype=D))
    assert bool((gx[:, :25] != 0).any())


def test_opcheck():
    x = torch.randn(3, 120, dtype=D, requires_grad=True)
    w = torch.randn(11, dtype=D, requires_grad=True)
    torch.library.opcheck(strided_fir_rows, (x, w, 2, 4, 20))
    torch.library.opcheck(strided_fir_rows, (x.detach().float(), w.detach().float(), 0, 3, 30))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_conv1d_functions_of_other_devices_equal_the_cpu_kernels(dtype):
    # what the operator runs on a device without compiled kernels, on CPU tensors
    other, cpu = _KERNELS.for_device("mps"), _KERNELS.for_device("cpu")
    assert other is not cpu
    g = torch.Generator().manual_seed(3)
    x = torch.randn(3, 300, generator=g, dtype=dtype)
    w = torch.randn(13, generator=g, dtype=dtype)
    start, stride, n_out = 2, 3, 90
    tol = 1e-12 if dtype == D else 1e-5
    y, ry = (
        other.fir_forward(x, w, start, stride, n_out),
        cpu.fir_forward(x, w, start, stride, n_out),
    )
    assert y.dtype == ry.dtype and float((y - ry).abs().max()) <= tol * float(ry.abs().max())
    gy = torch.randn(ry.shape, generator=g, dtype=dtype)
    for want_x, want_w in ((True, True), (True, False), (False, True)):
        got = _backward_rows(other, gy, x, w, start, stride, want_x, want_w)
        ref = _backward_rows(cpu, gy, x, w, start, stride, want_x, want_w)
        for a, b in zip(got, ref, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            if b.numel():
                assert float((a - b).abs().max()) <= tol * float(b.abs().max())


def test_gradcheck_float64():
    x = torch.randn(2, 60, dtype=D, requires_grad=True)
    w = torch.randn(7, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: ops.strided_fir(a, b, 1, 3, 15), (x, w))


def test_argument_errors():
    x = torch.randn(2, 50)
    w = torch.randn(9)
    with pytest.raises(ValueError, match="read 54"):
        ops.strided_fir(x, w, 1, 4, 12)
    with pytest.raises(ValueError, match="stride=0"):
        ops.strided_fir(x, w, 0, 0, 3)
    with pytest.raises(TypeError, match="x must be a real floating tensor"):
        ops.strided_fir(x[0], w, 0, 1, 3)
    with pytest.raises(TypeError, match="w must be a real floating tensor"):
        ops.strided_fir(x, w.long(), 0, 1, 3)
    assert ops.strided_fir(x, w, 0, 4, 0).shape == (2, 0)


def test_paulick2024_gradients_equal_conv1d_reference(monkeypatch):
    torch.manual_seed(0)
    model = lhotse_amt.Paulick2024(fs=44100, dtype=D, n_channels=3, learnable=True)
    x = (0.05 * torch.randn(1, 2000, dtype=D)).requires_grad_(True)
    params = [p for p in model.parameters() if p.requires_grad]

    def loss():
        return sum(o.square().mean() for o in model(x))

    grads = torch.autograd.grad(loss(), [x, *params], allow_unused=True)
    monkeypatch.setattr(ops, "strided_fir", _conv)
    ref = torch.autograd.grad(loss(), [x, *params], allow_unused=True)
    for g, r in zip(grads, ref, strict=True):
        assert (g is None) == (r is None)
        if g is not None:
            assert float((g - r).abs().max()) <= 1e-9 * float(r.abs().max()) + 1e-300

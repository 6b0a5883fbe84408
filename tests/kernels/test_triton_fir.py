"""The Triton kernels of the strided FIR operator (:mod:`lhotse_amt.kernels.triton_fir`)
against its numba kernels (:mod:`lhotse_amt.kernels.fir_grad`) and the plain-torch
reference (``conv1d`` and its autograd), float64 and float32, in Triton's CPU interpreter:
the kernels one by one, then the operator's CUDA implementations run on CPU tensors. On
CUDA, the operator ``lhotse_amt::strided_fir`` against its CPU kernel.

Taps longer than, equal to a multiple of and shorter than the stride, start offsets, odd
lengths, fewer outputs than the input allows (a tail without gradient), partial blocks
and chunks of the programs, gradients asked for one at a time, and no output.
"""

from __future__ import annotations

import pytest
import torch
from triton_interpret import run_interpreted

_SCRIPT = """
import torch
from lhotse_amt.kernels import fir_grad as cpu
from lhotse_amt.kernels import triton_fir as tri
from lhotse_amt.ops.fir import _conv as conv
from lhotse_amt.ops.fir import _KERNELS, _backward_rows, strided_fir_rows

cuda = _KERNELS.for_device("cuda")  # the operator's kernel choice on CUDA
assert cuda is tri and _KERNELS.for_device("cpu") is cpu

torch.manual_seed(0)


def close(name, a, b, tol):
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    if b.numel() == 0:
        return
    scale = b.double().abs().max().item()
    assert scale > 0, name
    err = (a.double() - b.double()).abs().max().item() / scale
    assert err <= tol, (name, str(b.dtype), err)


CASES = (  # K, stride, start, Tx, dtype
    (97, 4, 0, 701, torch.float64),
    (12, 3, 5, 301, torch.float32),
    (7, 1, 2, 151, torch.float64),
    (5, 8, 1, 333, torch.float32),
)
for K, stride, start, Tx, dt in CASES:
    tol = 1e-12 if dt == torch.float64 else 1e-6
    x = torch.randn(3, Tx, dtype=torch.float64).to(dt)
    w = torch.randn(K, dtype=torch.float64).to(dt)
    n_out = (Tx - start - K) // stride  # one output less than Tx allows: a tail
    y = cpu.fir_forward(x, w, start, stride, n_out)
    close("y", tri.fir_forward(x, w, start, stride, n_out, block=64), y, tol)
    close("y vs conv1d", y, conv(x.double(), w.double(), start, stride, n_out).to(dt), tol)
    g = torch.randn(3, n_out, dtype=torch.float64).to(dt)
    ref = cpu.fir_backward(g, x, w, start, stride, True, True)
    got = tri.fir_backward(g, x, w, start, stride, True, True, block=64, chunk=16)
    close("gx", got[0], ref[0], tol)
    close("gw", got[1], ref[1], 1e-12)
    assert (got[0][:, start + (n_out - 1) * stride + K :] == 0).all()
    for wx, ww in ((True, False), (False, True)):
        one = tri.fir_backward(g, x, w, start, stride, wx, ww, block=64, chunk=16)
        assert one[0].shape == ((3, Tx) if wx else (3, 0))
        assert one[1].shape == ((3, K) if ww else (3, 0))
        assert torch.equal(one[0 if wx else 1], got[0 if wx else 1])

    # the operator's CUDA implementations on CPU tensors: the CPU operator and conv1d's
    # autograd
    op_y = strided_fir_rows(x, w, start, stride, n_out)
    close("op y", cuda.fir_forward(x, w, start, stride, n_out), op_y, tol)
    gx, gw = _backward_rows(cuda, g, x, w, start, stride, True, True)
    xr = x.double().requires_grad_(True)
    wr = w.double().requires_grad_(True)
    rx, rw = torch.autograd.grad(conv(xr, wr, start, stride, n_out), [xr, wr], g.double())
    close("op gx vs conv1d", gx, rx.to(dt), tol)
    close("op gw vs conv1d", gw, rw, 1e-12 if dt == torch.float64 else 1e-5)

e = tri.fir_backward(g[:, :0], x, w, start, stride, True, True)
assert e[0].shape == x.shape and (e[0] == 0).all() and e[1].shape == (3, K) and (e[1] == 0).all()
assert tri.fir_forward(x, w, start, stride, 0).shape == (3, 0)
print("ok")
"""


def test_fir_triton_kernels_match_numba_and_conv1d_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fir_operator_cuda_matches_cpu(dtype):
    from lhotse_amt import ops

    g = torch.Generator().manual_seed(0)
    R, Tx, K, stride, start = 50, 44101, 97, 4, 3
    n_out = (Tx - start - K) // stride + 1
    x = torch.randn(R, Tx, generator=g, dtype=torch.float64).to(dtype)
    w = torch.randn(K, generator=g, dtype=torch.float64).to(dtype)
    gy = torch.randn(R, n_out, generator=g, dtype=torch.float64).to(dtype)
    outs = []
    for dev in ("cpu", "cuda"):
        xd = x.to(dev).requires_grad_(True)
        wd = w.to(dev).requires_grad_(True)
        y = ops.strided_fir(xd, wd, start, stride, n_out)
        outs.append((y, *torch.autograd.grad(y, [xd, wd], gy.to(dev))))
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for a, b in zip(outs[1], outs[0], strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        err = (a.detach().cpu().double() - b.detach().double()).abs().max()
        assert err <= tol * b.detach().double().abs().max()

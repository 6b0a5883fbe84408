"""The Triton kernels of the AGC operator (:mod:`lhotse_amt.kernels.triton_agc`) against
its numba kernels (:mod:`lhotse_amt.kernels.agc_grad`) in Triton's CPU interpreter: the
forward bit for bit (float64 and float32), the backward (input, attack, release and state
gradients), the input checks; on CUDA, the operator ``lhotse_amt::agc`` against its CPU
kernel.

Columns of ``(B, T, C) = (2, T, 5)`` with 8 columns per program exercise the masked
columns of the last program; the signal rises and falls so both branches are taken.
"""

from __future__ import annotations

import pytest
import torch
from triton_interpret import run_interpreted

_SCRIPT = """
import torch
from lhotse_amt.kernels import agc_grad as cpu
from lhotse_amt.kernels import triton_agc as tri

torch.manual_seed(0)
B, C = 2, 5
for dt, T, wx in ((torch.float64, 150, True), (torch.float32, 120, False)):
    x = (torch.rand(B, T, C, dtype=torch.float64) ** 3 * 4.0).to(dt)
    at = (torch.rand(B, C) * 0.5 + 0.1).to(dt)
    rl = (torch.rand(B, C) * 0.05 + 0.01).to(dt)
    zi = torch.rand(B, C, dtype=dt)
    y = cpu.agc_forward(x, at, rl, zi)
    got = tri.agc_forward(x, at, rl, zi, block=8)
    assert got.dtype == dt and torch.equal(got, y), (str(dt), (got - y).abs().max())
    gy = torch.randn(B, T, C, dtype=dt)
    ref = cpu.agc_backward(gy, x, y, at, rl, zi, wx)
    got = tri.agc_backward(gy, x, y, at, rl, zi, wx, block=8)
    for name, a, b in zip(("gx", "ga", "gr", "gzi"), got, ref, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype)
        if b.numel():
            assert b.abs().max() > 0, name
            err = ((a.double() - b.double()).abs().max() / b.double().abs().max()).item()
            assert err <= (1e-13 if dt == torch.float64 else 1e-6), (name, str(dt), err)

for bad, kind in (((x[0], at, rl, zi), ValueError), ((x, at.double(), rl, zi), TypeError)):
    try:
        tri.agc_forward(*bad)
    except kind as e:
        assert "agc" in str(e)
    else:
        raise AssertionError("bad input accepted")
print("ok")
"""


def test_agc_triton_kernels_match_numba_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


_STREAM = """
import numpy as np
import torch
from lhotse_amt.ops.agc_stream import agc_stream, agc_stream_device

torch.manual_seed(1)
x = torch.rand(3, 300, dtype=torch.float64) ** 3
for xd, sd in ((torch.float64, torch.float64), (torch.float32, torch.float64),
               (torch.float32, torch.float32)):
    xs = x.to(xd)
    ref_state = (torch.rand(3, dtype=torch.float64) * 0.1).to(sd)
    st = ref_state.clone()
    ref = agc_stream(xs.numpy(), 0.045, 0.02, ref_state.numpy())
    # three blocks (one empty) on the device kernel equal one call on the CPU kernel
    parts = [agc_stream_device(xs[:, a:b], st, 0.045, 0.02)
             for a, b in ((0, 120), (120, 120), (120, 300))]
    got = torch.cat(parts, 1)
    assert got.dtype == xd and st.dtype == sd
    assert torch.equal(got, torch.from_numpy(ref)), (str(xd), str(sd))
    assert torch.equal(st, ref_state), (str(xd), str(sd))
print("ok")
"""


def test_agc_stream_cuda_kernel_matches_the_cpu_kernel_in_interpreter():
    # the operator's CUDA kernel (the agc operator's Triton kernel, state carried between
    # blocks) on CPU tensors in the interpreter: bit for bit the CPU operator, streamed
    pytest.importorskip("triton")
    run_interpreted(_STREAM)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_agc_operator_cuda_matches_cpu(dtype):
    import lhotse_amt.ops  # noqa: F401  (registers the operators)

    ops = torch.ops.lhotse_amt
    g = torch.Generator().manual_seed(0)
    B, T, C = 3, 4000, 150
    x = (torch.rand(B, T, C, generator=g, dtype=torch.float64) ** 3 * 4.0).to(dtype)
    at = (torch.rand(B, C, generator=g) * 0.5 + 0.1).to(dtype)
    rl = (torch.rand(B, C, generator=g) * 0.05 + 0.01).to(dtype)
    zi = torch.rand(B, C, generator=g, dtype=torch.float64).to(dtype)
    y = ops.agc(x, at, rl, zi)
    yc = ops.agc(x.cuda(), at.cuda(), rl.cuda(), zi.cuda())
    assert torch.equal(yc.cpu(), y)  # the same arithmetic, no contraction
    gy = torch.randn(B, T, C, generator=g, dtype=torch.float64).to(dtype)
    args = (gy, x, y, at, rl, zi)
    ref = ops.agc_backward(*args, True)
    got = ops.agc_backward(*(a.cuda() for a in args), True)
    tol = 1e-12 if dtype == torch.float64 else 1e-6
    for a, b in zip(got, ref, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert (a.cpu().double() - b.double()).abs().max() <= tol * b.double().abs().max()

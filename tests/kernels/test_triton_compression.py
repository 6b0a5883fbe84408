"""The Triton kernels of the compression operators
(:mod:`lhotse_amt.kernels.triton_compression`, the operators' CUDA kernels) against their
CPU kernels (:mod:`lhotse_amt.kernels.compression`) in Triton's interpreter: values, the
input gradient and the parameters' gradients, float64 and float32, amplitudes on both
sides of the knee, both signs and exact zeros, a partial last block. Broken stick (King
et al. 2019) and DRNL compression (per channel, rows of two items)."""

from __future__ import annotations

import pytest
from triton_interpret import run_interpreted

_TRITON = """
import torch
from lhotse_amt.kernels import compression as cpu
from lhotse_amt.kernels import triton_compression as tri
from lhotse_amt.ops.compression import _KERNELS

assert _KERNELS.for_device("cuda") is tri and _KERNELS.for_device("cpu") is cpu
g0 = torch.Generator().manual_seed(0)
for dt, tol in ((torch.float64, 1e-13), (torch.float32, 2e-6)):
    x = (torch.randn(3, 1500, generator=g0, dtype=torch.float64)
         * torch.logspace(-5, -1, 1500, dtype=torch.float64)).to(dt)
    x[:, ::97] = 0.0
    g = torch.randn(3, 1500, generator=g0, dtype=torch.float64).to(dt)
    K, n = 10 ** (-70 / 20), 0.3
    y, yr = tri.broken_stick_forward(x, n, K), cpu.broken_stick_forward(x, n, K)
    gx, gn = tri.broken_stick_backward(g, x, n, K)
    gxr, gnr = cpu.broken_stick_backward(g, x, n, K)
    assert y.dtype == gx.dtype == dt and y.shape == gx.shape == x.shape
    for a, b in ((y, yr), (gx, gxr)):
        assert float((a - b).abs().max()) <= tol * float(b.abs().max()), dt
    assert abs(float(gn) - gnr) <= tol * abs(gnr), (float(gn), gnr)

    C = 3
    u = (torch.randn(2, C, 1500, generator=g0, dtype=torch.float64)
         * torch.logspace(-9, 1, 1500, dtype=torch.float64)).to(dt)
    u[..., ::97] = 0.0
    gu = torch.randn(2, C, 1500, generator=g0, dtype=torch.float64).to(dt)
    a = torch.rand(C, generator=g0, dtype=torch.float64) * 1e3 + 10.0
    b = torch.rand(C, generator=g0, dtype=torch.float64) * 100.0 + 1.0
    y, yr = tri.drnl_compression_forward(u, a, b, 0.25), cpu.drnl_compression_forward(u, a, b, 0.25)
    got = tri.drnl_compression_backward(gu, u, a, b, 0.25)
    ref = cpu.drnl_compression_backward(gu, u, a, b, 0.25)
    assert y.dtype == got[0].dtype == dt and y.shape == got[0].shape == u.shape
    assert got[1].shape == got[2].shape == (C,) and got[3].shape == ()
    for x, r in ((y, yr), *zip(got, ref)):
        x, r = x.to(torch.float64), r.to(torch.float64)
        assert float((x - r).abs().max()) <= tol * float(r.abs().max()), dt
print("ok")
"""


def test_triton_kernels_equal_the_cpu_kernels_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_TRITON)

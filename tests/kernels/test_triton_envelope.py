"""The Triton kernels of the rms-matched Hilbert envelope operator
(:mod:`lhotse_amt.kernels.triton_envelope`) against its numba kernels
(:mod:`lhotse_amt.kernels.envelope`) and the plain-torch reference (the autograd of
:func:`lhotse_amt.functional.king2019_modulation.phase_insensitivity`,
``backend="reference"``), float64 and float32, in Triton's CPU interpreter: the kernels one
by one, then the operator's CUDA implementations (Hilbert transforms and kernels) run on
CPU tensors. On CUDA, the operator ``lhotse_amt::rms_envelope`` against its CPU kernel.

Batch shape ``(2, 3)`` of 5 bands, 3 of them selected, odd and even lengths over several
chunks of a program (64 samples, the last one partial), and an all-zero band (output and
gradient 0).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_interpret import run_interpreted

_SCRIPT = """
import torch
from lhotse_amt.functional.king2019_modulation import phase_insensitivity
from lhotse_amt.kernels import envelope as cpu
from lhotse_amt.kernels import triton_envelope as tri
from lhotse_amt.ops.envelope import _KERNELS, _backward_rows, _forward, _hilbert, rms_envelope_rows

cuda = _KERNELS.for_device("cuda")  # the operator's kernel choice on CUDA
assert cuda is tri and _KERNELS.for_device("cpu") is cpu

torch.manual_seed(0)
sel = [1, 3, 4]
mfc = [20.0 if m in sel else 1.0 for m in range(5)]


def close(name, a, b, tol):
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    scale = b.double().abs().max().item()
    assert scale > 0, name
    err = (a.double() - b.double()).abs().max().item() / scale
    assert err <= tol, (name, str(b.dtype), err)


for dt, T in ((torch.float64, 301), (torch.float32, 256)):
    tol = 1e-12 if dt == torch.float64 else 1e-6
    rtol = 1e-10 if dt == torch.float64 else 1e-5  # against the float64 reference
    t = torch.arange(T, dtype=torch.float64)
    x = (torch.randn(2, 3, 5, T, dtype=torch.float64) * (1.5 + torch.sin(0.07 * t))).to(dt)
    x[1, 2, 3] = 0.0  # an all-zero selected band
    xr = x.reshape(6, 5, T)
    h = _hilbert(xr[:, sel])
    ref = cpu.envelope_forward(xr, h, sel)
    got = tri.envelope_forward(xr, h, sel, block=64)
    close("out", got[0], ref[0], tol)
    close("stats", got[1], ref[1], 1e-13)
    assert (got[0][5, 3] == 0).all()
    g = torch.randn(6, 5, T, dtype=torch.float64).to(dt)
    stats = ref[1]
    ref = cpu.envelope_backward_direct(g, xr, h, stats, sel)
    got = tri.envelope_backward_direct(g, xr, h, stats, sel, block=64)
    for name, a, b in zip(("gx", "gh"), got, ref, strict=True):
        close(name, a, b, tol)
    hgh = _hilbert(ref[1])
    gx_ref, gx = ref[0], got[0]
    cpu.envelope_backward_finish(gx_ref, hgh, sel)
    tri.envelope_backward_finish(gx, hgh, sel, block=64)
    close("gx + Hilbert term", gx, gx_ref, tol)
    assert (gx[5, 3] == 0).all()

    # the operator's CUDA implementations on CPU tensors: the CPU operator and the
    # reference's autograd
    out, hh, st = _forward(cuda, xr, sel)
    cout, ch, cst = rms_envelope_rows(xr, sel)
    close("op out", out, cout, tol)
    assert torch.equal(hh, ch)
    close("op stats", st, cst, 1e-13)
    xg = x.double().requires_grad_(True)
    pref = phase_insensitivity(xg, mfc, 10.0, backend="reference")
    close("op out vs reference", out.reshape(x.shape), pref.detach().to(dt), rtol)
    gin = _backward_rows(cuda, g, xr, hh, st, sel).reshape(x.shape)
    (gref,) = torch.autograd.grad(pref, xg, g.double().reshape(x.shape))
    # (the reference's gradient of the all-zero band is not finite: that row is left out)
    ok = gref.isfinite().all(-1)
    assert ok.sum() == ok.numel() - 1 and (gin[1, 2, 3] == 0).all()
    close("op gx vs reference", gin[ok], gref[ok].to(dt), rtol)
print("ok")
"""


def test_envelope_triton_kernels_match_numba_and_reference_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_envelope_operator_cuda_matches_cpu(dtype):
    from lhotse_amt import ops

    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 6, 12, 5001, generator=g, dtype=torch.float64).to(dtype)
    x[0, 1, 7] = 0.0
    bands = [2, 7, 8, 11]
    gy = torch.randn(x.shape, generator=g, dtype=torch.float64).to(dtype)
    xc = x.clone().requires_grad_(True)
    xg = x.cuda().requires_grad_(True)
    yc = ops.rms_envelope(xc, bands)
    yg = ops.rms_envelope(xg, bands)
    (gc,) = torch.autograd.grad(yc, xc, gy)
    (gg,) = torch.autograd.grad(yg, xg, gy.cuda())
    # float32: the Hilbert transforms are float32 FFTs of two libraries (cuFFT, pocketfft)
    # of a length with a large prime factor (5001 = 3 * 1667, Bluestein's algorithm), which
    # round differently: 4e-5 of the largest value on an H200
    tol = 1e-12 if dtype == torch.float64 else 2e-4
    for what, a, b in (("output", yg, yc), ("gradient", gg, gc)):
        assert a.dtype == b.dtype and a.shape == b.shape
        err = (a.detach().cpu().double() - b.detach().double()).abs()
        scale = b.detach().double().abs().max()
        worst = np.unravel_index(int(err.argmax()), err.shape)
        assert err.max() <= tol * scale, (what, (err.max() / scale).item(), worst)

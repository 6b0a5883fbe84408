"""The Triton kernels of the IHC operator (:mod:`lhotse_amt.kernels.triton_ihc_paulick`)
against its numba kernels (:mod:`lhotse_amt.kernels.ihc_paulick_grad`): output, final
states, checkpoints and every backward output, float64 and float32, in Triton's CPU
interpreter; on CUDA, the operator ``lhotse_amt::ihc_paulick`` against its CPU kernel. The
no-grad operator ``lhotse_amt::paulick_ihc``'s CUDA kernel against the plain-torch
reference in the interpreter.

Signals of 600 and 530 samples span two blocks of the backward's recomputation (the last
one partial: the interpreter is slow); the velocities cap the MET exponent over a stretch
(``u > zmax``), the row maps broadcast input and constant rows, and 5 rows with 8 rows per
program exercise the masked rows of a program.
"""

from __future__ import annotations

import pytest
import torch
from triton_interpret import run_interpreted

_SCRIPT = """
import torch
from lhotse_amt.functional.ihc_paulick import IHC_PAULICK_CONSTANTS, ihc_step_constants
from lhotse_amt.kernels import ihc_paulick_grad as cpu
from lhotse_amt.kernels import triton_ihc_paulick as tri

torch.manual_seed(0)
p = {k: torch.tensor(v, dtype=torch.float64) for k, v in IHC_PAULICK_CONSTANTS.items()}
c0 = ihc_step_constants(p, 44100.0)
base = torch.stack([torch.as_tensor(c0[k], dtype=torch.float64) for k in cpu.IHC_STEP_KEYS])
c = torch.stack([base * (1 + 0.05 * k) for k in range(3)])
xrow = torch.tensor([0, 0, 1, 1, 2])
crow = torch.tensor([0, 1, 1, 2, 0])
R = 5


def same(names, got, ref, dt):
    tol = 1e-12 if dt == torch.float64 else 1e-6
    for name, a, b in zip(names, got, ref, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype)
        if b.numel() == 0:
            continue
        # per constant for gc (each one has a gradient of its own scale)
        dim = 0 if name == "gc" else None
        scale = b.double().abs().amax(dim)
        assert (scale > 0).all(), name
        err = ((a.double() - b.double()).abs().amax(dim) / scale).max().item()
        assert err <= tol, (name, str(dt), err)


for dt, T, wx in ((torch.float64, 600, True), (torch.float32, 530, False)):
    x = 5e-3 * torch.randn(3, T, dtype=torch.float64)
    x[:, 40:70] = -0.3  # the MET exponent is capped here
    x = x.to(dt)
    zi = 1e-3 * torch.randn(R, dtype=dt)
    ref = cpu.ihc_forward(x, xrow, c, crow, zi)
    got = tri.ihc_paulick_forward(x, xrow, c, crow, zi, block=8)
    same(("W", "zf", "ck"), got, ref, dt)
    ck = ref[2]
    assert ck.shape == (R, 2)
    gy = torch.randn(R, T, dtype=dt)
    gzf = torch.randn(R, dtype=torch.float64)
    ref = cpu.ihc_backward(gy, gzf, x, xrow, c, crow, zi, ck, wx, True)
    got = tri.ihc_paulick_backward(gy, gzf, x, xrow, c, crow, zi, ck, wx, True, block=8)
    same(("gx", "gc", "gzi"), got, ref, dt)
    # the constant gradients only where asked for
    none = tri.ihc_paulick_backward(gy, gzf, x, xrow, c, crow, zi, ck, wx, False, block=8)
    assert (none[1] == 0).all() and torch.equal(none[2], got[2])

assert tri.ihc_paulick_forward(x, xrow, c, crow, zi, keep=False)[2].shape == (R, 0)
try:
    tri.ihc_paulick_backward(gy, gzf, x, xrow, c, crow, zi, ck[:, :1], wx, True)
except ValueError as e:
    assert "checkpoints" in str(e)
else:
    raise AssertionError("checkpoints of the wrong shape were accepted")
print("ok")
"""


def test_ihc_triton_kernels_match_numba_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


_NO_GRAD_SCRIPT = """
import torch
from lhotse_amt.functional.ihc_paulick import (
    IHC_PAULICK_CONSTANTS, ihc_paulick, ihc_step_constants,
)
from lhotse_amt.kernels import paulick
from lhotse_amt.ops import paulick as ops_paulick

cuda = ops_paulick._IHC.for_device("cuda")  # the no-grad operator's kernel on CUDA
assert cuda is paulick.ihc_triton and ops_paulick._IHC.for_device("cpu") is paulick.ihc
x = torch.randn(1, 2, 16, dtype=torch.float64) * 3e-3
x[..., 5:10] *= 40
p = {k: torch.tensor(v, dtype=torch.float64) for k, v in IHC_PAULICK_CONSTANTS.items()}
c = ihc_step_constants(p, 44100.0)
consts = [float(c[k]) for k in ops_paulick.IHC_STEP_KEYS]
w0 = torch.zeros(1, 2, dtype=torch.float64)
for xx, ww in ((x, w0), (x[0, 1], w0[0, 1])):  # rows, and one signal (..., T)
    a, sa = ops_paulick._ihc_rows(cuda, xx, consts, ww)
    b, sb = ihc_paulick(xx, 44100, backend="torch", return_state=True)
    assert a.shape == b.shape and sa.shape == sb.shape
    assert (a - b).abs().max() <= 1e-12 * b.abs().max(), (a - b).abs().max()
    assert (sa - sb).abs().max() <= 1e-15
print("ok")
"""


def test_no_grad_ihc_operator_cuda_kernel_matches_reference_in_interpreter():
    # lhotse_amt::paulick_ihc's CUDA kernel (the Triton recursion in the signal's dtype)
    pytest.importorskip("triton")
    run_interpreted(_NO_GRAD_SCRIPT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_ihc_operator_cuda_matches_cpu():
    import lhotse_amt.ops  # noqa: F401  (registers the operators)
    from lhotse_amt.functional.ihc_paulick import IHC_PAULICK_CONSTANTS, ihc_step_constants
    from lhotse_amt.kernels.ihc_paulick_grad import CHECKPOINT_BLOCK, IHC_STEP_KEYS

    ops = torch.ops.lhotse_amt
    g = torch.Generator().manual_seed(0)
    R, T = 40, 3 * CHECKPOINT_BLOCK + 100
    xrow = torch.arange(R) // 4
    crow = torch.arange(R) % 7
    x = 5e-3 * torch.randn(R // 4, T, generator=g, dtype=torch.float64)
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in IHC_PAULICK_CONSTANTS.items()}
    c0 = ihc_step_constants(p, 44100.0)
    base = torch.stack([torch.as_tensor(c0[k], dtype=torch.float64) for k in IHC_STEP_KEYS])
    c = torch.stack([base * (1 + 0.02 * k) for k in range(7)])
    zi = 1e-3 * torch.randn(R, generator=g, dtype=torch.float64)
    gy = torch.randn(R, T, generator=g, dtype=torch.float64)
    gzf = torch.randn(R, generator=g, dtype=torch.float64)
    args = (x, xrow, c, crow, zi)
    cpu_f = ops.ihc_paulick(*args)
    gpu_f = ops.ihc_paulick(*(a.cuda() for a in args))
    bwd = (gy, gzf, *args, cpu_f[2], True, True)
    cpu_b = ops.ihc_paulick_backward(*bwd)
    gpu_b = ops.ihc_paulick_backward(*(a.cuda() if torch.is_tensor(a) else a for a in bwd))
    for a, b in zip((*gpu_f, *gpu_b), (*cpu_f, *cpu_b), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        err = (a.cpu() - b).abs().max() / b.abs().max().clamp_min(1e-300)
        assert err <= 1e-10, err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_no_grad_ihc_operator_cuda_matches_reference(dtype):
    # eager CUDA inference of the IHC stage: lhotse_amt::paulick_ihc's Triton kernel
    from lhotse_amt.functional.ihc_paulick import ihc_paulick

    g = torch.Generator().manual_seed(1)
    x = 3e-3 * torch.randn(3, 4, 2000, generator=g, dtype=torch.float64)
    x[..., 500:900] *= 40  # into saturation for a while
    ref, wref = ihc_paulick(x, 44100, backend="reference", return_state=True)
    with torch.inference_mode():
        y, w = ihc_paulick(x.to(dtype).cuda(), 44100, return_state=True)
    assert y.dtype == w.dtype == dtype and y.shape == ref.shape and w.shape == wref.shape
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert (y.cpu().double() - ref).abs().max() <= tol * ref.abs().max()

"""The Triton kernels of the recursion operators (:mod:`lhotse_amt.kernels.triton_autodiff`)
against the numba kernels (:mod:`lhotse_amt.kernels.autodiff`): forward outputs, final
states, checkpoints and every backward output, float64 and float32.

On the CPU the kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, in a
subprocess so that the setting stays local); signals of 1100 (float64) and 530 (float32)
samples span three and two blocks of the backward's recomputation (the last one partial:
the interpreter is slow), the row maps broadcast input and
coefficient rows, and 5 rows with 4 rows per program exercise the masked last program.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

_COMMON = """
import torch
from lhotse_amt.kernels import adaptation_grad as ada
from lhotse_amt.kernels import resonator_grad as res
from lhotse_amt.kernels import sos_grad
from lhotse_amt.kernels import triton_autodiff as tri

torch.manual_seed(0)
xrow = torch.tensor([0, 0, 1, 1, 2])
crow = torch.tensor([0, 1, 1, 2, 0])
R = 5


def close(name, a, b, dt):
    tol = 1e-12 if dt == torch.float64 else 1e-5
    assert a.shape == b.shape, (name, a.shape, b.shape)
    assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
    if b.numel() == 0:
        return
    scale = b.double().abs().max().item()
    if scale == 0:  # gradients not asked for: zeros
        assert (a == 0).all(), name
        return
    err = (a.double() - b.double()).abs().max().item() / scale
    assert err <= tol, (name, str(dt), err)


def same(names, got, ref, dt):
    for n, a, b in zip(names, got, ref, strict=True):
        close(n, a, b, dt)
"""

_SOS = """
CASES = ((2, torch.float64, True, True, 1100), (1, torch.float32, False, True, 530))
for S, dt, wx, wc, T in CASES:
    x = torch.randn(3, T, dtype=dt)
    base = torch.tensor(
        [[0.2, 0.3, 0.1, 1.0, -1.6, 0.7], [0.5, -0.4, 0.2, 1.0, -1.2, 0.5]], dtype=torch.float64
    )
    sos = torch.stack([base[:S] * (1 + 0.05 * k) for k in range(3)])
    sos[..., 3] = 1.0
    zi = torch.randn(R, S, 2, dtype=torch.float64)
    ref = sos_grad.sos_forward(x, xrow, sos, crow, zi)
    got = tri.sos_forward(x, xrow, sos, crow, zi, block=4)
    same(("y", "zf", "ck"), got, ref, dt)
    gy = torch.randn(R, T, dtype=dt)
    gzf = torch.randn(R, S, 2, dtype=torch.float64)
    ck = ref[2]
    ref = sos_grad.sos_backward(gy, gzf, x, xrow, sos, crow, zi, ck, wx, wc)
    got = tri.sos_backward(gy, gzf, x, xrow, sos, crow, zi, ck, wx, wc, block=4)
    same(("gx", "gsos", "gzi"), got, ref, dt)
print("ok")
"""

_RESONATOR = """
ang = torch.tensor([0.1, 0.3, 0.7])
rad = torch.tensor([0.95, 0.9, 0.99])
pole = torch.stack([rad * ang.cos(), rad * ang.sin()], -1).double()
gain = torch.randn(3, 2, dtype=torch.float64)
mode = torch.tensor([0, 1, 1], dtype=torch.int8)  # Re and |.| rows mixed
CASES = ((4, torch.float64, True, True, 1100), (1, torch.float32, True, False, 530))
for K, dt, wx, wc, T in CASES:
    x = torch.randn(3, T, dtype=dt)
    zi = torch.randn(R, K, 2, dtype=torch.float64) * 0.1
    ref = res.resonator_forward(x, xrow, pole, gain, mode, crow, zi)
    got = tri.resonator_forward(x, xrow, pole, gain, mode, crow, zi, block=4)
    same(("y", "zf", "ck"), got, ref, dt)
    gy = torch.randn(R, T, dtype=dt)
    gzf = torch.randn(R, K, 2, dtype=torch.float64)
    ck = ref[2]
    ref = res.resonator_backward(gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, wx, wc)
    got = tri.resonator_backward(gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, wx, wc, block=4)
    same(("gx", "gpole", "ggain", "gzi"), got, ref, dt)
print("ok")
"""

_ADAPTATION = """
tau = torch.tensor([0.005, 0.129])
a = torch.stack([torch.exp(-1 / (16000 * tau * f)) for f in (1.0, 0.7, 1.3)]).double()
m = torch.tensor([[10.0, 10.0], [5.0, 5.0], [10.0, 3.0]], dtype=torch.float64)
minlvl = 1e-5
for lim, dt, T in ((True, torch.float64, 1100), (False, torch.float32, 530)):
    x = torch.rand(3, T, dtype=dt) * 0.05
    x[:, 300:] *= 30  # onset: the limiter engages
    x[0, :100] = 0.0  # below minlvl: no input gradient
    zi = torch.rand(R, 2, dtype=torch.float64) * 0.01 + 1e-3
    ref = ada.adaptation_forward(x, xrow, a, m, crow, minlvl, lim, zi)
    got = tri.adaptation_forward(x, xrow, a, m, crow, minlvl, lim, zi, block=4)
    same(("v", "zf", "ck"), got, ref, dt)
    gy = torch.randn(R, T, dtype=dt)
    gzf = torch.randn(R, 2, dtype=torch.float64)
    ck = ref[2]
    ref = ada.adaptation_backward(gy, gzf, x, xrow, a, m, crow, minlvl, lim, zi, ck, True, True)
    got = tri.adaptation_backward(
        gy, gzf, x, xrow, a, m, crow, minlvl, lim, zi, ck, True, True, block=4
    )
    same(("gx", "ga", "gm", "gzi"), got, ref, dt)
    assert (got[0][:2, :100] == 0).all()
print("ok")
"""


@pytest.mark.parametrize(
    "body", [_SOS, _RESONATOR, _ADAPTATION], ids=["sosfilt", "resonator", "adaptation"]
)
def test_triton_kernels_match_numba_in_interpreter(body):
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1")
    r = subprocess.run(
        [sys.executable, "-c", _COMMON + body], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-3000:]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_recursion_operators_cuda_match_cpu():
    import lhotse_amt.ops  # noqa: F401  (registers the operators)

    ops = torch.ops.lhotse_amt
    torch.manual_seed(0)
    T, R = 3000, 40
    xrow = torch.arange(R) // 4
    crow = torch.arange(R) % 7
    x = torch.randn(R // 4, T, dtype=torch.float64)
    gy = torch.randn(R, T, dtype=torch.float64)

    def check(cpu_out, gpu_out):
        for a, b in zip(gpu_out, cpu_out, strict=True):
            assert a.shape == b.shape and a.dtype == b.dtype
            if b.numel():
                err = (a.cpu() - b).abs().max() / b.abs().max().clamp_min(1e-300)
                assert err <= 1e-10, err

    def both(op, *args):
        cuda = [a.cuda() if isinstance(a, torch.Tensor) else a for a in args]
        return op(*args), op(*cuda)

    sos = torch.randn(7, 3, 6, dtype=torch.float64) * 0.1
    sos[..., 3] = 1.0
    sos[..., 4] = -1.5
    sos[..., 5] = 0.6
    zi = torch.randn(R, 3, 2, dtype=torch.float64)
    c, g = both(ops.sosfilt, x, xrow, sos, crow, zi)
    check(c, g)
    gz = torch.randn_like(zi)
    check(*both(ops.sosfilt_backward, gy, gz, x, xrow, sos, crow, zi, c[2], True, True))

    ang = torch.rand(7) * 0.5
    pole = torch.stack([0.95 * ang.cos(), 0.95 * ang.sin()], -1).double()
    gain = torch.randn(7, 2, dtype=torch.float64)
    mode = (torch.arange(7) % 2).to(torch.int8)
    zi = torch.randn(R, 4, 2, dtype=torch.float64) * 0.1
    c, g = both(ops.resonator, x, xrow, pole, gain, mode, crow, zi)
    check(c, g)
    gz = torch.randn_like(zi)
    args = (gy, gz, x, xrow, pole, gain, mode, crow, zi, c[2], True, True)
    check(*both(ops.resonator_backward, *args))

    xa = x.abs() * 0.05
    xa[:, 1000:] *= 30
    a = torch.rand(7, 5, dtype=torch.float64) * 0.05 + 0.95
    m = torch.full((7, 5), 10.0, dtype=torch.float64)
    zi = torch.rand(R, 5, dtype=torch.float64) * 0.01 + 1e-3
    c, g = both(ops.adaptation_loops, xa, xrow, a, m, crow, 1e-5, True, zi)
    check(c, g)
    gz = torch.randn_like(zi)
    args = (gy, gz, xa, xrow, a, m, crow, 1e-5, True, zi, c[2], True, True)
    check(*both(ops.adaptation_loops_backward, *args))

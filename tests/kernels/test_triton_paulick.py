"""The CUDA kernels of Paulick et al. (2024)'s no-grad operators
(:mod:`lhotse_amt.kernels.triton_paulick`: ``paulick_drnl``, ``paulick_fir``,
``paulick_frontend`` composed of the stage operators' Triton kernels, ``paulick_pooled``
chunk by chunk) against the CPU operators.

In Triton's CPU interpreter the operators run with their CUDA kernels on CPU tensors
(:class:`lhotse_amt.ops.rowop.DeviceKernels` made to pick the CUDA functions): a real
model's coefficients (float64 design; channels at 125, 1478 and 8000 Hz, the lowest one
the DRNL's most sensitive), float64 and float32 signals with an onset that drives the
limiter, with and without the decimator (the model's 97 taps, factor 4), from rest and
from states, streamed in chunks (one that starts from the CPU operator's states and one
too short to reach the next decimated sample). On CUDA, the operators on CUDA tensors
against the CPU operators.

Tolerances: float64 1e-10 relative to the largest value (the GPU's and the CPU front
end's fused multiply-adds change last bits, which the low-frequency DRNL sections amplify);
float32 outputs 1e-5 (the CPU front end applies the limiter's correction in float32).
"""

from __future__ import annotations

import pytest
import torch
from triton_interpret import run_interpreted

_SETUP = """
import torch
import lhotse_amt
from lhotse_amt.ops import paulick as ops
from lhotse_amt.ops import rowop

D = torch.float64


def model(C):
    m = lhotse_amt.Paulick2024(44100, n_channels=C, dtype=D)
    d = m.drnl
    coefs = (d.lin_gain, torch.cat([d.lin_gt, d.lin_lp], -2), d.nl_gt,
             torch.cat([d.nl_gt, d.nl_lp], -2), d.a, d.b, float(d.c))  # fmt: skip
    return m, coefs


def signal(B, T, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=D) * 1e-3
    x[:, T // 3 :] *= 30  # an onset: the overshoot limiter engages
    return x.to(dtype)


def frontend_args(m, C, B, decimate):
    a, mm, s0, minlvl, c0 = m._adapt_constants(D)
    J = a.shape[-1]
    return dict(
        ihc_consts={k: float(v) for k, v in m._ihc_step_constants(D).items()},
        adapt_a=a.expand(C, J), adapt_m=mm.expand(C, J), minlvl=minlvl, use_limit=True,
        out_offset=c0, out_scale=100.0 / (1.0 - c0),
        dec_weight=m.resampler.weight.reshape(-1) if decimate else None,
        dec_factor=m.resample_factor,
    ), dict(
        drnl_state=None, ihc_state=torch.zeros(B, C, dtype=D), adapt_state=s0.expand(B, C, J),
        dec_state=None,
    )  # fmt: skip


def frontend(x, coefs, const, st):
    return ops.frontend(x, coefs, **const, **st)


def pooled_args(m, C, B, T, hop, lengths):
    # the arguments of ops.pooled after x: the front end's (from rest), the model's
    # modulation filterbank, the frames of hop samples of items of the given lengths
    import numpy as np
    from lhotse_amt.ops import fused

    const, rest = frontend_args(m, C, B, True)
    counts = np.array([-(-n // hop) for n in lengths])
    f = np.arange(counts.max())
    starts = np.tile(f * hop, (B, 1))
    stops = np.minimum((f + 1) * hop, np.array(lengths)[:, None])
    frames = [torch.from_numpy(a.astype(np.int64)) for a in (starts, stops, counts)]
    front = (
        const["ihc_consts"], rest["ihc_state"], const["adapt_a"], const["adapt_m"],
        rest["adapt_state"], const["minlvl"], const["use_limit"], const["out_offset"],
        const["out_scale"],
    )  # fmt: skip
    filters = fused.pooled_filters(m.modulation)
    return front, const["dec_weight"], const["dec_factor"], filters, frames


def carried(out):
    return dict(drnl_state=out[1], ihc_state=out[2], adapt_state=out[3], dec_state=out[4])


def close(name, got, ref, tol):
    if isinstance(ref, dict):
        assert got.keys() == ref.keys(), name
        for k in ref:
            close(f"{name}.{k}", got[k], ref[k], tol)
        return
    if isinstance(ref, (tuple, list)):
        assert len(got) == len(ref), name
        for i, (g, r) in enumerate(zip(got, ref)):
            close(f"{name}[{i}]", g, r, tol)
        return
    if not isinstance(ref, torch.Tensor):
        assert got == ref, (name, got, ref)
        return
    got = got.cpu()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (
        name, got.shape, ref.shape, got.dtype, ref.dtype,
    )  # fmt: skip
    if ref.numel() == 0:
        return
    scale = ref.double().abs().max().item()
    assert scale > 0, name
    err = (got.double() - ref.double()).abs().max().item() / scale
    assert err <= tol, (name, str(ref.dtype), err, tol)


def compare(got, ref, dtype):
    # outputs (and the decimator's history, in the output's dtype) and float64 states
    tol_y = 1e-10 if dtype == D else 1e-5
    tol_s = 1e-10 if dtype == D else 1e-6
    close("y", got[0], ref[0], tol_y)
    for name, g, r in zip(("drnl", "ihc", "adaptation"), got[1:4], ref[1:4]):
        close(name, g, r, tol_s)
    assert (got[4] is None) == (ref[4] is None)
    if ref[4] is not None:
        close("dec", got[4], ref[4], tol_y)
"""

_SCRIPT = (
    _SETUP
    + """
from lhotse_amt.kernels import paulick as k_paulick
from lhotse_amt.kernels import paulick_frontend as k_frontend
from lhotse_amt.kernels import paulick_pooled as k_pooled
from lhotse_amt.kernels import triton_paulick as tri

# the operators' kernel choice per device
for kern, cpu, cuda in (
    (ops._FRONTEND, k_frontend.frontend, tri.frontend),
    (ops._FIR, k_paulick.fir, tri.fir),
    (ops._DRNL, k_paulick.drnl, tri.drnl),
    (ops._POOLED, k_pooled.pooled, tri.pooled),
):
    assert kern.for_device("cpu") is cpu and kern.for_device("cuda") is cuda

_pick = rowop.DeviceKernels.on


def on_cuda_kernels(flag):
    # the operators' kernels as on CUDA, whatever the tensors' device (or as by device)
    rowop.DeviceKernels.on = (lambda self, t: self.for_device("cuda")) if flag else _pick


def both(fn):
    on_cuda_kernels(False)
    ref = fn()
    on_cuda_kernels(True)
    got = fn()
    on_cuda_kernels(False)
    return got, ref


B, C, T = 2, 3, 190
m, coefs = model(C)

# the front end: from rest in one call; streamed from the CPU operator's states after 69
# samples (the decimator's phase 3), through 2 samples without a decimated output, then
# the rest
for dtype, decimate in ((D, True), (torch.float32, True), (D, False), (torch.float32, False)):
    x = signal(B, T, dtype)
    const, rest = frontend_args(m, C, B, decimate)
    got, ref = both(lambda: frontend(x, coefs, const, rest))
    compare(got, ref, dtype)
    first = frontend(x[:, :69], coefs, const, rest)
    on_cuda_kernels(True)
    mid = frontend(x[:, 69:71], coefs, const, carried(first))
    if decimate:
        assert mid[0].shape == (B, C, 0) and mid[4]["t"] == 71
    last = frontend(x[:, 71:], coefs, const, carried(mid))
    on_cuda_kernels(False)
    y = torch.cat([first[0], mid[0], last[0]], -1)
    compare((y, *last[1:]), ref, dtype)

# the DRNL: leading shape (2, 1), from rest, streamed, from a state with a key missing
for dtype in (D, torch.float32):
    x = signal(2, 150, dtype, seed=1).reshape(2, 1, 150)
    got, ref = both(lambda: ops.drnl(x, *coefs, None))
    tol = 1e-10 if dtype == D else 1e-6
    close("drnl", got, ref, tol)
    on_cuda_kernels(True)
    a, st = ops.drnl(x[..., :61], *coefs, None)
    b, st = ops.drnl(x[..., 61:], *coefs, st)
    on_cuda_kernels(False)
    close("drnl streamed", (torch.cat([a, b], -1), st), ref, tol)
    part = {"nl1": st["nl1"]}
    got, ref = both(lambda: ops.drnl(x, *coefs, part))
    close("drnl from nl1", got, ref, tol)

# the FIR: taps longer than the stride, one tap per output step, no output
for dtype, K, stride, start, n_out in (
    (D, 97, 4, 3, 90),
    (torch.float32, 13, 1, 0, 300),
    (D, 5, 2, 1, 0),
):
    g = torch.Generator().manual_seed(K)
    buf = torch.randn(3, 470, generator=g, dtype=D).to(dtype)
    w = torch.randn(K, generator=g, dtype=D).to(dtype)
    got, ref = both(lambda: ops.fir(buf, w, start, stride, n_out))
    close("fir", got, ref, 1e-12 if dtype == D else 1e-6)

# the pooled chain: chunks of 48 input samples (frames of 30 samples straddle them), set
# by the chunk length or by the bytes of a block of B C rows, items of different lengths,
# mean and rms, against the CPU's one pass
for dtype, rms, chunk, block_bytes in (
    (D, False, 48, 1 << 30),
    (torch.float32, True, 4096, 8 * B * C * 48),
):
    tri.POOLED_CHUNK, tri.POOLED_BLOCK_BYTES = chunk, block_bytes
    x = signal(B, T, dtype)
    front, *args = pooled_args(m, C, B, T, 30, [T, 101])
    ear = m.outer_middle_ear.weight.reshape(-1).to(dtype)
    got, ref = both(lambda: ops.pooled(x, ear, (coefs, *front), *args, rms))
    close("pooled", got, ref, 1e-10 if dtype == D else 1e-5)
print("ok")
"""
)


def test_paulick_operators_cuda_kernels_match_cpu_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_paulick_operators_cuda_match_cpu(dtype):
    scope: dict = {}
    exec(_SETUP, scope)
    ops, D = scope["ops"], scope["D"]
    B, C, T = 2, 20, 5001
    m, coefs = scope["model"](C)
    x = scope["signal"](B, T, dtype)

    def cuda(v):
        if isinstance(v, torch.Tensor):
            return v.cuda()
        if isinstance(v, (tuple, list)):
            return type(v)(cuda(u) for u in v)
        if isinstance(v, dict):
            return {k: cuda(u) for k, u in v.items()}
        return v

    for decimate in (True, False):
        const, rest = scope["frontend_args"](m, C, B, decimate)
        ref = scope["frontend"](x, coefs, const, rest)
        got = scope["frontend"](x.cuda(), cuda(coefs), cuda(const), cuda(rest))
        scope["compare"](got, ref, dtype)
        # streamed on CUDA: a chunk from rest, one without a decimated output, the rest
        parts, st = [], cuda(rest)
        for a, b in ((0, 1001), (1001, 1003), (1003, T)):
            out = scope["frontend"](x[:, a:b].cuda(), cuda(coefs), cuda(const), st)
            st = scope["carried"](out)
            parts.append(out[0])
        scope["compare"]((torch.cat(parts, -1), *out[1:]), ref, dtype)

    tol = 1e-10 if dtype == D else 1e-6
    ref = ops.drnl(x, *coefs, None)
    scope["close"]("drnl", ops.drnl(x.cuda(), *cuda(coefs), None), ref, tol)
    a, st = ops.drnl(x[:, :2000].cuda(), *cuda(coefs), None)
    b, st = ops.drnl(x[:, 2000:].cuda(), *cuda(coefs), st)
    scope["close"]("drnl streamed", (torch.cat([a, b], -1), st), ref, tol)

    w = m.resampler.weight.reshape(-1).to(dtype)
    buf = x.repeat(3, 1)
    n_out = (T - 3 - w.shape[0]) // 4 + 1
    ref = ops.fir(buf, w, 3, 4, n_out)
    scope["close"]("fir", ops.fir(buf.cuda(), w.cuda(), 3, 4, n_out), ref, tol)

    # the pooled chain (several chunks of the CUDA host), frames on the CPU
    tri = pytest.importorskip("lhotse_amt.kernels.triton_paulick")
    front, *args = scope["pooled_args"](m, C, B, T, 441, [T, 3001])
    ear = m.outer_middle_ear.weight.reshape(-1).to(dtype)
    ref = ops.pooled(x, ear, (coefs, *front), *args, False)
    old, tri.POOLED_CHUNK = tri.POOLED_CHUNK, 2000
    try:
        got = ops.pooled(
            x.cuda(), ear.cuda(), cuda((coefs, *front)), *cuda(args[:-1]), args[-1], False
        )
    finally:
        tri.POOLED_CHUNK = old
    scope["close"]("pooled", got, ref, 1e-10 if dtype == D else 1e-5)

"""The Triton kernels of the fused pooled chains (the CUDA kernels of the operators
``lhotse_amt::casp_pooled``, ``king_pooled``, ``modulation_pooled`` and ``pool_held``, and
``casp_samples_``/``king_samples_``, which run ``casp_pooled``'s/``king_pooled``'s with
one-sample frames) against the CPU
operators, in Triton's CPU interpreter: block sums (frame sums) and, by
streaming a signal in two chunks through the Triton kernel's own state, the states.

Small signals with odd lengths, two items of different lengths (the shorter one ends
inside a frame and a sample block), frames that straddle the kernels' sample blocks
(``ck`` below the signal length), mean and rms pooling, the model settings the
extractors use: Dau1997 (one IHC section, no modulation pre-filter; without the
overshoot limiter), Osses2021 (five IHC sections, the 150-Hz pre-filter), King2019
(broken-stick and power compression, the 150-Hz low-pass, signed and magnitude bands).
float64 models agree to rounding; float32 models, whose CPU kernels take float32
shortcuts (limiter, magnitudes, compression), within float32 resolution. On CUDA the
operators themselves against their CPU kernels.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_interpret import run_interpreted

_COMMON = """
import torch
from lhotse_amt.ops import fused

torch.manual_seed(0)
B, T, HOP, CK = 2, 101, 17, 48
ENDS = [T, 63]


def signal(dt):
    x = torch.randn(B, T, dtype=torch.float64) * 0.02
    x[:, 60:] *= 30  # an onset: the overshoot limiter engages
    return x.to(dt)


def close(name, got, ref, dt):
    assert got.shape == ref.shape and got.dtype == ref.dtype, (name, got.shape, ref.shape)
    scale = ref.abs().max().item()
    assert scale > 0, name
    err = (got - ref).abs().max().item() / scale
    assert err <= (1e-12 if dt == torch.float64 else 2e-6), (name, str(dt), err)


def check_pooled(name, plan, gpu, cpu_op, dt, square, stream):
    from lhotse_amt.kernels.triton_pooled import pooled

    def run(x, st, ends):
        return pooled(gpu, plan, x, st, HOP, ends, square, block=4, ck=CK)

    # one pass, and (stream) two chunks through the Triton kernel's state (the first
    # chunk's end on a frame boundary), against one pass of the CPU operator
    x = signal(dt)
    ref, _ = cpu_op(plan, x, None, HOP, ENDS, square)
    rest = gpu.rest_state(plan, B, x.device)
    got, _ = run(x, rest, ENDS)
    close(name, got, ref, dt)
    assert (got[1, ..., 4:] == 0).all()  # blocks after the shorter item's end
    if not stream:
        return
    cut = 3 * HOP
    a, st = run(x[:, :cut], rest, ENDS)
    b, _ = run(x[:, cut:], st, [n - cut for n in ENDS])
    close(name + " streamed", torch.cat([a, b], -1), ref, dt)
"""

_CASP = """
from lhotse_amt.kernels import triton_casp_pooled as gpu
from lhotse_amt.models import Dau1997, Osses2021

CASES = (
    (Dau1997, {}, torch.float64, False),
    (Osses2021, {}, torch.float64, True),
    (Dau1997, {"adaptation_kwargs": {"limit": 0.0}}, torch.float32, True),
)
for i, (model, kw, dt, square) in enumerate(CASES):
    m = model(16000, flow=700.0, fhigh=1000.0, dtype=dt, **kw)
    plan = m._kernel_plan("casp", fused.casp_plan)
    check_pooled("casp_pooled", plan, gpu, fused.casp_pooled, dt, square, i == 0)
print("ok")
"""

_CASP_SAMPLES = """
from lhotse_amt.models import Dau1997, Osses2021

fused._SAMPLES_BLOCK, fused._SAMPLES_BYTES = 40, 0  # three time blocks through the state
for model, dt in ((Dau1997, torch.float64), (Osses2021, torch.float32)):
    m = model(16000, flow=700.0, fhigh=1000.0, dtype=dt)
    plan = m._kernel_plan("casp", fused.casp_plan)
    x = signal(dt)
    rows = int(plan.n_bands.sum())
    ref = torch.full((B, rows, T), float("nan"), dtype=dt)
    got = torch.full((B, rows, T), float("nan"), dtype=dt)
    fused.casp_samples(plan, x, ref)
    fused.casp_samples_triton(plan, x, got)
    close("casp_samples", got, ref, dt)
print("ok")
"""

_KING = """
from lhotse_amt.kernels import triton_king_pooled as gpu
from lhotse_amt.models import King2019
from lhotse_amt.models._base import _king_pooled_plan

CASES = (
    ({}, True, torch.float64, False),
    ({"compression_type": "power", "lp_150hz": True}, False, torch.float32, True),
)
for i, (kw, envelope, dt, square) in enumerate(CASES):
    m = King2019(16000, flow=700.0, fhigh=1000.0, dtype=dt, **kw)
    plan = m._kernel_plan(f"king2019-pooled-{envelope}", _king_pooled_plan(envelope))
    assert plan.use_abs.any() == envelope
    check_pooled("king_pooled", plan, gpu, fused.king_pooled, dt, square, i == 0)
print("ok")
"""

_KING_SAMPLES = """
import numpy as np
from lhotse_amt.models import King2019

fused._SAMPLES_BLOCK, fused._SAMPLES_BYTES = 40, 0  # three time blocks through the state
for kw, dt, pi in (({}, torch.float64, [3, 4]), ({"lp_150hz": True}, torch.float32, [])):
    m = King2019(16000, flow=700.0, fhigh=1000.0, dtype=dt, **kw)
    M = int(m.mfc.numel())
    ones, no = np.ones(M), np.zeros(M, bool)
    plan = m._kernel_plan("king2019", lambda m64, p: fused.king_plan(m64, ones, no, p))
    x = signal(dt)
    ref = torch.full((B, plan.C, plan.M, T), float("nan"), dtype=dt)
    got = torch.full((B, plan.C, plan.M, T), float("nan"), dtype=dt)
    fused.king_samples(plan, x, ref, pi)
    fused.king_samples_triton(plan, x, got, pi)
    close("king_samples", got, ref, dt)
print("ok")
"""

_MODULATION = """
import numpy as np
from lhotse_amt.features.frames import FrameAccumulator
from lhotse_amt.kernels import triton_modulation_pooled as gpu
from lhotse_amt.models import Dau1997, Osses2021


def frames(n, hop, R, t0, t1):
    # the frames of items of n input samples that start in [t0, t1), as the extractor
    acc = FrameAccumulator(hop, n, [-(-k // hop) for k in n], False)
    spans = [acc.frame_spans(b, t0, t1) for b in range(len(n))]
    counts = np.array([len(s) for s, _ in spans], np.int64)
    F = max(1, int(counts.max()))
    s, e = np.zeros((len(n), F), np.int64), np.ones((len(n), F), np.int64)
    for b, (sb, eb) in enumerate(spans):
        s[b, : len(sb)], e[b, : len(eb)] = sb, eb
    return s, e, counts


def run(x, mod, state, s, e, counts, R, rms):
    t = torch.from_numpy
    filters = (mod.lp_sos, mod.prefilter_sos, mod.poles[:, 1:, 0], mod.gains[:, 1:, 0],
               mod.use_abs[:, 1:], mod.scale)  # fmt: skip
    frames = (t(s), t(e), t(counts))
    return gpu.modulation_pooled(x, filters, state, frames, R, rms, block=4, ck=24)


C, Tq = 3, 41
for i, (model, dt, rms, R, hop) in enumerate((
    (Osses2021, torch.float64, False, 4, 30),
    (Dau1997, torch.float32, True, 4, 30),
    (Osses2021, torch.float32, False, 5, 3),  # frames shorter than a held sample
)):
    mod = model(16000, flow=700.0, fhigh=1000.0, dtype=dt).modulation
    y = (torch.rand(B, C, Tq, dtype=torch.float64) * 50).to(dt)
    n = [Tq * R, Tq * R - 37]
    s, e, counts = frames(n, hop, R, 0, Tq * R)
    ref, ref_st = fused.modulation_pooled(y, mod, None, s, e, counts, R, rms)
    got, st = run(y, mod, None, s, e, counts, R, rms)
    close("modulation_pooled", got, ref, dt)
    assert sorted(st) == sorted(ref_st)
    for k in ref_st:
        close("state " + k, st[k], ref_st[k], dt)
    if i == 1:
        continue
    # two chunks of whole frames and held samples through the state
    L = np.lcm(hop, R)
    q = L * max(1, Tq * R // 2 // L) // R
    parts = []
    st = None
    for a, b in ((0, q), (q, Tq)):
        s, e, counts = frames(n, hop, R, a * R, b * R)
        out, st = run(y[..., a:b], mod, st, s, e, counts, R, rms)
        parts.append(out[..., : counts.max()])
    close("modulation_pooled streamed", torch.cat(parts, -1)[..., : ref.shape[-1]], ref, dt)
    # the held pooling of a computed signal (operator pool_held), rows picked
    s, e, counts = frames(n[:1], hop, R, 0, Tq * R)
    v = y.reshape(B * C, Tq)
    cols = np.array([4, 0, 5, 2])
    ref = fused.pool_held(v, cols, s[0], e[0], R, rms)
    t = torch.from_numpy
    close("pool_held", gpu.pool_held(v, t(cols), t(s[0]), t(e[0]), R, rms, block=2), ref, dt)
print("ok")
"""


@pytest.mark.parametrize(
    "body",
    [_CASP, _CASP_SAMPLES, _KING, _KING_SAMPLES, _MODULATION],
    ids=["casp_pooled", "casp_samples", "king_pooled", "king_samples", "modulation_pooled"],
)
def test_triton_pooled_kernels_match_the_cpu_operators_in_interpreter(body):
    pytest.importorskip("triton")
    run_interpreted(_COMMON + body)


def _gpu_cases():
    from lhotse_amt.models import Dau1997, King2019, Osses2021
    from lhotse_amt.models._base import _king_pooled_plan
    from lhotse_amt.ops import fused

    for model in (Dau1997, Osses2021):
        m = model(16000, flow=100.0, fhigh=6000.0, dtype=torch.float64)
        yield fused.casp_pooled, m._kernel_plan("casp", fused.casp_plan)
    m = King2019(16000, flow=100.0, fhigh=6000.0, dtype=torch.float64)
    yield fused.king_pooled, m._kernel_plan("king2019-pooled-True", _king_pooled_plan(True))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("square", [False, True])
def test_pooled_operators_cuda_match_cpu(square):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 16001, generator=g, dtype=torch.float64) * 0.05
    ends = [16001, 12345, 160]
    for op, plan in _gpu_cases():
        ref, _ = op(plan, x, None, 160, ends, square)
        got, st = op(plan, x.cuda(), None, 160, ends, square)
        assert all(a.is_cuda for a in st.arrays)
        err = ((got.cpu() - ref).abs().max() / ref.abs().max()).item()
        assert got.shape == ref.shape and err <= 1e-11, err
        # streaming through the CUDA state
        a, st = op(plan, x[:, :8000].cuda(), None, 160, ends, square)
        b, _ = op(plan, x[:, 8000:].cuda(), st, 160, [n - 8000 for n in ends], square)
        err = ((torch.cat([a, b], -1).cpu() - ref).abs().max() / ref.abs().max()).item()
        assert err <= 1e-11, err


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_modulation_pooled_operator_cuda_matches_cpu():
    from lhotse_amt.models import Osses2021
    from lhotse_amt.ops import fused

    mod = Osses2021(16000, flow=100.0, fhigh=6000.0, dtype=torch.float64).modulation
    g = torch.Generator().manual_seed(1)
    C = mod.scale.shape[0]
    y = torch.rand(2, C, 4001, generator=g, dtype=torch.float64) * 50
    R, hop = 4, 441
    F = -(-4001 * R // hop)
    starts = np.arange(F, dtype=np.int64)[None].repeat(2, 0) * hop
    stops = np.minimum(starts + hop, 4001 * R)
    counts = np.array([F, F - 3], np.int64)
    ref, ref_st = fused.modulation_pooled(y, mod, None, starts, stops, counts, R, True)
    got, st = fused.modulation_pooled(y.cuda(), mod.cuda(), None, starts, stops, counts, R, True)
    assert ((got.cpu() - ref).abs().max() / ref.abs().max()).item() <= 1e-11
    for k in ref_st:
        assert (st[k].cpu() - ref_st[k]).abs().max().item() <= 1e-9 * ref_st[k].abs().max().item()

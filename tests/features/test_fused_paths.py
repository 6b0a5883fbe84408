"""Fused pooled CPU feature paths (Dau1997, Osses2021, King2019 extractors; kernels in
:mod:`lhotse_amt.kernels.casp` and :mod:`lhotse_amt.kernels.king2019`, the register
kernels of float32 models in ``casp_simd`` and ``king2019_simd``): equal to the
stage-wise paths, chunked (the pooled chain streamed over chunks with its states carried)
== one pass, batch == single, register == channel-vectorised kernels; and the kernels'
inline exp / log against numpy."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from launch_counter import count_launches

from lhotse_amt.features import (
    Dau1997Config,
    Dau1997Extractor,
    King2019Config,
    King2019Extractor,
    Osses2021Config,
    Osses2021Extractor,
)
from lhotse_amt.models import Dau1997, King2019, Osses2021

FS = 16000


def _signal(seconds: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    n = int(seconds * FS)
    x = rng.standard_normal(n) * 10 ** ((60 - 100) / 20)
    x[: n // 4] *= 0.01  # quiet start, then an onset (overshoot limiter active)
    return x.astype(np.float32)


CASES = {
    "dau1997": (Dau1997Extractor, Dau1997Config, {}),
    "dau1997-rms": (Dau1997Extractor, Dau1997Config, {"pooling": "rms"}),
    "osses2021": (Osses2021Extractor, Osses2021Config, {}),
    "osses2021-amt": (Osses2021Extractor, Osses2021Config, {"preset": "amt-1.4"}),
    "king2019": (King2019Extractor, King2019Config, {}),
    "king2019-rms": (King2019Extractor, King2019Config, {"pooling": "rms", "lp_150hz": True}),
    "king2019-power": (King2019Extractor, King2019Config, {"compression_type": "power"}),
}


def _extractor(case: str, **kw) -> object:
    cls, cfg, extra = CASES[case]
    args = dict(sampling_rate=FS, flow=500.0, fhigh=4000.0, chunk_duration=0.25)
    args.update(extra)
    args.update(kw)
    return cls(cfg(**args))


def _unfused(ex: object) -> object:
    ex._fused_ok = lambda model, x: False  # type: ignore[attr-defined]
    return ex


def _chunked(ex: object) -> object:
    """Stream the fused path chunk by chunk (the extractor runs it in one pass)."""
    ex._single_pass = lambda model, x: False  # type: ignore[attr-defined]
    return ex


def _frames(ex: object, x: np.ndarray) -> np.ndarray:
    """Frames before the float32 output cast (the extractor's computation dtype)."""
    t = torch.from_numpy(x.astype(np.float64))[None, None].to(ex.torch_dtype)
    with torch.inference_mode():
        (f,) = ex._compute(t, [x.shape[-1]])
    return f.double().numpy()


def _rel(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


@pytest.mark.parametrize("case", list(CASES))
def test_fused_path_is_taken(case: str) -> None:
    ex = _extractor(case)
    x = torch.zeros(1, 1, 100)
    with torch.inference_mode():
        assert ex._fused_ok(ex.model("cpu"), x)


@pytest.mark.parametrize("case", list(CASES))
def test_fused_equals_unfused_float64(case: str) -> None:
    x = _signal(0.7)
    fused = _frames(_extractor(case, dtype="float64"), x)
    ref = _frames(_unfused(_extractor(case, dtype="float64")), x)
    assert fused.shape == ref.shape
    assert _rel(fused, ref) <= 1e-10


@pytest.mark.parametrize("case", list(CASES))
def test_fused_float32(case: str) -> None:
    # the fused path runs its recursions in float64 whatever the config dtype: with
    # dtype="float32" it is within 1e-5 of the float64 result; the float32 stage-wise
    # path carries its own float32 error (~7e-5 for Osses2021), so the two float32 paths
    # agree within that error
    x = _signal(0.7)
    truth = _frames(_unfused(_extractor(case, dtype="float64")), x)
    fused = _frames(_extractor(case, dtype="float32"), x)
    ref = _frames(_unfused(_extractor(case, dtype="float32")), x)
    assert _rel(fused, truth) <= 1e-5
    assert _rel(fused, ref) <= max(1e-5, 1.1 * _rel(ref, truth) + 1e-5)


@pytest.mark.parametrize("case", list(CASES))
def test_fused_chunked_equals_one_shot(case: str) -> None:
    x = _signal(0.93, seed=1)
    a = _chunked(_extractor(case, dtype="float64", chunk_duration=0.05)).extract(x, FS)
    b = _extractor(case, dtype="float64", chunk_duration=0.05).extract(x, FS)
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())


@pytest.mark.parametrize("case", list(CASES))
def test_register_pooled_kernel(case: str, monkeypatch) -> None:
    """float32 extractors run the register kernel fused with the frame pooling: equal to
    the channel-vectorised kernel to float32 rounding, chunked (its states carried in its
    own layout) equal to one shot, batch items of different lengths equal to single
    items."""
    from lhotse_amt.kernels import casp_simd, king2019_simd, modbank_simd

    calls = []
    kernel = king2019_simd if case.startswith("king") else casp_simd
    orig = kernel.pooled
    monkeypatch.setattr(kernel, "pooled", lambda *a: calls.append(1) or orig(*a))
    xs = [_signal(0.93, seed=1), _signal(0.4137, seed=6)]
    simd = _chunked(_extractor(case, chunk_duration=0.05)).extract_batch(xs, FS)
    assert calls
    monkeypatch.setattr(modbank_simd, "ENABLED", False)
    n = len(calls)
    lanes = _chunked(_extractor(case, chunk_duration=0.05)).extract_batch(xs, FS)
    assert len(calls) == n
    monkeypatch.setattr(modbank_simd, "ENABLED", True)
    for x, a, b in zip(xs, simd, lanes):
        one_shot = _extractor(case, chunk_duration=0.05).extract(x, FS)
        assert a.shape == b.shape == one_shot.shape
        assert _rel(a, b) <= 3e-7
        # (Osses2021's float32 ear filters alone differ by ~4e-6 between chunked and one
        # shot, whichever kernel follows them)
        assert _rel(a, one_shot) <= 1e-5


@pytest.mark.parametrize("case", list(CASES))
def test_fused_batch_equals_single(case: str) -> None:
    xs = [_signal(0.5, seed=2), _signal(0.8137, seed=3), _signal(0.3, seed=4)]
    ex = _extractor(case, dtype="float64", chunk_duration=0.1)
    batch = ex.extract_batch(xs, FS)
    for x, f in zip(xs, batch):
        single = ex.extract(x, FS)
        assert f.shape == single.shape
        np.testing.assert_allclose(f, single, rtol=1e-6, atol=1e-6 * np.abs(single).max())


def test_inline_exp_log_accuracy() -> None:
    from lhotse_amt.kernels import fastmath

    u = np.linspace(-37.5, 0.0, 200001)
    ref = np.exp(u)
    assert np.max(np.abs(fastmath.exp_nonpos(u) / ref - 1.0)) < 5e-16
    u32 = u.astype(np.float32)
    ref32 = np.exp(u32.astype(np.float64))
    assert np.max(np.abs(fastmath.exp32_nonpos(u32) / ref32 - 1.0)) < 3e-7
    a = np.exp(np.linspace(np.log(1e-200), np.log(1e30), 200001))
    for n in (0.3, 0.5, 1.0):
        assert np.max(np.abs(fastmath.pow_pos(a, n) / a**n - 1.0)) < 1e-9


_X86 = __import__("platform").machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}


@pytest.mark.skipif(not _X86, reason="flush-to-zero is set through the x86 MXCSR")
def test_kernels_treat_subnormals_as_zero_and_restore_the_mode() -> None:
    from numba import njit

    from lhotse_amt.kernels.fastmath import denormals_off, restore_fp_mode

    @njit(cache=False)
    def probe(a):
        m = denormals_off()
        inside = 0.0
        for i in range(a.shape[0]):
            inside += a[i]
        restore_fp_mode(m)
        after = 0.0
        for i in range(a.shape[0]):
            after += a[i]
        return inside, after

    sub = np.array([5e-320, 1e-320])
    inside, after = probe(sub)
    assert inside == 0.0 and after == pytest.approx(6e-320, rel=1e-3)
    # the calling thread's mode is untouched
    assert np.float64(1e-300) * np.float64(1e-10) > 0.0


@pytest.mark.skipif(not _X86, reason="flush-to-zero is set through the x86 MXCSR")
def test_decaying_recursion_output_has_no_subnormals() -> None:
    # digital silence after a click: a plain evaluation of the recursion passes through
    # (and can stay on) subnormal numbers, 100-cycle microcode assists each on x86; the
    # kernels flush them to zero (benchmarks/bench_silence.py measures the time)
    import scipy.signal as ss

    from lhotse_amt.kernels.cpu import one_pole_cascade

    T = 20000
    x = torch.zeros(1, T, dtype=torch.float64)
    x[0, 0] = 1.0
    pole = torch.tensor([0.9 + 0.0j], dtype=torch.complex128)
    gain = torch.tensor([1.0 + 0.0j], dtype=torch.complex128)
    y, _ = one_pole_cascade(x, pole, gain, 1, None, "real")
    y = y[0].numpy()
    ref = ss.lfilter([1.0], [1.0, -0.9], x[0].numpy())
    tiny = np.finfo(np.float64).tiny
    assert np.any((ref != 0) & (np.abs(ref) < tiny))  # the plain recursion goes subnormal
    assert not np.any((y != 0) & (np.abs(y) < tiny))
    big = np.abs(ref) > 1e-290
    np.testing.assert_allclose(y[big], ref[big], rtol=1e-12)


# ---- model forward: the kernels writing every sample (inference on the CPU) ----------

FORWARD_MODELS = {
    "dau1997": lambda **kw: Dau1997(FS, flow=500.0, fhigh=4000.0, **kw),
    "osses2021": lambda **kw: Osses2021(FS, flow=500.0, fhigh=4000.0, **kw),
    "osses2021-amt": lambda **kw: Osses2021(FS, flow=500.0, fhigh=4000.0, preset="amt-1.4", **kw),
    "king2019": lambda **kw: King2019(FS, flow=500.0, fhigh=4000.0, **kw),
    "king2019-lp150": lambda **kw: King2019(FS, flow=500.0, fhigh=4000.0, lp_150hz=True, **kw),
}


def _bands(y: object) -> list[torch.Tensor]:
    """Per-(channel, band) outputs ``(B, T)`` of a CASP list or a King ``(B, T, F, M)``."""
    if isinstance(y, list):
        return [c[:, m] for c in y for m in range(c.shape[1])]
    return [y[..., f, m] for f in range(y.shape[2]) for m in range(y.shape[3])]


def _stagewise(name: str, x: torch.Tensor, dtype: torch.dtype = torch.float64) -> object:
    """The stage-wise path (``return_stages``: every stage kept) of model ``name``."""
    with torch.no_grad():
        return FORWARD_MODELS[name](dtype=dtype, return_stages=True)(x)[0]


@pytest.mark.parametrize("name", list(FORWARD_MODELS))
def test_forward_kernel_equals_stagewise_float64(name: str) -> None:
    """Without autograd the model forward runs the fused sample-writing kernel: band for
    band equal to the stage-wise path to rounding; batch items equal single calls."""
    model = FORWARD_MODELS[name](dtype=torch.float64)
    x = torch.from_numpy(np.stack([_signal(0.5), 0.3 * _signal(0.5, seed=1)])).double()
    with torch.no_grad(), count_launches() as calls:
        fast = model(x)
        one = model(x[1])
    fused_ops = ("op:lhotse_amt.casp_samples_", "op:lhotse_amt.king_samples_")
    assert sum(calls[k] for k in fused_ops) > 0, "the fused kernel did not run"
    for f, g in zip(_bands(fast), _bands(_stagewise(name, x))):
        assert float((f - g).abs().max()) <= 1e-10 * float(g.abs().max())
    one = [c[None] for c in one] if isinstance(one, list) else one[None]
    for f, o in zip(_bands(fast), _bands(one)):
        assert torch.equal(f[1], o[0])


@pytest.mark.parametrize("name", list(FORWARD_MODELS))
def test_forward_kernel_float32(name: str) -> None:
    """float32 models: the kernel's float64 recursions make the forward closer to the
    float64 model than the float32 stage-wise path is (1e-5 of each band's maximum)."""
    x = torch.from_numpy(_signal(0.5))[None]
    ref = _bands(_stagewise(name, x.double()))
    with torch.no_grad():
        fast = _bands(FORWARD_MODELS[name]()(x))
    for f, r in zip(fast, ref):
        assert f.dtype == torch.float32
        assert float((f.double() - r).abs().max()) <= 1e-5 * float(r.abs().max())


def test_forward_kernel_follows_learnable_parameters() -> None:
    """A learnable model's kernel layout is rebuilt from its current parameters."""
    model = Dau1997(FS, flow=500.0, fhigh=4000.0, learnable=True, dtype=torch.float64)
    x = torch.from_numpy(_signal(0.25)).double()[None]
    with torch.no_grad():
        before = model(x)
        model.adaptation.tau.mul_(1.5)
        after = model(x)
    graph = model(x.clone().requires_grad_(True))  # autograd: the plain-torch stages
    for a, g in zip(_bands(after), _bands(graph)):
        g = g.detach()
        assert float((a - g).abs().max()) <= 1e-8 * float(g.abs().max())
    assert any(not torch.allclose(a, b) for a, b in zip(_bands(after), _bands(before)))


def test_casp_kernel_layout() -> None:
    from lhotse_amt.kernels import casp
    from lhotse_amt.ops import fused

    model = Osses2021(44100, dtype=torch.float64)
    plan = fused.casp_plan(model, precise=True)
    assert plan.n_bands.tolist() == [int(n) for n in model.modulation.n_bands]
    with pytest.raises(ValueError, match="contiguous"):
        casp.casp_samples(plan, torch.zeros(1, 10), torch.zeros(1, 3, 10))


@pytest.mark.parametrize(
    "name, kwargs, channels",
    [
        ("osses2021", dict(flow=500.0, fhigh=4000.0), 17),  # 3 blocks: one group of 3
        ("osses2021", dict(preset="amt-1.4"), 31),  # 4 blocks: one group of 4
        ("dau1997", dict(filterbank_kwargs=dict(bwmul=0.75)), 41),  # 6 blocks: 2 groups of 4
    ],
)
def test_casp_register_kernel_agrees(name, kwargs, channels, monkeypatch) -> None:
    """The register kernel of float32 models (8 channels per vector, blocks side by side
    in the adaptation loops) equals the channel-vectorised kernel to float32 rounding:
    every band of every channel, incomplete blocks and groups (padding lanes and blocks
    never written), a length that is not a multiple of its chunk or tile, a loud onset
    (the overshoot limiter)."""
    from lhotse_amt.kernels import casp_simd, modbank_simd

    calls = []
    orig = casp_simd.samples
    monkeypatch.setattr(casp_simd, "samples", lambda *a: calls.append(1) or orig(*a))
    model = {"osses2021": Osses2021, "dau1997": Dau1997}[name](FS, **kwargs)
    assert model.num_channels == channels
    x = np.stack([_signal(0.7), 0.1 * _signal(0.7, seed=4)])[:, :-5].copy()
    x[:, : x.shape[1] // 2] *= 1e-3  # quiet, then a loud onset
    x = torch.from_numpy(x).float()
    out, ran = {}, {}
    for simd in (True, False):
        monkeypatch.setattr(modbank_simd, "ENABLED", simd)
        n = len(calls)
        with torch.no_grad():
            out[simd] = model(x)
        ran[simd] = len(calls) > n
    assert ran == {True: True, False: False}
    for a, b in zip(_bands(out[True]), _bands(out[False])):
        scale = float(b.double().abs().max())
        assert float((a.double() - b.double()).abs().max()) <= 3e-7 * scale


# ---- King2019 phase insensitivity from one Hilbert transform per channel -------------


@pytest.mark.parametrize(
    "seconds, cutoff, routes",
    [
        (0.0125, 10.0, ("direct",)),  # states do not decay within 200 samples
        (0.25, 10.0, ("direct", "linear")),  # 13.7 Hz direct, 35.9 and 94 Hz linear
        (6.0, 10.0, ("linear",)),  # tail pre-pass shorter than the signal
        (6.0, 50.0, ("linear",)),  # one band: H{u} in its own array
        (2.0, 1.0, ("direct", "linear")),  # 2 Hz band direct (states decay in ~ 4 s)
    ],
)
@pytest.mark.parametrize("simd", [True, False])
def test_king_phase_insensitivity_routes(seconds, cutoff, routes, simd, monkeypatch) -> None:
    """The forward's phase insensitivity (envelopes from H{u}, or per band output where
    the band-pass states do not decay within the signal) equals the stage-wise path's
    FFT per band output to rounding, in float64 and float32; the envelopes by the
    register kernel (8 channels per vector) and by the channel-vectorised one."""
    from lhotse_amt.kernels import king2019 as kk
    from lhotse_amt.kernels import king2019_envelope, king2019_envelope_simd, modbank_simd

    monkeypatch.setattr(modbank_simd, "ENABLED", simd)
    used = set()
    per_band = kk.phase_insensitivity_cpu_
    monkeypatch.setattr(
        kk, "phase_insensitivity_cpu_", lambda *a: used.add("direct") or per_band(*a)
    )
    simd_env = (king2019_envelope_simd, "envelopes")
    kernel = simd_env if simd else (king2019_envelope, "_envelope_batch")
    orig = getattr(*kernel)
    monkeypatch.setattr(*kernel, lambda *a: used.add("linear") or orig(*a))
    x = torch.from_numpy(np.stack([_signal(seconds), 0.5 * _signal(seconds, seed=3)])).double()
    ref = _bands(
        King2019(FS, flow=1000.0, fhigh=3000.0, pi_cutoff=cutoff, return_stages=True,
                 dtype=torch.float64)(x)[0]
    )  # fmt: skip
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        used.clear()
        with torch.no_grad():
            fast = King2019(FS, flow=1000.0, fhigh=3000.0, pi_cutoff=cutoff, dtype=dtype)
            fast = _bands(fast(x.to(dtype)))
        assert used == set(routes)
        for f, r in zip(fast, ref):
            assert float((f.double() - r).abs().max()) <= tol * float(r.abs().max())


def test_king_envelope_kernels_agree(monkeypatch) -> None:
    """The register envelope kernel equals the channel-vectorised one to rounding (its
    fused multiply-adds), for 23 channels (three blocks of 8, a padding lane), float64 and
    float32, over a length that is not a multiple of its chunk or tile."""
    from lhotse_amt.kernels import king2019_envelope_simd, modbank_simd

    calls = []
    orig = king2019_envelope_simd.envelopes
    monkeypatch.setattr(king2019_envelope_simd, "envelopes", lambda *a: calls.append(1) or orig(*a))

    x = torch.from_numpy(np.stack([_signal(1.3), 0.2 * _signal(1.3, seed=5)]))
    x = x[:, :-3]
    for dtype, tol in ((torch.float64, 1e-11), (torch.float32, 3e-7)):
        model = King2019(FS, flow=300.0, fhigh=6000.0, dtype=dtype)
        assert model.num_channels == 23
        out = {}
        for simd in (True, False):
            monkeypatch.setattr(modbank_simd, "ENABLED", simd)
            with torch.no_grad():
                out[simd] = model(x.to(dtype)).double()
        ref = out[False]
        scale = ref.abs().amax(dim=1, keepdim=True)
        assert float(((out[True] - ref).abs() / scale).max()) <= tol
    assert len(calls) == 2


def test_king_wrap_basis_identity() -> None:
    """H{F(u)} = F_circ(H{u}) - sum_j s_N[j] G_j for one band-pass (scipy filters): the
    identity behind the forward's phase insensitivity, at lengths where the periodic
    state needs Q and where it does not."""
    import scipy.signal

    from lhotse_amt.functional.king2019_modulation import hilbert_transform
    from lhotse_amt.kernels import king2019 as kk
    from lhotse_amt.ops import fused

    model = King2019(FS, flow=1000.0, fhigh=1500.0, dtype=torch.float64)
    plan = fused.king_plan(model, np.ones(5), np.zeros(5, bool), True)
    rng = np.random.default_rng(0)
    for N, m in ((3001, 3), (40000, 2), (40000, 4)):
        sos = plan.bank[m]  # (S, 6)
        u = rng.standard_normal(N)
        b, zf = scipy.signal.sosfilt(sos, u, zi=np.zeros((len(sos), 2)))
        hu = hilbert_transform(torch.from_numpy(u)).numpy()
        Q, L, _ = kk.periodic_state_maps(sos, N)
        _, zt = scipy.signal.sosfilt(sos, hu[N - L :], zi=np.zeros((len(sos), 2)))
        zp = (Q @ zt.reshape(-1)).reshape(zt.shape)
        h = scipy.signal.sosfilt(sos, hu, zi=zp)[0]
        G = kk.wrap_basis(plan.bank, [m], N)[0].numpy()  # (S, N)
        for s in range(len(sos)):
            h -= zf[s, 0] * G[s] + zf[s, 1] * np.roll(G[s], 1)
        ref = hilbert_transform(torch.from_numpy(b)).numpy()
        assert np.abs(h - ref).max() <= 1e-9 * np.abs(ref).max()


def test_king_length_terms_reused_per_length(monkeypatch) -> None:
    """The wrap-around basis and periodic-state maps are computed once per signal length
    and band set (the last one is kept): a repeated length reuses them and gives the
    same bits, a new length recomputes them and matches a fresh model."""
    from lhotse_amt.kernels import king2019 as kk

    calls = []
    basis = kk.wrap_basis
    monkeypatch.setattr(kk, "wrap_basis", lambda *a: calls.append(a[2]) or basis(*a))
    model = King2019(FS, flow=1000.0, fhigh=3000.0, dtype=torch.float64)
    xa = torch.from_numpy(_signal(1.0)[None]).double()
    xb = torch.from_numpy(_signal(1.5, seed=2)[None]).double()
    with torch.no_grad():
        a1 = model(xa)
        a2 = model(xa)
        assert calls == [xa.shape[-1]]
        b1 = model(xb)
        assert calls == [xa.shape[-1], xb.shape[-1]]
        a3 = model(xa)
        fresh = King2019(FS, flow=1000.0, fhigh=3000.0, dtype=torch.float64)(xb)
    assert torch.equal(a1, a2) and torch.equal(a1, a3)
    assert torch.equal(b1, fresh)
    assert len(calls) == 4  # xa again after xb: recomputed (only the last length is kept)

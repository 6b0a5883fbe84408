"""Fast CPU paths of the Paulick2024 model and extractor: the FIR decimator inside the fused
front-end kernel, the compiled pooling of the held decimated signal, and the blocked FIR
kernel, each against its plain definition."""

import math

import numpy as np
import pytest
import scipy.signal as ss
import torch

from lhotse_amt.features import Paulick2024Config, Paulick2024Extractor
from lhotse_amt.kernels import paulick, paulick_frontend
from lhotse_amt.models.paulick2024 import Paulick2024

FS = 44100


def _noise(n: int, batch: int = 2, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, n, generator=g, dtype=torch.float64) * 0.02
    x[:, : n // 3] *= 0.01  # quiet start, then an onset (overshoot limiter active)
    return x


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_fused_decimation_equals_decimating_the_adaptation_output(dtype):
    m = Paulick2024(n_channels=5, dtype=dtype)
    x = _noise(5001).to(dtype)
    with torch.inference_mode():
        fused, fs = m.stream(x, None, "resampled")
        ad, _ = m.stream(x, None, "adaptation")
        ref, rs = m.resampler(ad["adaptation"], None, return_state=True)
    y = fused["resampled"]
    assert y.dtype == dtype and y.shape == ref.shape == (2, 5, math.ceil(5001 / 4))
    # float64: the fused kernel's fused multiply-adds change last bits, which the
    # low-frequency DRNL sections and the adaptation loops amplify to ~1e-11 relative
    tol = 1e-10 if dtype == torch.float64 else 1e-6
    assert float((y - ref).abs().max()) <= tol * float(ref.abs().max())
    # the decimator state has the stage-wise layout and values (interchangeable)
    assert fs["resampled"]["t"] == rs["t"] == 5001
    h, hr = fs["resampled"]["hist"], rs["hist"]
    assert h.shape == hr.shape and float((h - hr).abs().max()) <= tol * float(ref.abs().max())


def test_fused_decimation_streams_bit_exactly():
    m = Paulick2024(n_channels=4)
    x = _noise(6003).float()
    with torch.inference_mode():
        ref, _ = m.stream(x, None, "resampled")
        s, parts = None, []
        for a, b in ((0, 3), (3, 1001), (1001, 1002), (1002, 4445), (4445, 6003)):
            o, s = m.stream(x[:, a:b], s, "resampled")
            parts.append(o["resampled"])
    assert torch.equal(torch.cat(parts, -1), ref["resampled"])


@pytest.mark.parametrize("n_channels", [1, 3])
def test_streaming_leaves_the_passed_state_untouched(n_channels):
    # one channel and one row: the kernels' working copies of the states could be views of
    # the caller's tensors; a call must never update them in place
    m = Paulick2024(n_channels=n_channels, dtype=torch.float64)
    x = _noise(3001, batch=1)
    with torch.inference_mode():
        _, s = m.stream(x[:, :1500], None, "resampled")
        before = {k: v.clone() for k, v in s.items() if isinstance(v, torch.Tensor)}
        before.update(
            {
                f"{k}.{j}": t.clone()
                for k, v in s.items()
                if isinstance(v, dict)
                for j, t in v.items()
                if isinstance(t, torch.Tensor)
            }
        )
        o1, _ = m.stream(x[:, 1500:], s, "resampled")
        o2, _ = m.stream(x[:, 1500:], s, "resampled")
    assert torch.equal(o1["resampled"], o2["resampled"])
    for k, v in before.items():
        top, _, sub = k.partition(".")
        now = s[top][sub] if sub else s[top]
        assert torch.equal(now, v), k


def _pool_reference(y, s, e, R, rms):
    """Frame means of the held signal, literally (repeat each sample R times)."""
    v = y.double().square() if rms else y.double()
    held = v.repeat_interleave(R, -1)
    out = torch.stack([held[:, a:b].mean(-1) for a, b in zip(s, e)], -1)
    return out.sqrt() if rms else out


@pytest.mark.parametrize("rms", [False, True])
def test_pool_held_matches_the_definition(rms):
    g = torch.Generator().manual_seed(1)
    y = torch.randn(7, 300, generator=g, dtype=torch.float64)
    R, hop, n = 4, 441, 1150  # frames cut by the signal end, edges inside held samples
    f = np.arange(0, -(-n // hop))
    s = f * hop
    e = np.minimum((f + 1) * hop, n)
    cols = np.array([0, 3, 6])
    got = paulick.pool_held(y, cols, s, e, R, rms)
    ref = _pool_reference(y[cols], s, e, R, rms)
    torch.testing.assert_close(got, ref, rtol=1e-13, atol=0)
    assert paulick.pool_held(y.float(), None, s, e, R, rms).dtype == torch.float32


def test_extractor_rms_pooling_of_the_held_signal():
    x = _noise(9001, batch=1)[0].float().numpy()
    ex = Paulick2024Extractor(Paulick2024Config(n_channels=3, stage="resampled", pooling="rms"))
    m = ex.model("cpu")
    with torch.inference_mode():
        out, _ = m.stream(torch.from_numpy(x)[None], None, "resampled")
    F = ex._num_frames(9001)
    f = np.arange(F)
    ref = _pool_reference(out["resampled"][0], f * 441, np.minimum((f + 1) * 441, 9001), 4, True)
    np.testing.assert_allclose(ex.extract(x, FS), ref.T.numpy(), rtol=1e-6)


def test_fir_kernel_matches_lfilter_every_stride():
    rng = np.random.default_rng(2)
    h = rng.standard_normal(37)
    x = rng.standard_normal((3, 2000))
    w = torch.from_numpy(h[::-1].copy())
    buf = torch.from_numpy(np.concatenate([np.zeros((3, 36)), x], -1))
    full = ss.lfilter(h, 1.0, x)
    for start, stride in ((0, 1), (1, 3), (2, 4)):
        n_out = len(range(start, 2000, stride))
        y = paulick.fir(buf, w, start, stride, n_out).numpy()
        np.testing.assert_allclose(y, full[:, start::stride], rtol=0, atol=1e-12)


def test_kernel_exp_within_two_ulp():
    rng = np.random.default_rng(3)
    x = np.concatenate([np.linspace(-708.0, 709.0, 200001), rng.uniform(-5.0, 5.0, 200000)])
    ref = np.exp(x)
    err = np.abs(paulick.fast_exp(x) - ref) / np.spacing(ref)
    assert err.max() <= 2.0
    assert paulick.fast_exp(np.array([-1e4]))[0] == pytest.approx(math.exp(-708.0), rel=1e-15)


@pytest.mark.parametrize("wide", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_modulation_kernel_matches_torch_and_streams_bit_exactly(dtype, wide):
    # the compiled filterbank (bands vectorised, padded to a multiple of 8) against the
    # plain-torch recursions: the Paulick bank (5 to 8 bands per channel, use_abs and
    # padded bands included) and a wider one (up to 12 bands: more than one vector); then
    # chunked against one-shot
    from lhotse_amt.functional.modulation import modulation_filterbank
    from lhotse_amt.modules.modulation import ModulationFilterbank

    if wide:
        fc = np.geomspace(500.0, 8000.0, 12)
        mb = ModulationFilterbank(11025.0, fc, max_mfc=1000.0, dtype=dtype)
        assert mb.max_bands > 9
    else:
        mb = Paulick2024(n_channels=12, dtype=dtype).modulation
    g = torch.Generator().manual_seed(1)
    x = (torch.rand(2, 12, 3001, generator=g, dtype=torch.float64) * 50).to(dtype)
    args = (mb.lp_sos, mb.poles, mb.gains, mb.direct, mb.use_abs, mb.scale, mb.prefilter_sos)
    with torch.inference_mode():
        fast = modulation_filterbank(x, *args, backend="numba")
        ref = modulation_filterbank(x, *args, backend="torch")
        s, parts = None, []
        for a, b in ((0, 1), (1, 700), (700, 701), (701, 3001)):
            o, s = modulation_filterbank(x[..., a:b], *args, s, return_state=True, backend="numba")
            parts.append(o)
    assert fast.shape == ref.shape == (2, 12, mb.max_bands, 3001)
    # (the low-pass band's poles lie within ~1e-3 of z = 1: last-bit differences of the
    # two section implementations grow to ~1e-10 relative there, ~1e-15 in the bands)
    tol = 1e-9 if dtype == torch.float64 else 1e-5
    assert float((fast - ref).abs().max()) <= tol * float(ref.abs().max())
    assert torch.equal(torch.cat(parts, -1), fast)
    # padded bands are exact zeros
    for c, n in enumerate(mb.n_bands.tolist()):
        assert torch.all(fast[:, c, n:] == 0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("n_channels", [1, 9, 50, 70])
def test_register_kernel_equals_channel_vectorised_kernel(dtype, n_channels, monkeypatch):
    # the front end with its states in vector registers (kernels.paulick_simd: blocks of 8
    # channels, groups of blocks, padding lanes) against the channel-vectorised kernel:
    # outputs and every returned state
    m = Paulick2024(n_channels=n_channels, dtype=dtype)
    x = _noise(3001).to(dtype) * 3.0
    runs = []
    for simd in (False, True):
        monkeypatch.setattr(paulick_frontend, "_SIMD", simd)
        with torch.inference_mode():
            o1, s1 = m.stream(x[:, :1700], None, "resampled")
            o2, s2 = m.stream(x[:, 1700:], s1, "resampled")
        runs.append((torch.cat([o1["resampled"], o2["resampled"]], -1), s2))
    (ref, rs), (new, ns) = runs
    tol = 1e-10 if dtype == torch.float64 else 1e-5
    scale = float(ref.abs().max())
    assert new.shape == ref.shape and float((new - ref).abs().max()) <= tol * scale
    for k in ("lin", "nl1", "nl2"):
        torch.testing.assert_close(ns["drnl"][k], rs["drnl"][k], rtol=1e-9, atol=1e-15)
    torch.testing.assert_close(ns["ihc"], rs["ihc"], rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(ns["adaptation"], rs["adaptation"], rtol=1e-7, atol=1e-12)
    assert ns["resampled"]["t"] == rs["resampled"]["t"] == 3001
    h_ref, h_new = rs["resampled"]["hist"], ns["resampled"]["hist"]
    assert float((h_new - h_ref).abs().max()) <= tol * scale


def test_register_kernel_exp_within_two_ulp():
    from lhotse_amt.kernels.simd import vector_exp

    x = np.concatenate([np.linspace(-700, 700, 20001), np.linspace(-1, 1, 10001)])
    y = vector_exp(x)
    ref = np.exp(x)
    assert np.all(np.abs(y - ref) <= 2 * np.spacing(ref))
    # float32 exp on [-37.5, 0] (the float32 overshoot limiter)
    from lhotse_amt.kernels.simd import vector_exp32_nonpos

    u = np.linspace(-37.5, 0, 30001).astype(np.float32)
    e = vector_exp32_nonpos(u)
    assert e.dtype == np.float32
    assert np.max(np.abs(e / np.exp(u.astype(np.float64)) - 1)) < 3e-7


@pytest.mark.parametrize("pooling", ["mean", "rms"])
@pytest.mark.parametrize("layout", ["compact", "padded"])
def test_extractor_fused_modulation_pooling_equals_pooling_the_output(pooling, layout, monkeypatch):
    # modulation filterbank and frame pooling in one pass (kernels.modbank_simd.
    # modulation_bank_pooled) against pooling the model's modulation output: bit for bit,
    # over several chunks and rows of different lengths
    from lhotse_amt.kernels import modbank_simd

    cfg = Paulick2024Config(n_channels=11, pooling=pooling, layout=layout, chunk_duration=0.05)
    x = _noise(2 * 44100 // 10).numpy()[0]
    batch = [x, x[:6000] * 0.5]
    runs = []
    for enabled in (False, True):
        monkeypatch.setattr(modbank_simd, "ENABLED", enabled)
        ex = Paulick2024Extractor(cfg)
        assert ex._fused_modulation_ok(ex.model(torch.device("cpu")), torch.zeros(1)) is enabled
        runs.append(ex.extract_batch(batch, sampling_rate=44100))
    for ref, new in zip(*runs):
        assert ref.shape == new.shape and np.array_equal(ref, new)

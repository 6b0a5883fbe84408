"""Paulick2024 model: layout, stages, fused vs modular paths, streaming, ear filters,
decimator, gradients, input errors, and the ``amt-paulick2024`` extractor."""

import math

import numpy as np
import pytest
import scipy.signal as ss
import torch
from conftest import load_reference
from lhotse.features.base import FEATURE_EXTRACTORS
from lhotse.utils import compute_num_frames_from_samples

from lhotse_amt.features import Paulick2024Config, Paulick2024Extractor
from lhotse_amt.models.paulick2024 import FIRDecimator, Paulick2024, casp_ear_fir

FS = 44100


def _tone(n=8000, level_db=65.0, f=1000.0, dtype=torch.float32):
    t = torch.arange(n, dtype=torch.float64) / FS
    a = math.sqrt(2) * 10 ** ((level_db - 100) / 20)
    return (a * torch.sin(2 * math.pi * f * t) * (1 + 0.5 * torch.sin(2 * math.pi * 8 * t))).to(
        dtype
    )


def test_layout_and_stages():
    m = Paulick2024(n_channels=6, return_stages=True)
    assert m.fc[0].item() == pytest.approx(125.0) and m.fc[-1].item() == pytest.approx(8000.0)
    x = torch.stack([_tone(), _tone(level_db=40)])
    chans, st = m(x)
    assert len(chans) == 6
    for c, y in enumerate(chans):
        assert y.shape == (2, int(m.modulation.n_bands[c]), math.ceil(8000 / 4))
    assert set(st) == {"outerear", "drnl", "ihc", "adaptation", "resampled"}
    assert st["outerear"].shape == (2, 8000) and st["drnl"].shape == (2, 6, 8000)
    assert st["resampled"].shape == (2, 6, 2000)
    assert m.fs_resampled == FS / 4 and m.resample_factor == 4
    # 1-D input gives unbatched outputs
    # (the stage-wise path runs the IHC and the loops in float32, the fused path in float64)
    c1 = Paulick2024(n_channels=6)(_tone())
    assert c1[0].shape == chans[0].shape[1:]
    torch.testing.assert_close(c1[3], chans[3][0], rtol=0, atol=1e-4 * float(c1[3].abs().max()))


def test_defaults_match_the_documented_configuration():
    m = Paulick2024()
    assert m.num_channels == 50 and m.drnl.preset == "jepsen2008"
    assert m.adaptation.limit == 5.0 and m.modulation.use_lp150_prefilter
    assert int(m.modulation.n_bands.min()) >= 4 and int(m.modulation.n_bands.max()) == 8


def test_fused_path_equals_stagewise_path():
    x = _tone(6000, dtype=torch.float64)[None]
    fast = Paulick2024(n_channels=5, dtype=torch.float64)
    slow = Paulick2024(n_channels=5, dtype=torch.float64, return_stages=True)
    a = fast(x)
    b, _ = slow(x)
    for u, v in zip(a, b):
        torch.testing.assert_close(u, v, rtol=0, atol=1e-10 * float(v.abs().max()))


def test_streaming_equals_one_shot():
    m = Paulick2024(n_channels=4)
    x = torch.stack([_tone(7000), _tone(7000, level_db=80)])
    for upto in m.stage_names:
        ref, _ = m.stream(x, None, upto)
        s, parts = None, []
        for a, b in ((0, 1001), (1001, 1002), (1002, 4443), (4443, 7000)):
            o, s = m.stream(x[:, a:b], s, upto)
            parts.append(o[upto])
        assert torch.equal(torch.cat(parts, -1), ref[upto]), upto


def test_same_input_twice_same_output():
    m = Paulick2024(n_channels=3)
    x = _tone(3000)
    for u, v in zip(m(x), m(x)):
        assert torch.equal(u, v)


def test_ear_filters_match_reference_firs():
    d = load_reference("drnl_tone1k_fs44100.npz")
    np.testing.assert_allclose(
        casp_ear_fir(44100), np.convolve(d["hp_fir"], d["me_fir"]), rtol=1e-15
    )
    np.testing.assert_allclose(casp_ear_fir(44100, outer=False), d["me_fir"], rtol=0)
    # the model's ear stage is the plain causal FIR of README 5.5
    m = Paulick2024(n_channels=2, dtype=torch.float64, return_stages=True)
    _, st = m(torch.from_numpy(d["x"][:4000]))
    ref = ss.lfilter(d["me_fir"], 1.0, ss.lfilter(d["hp_fir"], 1.0, d["x"][:4000]))
    assert np.abs(st["outerear"].numpy() - ref).max() <= 1e-12 * np.abs(ref).max()
    # other rates: redesigned from the 44.1-kHz response, similar gain at 1 kHz
    h48 = casp_ear_fir(48000)
    g48 = abs(np.polyval(h48[::-1], np.exp(-2j * np.pi * 1000 / 48000)))
    g44 = abs(np.polyval(casp_ear_fir(44100)[::-1], np.exp(-2j * np.pi * 1000 / 44100)))
    assert g48 == pytest.approx(g44, rel=0.05)


def test_decimator_matches_filter_then_downsample():
    dec = FIRDecimator(FS, 4, dtype=torch.float64)
    h = dec.weight.flatten().numpy()[::-1]
    x = np.random.default_rng(0).standard_normal((2, 3, 1001))
    ref = ss.lfilter(h, 1.0, x)[..., ::4]
    y = dec(torch.from_numpy(x)).numpy()
    assert y.shape == ref.shape
    np.testing.assert_allclose(y, ref, rtol=0, atol=1e-12)
    # chunks of any length
    y1, s = dec(torch.from_numpy(x[..., :333]), return_state=True)
    y2, s = dec(torch.from_numpy(x[..., 333:334]), s, return_state=True)
    y3 = dec(torch.from_numpy(x[..., 334:]), s)
    np.testing.assert_array_equal(torch.cat([y1, y2, y3], -1).numpy(), y)
    # anti-aliasing: >= 80 dB attenuation above the new Nyquist frequency, flat pass band
    w, H = ss.freqz(h, worN=8192, fs=FS)
    assert np.abs(H[w >= FS / 8]).max() < 1e-4
    assert np.abs(np.abs(H[w <= 3000]) - 1).max() < 1e-3


def test_backward_and_gradcheck_through_the_model():
    m = Paulick2024(n_channels=2, dtype=torch.float64, flow=800, fhigh=1200)
    x = (_tone(400, level_db=90, dtype=torch.float64)[None]).requires_grad_()
    out = m(x)
    sum(o.square().sum() for o in out).backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().max() > 0
    dec = FIRDecimator(FS, 4, taps_per_phase=2, dtype=torch.float64)
    xs = torch.randn(1, 2, 13, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: dec(v), (xs,))


def test_bad_input():
    m = Paulick2024(n_channels=2)
    x = _tone(1000)
    for bad_value, msg in ((float("nan"), "NaN"), (float("inf"), "infinite")):
        y = x.clone()
        y[10] = bad_value
        with pytest.raises(ValueError, match=msg):
            m(y)
    with pytest.raises(ValueError, match="dimensions"):
        m(x.reshape(1, 1, -1))
    with pytest.raises(ValueError, match="empty batch"):
        m(x.new_zeros(0, 100))
    with pytest.raises(ValueError, match="Nyquist"):
        Paulick2024(fs=16000)  # fhigh 8000 = fs/2
    with pytest.raises(ValueError, match="Nyquist"):
        Paulick2024(fs=16000, fhigh=7900)  # the DRNL's non-linear path passes fs/2
    with pytest.raises(ValueError, match="dtype"):
        Paulick2024(dtype=torch.float16)


@pytest.mark.parametrize(
    "kwargs, error, field",
    [
        (dict(factor=2.5), TypeError, "factor"),
        (dict(factor=0), ValueError, "factor"),
        (dict(taps_per_phase=0), ValueError, "taps_per_phase"),
        (dict(cutoff=1.5), ValueError, "cutoff"),
        (dict(cutoff=0.0), ValueError, "cutoff"),
        (dict(beta=-1.0), ValueError, "beta"),
        (dict(factor=1, beta=-1.0), ValueError, "beta"),
        (dict(fs=-5.0), ValueError, "fs"),
        (dict(dtype=torch.int32), ValueError, "dtype"),
    ],
)
def test_decimator_rejects_bad_settings(kwargs, error, field):
    """A fractional factor was truncated and a cut-off above the Nyquist frequency of the
    output rate accepted; every setting is checked and named."""
    with pytest.raises(error, match=field):
        FIRDecimator(**{"fs": FS, **kwargs})


def test_extractor_registered_layouts_and_frames():
    assert FEATURE_EXTRACTORS["amt-paulick2024"] is Paulick2024Extractor
    ex = Paulick2024Extractor(Paulick2024Config(n_channels=4))
    x = _tone(13001).numpy()
    f = ex.extract(x, FS)
    n_frames = compute_num_frames_from_samples(13001, 0.01, FS)
    assert f.shape == (n_frames, ex.feature_dim(FS)) == (n_frames, len(ex.feature_names()))
    pad = Paulick2024Extractor(Paulick2024Config(n_channels=4, layout="padded"))
    fp = pad.extract(x, FS)
    assert fp.shape == (n_frames, 4 * 8)
    names = pad.feature_names()
    keep = [i for i, n in enumerate(names) if not n.endswith("none")]
    np.testing.assert_array_equal(fp[:, keep], f)
    # frame means of the held decimated output, computed at the input rate
    m = ex.model("cpu")
    with torch.inference_mode():
        out, _ = m.stream(torch.from_numpy(x)[None], None, "resampled")
    held = out["resampled"][0].repeat_interleave(4, -1)[:, :13001].double()
    hop = 441
    means = [held[:, j * hop : (j + 1) * hop].mean(-1) for j in range(n_frames)]
    ref = torch.stack(means).numpy()
    res = Paulick2024Extractor(Paulick2024Config(n_channels=4, stage="resampled")).extract(x, FS)
    np.testing.assert_allclose(res, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())
    # mixing hooks (model units) are available
    # (adding a sound to itself doubles each value's signed intensity: same sign, larger size)
    mixed = ex.mix(f, f, 1.0)
    assert mixed.shape == f.shape and (np.abs(mixed) >= np.abs(f) - 1e-4).all()
    assert (np.sign(mixed) == np.sign(f))[np.abs(f) > 1e-3].all()

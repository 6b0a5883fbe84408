"""Feature-domain mixing hooks (mix / scale / compute_energy) of every extractor, as used by
Lhotse's FeatureMixer for lazily mixed cuts."""

import numpy as np
import pytest
from lhotse.features.base import FEATURE_EXTRACTORS
from lhotse.features.mixer import FeatureMixer
from lhotse.utils import LOG_EPSILON

import lhotse_amt  # noqa: F401  (registers the extractors)
from lhotse_amt.features.mixing import MIX_KNEE_MU, intensity_to_mu, mu_to_intensity

NAMES = [
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
    "amt-glasberg2002",
    "amt-moore2016",
]


def _extractor(name):
    cls = FEATURE_EXTRACTORS[name]
    return cls(cls.config_type())


def _features(name, seed=0, shape=(50, 12)):
    # plausible values of each kind: signed MU / compressed units, non-negative sone
    rng = np.random.default_rng(seed)
    f = rng.standard_normal(shape) * 40.0
    if name in ("amt-glasberg2002", "amt-moore2016"):
        f = np.abs(f) / 40.0
    elif name == "amt-king2019":
        f = f * 1e-3
    return f.astype(np.float32)


def test_mu_mapping_is_odd_and_invertible():
    mu = np.array([-3000.0, -300.0, -31.0, -29.0, -1.0, -1e-3, 0.0, 1e-3, 1.0, 29.0, 31.0, 300.0])
    i = mu_to_intensity(mu)
    np.testing.assert_allclose(intensity_to_mu(i), mu, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(mu_to_intensity(-mu), -i, rtol=1e-12)
    assert np.all(np.diff(i) > 0)  # strictly increasing through 0 and the knee
    # the knee is continuous
    lo, hi = mu_to_intensity(np.array([MIX_KNEE_MU - 1e-7, MIX_KNEE_MU + 1e-7]))
    assert abs(hi - lo) < 1e-6 * abs(hi)  # the two sides meet (no jump at the knee)


@pytest.mark.parametrize("name", NAMES)
def test_mix_with_a_negligible_sound_leaves_features_unchanged(name):
    ex = _extractor(name)
    a, b = _features(name, 0), _features(name, 1)
    assert ((a < 0).any()) == (name not in ("amt-glasberg2002", "amt-moore2016"))
    np.testing.assert_allclose(ex.mix(a, b, 0.0), a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.mix(a, b, 1e-30), a, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ex.scale(a, 1.0), a, rtol=1e-6, atol=1e-6)
    # a larger contribution moves the result towards b, values below zero included
    big = ex.mix(a, b, 1e6)
    assert np.mean(np.abs(big - ex.scale(b, 1e6))) < np.mean(np.abs(big - a))
    # scaling by a factor and back
    np.testing.assert_allclose(ex.scale(ex.scale(a, 1e-3), 1e3), a, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("pad", [LOG_EPSILON, -1000.0])
def test_lhotse_padding_values_count_as_silence(name, pad):
    ex = _extractor(name)
    a = _features(name, 0)
    padding = np.full_like(a, pad)
    np.testing.assert_allclose(ex.mix(a, padding, 1.0), a, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(ex.mix(padding, a, 2.0), ex.scale(a, 2.0), rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(ex.scale(padding, 3.0), np.zeros_like(a))
    # (a positive floor, Lhotse divides by it: at most about the 0-dB-SPL intensity)
    assert 0.0 < ex.compute_energy(padding) < 1e-3 * ex.compute_energy(a)
    assert np.all(np.isfinite(ex.mix(padding, padding, 1.0)))


def _speech_like(sr: int, channels: int) -> np.ndarray:
    # harmonic complex with a 4-Hz envelope and a pause, 65 dB SPL (AMT scale)
    t = np.arange(int(1.2 * sr)) / sr
    x = sum(np.sin(2 * np.pi * k * 140 * t) / k for k in range(1, 8)) * (1 + np.sin(8 * np.pi * t))
    x[int(0.5 * sr) : int(0.7 * sr)] = 0.0
    x *= 10 ** ((65 - 100) / 20) / np.sqrt(np.mean(x**2))
    return np.tile(x, (channels, 1))


@pytest.mark.parametrize("name", NAMES)
def test_feature_mix_at_high_snr_tracks_the_audio_mix(name):
    ex = _extractor(name)
    sr = ex.config.sampling_rate
    x = _speech_like(sr, ex.input_channels)
    n = np.random.default_rng(0).standard_normal(x.shape)
    fx = ex.extract(x.astype(np.float32), sr)
    fn = ex.extract(n.astype(np.float32), sr)
    scale = float(np.mean(np.abs(fx)))
    err = {}
    for snr in (60.0, 30.0, 10.0):
        mixer = FeatureMixer(ex, fx, frame_shift=ex.frame_shift)
        mixer.add_to_mix(fn, sampling_rate=sr, snr=snr)
        ff = mixer.mixed_feats
        assert ff.shape == fx.shape and np.isfinite(ff).all()
        if snr == 60.0:  # a negligible noise changes the features by < 1 %
            assert np.mean(np.abs(ff - fx)) < 0.01 * scale
        g = np.sqrt(np.mean(x**2) / (np.mean(n**2) * 10 ** (snr / 10)))
        fa = ex.extract((x + g * n).astype(np.float32), sr)
        err[snr] = float(np.mean(np.abs(ff - fa)) / np.mean(np.abs(fa)))
    assert err[60.0] < 0.02
    assert err[60.0] < err[30.0] < err[10.0]  # the approximation degrades as the noise grows

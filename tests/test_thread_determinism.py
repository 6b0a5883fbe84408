"""Features do not depend on the number of threads: bitwise equal at 1 and 2 threads for
every extractor (batches with items of different lengths), and extraction leaves the
process-wide thread settings as it found them."""

import numpy as np
import pytest
import torch
from lhotse.features.base import FEATURE_EXTRACTORS

import lhotse_amt  # noqa: F401  (registers the extractors)

NAMES = [
    "amt-dau1997",
    "amt-osses2021",
    "amt-king2019",
    "amt-paulick2024",
    "amt-glasberg2002",
    "amt-moore2016",
]


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _batch(channels: int, sr: int) -> list[np.ndarray]:
    rng = np.random.default_rng(7)
    x = rng.standard_normal((channels, int(1.3 * sr))) * 0.02  # ~66 dB SPL
    x[..., int(0.5 * sr) : int(0.6 * sr)] *= 30.0  # a loud burst: onsets and offsets
    y = rng.standard_normal((channels, int(0.7 * sr))) * 0.002
    return [x.astype(np.float32), y.astype(np.float32)]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("config", [{}, {"target_level_db_spl": 60.0}])
def test_features_bitwise_equal_across_thread_counts(name, config, restore_threads):
    cls = FEATURE_EXTRACTORS[name]
    ex = cls(cls.config_type(**config))
    sr = ex.config.sampling_rate
    batch = _batch(cls.input_channels, sr)
    feats = {}
    for n in (1, 2):
        torch.set_num_threads(n)
        feats[n] = ex.extract_batch(batch, sr)
        assert torch.get_num_threads() == n  # extraction changed no global thread setting
    for f1, f2 in zip(feats[1], feats[2]):
        assert f1.shape == f2.shape and np.isfinite(f1).all()
        np.testing.assert_array_equal(f1, f2)

"""Kernel launches per ``extract_batch`` (:mod:`launch_counter`: torch operator calls and
calls into the numba kernels) do not grow with the signal's length: the fused pooled path
(Paulick2024: the ear filter, then the rest of the chain pooled in one operator) runs the
whole batch in one pass, however many ``chunk_duration`` chunks it spans (its
memory grows with the frames only), while the per-stage path runs once per chunk. On
CUDA the same path runs the pooled operators' Triton kernels (one launch per operator
call, counted as the operator call): counted there too, with the fused operator called
and no per-stage recursion operator.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from launch_counter import count_launches, growth

from lhotse_amt.features import Dau1997Config, King2019Config, Osses2021Config, Paulick2024Config
from lhotse_amt.features.dau1997 import Dau1997Extractor
from lhotse_amt.features.king2019 import King2019Extractor
from lhotse_amt.features.osses2021 import Osses2021Extractor
from lhotse_amt.features.paulick2024 import Paulick2024Extractor

EXTRACTORS = {
    "dau1997": (Dau1997Extractor, Dau1997Config, "casp_pooled"),
    "king2019": (King2019Extractor, King2019Config, "king_pooled"),
    "osses2021": (Osses2021Extractor, Osses2021Config, "casp_pooled"),
    # the ear filter (paulick_fir), then the rest of the chain pooled (paulick_pooled)
    "paulick2024": (Paulick2024Extractor, Paulick2024Config, "paulick_pooled"),
}
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _noise(n: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(n).astype(np.float32)


def _count_and_compare(ex, x: np.ndarray, fs: int) -> dict:
    """Launches of ``extract_batch([x[..., :n], x[..., :n // 2]])`` for ``n`` = a quarter
    of ``x``'s samples and all of them (each counted after a call that compiles and
    caches): asserts they are equal and returns them."""
    counts = []
    for n in (x.shape[-1] // 4, x.shape[-1]):
        batch = [x[..., :n], x[..., : n // 2]]
        ex.extract_batch(batch, fs)
        with count_launches() as c:
            ex.extract_batch(batch, fs)
        counts.append(c)
    short, long = counts
    assert sum(short.values()) > 0
    assert short == long, growth(short, long)
    return short


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=[CUDA, pytest.mark.gpu])])
@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_extract_batch_launches_do_not_grow_with_length(name, device):
    cls, cfg, op = EXTRACTORS[name]
    # 0.5-s chunks: the short batch fits in two, the long one needs eight
    ex = cls(cfg(sampling_rate=16000, flow=500.0, fhigh=2000.0, chunk_duration=0.5, device=device))
    short = _count_and_compare(ex, np.float32(0.05) * _noise(64000), 16000)
    if device == "cuda":
        assert short[f"op:lhotse_amt.{op}"] == 1
        assert not [
            k for k in short if k.startswith(("op:lhotse_amt.resonator", "op:lhotse_amt.adap"))
        ]


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("name", ["amt-glasberg2002", "amt-moore2016"])
def test_loudness_extract_batch_launches_do_not_grow_with_length_on_cuda(name):
    # one block of the whole batch (blocks sized by GPU memory, chunk_duration notwithstanding)
    # and every frame of a block in one pass of the excitation stage
    from lhotse.features.base import FEATURE_EXTRACTORS

    cls = FEATURE_EXTRACTORS[name]
    conf = cls.config_type(chunk_duration=0.5, device="cuda")
    if hasattr(conf, "diotic"):
        conf.diotic = True
    ex = cls(conf)
    x = np.float32(0.05) * _noise(128000)
    short = _count_and_compare(ex, np.stack([x, x]) if cls.input_channels == 2 else x, 32000)
    assert short["op:lhotse_amt.excitation_lower"] >= 1

"""Kernel launches per ``extract_batch`` (:mod:`launch_counter`: torch operator calls and
calls into the numba kernels) do not grow with the signal's length: the fused pooled path
runs the whole batch in one pass, however many ``chunk_duration`` chunks it spans (its
memory grows with the frames only), while the per-stage path runs once per chunk.
"""

from __future__ import annotations

import numpy as np
import pytest
from launch_counter import count_launches, growth

from lhotse_amt.features import Dau1997Config, King2019Config, Osses2021Config
from lhotse_amt.features.dau1997 import Dau1997Extractor
from lhotse_amt.features.king2019 import King2019Extractor
from lhotse_amt.features.osses2021 import Osses2021Extractor

EXTRACTORS = {
    "dau1997": (Dau1997Extractor, Dau1997Config),
    "king2019": (King2019Extractor, King2019Config),
    "osses2021": (Osses2021Extractor, Osses2021Config),
}


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
def test_extract_batch_launches_do_not_grow_with_length(name):
    cls, cfg = EXTRACTORS[name]
    # 0.5-s chunks: the short batch fits in two, the long one needs eight
    ex = cls(cfg(flow=500.0, fhigh=2000.0, chunk_duration=0.5))
    rng = np.random.default_rng(0)
    x = (0.05 * rng.standard_normal(64000)).astype(np.float32)
    counts = []
    for n in (16000, 64000):
        batch = [x[:n], x[: n // 2]]
        ex.extract_batch(batch, 16000)  # compile and cache before counting
        with count_launches() as c:
            ex.extract_batch(batch, 16000)
        counts.append(c)
    short, long = counts
    assert sum(short.values()) > 0
    assert short == long, growth(short, long)

"""On CUDA the extractors take the same fused pooled path as on the CPU: the pooled
operators' Triton kernels (``lhotse_amt::casp_pooled``, ``king_pooled``,
``paulick_pooled``) instead of the per-stage operators, with the features of the CPU
path (float32 features; both paths run their recursions in float64, the CPU kernels of
float32 models with float32 shortcuts in the limiter, magnitudes and compression)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from launch_counter import count_launches

from lhotse_amt import features as F

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.gpu,
]

FS = 16000
#: extractor, settings, the pooled operator of its fused path
CASES = {
    "dau1997": ("Dau1997", {}, "casp_pooled"),
    "dau1997-rms": ("Dau1997", {"pooling": "rms"}, "casp_pooled"),
    "osses2021": ("Osses2021", {}, "casp_pooled"),
    "king2019": ("King2019", {}, "king_pooled"),
    "king2019-rms": ("King2019", {"pooling": "rms", "lp_150hz": True}, "king_pooled"),
    "paulick2024": ("Paulick2024", {"n_channels": 8}, "paulick_pooled"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cuda_fused_features_match_the_cpu_path(case):
    name, extra, op = CASES[case]
    cls, cfg = getattr(F, f"{name}Extractor"), getattr(F, f"{name}Config")
    args = dict(sampling_rate=FS, flow=500.0, fhigh=4000.0, **extra)
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(FS + 123) * 0.01).astype(np.float32)
    x[FS // 4 :] *= 30  # an onset: the overshoot limiter engages
    batch = [x, x[: FS // 2 + 7]]
    ref = cls(cfg(**args)).extract_batch(batch, FS)
    ex = cls(cfg(**args, device="cuda"))
    ex.extract_batch(batch, FS)
    with count_launches() as n:
        got = ex.extract_batch(batch, FS)
    assert n[f"op:lhotse_amt.{op}"] >= 1
    # no per-stage recursion of the chain
    chain = ("op:lhotse_amt.resonator", "op:lhotse_amt.adaptation_loops", "op:lhotse_amt.paulick")
    assert not [k for k in n if k.startswith(chain) and k != f"op:lhotse_amt.{op}"]
    for a, b in zip(got, ref, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape
        scale = np.abs(b).max()
        assert np.abs(a - b).max() <= 1e-4 * scale, (case, np.abs(a - b).max() / scale)

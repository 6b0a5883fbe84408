"""The CUDA kernels inside ``extract_batch``, without a GPU: in Triton's interpreter
(``TRITON_INTERPRET=1``, a subprocess) every operator runs its CUDA (Triton) kernel on the
CPU tensors (:class:`lhotse_amt.ops.rowop.DeviceKernels`, the one place that maps an
operator to its kernels per device, is made to answer "cuda"), and the features of the
Dau1997, King2019 and Paulick2024 extractors (the fused pooled chains; Paulick2024's ear
filter, front end and pooled modulation bank, over two chunks) must equal those of the CPU
kernels: float32 features to 1e-5 of the largest value (both compute in float64)."""

from __future__ import annotations

import pytest
from triton_interpret import run_interpreted

_SCRIPT = """
import numpy as np
import torch
from lhotse_amt.features import Dau1997Config, King2019Config, Paulick2024Config
from lhotse_amt.features.dau1997 import Dau1997Extractor
from lhotse_amt.features.king2019 import King2019Extractor
from lhotse_amt.features.paulick2024 import Paulick2024Extractor
from lhotse_amt.ops.rowop import DeviceKernels

rng = np.random.default_rng(0)


def signals(n):
    x = (0.05 * rng.standard_normal(n)).astype(np.float32)
    x[n // 3 :] *= 8.0
    return [x, x[: 2 * n // 3].copy()]


CASES = [
    (Dau1997Extractor(Dau1997Config(flow=500.0, fhigh=1000.0)), 16000, signals(1000)),
    (King2019Extractor(King2019Config(flow=800.0, fhigh=1000.0)), 16000, signals(1000)),
    (Paulick2024Extractor(Paulick2024Config(flow=500.0, fhigh=1000.0, n_channels=2,
                                            chunk_duration=0.02)), 44100, signals(1900)),
]


def run():
    return [ex.extract_batch(xs, sr) for ex, sr, xs in CASES]


ref = run()
used = set()
cpu_for_device = DeviceKernels.for_device


def cuda_kernels(self, device_type):
    k = cpu_for_device(self, "cuda")
    used.add(getattr(k, "__name__", type(k).__name__))
    return k


DeviceKernels.for_device = cuda_kernels
got = run()
for (ex, _, _), r, g in zip(CASES, ref, got):
    for a, b in zip(g, r):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape and a.dtype == b.dtype == np.float32, (ex.name, a.shape)
        err = np.abs(a - b).max() / max(np.abs(b).max(), 1e-30)
        assert err <= 1e-5, (ex.name, err)
assert "_TritonPooled" in used, sorted(used)
print("ok", sorted(used))
"""


def test_extractors_on_the_cuda_kernels_equal_the_cpu_kernels_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT, timeout=900)

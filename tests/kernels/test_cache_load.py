"""Cached kernels load without numba's target refresh (:mod:`lhotse_amt.kernels.cache_load`):
the package's dispatchers use :class:`~lhotse_amt.kernels.cache_load.DirectLoadCache`, and a
fresh process with a warm cache runs a cached parallel kernel, with the same output as the
process that compiled it, without numba ever importing its lowering modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from numba.core.caching import FunctionCache

from lhotse_amt.kernels import cache_load, compression

pytestmark = pytest.mark.skipif(not cache_load.SUPPORTED, reason="numba's cache differs")


def test_package_dispatchers_load_directly() -> None:
    for disp in (compression._fwd, compression._fwd_chunk, compression._bwd):
        assert type(disp._cache) is cache_load.DirectLoadCache
    # a dispatcher outside the package keeps numba's own cache
    from numba import njit

    @njit(cache=True)
    def f(x):  # pragma: no cover - compiled
        return x + 1

    assert type(f._cache) is FunctionCache


_CHILD = r"""
import json, sys
import numpy as np, torch
from lhotse_amt.kernels import compression
x = torch.tensor(np.random.default_rng(0).standard_normal(3000) * 2.0)
y = compression.broken_stick_forward(x, 0.3, 0.5)  # the parallel kernel, float64: libm pow
print(json.dumps({
    "y": y.numpy().tobytes().hex(),
    "hits": sum(compression._fwd.stats.cache_hits.values()),
    "refreshed": "numba.np.arraymath" in sys.modules,
}))
"""


def test_warm_process_runs_cached_kernel_without_refresh(tmp_path) -> None:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run(
            [sys.executable, "-c", _CHILD],
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    compiled, loaded = runs
    assert compiled["hits"] == 0 and compiled["refreshed"]  # compiling refreshes the target
    assert loaded["hits"] == 1 and not loaded["refreshed"]
    assert loaded["y"] == compiled["y"]

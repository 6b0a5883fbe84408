"""Importing ``lhotse_amt`` changes nothing process-wide; the process-wide settings it offers
(huge pages, fork-safe numba threading, an exit without garbage collections) take effect only
when asked for. Each case runs in a fresh interpreter, since these settings are read once per
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: the snapshot of process-wide state a child prints before and after importing the package
_SNAPSHOT = r"""
import json, os, sys
import numba, numpy, torch, lhotse, lhotse.features.base

def snapshot():
    cfg = {k: repr(getattr(numba.config, k)) for k in dir(numba.config) if k.isupper()}
    torch_state = {
        "num_threads": torch.get_num_threads(),
        "default_dtype": str(torch.get_default_dtype()),
        "grad": torch.is_grad_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "anomaly": torch.is_anomaly_enabled(),
        "mkldnn": torch.backends.mkldnn.enabled,
        "flush_denormal_probe": float(torch.tensor([1e-40], dtype=torch.float32).item()),
    }
    return {"env": dict(os.environ), "numba": cfg, "torch": torch_state,
            "numpy_err": numpy.geterr()}

before = snapshot()
import lhotse_amt
after = snapshot()
big = torch.empty(8 << 20, dtype=torch.uint8)
print(json.dumps({"before": before, "after": after,
                  "host_cache_limit": lhotse_amt.host_cache_limit(),
                  "big_ptr_mod_page": big.data_ptr() % os.sysconf("SC_PAGE_SIZE")}))
"""

_CLEAN = ("THP_MEM_ALLOC_ENABLE", "LHOTSE_AMT_HOST_CACHE_MB", "NUMBA_THREADING_LAYER")


def _run(code: str, **env: str) -> str:
    e = {k: v for k, v in os.environ.items() if k not in _CLEAN}
    e.update(env)
    r = subprocess.run(
        [sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()[-1]


def test_import_changes_no_environment_numba_or_torch_setting():
    out = json.loads(_run(_SNAPSHOT))
    before, after = out["before"], out["after"]
    assert after["env"] == before["env"]
    assert "THP_MEM_ALLOC_ENABLE" not in after["env"]
    changed = {k for k in before["numba"] if before["numba"][k] != after["numba"].get(k)}
    assert not changed, changed
    assert after["torch"] == before["torch"]
    assert after["numpy_err"] == before["numpy_err"]
    assert out["host_cache_limit"] == 0  # the host cache is off
    if sys.platform.startswith("linux"):
        # PyTorch's default alignment (64 bytes), not the huge-page one (the page size)
        assert out["big_ptr_mod_page"] != 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="transparent huge pages: Linux")
def test_enable_huge_pages_before_and_after_the_first_tensor():
    code = r"""
import os, torch, lhotse_amt
on = lhotse_amt.enable_huge_pages()
big = torch.empty(8 << 20, dtype=torch.uint8)
print(on, os.environ.get("THP_MEM_ALLOC_ENABLE"), big.data_ptr() % os.sysconf("SC_PAGE_SIZE"))
"""
    on, var, mod = _run(code).split()
    assert (on, var, mod) == ("True", "1", "0")
    # too late: the process already allocated a CPU tensor, PyTorch read the setting then
    late = "import torch; torch.zeros(4)\n" + code
    on, var, mod = _run(late).split()
    assert on == "False" and var == "1" and mod != "0"
    # an explicit THP_MEM_ALLOC_ENABLE=0 is kept
    on, var, mod = _run(code, THP_MEM_ALLOC_ENABLE="0").split()
    assert (on, var) == ("False", "0") and mod != "0"


def test_use_fork_safe_threading():
    code = r"""
import numba, lhotse_amt
from numba import njit, prange
import numpy as np
before = list(numba.config.THREADING_LAYER_PRIORITY)
ok = lhotse_amt.use_fork_safe_threading()
@njit(parallel=True)
def total(a):
    s = 0.0
    for i in prange(a.size):
        s += a[i]
    return s
assert total(np.ones(1000)) == 1000.0
after = numba.config.THREADING_LAYER_PRIORITY
print(ok, ",".join(before), ",".join(after), numba.threading_layer())
"""
    ok, before, after, layer = _run(code).split()
    assert ok == "True" and after == "tbb,workqueue,omp"
    assert before != after  # numba's own order puts OpenMP before its work-queue
    # numba's work-queue is always built in, so OpenMP (last) is never chosen
    assert layer in ("tbb", "workqueue")
    # NUMBA_THREADING_LAYER chosen by the user decides: the call reports it does not
    ok, *_ = _run(code, NUMBA_THREADING_LAYER="workqueue").split()
    assert ok == "False"


_EXIT_PROBE = r"""
import atexit, gc, sys
# registered first, so it runs last: it sees what the package's hook (if any) did
atexit.register(lambda: print("frozen-at-exit", gc.get_freeze_count() > 0, flush=True))
import lhotse_amt
if sys.argv[1] == "on":
    print("registered", lhotse_amt.skip_exit_collection(), lhotse_amt.skip_exit_collection())
print("frozen-before-exit", gc.get_freeze_count() > 0)
"""


def _run_exit_probe(mode: str) -> list[str]:
    r = subprocess.run(
        [sys.executable, "-c", _EXIT_PROBE, mode], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr[-3000:]
    return r.stdout.strip().splitlines()


def test_skip_exit_collection_freezes_only_at_exit_and_only_when_asked():
    # importing leaves the collector alone, also at exit
    assert _run_exit_probe("off") == ["frozen-before-exit False", "frozen-at-exit False"]
    # the opt-in registers one hook (the second call reports it did nothing); nothing is
    # frozen while the program runs, everything at its exit
    assert _run_exit_probe("on") == [
        "registered True False",
        "frozen-before-exit False",
        "frozen-at-exit True",
    ]

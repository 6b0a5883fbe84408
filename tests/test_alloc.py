"""The bound of the host cache (``lhotse_amt._alloc``): off unless turned on, a limit set by
:func:`lhotse_amt.enable_host_cache` or ``LHOTSE_AMT_HOST_CACHE_MB``, checked input."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest

import lhotse_amt
from lhotse_amt import _alloc

MB = 2**20
SHAPE = (2, 4 * MB)  # 32 MB of float32 (>= the cache threshold)


@pytest.fixture(autouse=True)
def _default_settings(monkeypatch):
    monkeypatch.delenv("LHOTSE_AMT_HOST_CACHE_MB", raising=False)
    monkeypatch.setattr(_alloc, "_LIMIT", None)
    lhotse_amt.empty_host_cache()
    yield
    gc.collect()
    lhotse_amt.empty_host_cache()


def test_cache_is_off_by_default():
    assert lhotse_amt.host_cache_limit() == 0
    a = _alloc.empty(SHAPE, np.float32)
    a[...] = 1.0
    del a
    gc.collect()
    assert lhotse_amt.host_cache_bytes() == 0


def test_enable_host_cache_limits():
    physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert lhotse_amt.enable_host_cache() == physical // 4 == lhotse_amt.host_cache_limit()
    assert lhotse_amt.enable_host_cache(40) == 40 * MB == lhotse_amt.host_cache_limit()
    blocks = [_alloc.empty(SHAPE, np.float32) for _ in range(2)]
    del blocks  # 64 MB freed, 40 MB kept at most: the last freed block
    gc.collect()
    assert lhotse_amt.host_cache_bytes() == 32 * MB
    # lowering the limit releases what no longer fits, 0 turns the cache off
    lhotse_amt.enable_host_cache(16)
    assert lhotse_amt.host_cache_bytes() == 0
    lhotse_amt.enable_host_cache(0)
    a = _alloc.empty(SHAPE, np.float32)
    del a
    gc.collect()
    assert lhotse_amt.host_cache_bytes() == 0


def test_explicit_limit_wins_over_the_environment(monkeypatch):
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", "40")
    assert lhotse_amt.host_cache_limit() == 40 * MB
    lhotse_amt.enable_host_cache(100)
    assert lhotse_amt.host_cache_limit() == 100 * MB
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", "0")
    assert lhotse_amt.host_cache_limit() == 100 * MB


@pytest.mark.parametrize("bad", [-1, float("inf"), float("nan")])
def test_enable_host_cache_rejects_bad_limits(bad):
    with pytest.raises(ValueError, match="limit_mb"):
        lhotse_amt.enable_host_cache(bad)
    assert lhotse_amt.host_cache_limit() == 0  # unchanged


@pytest.mark.parametrize("bad", ["40", True, [40]])
def test_enable_host_cache_rejects_non_numbers(bad):
    with pytest.raises(TypeError, match="limit_mb"):
        lhotse_amt.enable_host_cache(bad)


@pytest.mark.parametrize("bad", ["lots", "-5", "nan", "inf"])
def test_bad_environment_limit_is_named(monkeypatch, bad):
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", bad)
    with pytest.raises(ValueError, match="LHOTSE_AMT_HOST_CACHE_MB") as e:
        lhotse_amt.host_cache_limit()
    assert repr(bad) in str(e.value)


def test_empty_tensor_on_another_device_comes_from_torch():
    import torch

    cpu = _alloc.empty_tensor((2, 3), torch.float32, torch.device("cpu"))
    assert cpu.device.type == "cpu" and cpu.shape == (2, 3) and cpu.dtype == torch.float32
    meta = _alloc.empty_tensor((2, 3), torch.float64, torch.device("meta"))
    assert meta.device.type == "meta" and meta.shape == (2, 3) and meta.dtype == torch.float64

"""The host cache behind the models' large CPU outputs (``lhotse_amt.kernels._alloc``)."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
import torch

import lhotse_amt
from lhotse_amt import _alloc

MB = 2**20
SHAPE = (3, 4 * MB // 3 * 2)  # 32 MB of float32 (>= the cache threshold)


@pytest.fixture(autouse=True)
def _fresh_cache(monkeypatch):
    monkeypatch.delenv("LHOTSE_AMT_HOST_CACHE_MB", raising=False)
    monkeypatch.setattr(_alloc, "_LIMIT", None)
    lhotse_amt.enable_host_cache(1024)  # the cache is off unless turned on
    lhotse_amt.empty_host_cache()
    yield
    gc.collect()
    lhotse_amt.empty_host_cache()


def _ptr(a) -> int:
    return a.ctypes.data if isinstance(a, np.ndarray) else a.data_ptr()


def test_freed_block_is_reused():
    a = _alloc.empty(SHAPE, np.float32)
    assert a.shape == SHAPE and a.dtype == np.float32 and a.flags.c_contiguous
    assert a.flags.writeable and _ptr(a) % 64 == 0
    p = _ptr(a)
    assert lhotse_amt.host_cache_bytes() == 0
    del a
    assert lhotse_amt.host_cache_bytes() >= 32 * MB
    b = _alloc.empty(SHAPE, np.float32)
    assert _ptr(b) == p
    assert lhotse_amt.host_cache_bytes() == 0


@pytest.mark.parametrize("keep", ["view", "tensor", "tensor_view"])
def test_block_in_use_is_never_handed_out(keep):
    a = _alloc.empty(SHAPE, np.float32)
    a[...] = 7.0
    if keep == "view":
        held = a[1, 10:20]
    elif keep == "tensor":
        held = torch.from_numpy(a)
    else:
        held = torch.from_numpy(a)[2:, ::3]
    p = _ptr(a)
    del a
    gc.collect()
    assert lhotse_amt.host_cache_bytes() == 0
    b = _alloc.empty(SHAPE, np.float32)
    b[...] = -1.0
    assert _ptr(b) != p
    assert float(np.asarray(held).min()) == 7.0 == float(np.asarray(held).max())
    del held
    gc.collect()
    assert lhotse_amt.host_cache_bytes() >= 32 * MB


def test_empty_tensor_and_sizes():
    t = _alloc.empty_tensor(SHAPE, torch.float64)
    assert t.dtype == torch.float64 and tuple(t.shape) == SHAPE
    p = t.data_ptr()
    del t
    # small arrays bypass the cache
    w = _alloc.empty((1000,), np.float32)
    del w
    assert lhotse_amt.host_cache_bytes() == 64 * MB
    # a smaller request within the slack reuses the block
    u = _alloc.empty_tensor((SHAPE[0], SHAPE[1] - 1000), torch.float64)
    assert u.data_ptr() == p
    del u
    assert lhotse_amt.host_cache_bytes() == 64 * MB
    # a request no cached block serves releases the cache and gets a fresh block
    v = _alloc.empty_tensor((SHAPE[0], SHAPE[1] // 2), torch.float64)
    assert lhotse_amt.host_cache_bytes() == 0
    del v
    assert lhotse_amt.host_cache_bytes() == 32 * MB


def test_limit_and_release(monkeypatch):
    monkeypatch.setattr(_alloc, "_LIMIT", None)  # the environment decides
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", "40")
    assert lhotse_amt.host_cache_limit() == 40 * MB
    a, b = _alloc.empty(SHAPE, np.float32), _alloc.empty(SHAPE, np.float32)
    pb = _ptr(b)
    del a, b  # 64 MB freed, only the last freed 32 MB fit
    assert lhotse_amt.host_cache_bytes() == 32 * MB
    assert _ptr(_alloc.empty(SHAPE, np.float32)) == pb
    c = _alloc.empty(SHAPE, np.float32)
    del c
    lhotse_amt.empty_host_cache()
    assert lhotse_amt.host_cache_bytes() == 0
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", "0")
    d = _alloc.empty(SHAPE, np.float32)
    del d
    assert lhotse_amt.host_cache_bytes() == 0
    monkeypatch.setenv("LHOTSE_AMT_HOST_CACHE_MB", "lots")
    with pytest.raises(ValueError, match="LHOTSE_AMT_HOST_CACHE_MB"):
        lhotse_amt.host_cache_limit()


def test_threads_never_share_a_block():
    ptrs: list[int] = []
    errors: list[str] = []

    def work(k: int) -> None:
        for _ in range(5):
            a = _alloc.empty(SHAPE, np.float32)
            a[...] = k
            ptrs.append(_ptr(a))
            if not (a == k).all():
                errors.append(f"thread {k} saw another thread's writes")
            del a

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(set(ptrs)) <= 4  # blocks were reused, at most one per thread at a time


@pytest.mark.parametrize("model", ["King2019", "Osses2021"])
def test_model_forward_reuses_its_output_memory(model):
    fs = 16000
    m = getattr(lhotse_amt, model)(fs)
    x = torch.randn(2, fs) * 0.01
    gc.collect()  # blocks of garbage other tests left behind come back now, not mid-call
    lhotse_amt.empty_host_cache()
    with torch.inference_mode():
        y1 = m(x)
        first = [t.clone() for t in (y1 if isinstance(y1, list) else [y1])]
        del y1
        gc.collect()
        assert lhotse_amt.host_cache_bytes() > 0
        y2 = m(x)
        assert lhotse_amt.host_cache_bytes() == 0  # the freed output served the call
    second = y2 if isinstance(y2, list) else [y2]
    assert all(torch.equal(a, b) for a, b in zip(first, second))


@pytest.mark.skipif(not hasattr(__import__("os"), "fork"), reason="needs fork")
def test_forked_child_can_allocate_while_another_thread_holds_the_lock():
    import os
    import signal

    a = _alloc.empty(SHAPE, np.float32)
    del a  # the child inherits one cached block
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with _alloc._CACHE._lock:
            held.set()
            release.wait(30)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(30)
    try:
        pid = os.fork()
        if pid == 0:  # child: the holder thread does not exist here
            signal.alarm(20)  # a deadlock ends the child with SIGALRM
            try:
                b = _alloc.empty(SHAPE, np.float32)
                b[...] = 1.0
                del b
                os._exit(0 if lhotse_amt.host_cache_bytes() >= 32 * MB else 1)
            except BaseException:
                os._exit(2)
    finally:
        release.set()
        t.join()
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status

"""Output arrays of the CPU kernels, and the host cache that recycles the large ones.

The sample-rate outputs of the models are hundreds of MB (King2019, 10 s at 44.1 kHz:
273 MB per item; Osses2021: 0.5 GB). They are allocated by PyTorch's CPU allocator, so
they take its huge-page setting (``THP_MEM_ALLOC_ENABLE``, :func:`enable_huge_pages`),
are 64-byte aligned, and ``torch.from_numpy`` of the result shares the memory.

Arrays of ``_CACHE_MIN_BYTES`` and more come from a host cache, the CPU counterpart of
PyTorch's CUDA caching allocator: when the last tensor or array viewing such a block is
freed, the block goes back to the cache instead of to the operating system, and the next
request of about the same size reuses its pages. A fresh block costs the kernel a page
fault and a page zeroing per page on its first write (0.16 s per GB on the development
machine), and on virtual machines that report free memory to their host (virtio-balloon
free page reporting) a block freed for more than about 2 s is handed back to the host and
costs ten times that again (1.4–2.1 s per GB, ``benchmarks/bench_fresh_memory.py``): a
batch-8 forward of Osses2021 at 44.1 kHz spent as much time in such faults as in its
kernels. A block serves requests from its size down to 1 / 1.25 of it; a request that
no cached block serves releases the whole cache before it allocates (the sizes in use
have changed), so the cache holds only blocks of the sizes the current calls use. It
holds at most ``host_cache_limit()`` bytes of freed blocks, evicting the least recently
freed; :func:`empty_host_cache` hands them all back. Blocks in use are never shared: a
block returns to the cache only when nothing views it any more.

The cache is off unless asked for, since every process keeps its own (N worker processes:
N caches): :func:`enable_host_cache` turns it on in this process (the ``lhotse-amt`` CLI
does, with at most ``CLI_HOST_CACHE_MB``), and ``LHOTSE_AMT_HOST_CACHE_MB`` in the
environment sets the limit of every process that inherits it (0: off).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
from collections import OrderedDict

import numpy as np
import torch

__all__ = [
    "empty",
    "empty_like",
    "empty_tensor",
    "empty_host_cache",
    "enable_host_cache",
    "enable_huge_pages",
    "host_cache_bytes",
    "host_cache_limit",
]

_TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.complex64): torch.complex64,
    np.dtype(np.complex128): torch.complex128,
}

_CACHE_MIN_BYTES = 16 << 20  # smaller arrays come straight from PyTorch's allocator
_GRAIN = 2 << 20  # block sizes are multiples of one huge page
_SLACK = 0.25  # a cached block serves requests down to 1 / (1 + _SLACK) of its size


#: the limit :func:`enable_host_cache` set in this process (``None``: not called)
_LIMIT: int | None = None

#: the host cache limit the ``lhotse-amt`` CLI turns on (MB; a quarter of the physical
#: memory where that is less)
CLI_HOST_CACHE_MB = 2048


def _physical_memory() -> int:
    """Bytes of physical memory (16 GiB where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 16 << 30


def host_cache_limit() -> int:
    """Most bytes of freed blocks the host cache of this process keeps: the limit
    :func:`enable_host_cache` set, else ``LHOTSE_AMT_HOST_CACHE_MB`` (MB) from the
    environment, else 0 (the cache is off)."""
    if _LIMIT is not None:
        return _LIMIT
    env = os.environ.get("LHOTSE_AMT_HOST_CACHE_MB")
    if env is not None and env.strip() != "":
        try:
            mb = float(env)
        except ValueError:
            mb = float("nan")
        if not mb >= 0 or mb == float("inf"):
            raise ValueError(
                f"LHOTSE_AMT_HOST_CACHE_MB must be a number of MB >= 0 (0: off), got {env!r}"
            )
        return int(mb * 2**20)
    return 0


def enable_host_cache(limit_mb: float | None = None) -> int:
    """Turn on the host cache of this process, which keeps the memory of the models' freed
    large CPU outputs (16 MB and more) for the next call of about the same size, instead of
    handing it back to the operating system (whose fresh pages cost a page fault and a
    zeroing each, and on VMs with free page reporting ten times that).

    Each process has its own cache: with N worker processes give each ``1 / N`` of what one
    process may keep. The setting holds in this process and in processes it forks, not in
    spawned ones (set ``LHOTSE_AMT_HOST_CACHE_MB`` in their environment instead).

    Args:
        limit_mb: most MB of freed blocks kept; ``None``: a quarter of the physical
            memory; 0 turns the cache off (and empties it).

    Returns:
        The limit in bytes.
    """
    global _LIMIT
    if limit_mb is None:
        limit = _physical_memory() // 4
    else:
        if isinstance(limit_mb, bool) or not isinstance(limit_mb, (int, float)):
            raise TypeError(f"limit_mb must be a number of MB or None, got {limit_mb!r}")
        if not 0 <= limit_mb < float("inf"):
            raise ValueError(f"limit_mb must be a finite number of MB >= 0, got {limit_mb!r}")
        limit = int(limit_mb * 2**20)
    _LIMIT = limit
    if _CACHE is not None:
        _CACHE.trim(limit)
    return limit


def enable_huge_pages() -> bool:
    """Ask PyTorch's CPU allocator to back large tensors (2 MB and more) with transparent
    huge pages (Linux), by setting ``THP_MEM_ALLOC_ENABLE=1`` in the environment (which
    processes started from this one inherit).

    The models' sample-rate outputs are hundreds of MB; faulting them in 2-MB pages instead
    of 4-kB ones cuts the kernel's share of their cost by about five times. PyTorch reads
    the variable once, at the process's first CPU tensor allocation, so this must be called
    before any CPU tensor is made (or set the variable before starting Python). A
    ``THP_MEM_ALLOC_ENABLE`` already in the environment is left as it is (0 keeps PyTorch's
    default).

    Returns:
        Whether large CPU tensors now come in huge pages (False: the variable says no, the
        platform is not Linux, or a CPU tensor was allocated before the call).
    """
    os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
    if not sys.platform.startswith("linux"):
        return False
    # PyTorch aligns allocations that take huge pages to the page size, others to 64 bytes
    probe = torch.empty(2 << 20, dtype=torch.uint8)
    return probe.data_ptr() % os.sysconf("SC_PAGE_SIZE") == 0


class _HostCache:
    """Freed blocks (``torch.uint8`` tensors of ``_GRAIN``-multiple sizes), least
    recently freed first."""

    def __init__(self) -> None:
        self._lock = threading.RLock()  # a lease can be finalised inside a locked section
        self._free: OrderedDict[int, torch.Tensor] = OrderedDict()
        self._bytes = 0
        self._lease_types: dict[int, type] = {}

    def take(self, nbytes: int) -> torch.Tensor:
        """A block of at least ``nbytes``: the smallest cached one that fits within the
        slack, else a fresh one from PyTorch's allocator. A request the cache cannot
        serve releases every cached block first: the sizes in use have changed, and the
        process should not hold memory for sizes it no longer asks for."""
        size = -(-nbytes // _GRAIN) * _GRAIN
        with self._lock:
            best = None
            for key, block in self._free.items():
                n = block.numel()
                if size <= n <= size * (1 + _SLACK) and (best is None or n < best[1]):
                    best = (key, n)
            if best is not None:
                self._bytes -= best[1]
                return self._free.pop(best[0])
            self._free.clear()
            self._bytes = 0
        return torch.empty(size, dtype=torch.uint8)

    def give(self, block: torch.Tensor) -> None:
        """Return ``block`` to the cache (called when its lease is finalised)."""
        limit = host_cache_limit()
        with self._lock:
            if block.numel() > limit:
                return
            self._free[id(block)] = block
            self._bytes += block.numel()
            while self._bytes > limit:
                _, old = self._free.popitem(last=False)
                self._bytes -= old.numel()

    def clear(self) -> None:
        with self._lock:
            self._free.clear()
            self._bytes = 0

    def trim(self, limit: int) -> None:
        """Release the least recently freed blocks until at most ``limit`` bytes remain."""
        with self._lock:
            while self._bytes > limit:
                _, old = self._free.popitem(last=False)
                self._bytes -= old.numel()

    def lease(self, block: torch.Tensor) -> ctypes.Array:
        """A buffer object over ``block`` that gives the block back when it is freed:
        numpy arrays made from it (and their views, and tensors sharing their memory)
        hold a reference to it."""
        n = block.numel()
        with self._lock:
            cls = self._lease_types.get(n)
            if cls is None:
                cls = type(
                    "_HostLease",
                    (ctypes.Array,),
                    {"_type_": ctypes.c_char, "_length_": n, "__del__": _release},
                )
                self._lease_types[n] = cls
        lease = cls.from_address(block.data_ptr())
        lease._block = block
        return lease


def _release(lease: ctypes.Array) -> None:
    """Finaliser of a lease: its block goes back to the cache."""
    block = lease.__dict__.pop("_block", None)
    if block is not None and _CACHE is not None:
        try:
            _CACHE.give(block)
        except Exception:  # interpreter shutdown: the block is simply freed
            pass


_CACHE: _HostCache | None = _HostCache()


def _after_fork_in_child() -> None:
    # a lock held by another thread at fork time would stay held in the child
    if _CACHE is not None:
        _CACHE._lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def empty(shape: tuple[int, ...], dtype: np.dtype | type = np.float64) -> np.ndarray:
    """Uninitialised C-contiguous numpy array of ``shape`` and ``dtype`` (64-byte
    aligned); from the host cache when it is ``_CACHE_MIN_BYTES`` or more."""
    shape = tuple(int(n) for n in shape)
    dt = np.dtype(dtype)
    count = int(np.prod(shape, dtype=np.int64))
    nbytes = count * dt.itemsize
    if nbytes < _CACHE_MIN_BYTES or _CACHE is None or host_cache_limit() == 0:
        return torch.empty(shape, dtype=_TORCH_DTYPES[dt]).numpy()
    lease = _CACHE.lease(_CACHE.take(nbytes))
    return np.frombuffer(lease, dtype=dt, count=count).reshape(shape)


def empty_like(a: np.ndarray) -> np.ndarray:
    """:func:`empty` with the shape and dtype of ``a``."""
    return empty(a.shape, a.dtype)


_NUMPY_DTYPES = {v: k for k, v in _TORCH_DTYPES.items()}


def empty_tensor(
    shape: tuple[int, ...], dtype: torch.dtype, device: torch.device | None = None
) -> torch.Tensor:
    """:func:`empty` as a CPU tensor of ``dtype`` (sharing the array's memory); on another
    ``device`` an uninitialised tensor from PyTorch's allocator."""
    if device is not None and device.type != "cpu":
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.from_numpy(empty(shape, _NUMPY_DTYPES[dtype]))


def empty_host_cache() -> None:
    """Hand every freed block in the host cache back to the operating system (like
    ``torch.cuda.empty_cache`` for the CUDA caching allocator)."""
    if _CACHE is not None:
        _CACHE.clear()


def host_cache_bytes() -> int:
    """Bytes of freed blocks the host cache holds now."""
    return 0 if _CACHE is None else _CACHE._bytes

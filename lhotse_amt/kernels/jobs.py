"""Serial numba kernels over independent jobs, run on the calling thread and a thread pool.

numba's ``parallel=True`` compiles a ``prange`` loop through its parfor passes into an
outlined gufunc; for the large register kernels (:mod:`~lhotse_amt.kernels.casp_simd`,
:mod:`~lhotse_amt.kernels.paulick_simd`, ...) that costs two to three times the compile
time of the same kernel without it, which a process pays at its first extract when numba's
on-disk cache is empty. These kernels are therefore compiled serial (and ``nogil``) over a
range of independent jobs, ``kernel(j0, j1, *args)`` running jobs ``j0 <= j < j1`` (e.g.
pairs of batch item and block of channels), and :func:`run_jobs` cuts the jobs into
contiguous ranges, one per thread, as numba's static ``prange`` schedule does: the calling
thread runs the first range, a pool of worker threads the others. The number of threads
follows ``torch.get_num_threads()`` (at most ``NUMBA_NUM_THREADS``), as for the parallel
kernels (:func:`lhotse_amt.kernels.cpu._threads`).

Their structural arguments are literal integers (the generated code depends on them;
the register intrinsics refuse plain integers): :func:`literal_entry`, the one way these
kernels are launched, types them as integer literals and compiles or loads the
specialisation for the values at hand directly (the kernels need no ``numba.literally``
calls, nor numba's first typing attempt with plain integers that those would make), and
keeps its compiled entry point, so later calls skip the dispatcher's type resolution too
(~0.1 s per call for a dispatcher call with ``literally`` arguments). It compiles them at
LLVM optimisation level :data:`LITERAL_OPT` instead of numba's default 3: their IR is
written vector by vector (:mod:`lhotse_amt.kernels.simd`), so the extra work of level 3
finds nothing to improve in it (the same kernel speed, measured) but took a third of the
compile time of the larger ones (the Paulick2024 front end and modulation filterbank: 1.1
of 3.4 CPU-s).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import numba
import torch
from numba import types
from numba.core.compiler_lock import global_compiler_lock

__all__ = ["LITERAL_OPT", "kernel_threads", "literal_entry", "opt_level", "run_jobs"]

#: LLVM optimisation level of the literal specialisations (numba's default: 3)
LITERAL_OPT = 2

#: compiled entry points per dispatcher, argument types and literal values
_ENTRY: dict[tuple, Callable[..., Any]] = {}
_POOL: dict[str, Any] = {"pid": None, "pool": None, "size": 0}
_POOL_LOCK = threading.Lock()


def kernel_threads() -> int:
    """Threads a kernel launch may use: ``torch.get_num_threads()``, at most
    ``NUMBA_NUM_THREADS``."""
    return max(1, min(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS))


@contextmanager
def opt_level(level: int) -> Iterator[None]:
    """Compile at LLVM optimisation level ``level`` (at most numba's configured level,
    ``NUMBA_OPT``) inside the block. Holds numba's compiler lock, so no other thread
    compiles meanwhile; numba reads the level when it builds each function's pass
    pipelines."""
    with global_compiler_lock:
        old = numba.config.OPT
        numba.config.OPT = min(int(old), int(level))
        try:
            yield
        finally:
            numba.config.OPT = old


def literal_entry(disp: Any, args: tuple, n_lit: int) -> Callable[..., Any]:
    """The compiled entry point of the numba dispatcher ``disp`` for ``args`` whose last
    ``n_lit`` values are the kernel's literal integers (compiled, or loaded from numba's
    cache, on first use). The entry point takes the same arguments as ``disp``."""
    key = (disp, *(numba.typeof(a) for a in args[:-n_lit]), *(int(v) for v in args[-n_lit:]))
    ep = _ENTRY.get(key)
    if ep is None:
        lits = tuple(types.IntegerLiteral(int(v)) for v in args[-n_lit:])
        with opt_level(LITERAL_OPT):
            ep = disp.compile(tuple(key[1 : len(args) - n_lit + 1]) + lits)
        _ENTRY[key] = ep
    return ep


def _pool(workers: int) -> ThreadPoolExecutor:
    # one pool per process (a forked child makes its own) with at least `workers` threads
    with _POOL_LOCK:
        if _POOL["pid"] != os.getpid() or _POOL["size"] < workers:
            if _POOL["pid"] == os.getpid() and _POOL["pool"] is not None:
                _POOL["pool"].shutdown(wait=False)
            _POOL.update(
                pid=os.getpid(),
                pool=ThreadPoolExecutor(workers, thread_name_prefix="lhotse_amt"),
                size=workers,
            )
        return _POOL["pool"]


def run_jobs(entry: Callable[..., Any], n_jobs: int, args: tuple) -> None:
    """``entry(j0, j1, *args)`` over ``0 <= j < n_jobs``, cut into contiguous ranges over
    :func:`kernel_threads` threads (fewer when there are fewer jobs)."""
    n = min(kernel_threads(), n_jobs)
    if n <= 1:
        if n_jobs > 0:
            entry(0, n_jobs, *args)
        return
    cut = [n_jobs * i // n for i in range(n + 1)]
    pool = _pool(n - 1)
    futures = [pool.submit(entry, cut[i], cut[i + 1], *args) for i in range(1, n)]
    try:
        entry(cut[0], cut[1], *args)
    finally:
        for f in futures:
            f.result()

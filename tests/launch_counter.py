"""Count the kernel launches of a call on the CPU.

A launch is a call of a torch operator (every ``aten`` operator and the registered
``torch.ops.lhotse_amt`` operators: on CUDA each launches its kernels), a call from Python
into a compiled numba kernel of the package (the CPU kernels the no-grad paths call
directly), a :func:`lhotse_amt.kernels.matmul.matmul` (the fixed-order product: it calls
its compiled entry points directly, past the dispatcher) or a
:func:`lhotse_amt.kernels.jobs.run_jobs` (one kernel over its jobs, on the thread pool).
The operators are counted by a ``TorchDispatchMode``; the kernels by replacing, for the
duration, every numba dispatcher (and every reference to ``matmul`` and ``run_jobs``) held
by a module of the package with a counting wrapper (calls between compiled kernels are not
launches and are not seen). Run
the call once before counting, so that nothing is compiled while the wrappers are in place.
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator

from numba.core.dispatcher import Dispatcher
from torch.utils._python_dispatch import TorchDispatchMode


class _OperatorCounter(TorchDispatchMode):
    def __init__(self, counts: Counter) -> None:
        super().__init__()
        self.counts = counts

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[f"op:{func.overloadpacket}"] += 1
        return func(*args, **(kwargs or {}))


class _CountingKernel:
    """A numba dispatcher that counts its calls; everything else (``compile``,
    ``py_func``, ...) is the dispatcher's own."""

    def __init__(self, kernel: Dispatcher, counts: Counter) -> None:
        self._kernel = kernel
        self._counts = counts
        self._name = f"numba:{kernel.py_func.__module__}.{kernel.py_func.__qualname__}"

    def __call__(self, *args, **kwargs):
        self._counts[self._name] += 1
        return self._kernel(*args, **kwargs)

    def __getattr__(self, attr):
        return getattr(self._kernel, attr)


def _counting_call(fn, name: str, counts: Counter):
    """A function that counts its calls as launches of ``name``."""

    def call(*args, **kwargs):
        counts[name] += 1
        return fn(*args, **kwargs)

    return call


def _counting_jobs(run_jobs, counts: Counter):
    """:func:`lhotse_amt.kernels.jobs.run_jobs`: one launch of a kernel over its jobs (the
    compiled entry point it runs bypasses the dispatcher)."""

    def call(entry, n_jobs, args):
        counts[f"numba:run_jobs({getattr(entry, '__name__', entry)})"] += 1
        return run_jobs(entry, n_jobs, args)

    return call


@contextlib.contextmanager
def count_launches() -> Iterator[Counter]:
    """``with count_launches() as n: ...``: ``n`` counts the launches by name."""
    counts: Counter = Counter()
    replaced = []
    jobs = sys.modules.get("lhotse_amt.kernels.jobs")
    run_jobs = getattr(jobs, "run_jobs", None)
    product = getattr(sys.modules.get("lhotse_amt.kernels.matmul"), "matmul", None)
    for name, mod in list(sys.modules.items()):
        if name != "lhotse_amt" and not name.startswith("lhotse_amt."):
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, Dispatcher):
                replaced.append((mod, attr, value))
                setattr(mod, attr, _CountingKernel(value, counts))
            elif run_jobs is not None and value is run_jobs:
                replaced.append((mod, attr, value))
                setattr(mod, attr, _counting_jobs(value, counts))
            elif product is not None and value is product:
                replaced.append((mod, attr, value))
                setattr(mod, attr, _counting_call(value, "numba:matmul", counts))
    try:
        with _OperatorCounter(counts):
            yield counts
    finally:
        for mod, attr, value in reversed(replaced):
            setattr(mod, attr, value)


def growth(short: Counter, long: Counter) -> dict[str, tuple[int, int]]:
    """The launches whose counts differ between two calls: ``{name: (short, long)}``."""
    return {k: (short[k], long[k]) for k in sorted(set(short) | set(long)) if short[k] != long[k]}

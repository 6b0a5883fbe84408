"""Count the kernel launches of a call on the CPU.

A launch is a call of a torch operator (every ``aten`` operator and the registered
``torch.ops.lhotse_amt`` operators: on CUDA each launches its kernels) or a call from Python
into a compiled numba kernel of the package (the CPU kernels the no-grad paths call
directly). The operators are counted by a ``TorchDispatchMode``; the numba kernels by
replacing, for the duration, every numba dispatcher held by a module of the package with a
counting wrapper (calls between compiled kernels are not launches and are not seen). Run
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


def _counting(kernel: Dispatcher, counts: Counter):
    name = f"numba:{kernel.py_func.__module__}.{kernel.py_func.__qualname__}"

    def call(*args, **kwargs):
        counts[name] += 1
        return kernel(*args, **kwargs)

    return call


@contextlib.contextmanager
def count_launches() -> Iterator[Counter]:
    """``with count_launches() as n: ...``: ``n`` counts the launches by name."""
    counts: Counter = Counter()
    replaced = []
    for name, mod in list(sys.modules.items()):
        if name != "lhotse_amt" and not name.startswith("lhotse_amt."):
            continue
        for attr, value in list(vars(mod).items()):
            if isinstance(value, Dispatcher):
                replaced.append((mod, attr, value))
                setattr(mod, attr, _counting(value, counts))
    try:
        with _OperatorCounter(counts):
            yield counts
    finally:
        for mod, attr, value in reversed(replaced):
            setattr(mod, attr, value)


def growth(short: Counter, long: Counter) -> dict[str, tuple[int, int]]:
    """The launches whose counts differ between two calls: ``{name: (short, long)}``."""
    return {k: (short[k], long[k]) for k in sorted(set(short) | set(long)) if short[k] != long[k]}

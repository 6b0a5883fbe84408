"""Compiling the kernels with Python's cyclic garbage collector paused.

A numba compile creates and drops hundreds of thousands of small Python objects (typing
results, IR nodes, LLVM IR text builders). Each time the youngest generation fills, the
cyclic collector runs, and its older-generation passes walk every tracked object of the
process: PyTorch's, Lhotse's and numba's tens of thousands of objects, again and again.
Measured at the first extract of ``amt-glasberg2002`` with an empty cache (nine kernels
compiled): 5.5-5.8 CPU-s with the collector running, 4.6-4.8 with it paused.

:func:`pause_gc_in_compiles` wraps the compile step of the package's own numba
dispatchers (``Dispatcher._compiler.compile``, which runs only on a cache miss) so that
the collector is paused for the compile and switched back on after it, if it was on
before (a caller that disabled it keeps it disabled; nested compiles leave it to the
outermost). Nothing else changes: the compiled code, numba's settings and classes, and
the collector's state outside a compile. :mod:`lhotse_amt.kernels` applies it to each of
its modules as it is imported.
"""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import Any

from numba.core.dispatcher import Dispatcher

__all__ = ["pause_gc_in_compiles"]


def _without_gc(compile_fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(compile_fn)
    def compile_paused(*args: Any, **kwargs: Any) -> Any:
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            return compile_fn(*args, **kwargs)
        finally:
            if was_enabled:
                gc.enable()

    compile_paused.gc_paused = True  # type: ignore[attr-defined]
    return compile_paused


def pause_gc_in_compiles(namespace: dict[str, Any]) -> int:
    """Pause the garbage collector during the compiles of the numba dispatchers among the
    values of ``namespace`` (a module's globals); returns how many were wrapped. Where a
    dispatcher has no compile step of numba's usual structure it is left alone."""
    n = 0
    for value in list(namespace.values()):
        if not isinstance(value, Dispatcher):
            continue
        compiler = getattr(value, "_compiler", None)
        compile_fn = getattr(compiler, "compile", None)
        if compile_fn is None or getattr(compile_fn, "gc_paused", False):
            continue
        compiler.compile = _without_gc(compile_fn)
        n += 1
    return n

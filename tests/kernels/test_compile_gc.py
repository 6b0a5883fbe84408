"""The package's numba dispatchers compile with Python's garbage collector paused
(:mod:`lhotse_amt.kernels.compile_gc`): paused during the compile step only, switched
back on after it (also when the compile fails), left off where the caller had switched it
off, wrapped once; and every dispatcher of the kernel modules is wrapped as imported."""

from __future__ import annotations

import gc
import importlib
import pkgutil

import numpy as np
import pytest
from numba import njit
from numba.core.dispatcher import Dispatcher

import lhotse_amt.kernels as kernels
from lhotse_amt.kernels.compile_gc import pause_gc_in_compiles


def _dispatcher_recording_gc_state():
    @njit(cache=False)
    def add_one(x):  # pragma: no cover - compiled
        return x + 1

    seen = []
    real = add_one._compiler.compile

    def recording(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)

    add_one._compiler.compile = recording
    return add_one, seen


def test_compile_runs_with_the_collector_paused_and_restores_it():
    fn, seen = _dispatcher_recording_gc_state()
    assert pause_gc_in_compiles({"fn": fn, "other": 3}) == 1
    assert pause_gc_in_compiles({"fn": fn}) == 0  # wrapped once
    assert gc.isenabled()
    assert fn(np.float64(1.5)) == 2.5
    assert seen == [False] and gc.isenabled()
    fn(np.int64(2))  # a second signature compiles again, paused again
    assert seen == [False, False] and gc.isenabled()


def test_a_caller_that_switched_the_collector_off_keeps_it_off():
    fn, seen = _dispatcher_recording_gc_state()
    pause_gc_in_compiles({"fn": fn})
    gc.disable()
    try:
        fn(np.float64(1.0))
        assert seen == [False] and not gc.isenabled()
    finally:
        gc.enable()


def test_a_failing_compile_restores_the_collector():
    @njit(cache=False)
    def bad(x):  # pragma: no cover - compiled
        return x.no_such_attribute

    pause_gc_in_compiles({"bad": bad})
    with pytest.raises(Exception, match="no_such_attribute"):
        bad(np.float64(1.0))
    assert gc.isenabled()


def test_every_kernel_dispatcher_compiles_with_the_collector_paused():
    n = 0
    for mod in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"lhotse_amt.kernels.{mod.name}")
        for value in vars(module).values():
            if isinstance(value, Dispatcher) and value.py_func.__module__ == module.__name__:
                assert getattr(value._compiler.compile, "gc_paused", False), value
                n += 1
    assert n > 50

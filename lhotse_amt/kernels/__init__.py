"""Compiled kernels: numba (CPU) and Triton (CUDA) implementations of the sequential
recursions, each with the semantics of a plain-torch reference in
:mod:`lhotse_amt.functional`.

The environment switches of the kernels are read here, once: ``LHOTSE_AMT_SIMD=0``
selects the channel-vectorised CPU kernels instead of the register (SIMD) kernels
(:data:`SIMD`); ``TRITON_INTERPRET=1`` runs the Triton kernels in Triton's CPU interpreter
(:func:`triton_interpreted`, tests).

Compiled CPU kernels are cached on disk by numba (``cache=True``): next to the sources
(``__pycache__``) where the package directory is writable, else in the user's cache
directory (numba's fallback, e.g. ``~/.cache/numba``); ``NUMBA_CACHE_DIR`` chooses the
directory. ``lhotse-amt amt warmup`` fills the cache, e.g. when building a container image.
A warm process loads the cached specialisations without numba's refresh of its whole CPU
target (:mod:`lhotse_amt.kernels.cache_load`), and a cache miss compiles with Python's
garbage collector paused (:mod:`lhotse_amt.kernels.compile_gc`): each module of this
package has its numba dispatchers switched to both as it is imported.

Importing the package leaves numba's settings alone. :func:`use_fork_safe_threading`
(called by the ``lhotse-amt`` CLI) makes numba prefer threading layers that survive
``fork``; :func:`skip_exit_collection` (also called by the CLI) spares a process the
garbage collections of its exit.
"""

import atexit
import functools
import gc
import os
import sys
import types
from typing import Any

#: numba's threading layers in the order :func:`use_fork_safe_threading` prefers them
FORK_SAFE_PRIORITY = ["tbb", "workqueue", "omp"]


def use_fork_safe_threading() -> bool:
    """Make numba prefer threading layers that survive ``fork``: TBB (the ``tbb`` package),
    then numba's own work-queue, GNU OpenMP last, since a process that ran OpenMP threads
    cannot fork safely (forked ``DataLoader`` workers or Lhotse's ``--num-jobs`` workers
    that compute features would abort). Numba's own order puts OpenMP second; where TBB is
    installed both orders pick TBB.

    Numba picks its layer when the process first runs a parallel kernel, so call this
    before the first feature extraction. ``NUMBA_THREADING_LAYER`` in the environment
    wins over the priority.

    Returns:
        Whether the priority decides the layer (False: ``NUMBA_THREADING_LAYER`` is set, or
        numba already started its threads with another order).
    """
    import numba
    from numba.np.ufunc import parallel

    if not parallel._is_initialized:
        numba.config.THREADING_LAYER_PRIORITY = list(FORK_SAFE_PRIORITY)
    return (
        list(numba.config.THREADING_LAYER_PRIORITY) == FORK_SAFE_PRIORITY
        and "NUMBA_THREADING_LAYER" not in os.environ
    )


_EXIT_HOOK: list[bool] = []  # True once skip_exit_collection registered its hook


def skip_exit_collection() -> bool:
    """Freeze the garbage collector at interpreter exit (:func:`gc.freeze` as an
    :mod:`atexit` hook), so that the exit's collections skip every object alive then.

    Compiles run with the collector paused (:mod:`lhotse_amt.kernels.compile_gc`), and
    their cyclic garbage, with the objects numba keeps, is otherwise walked and freed at
    exit: measured after a first 1-s extract of ``amt-glasberg2002``, the exit took
    0.9-1.2 CPU-s with an empty kernel cache and 0.65 with a warm one, ~0.2 with this hook.
    With it the operating system takes that memory back instead; finalisers of objects in
    reference cycles do not run at exit (objects freed by reference counting, open files
    of live objects and other ``atexit`` hooks are unaffected). A process-wide opt-in for
    programs that exit when their work is done (the ``lhotse-amt`` command line turns it
    on); importing the package does not. Returns True if this call registered the hook
    (later calls do nothing)."""
    if _EXIT_HOOK:
        return False
    atexit.register(gc.freeze)
    _EXIT_HOOK.append(True)
    return True


#: register (SIMD) kernels where they apply; ``LHOTSE_AMT_SIMD=0``: the channel-vectorised ones
SIMD = os.environ.get("LHOTSE_AMT_SIMD", "1") != "0"


def triton_interpreted() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def triton_module() -> Any:
    """The ``triton`` module, imported at the first call (``None`` where Triton is not
    installed or does not import). Importing Triton costs about a tenth of a CPU-second,
    which a process that only runs the CPU kernels does not pay."""
    try:
        import triton
        import triton.language  # noqa: F401
    except Exception:  # pragma: no cover - depends on the installation
        return None
    return triton


class _KernelsPackage(types.ModuleType):
    """This package's module class: importing a submodule binds it here as an attribute
    (the import system's ``setattr(parent, name, submodule)``, after the submodule ran),
    and then its numba dispatchers are switched to loading their cached specialisations
    directly (:func:`lhotse_amt.kernels.cache_load.load_directly`) and to compiling with
    the garbage collector paused (:func:`lhotse_amt.kernels.compile_gc.pause_gc_in_compiles`)."""

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        if (
            isinstance(value, types.ModuleType)
            and value.__name__ == f"{self.__name__}.{name}"
            and "numba" in sys.modules  # a module without numba has no dispatcher
        ):
            from .cache_load import load_directly
            from .compile_gc import pause_gc_in_compiles

            load_directly(vars(value))
            pause_gc_in_compiles(vars(value))


sys.modules[__name__].__class__ = _KernelsPackage

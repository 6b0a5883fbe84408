"""Loading the kernels' cached specialisations without numba's target refresh.

Before numba loads a specialisation from its on-disk cache it refreshes its whole CPU
target (``FunctionCache.load_overload`` calls ``target_context.refresh()``): it imports
every lowering module of numba (``numba.np.arraymath`` imports ``scipy.linalg`` to probe
for BLAS) and installs all typing and lowering registries. In a process whose kernels all
come from the cache that is most of its start-up beyond PyTorch's (about 0.4 CPU-s, plus
the garbage collections of the ~60,000 objects it creates), yet a cached specialisation
needs none of it: its machine code is linked against numba's runtime (NRT), its C helpers
and the C maths library, which numba registers when it creates the target context and
initialises its runtime, and against the hash secret of string hashing, which the one
lowering module that registers symbols as it is imported (``numba.cpython.hashing``)
provides.

:class:`DirectLoadCache` is numba's ``FunctionCache`` (same files, index and keys, same
saving) whose ``load_overload`` initialises numba's runtime and imports
``numba.cpython.hashing``, as the refresh would, and loads the specialisation without the
refresh (so every symbol the refresh would have registered is there). A compile still
refreshes the target (numba's compiler does so itself), so a cache miss compiles exactly
as before; a cached specialisation is the same machine code either way.

:func:`load_directly` switches the module-level numba dispatchers of a namespace to it;
:mod:`lhotse_amt.kernels` applies it to each of its modules as it is imported. Nothing of
numba's own state or classes is changed: only the cache objects of the package's
dispatchers. Where numba's internals differ from those this relies on (checked here), the
dispatchers keep numba's own loading.
"""

from __future__ import annotations

from typing import Any

from numba.core.caching import FunctionCache
from numba.core.dispatcher import Dispatcher

try:
    from numba.core.runtime.nrt import rtsys
except ImportError:  # pragma: no cover - depends on the numba version
    rtsys = None

__all__ = ["SUPPORTED", "DirectLoadCache", "load_directly"]

#: whether numba's cache has the structure :class:`DirectLoadCache` relies on
SUPPORTED = (
    rtsys is not None
    and hasattr(rtsys, "initialize")
    and all(
        hasattr(FunctionCache, a)
        for a in ("load_overload", "_load_overload", "_guard_against_spurious_io_errors")
    )
)


class DirectLoadCache(FunctionCache):
    """numba's on-disk cache of one function, loading a cached specialisation without
    first refreshing numba's CPU target (see the module docstring)."""

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        # the symbols the refresh would provide to cached code: the runtime's (NRT_*) and
        # the hash secret (an unresolved symbol would abort the process at linking)
        rtsys.initialize(target_context)
        import numba.cpython.hashing  # noqa: F401

        with self._guard_against_spurious_io_errors():
            return self._load_overload(sig, target_context)


def load_directly(namespace: dict[str, Any]) -> int:
    """Make the numba dispatchers among the values of ``namespace`` (a module's globals)
    load their cached specialisations through :class:`DirectLoadCache`; returns how many
    were switched. Dispatchers without an on-disk cache, or with another cache class, are
    left alone, as is everything where :data:`SUPPORTED` is false."""
    if not SUPPORTED:
        return 0
    n = 0
    for value in list(namespace.values()):
        if isinstance(value, Dispatcher):
            cache = getattr(value, "_cache", None)
            if type(cache) is FunctionCache:
                cache.__class__ = DirectLoadCache
                n += 1
    return n

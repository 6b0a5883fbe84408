"""The process-wide settings the benchmark figures are measured with, the ones the
``lhotse-amt`` CLI turns on and the package leaves off by default: PyTorch's transparent
huge pages for large CPU tensors and the package's host cache (a quarter of the physical
memory per process). Import this module before the first tensor is made; they are set
through the environment (unless already set there), so the benchmarks' child processes
get them too. Numba's threading layer is left to numba (TBB where it is installed, which
is the layer :func:`lhotse_amt.use_fork_safe_threading` picks first).
"""

import os

os.environ.setdefault("THP_MEM_ALLOC_ENABLE", "1")
os.environ.setdefault(
    "LHOTSE_AMT_HOST_CACHE_MB",
    str(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 4 // 2**20),
)

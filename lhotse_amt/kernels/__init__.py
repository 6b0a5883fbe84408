"""Compiled kernels: numba (CPU) and Triton (CUDA) implementations of the sequential
recursions, each with the semantics of a plain-torch reference in
:mod:`lhotse_amt.functional`.

The environment switches of the kernels are read here, once: ``LHOTSE_AMT_SIMD=0``
selects the channel-vectorised CPU kernels instead of the register (SIMD) kernels
(:data:`SIMD`); ``TRITON_INTERPRET=1`` runs the Triton kernels in Triton's CPU interpreter
(:func:`triton_interpreted`, tests).

Numba's threading layer: TBB (the ``tbb`` package) is preferred, then numba's own
work-queue; GNU OpenMP comes last because a process that used it cannot ``fork`` safely
(DataLoader workers would abort). ``NUMBA_THREADING_LAYER`` set by the user wins.
"""

import os

import numba

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER_PRIORITY = ["tbb", "workqueue", "omp"]

#: register (SIMD) kernels where they apply; ``LHOTSE_AMT_SIMD=0``: the channel-vectorised ones
SIMD = os.environ.get("LHOTSE_AMT_SIMD", "1") != "0"


def triton_interpreted() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"

"""Compiled kernels: numba (CPU) and Triton (CUDA) implementations of the sequential
recursions, each with the semantics of a plain-torch reference in
:mod:`lhotse_amt.functional`.

Numba's threading layer: TBB (the ``tbb`` package) is preferred, then numba's own
work-queue; GNU OpenMP comes last because a process that used it cannot ``fork`` safely
(DataLoader workers would abort). ``NUMBA_THREADING_LAYER`` set by the user wins.
"""

import os

import numba

if "NUMBA_THREADING_LAYER" not in os.environ:
    numba.config.THREADING_LAYER_PRIORITY = ["tbb", "workqueue", "omp"]

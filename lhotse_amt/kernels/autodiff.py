"""CPU kernels (numba) of the differentiable recursion operators in :mod:`lhotse_amt.ops`:
what they share (this module) and one module per operator:
:mod:`~lhotse_amt.kernels.sos_grad` (second-order sections),
:mod:`~lhotse_amt.kernels.resonator_grad` (complex one-pole cascades) and
:mod:`~lhotse_amt.kernels.adaptation_grad` (adaptation loops).

Each operator has a forward kernel and a backward kernel. Rows are independent: output
row ``r`` reads input row ``xrow[r]`` and coefficient row ``crow[r]`` (broadcasting
without copies: a filterbank reads one input row for many channels). Every recursion runs
in float64 whatever the tensor dtype.

**Backward.** A recursion's backward is its adjoint recursion run backwards in time. It
needs the forward's internal values (section signals, pole-section states, loop states),
which are *recomputed* block-wise instead of saved: a first forward pass stores only the
states at the start of every block of :data:`CHECKPOINT_BLOCK` samples; then, from the
last block to the first, the block's internal values are recomputed from its checkpoint
into a buffer of ``CHECKPOINT_BLOCK`` samples and the adjoint recursion runs back over
it. A row's backward therefore costs about two forward passes and one adjoint pass, and
its memory is ``O(CHECKPOINT_BLOCK)`` per thread plus ``O(T / CHECKPOINT_BLOCK)``
checkpoints, independent of the signal length.

The host side (argument conversion, output buffers, launch) is shared by the numba and
the Triton kernels: :mod:`lhotse_amt.kernels.rows`.

Gradients of coefficients are accumulated per output row (the operator sums rows that
share a coefficient row); the input gradient is written per output row (the operator sums
rows that share an input row).
"""

from __future__ import annotations

import numpy as np
from numba import njit
from numba.extending import register_jitable

__all__ = ["CHECKPOINT_BLOCK", "checkpoint_blocks"]

#: numba options of the recursion kernels
KERNEL_OPTS = dict(
    nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"}
)
#: samples per recomputed block of the backward kernels (a checkpoint each)
CHECKPOINT_BLOCK = 512
_CKA = CHECKPOINT_BLOCK


@register_jitable
def checkpoint_blocks(T: int) -> int:
    """Number of checkpoints a forward keeps for the backward of a signal of ``T`` (also
    callable from the kernels)."""
    return (T + _CKA - 1) // _CKA


@njit(inline="always", **KERNEL_OPTS)
def row_blocks(y, W):  # pragma: no cover - compiled
    """The extent of a kernel's rows ``y (R, T)`` (its output or output gradient): ``R``,
    ``T``, the number of lane groups of ``W`` rows and of checkpoint blocks."""
    R, T = y.shape
    return R, T, (R + W - 1) // W, checkpoint_blocks(T)


@njit(inline="always", **KERNEL_OPTS)
def lane_group(R, grp, W, xrow, crow):  # pragma: no cover - compiled
    """Lane group ``grp`` of ``W`` rows of ``R`` (padding lanes repeat the last row): its
    first row ``r0``, its number of rows ``nr`` and per lane the row, its input row
    ``xrow[row]`` and its coefficient row ``crow[row]`` (``(W,)`` int64 each)."""
    r0 = grp * W
    nr = min(W, R - r0)
    rows = np.empty(W, np.int64)
    xr = np.empty(W, np.int64)
    cr = np.empty(W, np.int64)
    for k in range(W):
        r = r0 + min(k, nr - 1)
        rows[k] = r
        xr[k] = xrow[r]
        cr[k] = crow[r]
    return r0, nr, rows, xr, cr

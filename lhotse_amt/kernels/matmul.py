"""Matrix product with a fixed reduction order (numba), for the loudness models' spectra and
excitation patterns.

``torch``'s CPU matrix product (MKL) splits its work by the number of intra-op threads, and
with it the order in which each output element's terms are summed, so its results change in
the last bits with ``torch.set_num_threads``. Its OpenMP workers also synchronise at the end
of every product; on a machine whose cores are busy with other processes a worker that has
been descheduled makes the others spin until it runs again, which made many small products
(hundreds per second of audio) about 20 times more expensive in CPU time than one thread.

:func:`matmul` computes every output element as the chain of fused multiply-adds
``((0 + a[i, 0] b[0, j]) + a[i, 1] b[1, j]) + ...`` in ascending ``k``, whatever the blocking
and whatever the number of threads, so its results are bitwise the same for every thread
count. The product is computed in blocks of 4 rows x 512 columns; in a block four rows and
four ``k`` terms are combined per pass over the columns, so each output element is loaded
and stored once per four terms (speed within ~1.0-1.4x of MKL on one core for the shapes of
the loudness models: 128-2000 rows, inner dimensions 32-960).

It runs on the calling thread. The loudness models call it a few times per 128 frames, each
call ~0.05-5 ms of work: too little to share out without a synchronisation per call, which on
a machine whose cores are busy elsewhere costs more than it saves (a parallel version of this
kernel, blocks as ``prange`` tasks, cost 2.5-4x the CPU time of one thread there). Parallelism
belongs to the caller, over batch items or worker processes.
"""

from __future__ import annotations

import numpy as np
from numba import from_dtype, njit, types

from .fastmath import (
    KERNEL_OPTS,
    assume_distinct_arrays,
    denormals_off,
    prefer_wide_vectors,
    restore_fp_mode,
)

__all__ = ["matmul"]

_ROWS = 4  # rows per block
_COLS = 512  # columns per block


@njit(**KERNEL_OPTS)
def _matmul_serial(a, b, out):  # pragma: no cover - compiled
    # M and K multiples of 4 (matmul pads): blocks of 4 rows x 512 columns, four k terms per
    # pass over the columns (unsigned column indices: no wraparound code, the column loops
    # vectorise), each element's chain in ascending k. Written out in one function with no
    # remainder loops: numba's inlining of helper functions (and a separate compile of each)
    # cost more compile time at a process's first product than the whole kernel; so does the
    # min builtin (compiled as a function of its own), and every loop costs compile time in
    # each of the two specialisations (float32 and float64)
    assume_distinct_arrays()
    prefer_wide_vectors()
    fp = denormals_off()
    M, K = a.shape
    N = b.shape[1]
    nc = (N + _COLS - 1) // _COLS
    for t in range(M // _ROWS * nc):
        i = (t // nc) * _ROWS
        j0 = (t % nc) * _COLS
        j1 = j0 + _COLS
        j1 = N if N < j1 else j1
        n = np.uint64(j1 - j0)
        uj0 = np.uint64(j0)
        o0 = out[i]
        o1 = out[i + 1]
        o2 = out[i + 2]
        o3 = out[i + 3]
        r0 = a[i]
        r1 = a[i + 1]
        r2 = a[i + 2]
        r3 = a[i + 3]
        for j in range(n):
            jj = uj0 + j
            o0[jj] = 0.0
            o1[jj] = 0.0
            o2[jj] = 0.0
            o3[jj] = 0.0
        for k in range(0, K, 4):
            b0 = b[k]
            b1 = b[k + 1]
            b2 = b[k + 2]
            b3 = b[k + 3]
            a00, a01, a02, a03 = r0[k], r0[k + 1], r0[k + 2], r0[k + 3]
            a10, a11, a12, a13 = r1[k], r1[k + 1], r1[k + 2], r1[k + 3]
            a20, a21, a22, a23 = r2[k], r2[k + 1], r2[k + 2], r2[k + 3]
            a30, a31, a32, a33 = r3[k], r3[k + 1], r3[k + 2], r3[k + 3]
            for j in range(n):
                jj = uj0 + j
                x0 = b0[jj]
                x1 = b1[jj]
                x2 = b2[jj]
                x3 = b3[jj]
                # o[jj] += c0 x0 + c1 x1 + c2 x2 + c3 x3, one term after the other
                o0[jj] = (((o0[jj] + a00 * x0) + a01 * x1) + a02 * x2) + a03 * x3
                o1[jj] = (((o1[jj] + a10 * x0) + a11 * x1) + a12 * x2) + a13 * x3
                o2[jj] = (((o2[jj] + a20 * x0) + a21 * x1) + a22 * x2) + a23 * x3
                o3[jj] = (((o3[jj] + a30 * x0) + a31 * x1) + a32 * x2) + a33 * x3
    restore_fp_mode(fp)


#: dtype -> the compiled ``_matmul_serial`` for (any-layout ``a``, C-contiguous ``b``, ``out``)
_SERIAL: dict = {}


def _serial_kernel(dtype: np.dtype):
    """The one specialisation per dtype: ``a`` typed as any layout (it is read by scalar
    loads only), so contiguous and strided ``a`` share one compile instead of two."""
    fn = _SERIAL.get(dtype)
    if fn is None:
        ty = from_dtype(dtype)
        sig = (types.Array(ty, 2, "A"), types.Array(ty, 2, "C"), types.Array(ty, 2, "C"))
        _matmul_serial.compile(sig)
        fn = _SERIAL[dtype] = _matmul_serial.overloads[sig].entry_point
    return fn


def matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """``a @ b`` with a fixed reduction order: bitwise the same for every thread count.

    Args:
        a: ``(M, K)`` float32 or float64, any strides (e.g. a sliding-window view).
        b: ``(K, N)``, same dtype (made C-contiguous if it is not).
        out: optional C-contiguous ``(M, N)`` result array of that dtype (must not overlap
            ``a`` or ``b``).

    Returns:
        ``out``: element ``(i, j)`` is the fused multiply-add chain over ``k = 0 .. K - 1``
        (subnormal intermediate values are flushed to zero).
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) @ (K, N), got {a.shape} @ {b.shape}")
    if a.dtype != b.dtype or a.dtype not in (np.float32, np.float64):
        raise TypeError(f"matmul needs two float32 or two float64 arrays, got {a.dtype}, {b.dtype}")
    b = np.ascontiguousarray(b)
    M, K = a.shape
    N = b.shape[1]
    if out is None:
        out = np.empty((M, N), dtype=a.dtype)
    elif out.shape != (M, N) or out.dtype != a.dtype or not out.flags.c_contiguous:
        raise ValueError(
            f"out must be a C-contiguous {a.dtype} array of shape {(M, N)}, got "
            f"{out.dtype} {out.shape}"
        )
    if M == 0 or N == 0:
        return out
    if K == 0:
        out[...] = 0.0
        return out
    if K % 4:  # zero terms at the end of every chain: the same values
        ap = np.zeros((M, K + 4 - K % 4), a.dtype)
        ap[:, :K] = a
        bp = np.zeros((ap.shape[1], N), a.dtype)
        bp[:K] = b
        a, b = ap, bp
    fn = _serial_kernel(a.dtype)
    m4 = M - M % _ROWS
    if m4:
        fn(a[:m4], b, out[:m4])
    if m4 < M:  # the last rows in a zero-padded block of four
        at = np.zeros((_ROWS, a.shape[1]), a.dtype)
        at[: M - m4] = a[m4:]
        ot = np.empty((_ROWS, N), a.dtype)
        fn(at, b, ot)
        out[m4:] = ot[: M - m4]
    return out

"""Triton kernels (CUDA) of the strided FIR operator ``lhotse_amt::strided_fir`` and its
backward (Paulick et al. 2024's decimation of the IHC output).

Same functions, arguments, results and semantics as the numba kernels of
:mod:`lhotse_amt.kernels.fir_grad`: ``y[r, i] = sum_k w[k] x[r, start + i stride + k]``
with float64 accumulation whatever the tensor dtype, the input gradient
``dL/dx[r, t] = sum_i w[t - start - i stride] g[r, i]`` and the per-row tap gradients
``dL/dw[r, k] = sum_i g[r, i] x[r, start + i stride + k]``.

Nothing runs sequentially in time, so the lanes of a program run along the outputs (or
the input samples, or the taps) of one row instead of across rows
(:mod:`lhotse_amt.kernels.triton_common` describes the recursions' layout):

* forward: one program per block of ``BLOCK_OUT`` outputs of a row, the taps in order
  (each output has the CPU kernel's summation order);
* input gradient: one program per block of ``BLOCK_OUT`` input samples of a row; each
  sample gathers the ``ceil(K / stride)`` outputs that read it, in ascending order (the
  CPU kernel's order);
* tap gradients: one program per chunk of ``CHUNK`` outputs and block of taps of a row,
  lanes along the taps (coalesced loads); the chunks' partial sums are added by one
  reduction afterwards.

One launch per forward; one per gradient asked for (and the partial sums' reduction).
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["fir_forward", "fir_backward"]

#: outputs (forward) or input samples (input gradient) per program
BLOCK_OUT = 128
#: outputs per program of the tap gradients
CHUNK = 256
#: taps per program of the tap gradients, at most
BLOCK_TAPS = 128

if HAVE_TRITON:

    @triton.jit
    def _fir_fwd_kernel(x_ptr, w_ptr, y_ptr, Tx, n_out, K, start, stride, BO: tl.constexpr):
        r = tl.program_id(0).to(tl.int64)
        i = tl.program_id(1) * BO + tl.arange(0, BO)
        im = i < n_out
        xp = x_ptr + r * Tx + start + i.to(tl.int64) * stride
        acc = tl.zeros([BO], tl.float64)
        for k in range(K):
            acc += tl.load(w_ptr + k) * tl.load(xp + k, mask=im, other=0.0).to(tl.float64)
        tl.store(y_ptr + r * n_out + i, acc.to(y_ptr.dtype.element_ty), mask=im)

    @triton.jit
    def _fir_gx_kernel(
        g_ptr, w_ptr, gx_ptr, Tx, n_out, K, start, stride, NJ, BO: tl.constexpr
    ):  # fmt: skip
        # input sample t is read by the outputs i = lo ... hi with 0 <= t - start - i
        # stride < K (at most NJ = ceil(K / stride) of them)
        r = tl.program_id(0).to(tl.int64)
        t = tl.program_id(1) * BO + tl.arange(0, BO)
        u = t - start
        uc = tl.maximum(u, 0)
        lo = (tl.maximum(u - K + 1, 0) + stride - 1) // stride
        hi = tl.minimum(uc // stride, n_out - 1)
        ok = (u >= 0) & (t < Tx)
        gp = g_ptr + r * n_out
        acc = tl.zeros([BO], tl.float64)
        for j in range(NJ):
            i = lo + j
            m = ok & (i <= hi)
            wk = tl.load(w_ptr + (uc - i * stride), mask=m, other=0.0)
            acc += wk * tl.load(gp + i, mask=m, other=0.0).to(tl.float64)
        tl.store(gx_ptr + r * Tx + t, acc.to(gx_ptr.dtype.element_ty), mask=t < Tx)

    @triton.jit
    def _fir_gw_kernel(
        g_ptr, x_ptr, part_ptr, Tx, n_out, K, start, stride, CI: tl.constexpr, BK: tl.constexpr
    ):  # fmt: skip
        # part (R, n_chunks, K) float64: chunk c's sum over its outputs i of g[r, i]
        # x[r, start + i stride + k]
        r = tl.program_id(0).to(tl.int64)
        c = tl.program_id(1)
        k = tl.program_id(2) * BK + tl.arange(0, BK)
        km = k < K
        i0 = c * CI
        xp = x_ptr + r * Tx + start + i0.to(tl.int64) * stride + k
        gp = g_ptr + r * n_out + i0
        acc = tl.zeros([BK], tl.float64)
        for _i in range(tl.minimum(CI, n_out - i0)):
            acc += tl.load(gp).to(tl.float64) * tl.load(xp, mask=km, other=0.0).to(tl.float64)
            gp += 1
            xp += stride
        tl.store(part_ptr + (r * tl.num_programs(1) + c) * K + k, acc, mask=km)


def fir_forward(
    x: torch.Tensor, w: torch.Tensor, start: int, stride: int, n_out: int, block: int = BLOCK_OUT
) -> torch.Tensor:
    """Triton version of :func:`lhotse_amt.kernels.fir_grad.fir_forward`: ``x (R, Tx)``,
    taps ``w (K,)`` -> ``y (R, n_out)`` in ``x``'s dtype."""
    tc.require()
    R, Tx = x.shape
    y = torch.empty((R, n_out), dtype=x.dtype, device=x.device)
    if R > 0 and n_out > 0:
        _fir_fwd_kernel[(R, triton.cdiv(n_out, block))](
            tc.dense(x), tc.f64(w), y, Tx, n_out, w.shape[0], start, stride, BO=block
        )
    return y


def fir_backward(
    g: torch.Tensor,
    x: torch.Tensor,
    w: torch.Tensor,
    start: int,
    stride: int,
    want_x: bool,
    want_w: bool,
    block: int = BLOCK_OUT,
    chunk: int = CHUNK,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`lhotse_amt.kernels.fir_grad.fir_backward`: ``gx (R, Tx)``
    in ``x``'s dtype (``(R, 0)`` unless ``want_x``) and the per-row ``gw (R, K)`` float64
    (``(R, 0)`` unless ``want_w``)."""
    tc.require()
    R, Tx = x.shape
    K = w.shape[0]
    n_out = g.shape[1]
    dev = x.device
    live = R > 0 and n_out > 0
    if not want_x:
        gx = torch.empty((R, 0), dtype=x.dtype, device=dev)
    elif live:
        gx = torch.empty((R, Tx), dtype=x.dtype, device=dev)
        _fir_gx_kernel[(R, triton.cdiv(Tx, block))](
            tc.dense(g), tc.f64(w), gx, Tx, n_out, K, start, stride, triton.cdiv(K, stride),
            BO=block,
        )  # fmt: skip
    else:
        gx = torch.zeros((R, Tx), dtype=x.dtype, device=dev)
    if not want_w:
        gw = torch.empty((R, 0), dtype=torch.float64, device=dev)
    elif live:
        nc = triton.cdiv(n_out, chunk)
        bk = min(triton.next_power_of_2(K), BLOCK_TAPS)
        part = torch.empty((R, nc, K), dtype=torch.float64, device=dev)
        _fir_gw_kernel[(R, nc, triton.cdiv(K, bk))](
            tc.dense(g), tc.dense(x), part, Tx, n_out, K, start, stride, CI=chunk, BK=bk
        )
        gw = part.sum(1)
    else:
        gw = torch.zeros((R, K), dtype=torch.float64, device=dev)
    return gx, gw

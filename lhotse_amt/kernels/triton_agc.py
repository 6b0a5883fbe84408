"""Triton kernels (CUDA) of the attack/release AGC operator ``lhotse_amt::agc`` and its
backward.

Same arguments, results and semantics as the numba kernels of
:mod:`lhotse_amt.kernels.agc_grad`, which document the recursion (Glasberg & Moore 2002,
Sec. 2.6; Moore et al. 2016, Eqs. 4–5) and its adjoint. The AGC runs along axis 1 of
``x (B, T, C)``; one program handles a block of columns ``(b, c)`` (flattened, so that
neighbouring channels are neighbouring lanes and the loads are coalesced) and walks
through time. The forward computes in the dtype of ``x`` without contracting
multiply-adds (``enable_fp_fusion=False``), so its values are those of the CPU kernel and
of the plain-torch reference bit for bit; the backward reads the states back from the
forward's output ``y`` (no checkpoint, no recomputation) and runs the adjoint in float64.
One launch per call.
"""

from __future__ import annotations

from .agc_grad import AgcKernels
from .triton_common import HAVE_TRITON, require

if HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["agc_forward", "agc_backward"]

#: columns per program
BLOCK_COLS = 64

if HAVE_TRITON:

    @triton.jit
    def _columns(n_col, T, C, BLOCK: tl.constexpr):
        # the program's columns of (B, C), their mask and their first sample in (B, T, C)
        col = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        cm = col < n_col
        col = tl.minimum(col, n_col - 1).to(tl.int64)
        base = (col // C) * T * C + col % C
        return col, cm, base

    @triton.jit
    def _agc_fwd_kernel(x_ptr, at_ptr, rl_ptr, zi_ptr, y_ptr, n_col, T, C, BLOCK: tl.constexpr):
        col, cm, base = _columns(n_col, T, C, BLOCK)
        at = tl.load(at_ptr + col)
        rl = tl.load(rl_ptr + col)
        s = tl.load(zi_ptr + col)
        p = base
        for _t in range(T):
            v = tl.load(x_ptr + p)
            a = tl.where(v > s, at, rl)
            s = s + a * (v - s)
            tl.store(y_ptr + p, s, mask=cm)
            p += C

    @triton.jit
    def _agc_bwd_kernel(
        gy_ptr, x_ptr, y_ptr, at_ptr, rl_ptr, zi_ptr, gx_ptr, ga_ptr, gr_ptr, gzi_ptr,
        n_col, T, C, WANT_X: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # adjoint backwards in time; the state before frame t is y[t - 1] (zi at t = 0)
        col, cm, base = _columns(n_col, T, C, BLOCK)
        at = tl.load(at_ptr + col).to(tl.float64)
        rl = tl.load(rl_ptr + col).to(tl.float64)
        zi = tl.load(zi_ptr + col)
        lam = tl.zeros([BLOCK], tl.float64)
        gat = tl.zeros([BLOCK], tl.float64)
        grl = tl.zeros([BLOCK], tl.float64)
        p = base + (T - 1) * C
        for tt in range(T):
            first = tt == T - 1
            sp = tl.load(y_ptr + tl.where(first, base, p - C))
            sp = tl.where(first, zi, sp)
            v = tl.load(x_ptr + p)
            lt = lam + tl.load(gy_ptr + p).to(tl.float64)
            d = lt * (v.to(tl.float64) - sp.to(tl.float64))
            hit = v > sp
            a = tl.where(hit, at, rl)
            gat += tl.where(hit, d, 0.0)
            grl += tl.where(hit, 0.0, d)
            if WANT_X:
                tl.store(gx_ptr + p, (a * lt).to(gx_ptr.dtype.element_ty), mask=cm)
            lam = (1.0 - a) * lt
            p -= C
        tl.store(ga_ptr + col, gat, mask=cm)
        tl.store(gr_ptr + col, grl, mask=cm)
        tl.store(gzi_ptr + col, lam, mask=cm)


def _fwd(x, attack, release, zi, y, block: int = BLOCK_COLS) -> None:
    B, T, C = x.shape
    _agc_fwd_kernel[(triton.cdiv(B * C, block),)](
        x, attack, release, zi, y, B * C, T, C, BLOCK=block, num_warps=1, enable_fp_fusion=False
    )


def _bwd(gy, x, y, attack, release, zi, gx, ga, gr, gzi, want_x, block=BLOCK_COLS) -> None:
    B, T, C = x.shape
    _agc_bwd_kernel[(triton.cdiv(B * C, block),)](
        gy, x, y, attack, release, zi, gx, ga, gr, gzi, B * C, T, C, WANT_X=want_x, BLOCK=block,
        num_warps=1,
    )  # fmt: skip


KERNELS = AgcKernels(_fwd, _bwd, require)
#: Triton version of :data:`lhotse_amt.kernels.agc_grad.agc_forward` (same arguments and
#: results; option ``block``: columns per program)
agc_forward = KERNELS.forward
#: Triton version of :data:`lhotse_amt.kernels.agc_grad.agc_backward`
agc_backward = KERNELS.backward

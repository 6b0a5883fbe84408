"""Triton kernels (CUDA) of the broken-stick compression operator
``lhotse_amt::broken_stick`` (:mod:`lhotse_amt.ops.compression`): forward and analytic
backward, one elementwise pass each (King et al. 2019, eq. 1).

Same functions, arguments and results as the CPU kernels
(:func:`lhotse_amt.kernels.compression.broken_stick_forward`,
:func:`~lhotse_amt.kernels.compression.broken_stick_backward`): with the knee ``K`` and the
exponent ``n``, above the knee (``q = |x| / K > 1``, ``r = q^n``) ``y = sign(x) K r``,
``dy/dx = n r / q``, ``dy/dn = y log q``; below it ``y = x``, ``dy/dx = 1``, ``dy/dn = 0``.
Everything is computed in float64 whatever the tensor dtype; the exponent's gradient is
summed per block in float64, the blocks' sums then added by torch. ``TRITON_INTERPRET=1``
runs the kernels on CPU tensors (tests).
"""

from __future__ import annotations

import torch

from . import triton_common as tc

if tc.HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["broken_stick_forward", "broken_stick_backward"]

#: elements per program
_BLOCK = 1024

if tc.HAVE_TRITON:

    @triton.jit
    def _ratio_pow(x, knee, n):
        # q = |x| / K, the clamped ratio max(q, 1), its log and its power n, above the knee
        q = tl.abs(x) / knee
        above = q > 1.0
        qq = tl.where(above, q, 1.0)
        lg = tl.log(qq)
        return above, qq, lg, tl.exp(n * lg)

    @triton.jit
    def _fwd_kernel(x_ptr, y_ptr, N, knee: tl.float64, n: tl.float64, BLOCK: tl.constexpr):
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = i < N
        x = tl.load(x_ptr + i, mask=m, other=0.0).to(tl.float64)
        above, _, _, r = _ratio_pow(x, knee, n)
        y = tl.where(above, tl.where(x < 0.0, -knee * r, knee * r), x)
        tl.store(y_ptr + i, y.to(y_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def _bwd_kernel(
        g_ptr, x_ptr, gx_ptr, gn_ptr, N, knee: tl.float64, n: tl.float64, BLOCK: tl.constexpr
    ):
        i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
        m = i < N
        x = tl.load(x_ptr + i, mask=m, other=0.0).to(tl.float64)
        g = tl.load(g_ptr + i, mask=m, other=0.0).to(tl.float64)
        above, qq, lg, r = _ratio_pow(x, knee, n)
        gx = tl.where(above, g * (n * r / qq), g)
        y = tl.where(x < 0.0, -knee * r, knee * r)
        gn = tl.where(above & m, g * y * lg, 0.0)
        tl.store(gx_ptr + i, gx.to(gx_ptr.dtype.element_ty), mask=m)
        tl.store(gn_ptr + tl.program_id(0), tl.sum(gn, axis=0))


def broken_stick_forward(x: torch.Tensor, exponent: float, knee: float) -> torch.Tensor:
    """The compressed ``x`` (same shape and dtype)."""
    tc.require()
    xc = tc.dense(x)
    y = torch.empty_like(xc)
    N = xc.numel()
    if N:
        _fwd_kernel[(triton.cdiv(N, _BLOCK),)](xc, y, N, float(knee), float(exponent), BLOCK=_BLOCK)
    return y.view(x.shape)


def broken_stick_backward(
    g: torch.Tensor, x: torch.Tensor, exponent: float, knee: float
) -> tuple[torch.Tensor, float]:
    """``(g dy/dx, sum(g dy/dn))``: the input gradient shaped like ``x`` and the exponent's
    gradient (a float64 0-d tensor on ``x``'s device)."""
    tc.require()
    xc, gc = tc.dense(x), tc.dense(g.to(x.dtype))
    gx = torch.empty_like(xc)
    N = xc.numel()
    nb = triton.cdiv(N, _BLOCK)
    parts = torch.zeros(max(nb, 1), dtype=torch.float64, device=xc.device)
    if N:
        _bwd_kernel[(nb,)](gc, xc, gx, parts, N, float(knee), float(exponent), BLOCK=_BLOCK)
    return gx.view(x.shape), parts.sum()

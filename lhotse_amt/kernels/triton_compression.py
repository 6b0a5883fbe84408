"""Triton kernels (CUDA) of the compression operators (:mod:`lhotse_amt.ops.compression`):
forward and analytic backward, one elementwise pass each, of the broken stick
``lhotse_amt::broken_stick`` (King et al. 2019, eq. 1) and of the DRNL compression
``lhotse_amt::drnl_compression`` (Lopez-Poveda & Meddis 2001, eq. 1; the formulas:
:mod:`lhotse_amt.kernels.compression`).

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

__all__ = [
    "broken_stick_forward",
    "broken_stick_backward",
    "drnl_compression_forward",
    "drnl_compression_backward",
]

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

    @triton.jit
    def _drnl_terms(u, ar, br, cm1):
        # |u| bounded below, |u|^(c - 1), t = b |u|^(c - 1), the linear branch (a <= t)
        mag = tl.abs(u)
        bounded = mag < 1e-30
        mag = tl.where(bounded, 1e-30, mag)
        lg = tl.log(mag)
        p = tl.exp(cm1 * lg)
        t = br * p
        return bounded, lg, p, t, ar <= t

    @triton.jit
    def _drnl_fwd_kernel(u_ptr, a_ptr, b_ptr, y_ptr, C, T, cm1: tl.float64, BLOCK: tl.constexpr):
        r = tl.program_id(0)
        i = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
        m = i < T
        off = r.to(tl.int64) * T + i
        ar = tl.load(a_ptr + r % C)
        br = tl.load(b_ptr + r % C)
        u = tl.load(u_ptr + off, mask=m, other=0.0).to(tl.float64)
        _, _, _, t, lin = _drnl_terms(u, ar, br, cm1)
        tl.store(y_ptr + off, (u * tl.where(lin, ar, t)).to(y_ptr.dtype.element_ty), mask=m)

    @triton.jit
    def _drnl_bwd_kernel(
        g_ptr, u_ptr, a_ptr, b_ptr, gu_ptr, s_ptr, C, T, NB, cm1: tl.float64, BLOCK: tl.constexpr
    ):
        r = tl.program_id(0)
        blk = tl.program_id(1)
        i = blk * BLOCK + tl.arange(0, BLOCK)
        m = i < T
        off = r.to(tl.int64) * T + i
        ar = tl.load(a_ptr + r % C)
        br = tl.load(b_ptr + r % C)
        u = tl.load(u_ptr + off, mask=m, other=0.0).to(tl.float64)
        g = tl.load(g_ptr + off, mask=m, other=0.0).to(tl.float64)
        bounded, lg, p, t, lin = _drnl_terms(u, ar, br, cm1)
        d = tl.where(lin, ar, tl.where(bounded, t, t + cm1 * t))
        tl.store(gu_ptr + off, (g * d).to(gu_ptr.dtype.element_ty), mask=m)
        gv = tl.where(m, g * u, 0.0)
        base = (r.to(tl.int64) * NB + blk) * 3
        tl.store(s_ptr + base, tl.sum(tl.where(lin, gv, 0.0), axis=0))
        tl.store(s_ptr + base + 1, tl.sum(tl.where(lin, 0.0, gv * p), axis=0))
        tl.store(s_ptr + base + 2, tl.sum(tl.where(lin, 0.0, gv * t * lg), axis=0))


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


def _drnl_args(u: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> tuple:
    uc = tc.dense(u)
    C, T = a.shape[0], u.shape[-1]
    R = uc.numel() // T if T else 0
    ab = [t.detach().to(device=u.device, dtype=torch.float64).contiguous() for t in (a, b)]
    return uc, *ab, C, T, R


def drnl_compression_forward(
    u: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: float
) -> torch.Tensor:
    """The compressed ``u (..., C, T)`` (same shape and dtype)."""
    tc.require()
    uc, ab, bb, C, T, R = _drnl_args(u, a, b)
    y = torch.empty_like(uc)
    if R and T:
        grid = (R, triton.cdiv(T, _BLOCK))
        _drnl_fwd_kernel[grid](uc, ab, bb, y, C, T, float(c) - 1.0, BLOCK=_BLOCK)
    return y.view(u.shape)


def drnl_compression_backward(
    g: torch.Tensor, u: torch.Tensor, a: torch.Tensor, b: torch.Tensor, c: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dL/du, dL/da, dL/db, dL/dc)`` from ``g = dL/dy``: the first shaped like ``u``,
    the parameters' float64 on ``u``'s device (``(C,)``, ``(C,)``, 0-d); the partial sums
    of each block added by torch."""
    tc.require()
    uc, ab, bb, C, T, R = _drnl_args(u, a, b)
    gc = tc.dense(g.to(u.dtype))
    gu = torch.empty_like(uc)
    nb = triton.cdiv(T, _BLOCK) if T else 0
    parts = torch.zeros((R, max(nb, 1), 3), dtype=torch.float64, device=u.device)
    if R and T:
        _drnl_bwd_kernel[(R, nb)](gc, uc, ab, bb, gu, parts, C, T, nb, float(c) - 1.0, BLOCK=_BLOCK)
    per_channel = parts.sum(1).reshape(-1, C, 3).sum(0)
    return gu.view(u.shape), per_channel[:, 0], per_channel[:, 1], per_channel[:, 2].sum()

"""Triton kernels for the sequential nonlinear recursions on CUDA.

One program handles a block of channels and walks through time; the recursion per
channel is exactly that of the plain-torch reference in :mod:`lhotse_amt.functional`.
Importing this module never fails: without Triton (or without a CUDA device)
:func:`available` is ``False`` and callers fall back to the torch reference. Set
``TRITON_INTERPRET=1`` to run the kernels on the CPU with Triton's interpreter (tests).
"""

from __future__ import annotations

import torch

from . import triton_interpreted

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    _HAVE_TRITON = True
except Exception:  # pragma: no cover
    _HAVE_TRITON = False


def interpreted() -> bool:
    return triton_interpreted()


def available() -> bool:
    """True when the Triton kernels can run (CUDA device, or Triton's CPU interpreter)."""
    return _HAVE_TRITON and (torch.cuda.is_available() or interpreted())


if _HAVE_TRITON:

    @triton.jit
    def _adaptation_kernel(
        x_ptr,
        y_ptr,
        a_ptr,
        m_ptr,
        s_ptr,
        N,
        T,
        minlvl,
        USE_LIMIT: tl.constexpr,
        J: tl.constexpr,
        BJ: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        pid = tl.program_id(0)
        rows = pid * BLOCK + tl.arange(0, BLOCK)
        rmask = rows < N
        cols = tl.arange(0, BJ)
        cmask = cols < J
        m2 = rmask[:, None] & cmask[None, :]
        off2 = rows[:, None] * J + cols[None, :]
        S = tl.load(s_ptr + off2, mask=m2, other=1.0)
        A = tl.load(a_ptr + off2, mask=m2, other=0.0)
        M = tl.load(m_ptr + off2, mask=m2, other=1.0)
        for n in range(0, T):
            v = tl.load(x_ptr + rows * T + n, mask=rmask, other=1.0)
            v = tl.maximum(v, minlvl)
            for j in tl.static_range(J):
                sel = cols[None, :] == j
                sj = tl.sum(tl.where(sel, S, 0.0), axis=1)
                aj = tl.sum(tl.where(sel, A, 0.0), axis=1)
                v = v / sj
                if USE_LIMIT:
                    mj = tl.sum(tl.where(sel, M, 0.0), axis=1)
                    lim = 2.0 * mj / (1.0 + tl.exp(-2.0 * (v - 1.0) / mj)) - (mj - 1.0)
                    v = tl.where(v > 1.0, lim, v)
                sj = aj * sj + (1.0 - aj) * v
                S = tl.where(sel, sj[:, None], S)
            tl.store(y_ptr + rows * T + n, v, mask=rmask)
        tl.store(s_ptr + off2, S, mask=m2)


def adaptation_loops(
    x: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    state: torch.Tensor,
    block: int = 64,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`lhotse_amt.kernels.cpu.adaptation_loops` (same I/O)."""
    if not available():
        raise RuntimeError("Triton kernels need triton and a CUDA device (or TRITON_INTERPRET=1)")
    x = x.contiguous()
    N, T = x.shape
    J = a.shape[-1]
    y = torch.empty_like(x)
    s = state.to(x.dtype).contiguous().clone()
    a = a.to(x.dtype).contiguous()
    m = m.to(x.dtype).contiguous()
    if T > 0 and N > 0:
        bj = max(2, triton.next_power_of_2(J))
        grid = (triton.cdiv(N, block),)
        _adaptation_kernel[grid](x, y, a, m, s, N, T, float(minlvl), bool(use_limit), J, bj, block)
    return y, s

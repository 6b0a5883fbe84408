"""Triton kernel (CUDA) of the stage-wise no-grad Paulick et al. (2024) inner-hair-cell
membrane recursion of :func:`lhotse_amt.kernels.paulick.ihc` (entry point
:func:`lhotse_amt.kernels.paulick.ihc_triton`), one program per block of rows, sequential
in time; ``TRITON_INTERPRET=1`` runs it on CPU tensors (tests).

The recursion runs in the signal's dtype, as the CPU kernel does; its coefficients come
as a small tensor of that dtype (a compiled kernel would take a Python float argument as
float32 and round the coefficients of a float64 signal).

This module imports Triton; the entry points import it at their first call, so a process
that runs only CPU kernels never pays for importing Triton.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .ihc_paulick_grad import IHC_STEP_KEYS

__all__ = ["ihc_paulick"]


@triton.jit
def _ihc_kernel(x_ptr, y_ptr, w_ptr, c_ptr, N, T, BLOCK: tl.constexpr):  # pragma: no cover
    # c: the step constants (IHC_STEP_KEYS) in the signal's dtype, as on the CPU
    pid = tl.program_id(0)
    rows = pid * BLOCK + tl.arange(0, BLOCK)
    rmask = rows < N
    scale, gmax, x0 = tl.load(c_ptr), tl.load(c_ptr + 1), tl.load(c_ptr + 2)
    s0, s1, zmax = tl.load(c_ptr + 3), tl.load(c_ptr + 4), tl.load(c_ptr + 5)
    kk, gkf, gks = tl.load(c_ptr + 6), tl.load(c_ptr + 7), tl.load(c_ptr + 8)
    dep, dkf, dks = tl.load(c_ptr + 9), tl.load(c_ptr + 10), tl.load(c_ptr + 11)
    W = tl.load(w_ptr + rows, mask=rmask, other=0.0)
    for n in range(0, T):
        v = tl.load(x_ptr + rows * T + n, mask=rmask, other=0.0)
        z = tl.minimum(x0 - scale * v, zmax)
        G = gmax / (1.0 + tl.exp(z / s1) * (1.0 + tl.exp(z / s0)))
        W = W + kk * (-G * (W + dep) - gkf * (W + dkf) - gks * (W + dks))
        tl.store(y_ptr + rows * T + n, W, mask=rmask)
    tl.store(w_ptr + rows, W, mask=rmask)


def ihc_paulick(
    x: torch.Tensor, consts: dict[str, float], state: torch.Tensor, block: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """IHC of ``x (..., T)`` from ``state (...)``: ``(y (..., T), new state)``; ``consts``
    from :func:`lhotse_amt.functional.ihc_paulick.ihc_step_constants`."""
    lead = tuple(x.shape[:-1])
    T = x.shape[-1]
    xf = x.reshape(-1, T).contiguous()
    N = xf.shape[0]
    y = torch.empty_like(xf)
    w = state.expand(*lead).reshape(-1).to(xf.dtype).contiguous().clone()
    if T > 0 and N > 0:
        grid = (triton.cdiv(N, block),)
        c = torch.tensor(
            [float(consts[k]) for k in IHC_STEP_KEYS], dtype=xf.dtype, device=xf.device
        )
        _ihc_kernel[grid](xf, y, w, c, N, T, block)
    return y.reshape(*lead, T), w.reshape(*lead)

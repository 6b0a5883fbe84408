"""Triton kernel (CUDA) of the excitation pattern's lower branch, the CUDA kernel of the
operator ``lhotse_amt::excitation_lower``.

For rows ``r`` (frames of all items) and channels ``c`` it computes (Glasberg & Moore
1990, Eq. 4 with the level-dependent lower slope of Moore, Glasberg & Baer 1997, Eq. 5;
Glasberg & Moore 2002, Sec. 2.3)::

    E_low[r, c] = sum_{k < kend(c)} I[r, k] (1 - v) exp(v),   v = max(s h[k, c], -80)

with ``s = s[r, c]`` (per channel, ``per_channel``) or ``s[r, k]`` (per component), the
semantics of :func:`lhotse_amt.functional.loudness.excitation._lower_branch_reference`:
channels in groups of ``group`` (16, or all of them), each group summing over the bins
below its highest centre, ``kend(c) = n_below[last channel of c's group]``.

A program computes a ``(BR, BC)`` tile of the output and loops over the components in
steps of ``BK``, with the ``(BR, BK, BC)`` weights in registers: no ``(rows, K, C)``
tensor is ever stored, so the memory of a call is that of its input and output, and one
launch covers every frame. The arithmetic runs in the input's dtype (float32 or float64);
the sum's order differs from the reference's matrix product (float rounding).
"""

from __future__ import annotations

import torch

from .triton_common import HAVE_TRITON, require

if HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["lower_branch"]

#: rows, components and channels of a program's tile; channels per program must divide
#: the reference's group of 16 channels
BLOCK_ROWS = 32
BLOCK_K = 16
BLOCK_C = 16

if HAVE_TRITON:

    @triton.jit
    def _lower_kernel(
        i_ptr, s_ptr, h_ptr, nb_ptr, o_ptr, R, K, C, G,
        PER_CHANNEL: tl.constexpr, BR: tl.constexpr, BK: tl.constexpr, BC: tl.constexpr,
    ):  # fmt: skip
        # i (R, K), s (R, C) or (R, K), h (K, C), nb (C,) int64, o (R, C)
        r = tl.program_id(0) * BR + tl.arange(0, BR)
        c0 = tl.program_id(1) * BC
        c = c0 + tl.arange(0, BC)
        rm = r < R
        cm = c < C
        r64 = r.to(tl.int64)
        # the bins below the highest centre of the program's group of channels
        kend = tl.load(nb_ptr + tl.minimum((c0 // G + 1) * G, C) - 1).to(tl.int32)
        acc = tl.zeros([BR, BC], dtype=o_ptr.dtype.element_ty)
        if PER_CHANNEL:
            sc = tl.load(s_ptr + r64[:, None] * C + c[None, :], mask=rm[:, None] & cm[None, :],
                         other=0.0)  # fmt: skip
        for k0 in range(0, kend, BK):
            k = k0 + tl.arange(0, BK)
            km = k < kend
            rk = rm[:, None] & km[None, :]
            ik = tl.load(i_ptr + r64[:, None] * K + k[None, :], mask=rk, other=0.0)
            h = tl.load(h_ptr + k[:, None] * C + c[None, :], mask=km[:, None] & cm[None, :],
                        other=0.0)  # fmt: skip
            if PER_CHANNEL:
                v = sc[:, None, :] * h[None, :, :]
            else:
                sk = tl.load(s_ptr + r64[:, None] * K + k[None, :], mask=rk, other=0.0)
                v = sk[:, :, None] * h[None, :, :]
            v = tl.maximum(v, -80.0)
            e = tl.exp(v)
            acc += tl.sum(ik[:, :, None] * (e - v * e), axis=1)
        tl.store(o_ptr + r64[:, None] * C + c[None, :], acc, mask=rm[:, None] & cm[None, :])


def lower_branch(
    intensity: torch.Tensor,
    s: torch.Tensor,
    lower_h: torch.Tensor,
    n_below: torch.Tensor,
    group: int,
    per_channel: bool,
) -> torch.Tensor:
    """The lower branch of ``intensity (R, K)`` with slopes ``s`` ``(R, C)`` (per channel)
    or ``(R, K)``, ``lower_h (K, C)``, ``n_below (C,)`` int64 and channel groups of
    ``group`` (a multiple of :data:`BLOCK_C`, or ``C``) -> ``(R, C)`` in the input's dtype;
    all contiguous on one device, as :func:`lhotse_amt.ops.loudness.excitation_lower`
    passes them."""
    require()
    R, K = intensity.shape
    C = lower_h.shape[1]
    out = torch.empty((R, C), dtype=intensity.dtype, device=intensity.device)
    if R and C:
        grid = (triton.cdiv(R, BLOCK_ROWS), triton.cdiv(C, BLOCK_C))
        _lower_kernel[grid](
            intensity, s, lower_h, n_below, out, R, K, C, int(group),
            PER_CHANNEL=bool(per_channel), BR=BLOCK_ROWS, BK=BLOCK_K, BC=BLOCK_C,
        )  # fmt: skip
    return out

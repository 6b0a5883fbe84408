"""Triton kernels (CUDA) of the rms-matched Hilbert envelope operator
``lhotse_amt::rms_envelope`` and its backward (King et al. 2019's phase insensitivity).

Same functions, arguments, results and semantics as the numba kernels of
:mod:`lhotse_amt.kernels.envelope`, which document the formulas: the elementwise work and
the per-row sums around the Hilbert transforms (the FFTs stay with ``torch.fft``). Row
``(r, s)`` of band ``m = sel[s]``: ``e = sqrt(x^2 + h^2)``, ``out = k e`` with
``k = rms(x) / rms(e)`` (0 where ``e`` is all zero); the other bands are copied. Sums and
arithmetic in float64 whatever the tensor dtype.

Unlike the recursions (one program per block of rows walking through time, see
:mod:`lhotse_amt.kernels.triton_common`), nothing here runs sequentially in time: one
program handles one row of ``x (R, M, T)`` (band ``m`` of batch row ``r``) with its lanes
along time, in chunks of ``BLOCK_T`` samples (coalesced loads); a sum is a per-lane
float64 accumulator reduced once at the end (its order differs from the CPU kernel's by
rounding only). One launch per function call.
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from .envelope import _sel, _slots
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["envelope_forward", "envelope_backward_direct", "envelope_backward_finish"]

#: samples per chunk of a program's row (its lanes)
BLOCK_T = 1024

if HAVE_TRITON:

    @triton.jit
    def _copy_row(src, dst, T, BT: tl.constexpr):
        # T samples from src to dst (same dtype)
        offs = tl.arange(0, BT)
        for t0 in range(0, T, BT):
            idx = t0 + offs
            msk = idx < T
            tl.store(dst + idx, tl.load(src + idx, mask=msk), mask=msk)

    @triton.jit
    def _band_row(slot_ptr, src_ptr, dst_ptr, M, S, T, BT: tl.constexpr):
        # the program's row of x (R, M, T): its slot s in h (R, S, T) (-1: not selected,
        # the row of src (R, M, T) is copied to dst, all there is to do), the offset of its
        # first sample in x, its row hr = r S + s of h (and of stats) and the offset of
        # that row's first sample in h (int64)
        pid = tl.program_id(0)
        s = tl.load(slot_ptr + pid % M)
        hr = ((pid // M) * S + tl.maximum(s, 0)).to(tl.int64)
        xo = pid.to(tl.int64) * T
        if s < 0:
            _copy_row(src_ptr + xo, dst_ptr + xo, T, BT)
        return s, xo, hr, hr * T

    @triton.jit
    def _chunk(xp, hp, t0, T, BT: tl.constexpr):
        # samples t0 ... t0 + BT - 1 of the rows at xp and hp as float64 (0 past T), their
        # indices and mask
        idx = t0 + tl.arange(0, BT)
        msk = idx < T
        a = tl.load(xp + idx, mask=msk, other=0.0).to(tl.float64)
        b = tl.load(hp + idx, mask=msk, other=0.0).to(tl.float64)
        return idx, msk, a, b

    @triton.jit
    def _gain(num, den):
        # k = sqrt(num / den) where den > 0, else 0; and den > 0
        pos = den > 0.0
        return tl.where(pos, tl.sqrt(num / tl.where(pos, den, 1.0)), 0.0), pos

    @triton.jit
    def _env_fwd_kernel(x_ptr, h_ptr, slot_ptr, out_ptr, stats_ptr, M, S, T, BT: tl.constexpr):
        # stats (R, S, 2) float64: (mean(x^2), mean(e^2)) of every selected row
        s, xo, hr, ho = _band_row(slot_ptr, x_ptr, out_ptr, M, S, T, BT)
        if s >= 0:
            xp = x_ptr + xo
            op = out_ptr + xo
            hp = h_ptr + ho
            ax = tl.zeros([BT], tl.float64)
            ah = tl.zeros([BT], tl.float64)
            for t0 in range(0, T, BT):
                _idx, _msk, a, b = _chunk(xp, hp, t0, T, BT)
                ax += a * a
                ah += b * b
            sx = tl.sum(ax, 0)
            se = sx + tl.sum(ah, 0)
            k, _pos = _gain(sx, se)
            tl.store(stats_ptr + hr * 2, sx / T)
            tl.store(stats_ptr + hr * 2 + 1, se / T)
            for t0 in range(0, T, BT):
                idx, msk, a, b = _chunk(xp, hp, t0, T, BT)
                e = tl.sqrt(a * a + b * b)
                tl.store(op + idx, (k * e).to(out_ptr.dtype.element_ty), mask=msk)

    @triton.jit
    def _env_bwd_kernel(
        g_ptr, x_ptr, h_ptr, slot_ptr, stats_ptr, gx_ptr, gh_ptr, M, S, T, BT: tl.constexpr
    ):
        # gx (R, M, T): the gradient of every band but the Hilbert term; gh (R, S, T):
        # dL/de h / e of the selected rows (both 0 on a row whose e is all zero)
        s, xo, hr, ho = _band_row(slot_ptr, g_ptr, gx_ptr, M, S, T, BT)
        if s >= 0:
            gp = g_ptr + xo
            gxp = gx_ptr + xo
            xp = x_ptr + xo
            hp = h_ptr + ho
            ghp = gh_ptr + ho
            mx = tl.load(stats_ptr + hr * 2)
            me = tl.load(stats_ptr + hr * 2 + 1)
            k, pos = _gain(mx, me)
            av = tl.zeros([BT], tl.float64)
            for t0 in range(0, T, BT):
                idx, msk, a, b = _chunk(xp, hp, t0, T, BT)
                gv = tl.load(gp + idx, mask=msk, other=0.0).to(tl.float64)
                av += gv * tl.sqrt(a * a + b * b)
            acc = tl.sum(av, 0)
            c1 = tl.where(pos, acc * k / (T * tl.where(pos, me, 1.0)), 0.0)
            c2 = tl.where(pos & (mx > 0.0), acc * k / (T * tl.where(mx > 0.0, mx, 1.0)), 0.0)
            for t0 in range(0, T, BT):
                idx, msk, a, b = _chunk(xp, hp, t0, T, BT)
                gv = tl.load(gp + idx, mask=msk, other=0.0).to(tl.float64)
                e = tl.sqrt(a * a + b * b)
                ge = k * gv - c1 * e
                inv = tl.where(e > 0.0, 1.0 / tl.where(e > 0.0, e, 1.0), 0.0)
                gxv = tl.where(pos, c2 * a + ge * a * inv, 0.0)
                ghv = tl.where(pos, ge * b * inv, 0.0)
                tl.store(gxp + idx, gxv.to(gx_ptr.dtype.element_ty), mask=msk)
                tl.store(ghp + idx, ghv.to(gh_ptr.dtype.element_ty), mask=msk)

    @triton.jit
    def _env_finish_kernel(gx_ptr, hgh_ptr, sel_ptr, M, S, T, BT: tl.constexpr):
        # gx[r, sel[s]] -= hgh[r, s] for the program's row (r, s) of hgh (R, S, T)
        pid = tl.program_id(0)
        m = tl.load(sel_ptr + pid % S)
        dst = gx_ptr + ((pid // S) * M + m).to(tl.int64) * T
        src = hgh_ptr + pid.to(tl.int64) * T
        offs = tl.arange(0, BT)
        for t0 in range(0, T, BT):
            idx = t0 + offs
            msk = idx < T
            v = tl.load(dst + idx, mask=msk, other=0.0) - tl.load(src + idx, mask=msk, other=0.0)
            tl.store(dst + idx, v, mask=msk)


def _on(a, device: torch.device) -> torch.Tensor:
    """A host int64 array (band map) as a tensor on ``device``."""
    return torch.from_numpy(a).to(device)


def envelope_forward(
    x: torch.Tensor, h: torch.Tensor, sel: list[int], block: int = BLOCK_T
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`lhotse_amt.kernels.envelope.envelope_forward`: ``x (R, M,
    T)``, ``h (R, S, T)`` the Hilbert transforms of the bands ``sel`` -> ``out (R, M, T)``
    in ``x``'s dtype and the per-row ``(mean(x^2), mean(e^2))`` ``(R, S, 2)`` float64."""
    tc.require()
    R, M, T = x.shape
    out = torch.empty_like(x)
    stats = torch.empty((R, len(sel), 2), dtype=torch.float64, device=x.device)
    if x.numel():
        _env_fwd_kernel[(R * M,)](
            tc.dense(x), tc.dense(h), _on(_slots(sel, M), x.device), out, stats, M, len(sel), T,
            BT=block,
        )  # fmt: skip
    return out, stats


def envelope_backward_direct(
    g: torch.Tensor,
    x: torch.Tensor,
    h: torch.Tensor,
    stats: torch.Tensor,
    sel: list[int],
    block: int = BLOCK_T,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`lhotse_amt.kernels.envelope.envelope_backward_direct`:
    ``gx (R, M, T)`` without the Hilbert term and ``gh (R, S, T)`` (its argument)."""
    tc.require()
    R, M, T = x.shape
    gx = torch.empty_like(x)
    gh = torch.empty_like(h)
    if x.numel():
        _env_bwd_kernel[(R * M,)](
            tc.dense(g), tc.dense(x), tc.dense(h), _on(_slots(sel, M), x.device), tc.f64(stats),
            gx, gh, M, len(sel), T, BT=block,
        )  # fmt: skip
    return gx, gh


def envelope_backward_finish(
    gx: torch.Tensor, hgh: torch.Tensor, sel: list[int], block: int = BLOCK_T
) -> None:
    """Triton version of :func:`lhotse_amt.kernels.envelope.envelope_backward_finish`:
    ``gx[:, sel] -= hgh`` in place (``gx`` contiguous)."""
    tc.require()
    R, M, T = gx.shape
    if not gx.is_contiguous():
        raise ValueError("envelope_backward_finish: gx must be contiguous (updated in place)")
    if hgh.numel():
        _env_finish_kernel[(R * len(sel),)](
            gx, tc.dense(hgh).to(gx.dtype), _on(_sel(sel), gx.device), M, len(sel), T, BT=block
        )

"""Triton kernel (CUDA) of the modulation filterbank pooled over held frames (operator
``lhotse_amt::modulation_pooled``, the ``amt-paulick2024`` features): pre-filter ->
low-pass band and ``efilt`` band-passes -> frame means (or rms) of the output held over
``R`` input samples per sample, in one launch and without the ``(B, C, M + 1, T)``
output.

Same arguments and results as
:func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled` (the CPU kernel): frame
``f`` of item ``b`` covers input samples ``[starts[b, f], stops[b, f])`` of the signal
held over ``R`` input samples per sample; its value is the weighted mean of the samples
it touches (partial first and last held samples, ``R`` times the sum of those in between,
summed in sample order), each sample rounded to the input's dtype first, as
:func:`lhotse_amt.kernels.paulick.pool_held` of the written output. Recursions in
float64; states in the filterbank's own keys (``lp``, ``bp``, ``pre``). Program layout:
:mod:`lhotse_amt.kernels.triton_pooled`.

:func:`pool_held` (operator ``lhotse_amt::pool_held``) pools an already computed
decimated signal over the same held frames (the extractor's other stages), with the
arithmetic of :func:`lhotse_amt.kernels.paulick.pool_held`.
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from . import triton_pooled as tp
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .triton_common import load_plane
    from .triton_pooled import (
        band_coefs,
        band_states,
        band_step,
        channel_block,
        pool_value,
        prefilter_lowpass,
    )

__all__ = ["modulation_pooled", "pool_held"]

if HAVE_TRITON:

    @triton.jit
    def _held_frame(first, mid, last, sf, ef, qa, qb, R, RF, RMS: tl.constexpr):
        # the frame's mean (rms) from its first held sample, the sum of its inner ones and
        # its last one (the CPU kernel's weights and order)
        d = (ef - sf).to(tl.float64)
        if qb == qa:
            acc = (tl.minimum(qa * R + R, ef) - sf).to(tl.float64) * first
        else:
            w1 = (qa * R + R - sf).to(tl.float64)
            wb = (tl.minimum(qb * R + R, ef) - qb * R).to(tl.float64)
            acc = w1 * first + RF * mid + wb * last
        p = acc / d
        if RMS:
            p = tl.sqrt(p)
        return p

    @triton.jit
    def _modulation_pooled_kernel(
        x_ptr, out_ptr, w_ptr, pre_ptr, lp_ptr, sc0_ptr, band_ptr, zp_ptr, zl_ptr, zb_ptr,
        s_ptr, e_ptr, cnt_ptr, C, T, SP, SL, M, F, R, RF: tl.float64, NPL,
        RMS: tl.constexpr, ROUND32: tl.constexpr, MB: tl.constexpr, CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        # x (B, C, T); out (B, C, M + 1, F) zeros on entry; pre (SP, 6), lp (SL, 6); sc0
        # (C,); band (C, M, 6) (band_coefs); states pre, lp (B, C, S, 2), bands (B, C, M, 2)
        # advanced in place; starts/stops s, e (B, F), counts (B,). Scratch planes: the
        # input, pre-filter and low-pass (0 .. SP + SL)
        b, rm, cc, r64, RV, PV, wp = channel_block(w_ptr, C, NPL, CK, BLOCK)
        zero = cc * 0
        sc0 = tl.load(sc0_ptr + cc)
        bpr, bpi, bgr, bgi, bk, bab, bm = band_coefs(band_ptr, cc, M, rm, MB)
        xr, xi, zbo, o0, ob = band_states(zb_ptr, out_ptr, r64, M, F, bm, MB)
        NF = tl.load(cnt_ptr + b)
        sp = s_ptr + b * F
        ep = e_ptr + b * F
        f = NF * 0
        first0 = tl.zeros([BLOCK], tl.float64)
        mid0 = tl.zeros([BLOCK], tl.float64)
        first = tl.zeros([BLOCK, MB], tl.float64)
        mid = tl.zeros([BLOCK, MB], tl.float64)
        xrow = x_ptr + (b * C + cc) * T
        for blk in range(tl.cdiv(T, CK)):
            t0 = blk * CK
            n = tl.minimum(CK, T - t0)
            load_plane(xrow + t0, wp, n, RV)
            pu, pw = prefilter_lowpass(n, pre_ptr, SP, zp_ptr, lp_ptr, SL, zl_ptr, zero, r64, rm,
                                       wp, RV, PV)  # fmt: skip
            for i in range(n):
                q = t0 + i
                xr, xi, y = band_step(tl.load(pu)[:, None], xr, xi, bpr, bpi, bgr, bgi, bk, bab)
                y0 = sc0 * tl.load(pw)
                if ROUND32:  # the value a float32 output holds
                    y0 = y0.to(tl.float32).to(tl.float64)
                    y = y.to(tl.float32).to(tl.float64)
                if RMS:
                    y0 = y0 * y0
                    y = y * y
                # the frames that sample q belongs to (the next may start where one ends)
                go = f < NF
                while go:
                    sf = tl.load(sp + f)
                    ef = tl.load(ep + f)
                    qa = sf // R
                    qb = tl.minimum((ef - 1) // R, T - 1)
                    if q == qa:  # the frame's first held sample
                        first0 = y0
                        first = y
                        mid0 = tl.zeros_like(mid0)
                        mid = tl.zeros_like(mid)
                    if (q > qa) & (q < qb):
                        mid0 += y0
                        mid += y
                    done = (q >= qa) & (q >= qb)  # its last one: the frame is complete
                    if done:
                        p0 = _held_frame(first0, mid0, y0, sf, ef, qa, qb, R, RF, RMS)
                        p = _held_frame(first, mid, y, sf, ef, qa, qb, R, RF, RMS)
                        tl.store(o0 + f, p0, mask=rm)
                        tl.store(ob + f, p, mask=bm)
                        f += 1
                    go = done & (f < NF)
                pu += RV
                pw += RV
            tl.debug_barrier()
        tl.store(zb_ptr + zbo, xr, mask=bm)
        tl.store(zb_ptr + zbo + 1, xi, mask=bm)

    @triton.jit
    def _pool_held_kernel(
        y_ptr, cols_ptr, s_ptr, e_ptr, out_ptr, NC, M, F, R, RF: tl.float64,
        RMS: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # y (D, M); cols (NC,) int64; s, e (F,) int64; out (NC, F) in y's dtype: frame f
        # of row cols[i] from its held samples qa .. qb, the inner ones summed in order
        i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        im = i < NC
        yp = y_ptr + tl.load(cols_ptr + tl.minimum(i, NC - 1)) * M
        op = out_ptr + i.to(tl.int64) * F
        for f in range(F):
            sf = tl.load(s_ptr + f)
            ef = tl.load(e_ptr + f)
            qa = sf // R
            qb = tl.minimum((ef - 1) // R, M - 1)
            va = tl.load(yp + qa).to(tl.float64)
            vb = tl.load(yp + qb).to(tl.float64)
            if RMS:
                va = va * va
                vb = vb * vb
            mid = tl.zeros([BLOCK], tl.float64)
            for q in range(qa + 1, qb):
                mid = pool_value(mid, tl.load(yp + q).to(tl.float64), RMS)
            p = _held_frame(va, mid, vb, sf, ef, qa, qb, R, RF, RMS)
            tl.store(op + f, p.to(out_ptr.dtype.element_ty), mask=im)


def _zi(state: dict[str, torch.Tensor], key: str, shape: tuple[int, ...], dev) -> torch.Tensor:
    # a section state of the filterbank (B, C, S, 2) float64 (zeros at rest)
    if key in state:
        return tc.f64(state[key]).reshape(shape).clone()
    return torch.zeros(shape, dtype=torch.float64, device=dev)


def modulation_pooled(
    x: torch.Tensor,
    filters: tuple[torch.Tensor, ...],
    state: dict[str, torch.Tensor] | None,
    frames: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    R: int,
    rms: bool,
    block: int = tp.BLOCK_CHANNELS,
    ck: int = tp.CHUNK,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Triton version of :func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled`
    on ``x (..., C, T)``: ``filters`` are its ``lp_sos``, ``prefilter_sos`` (or
    ``None``), band-pass ``pole``/``gain`` complex ``(C, M)``, ``use_abs (C, M)`` and
    ``scale (C, M + 1)``; ``frames`` its ``starts``/``stops`` ``(B, F)`` and ``counts
    (B,)`` (integer tensors). Returns the frame values ``(B, C, M + 1, F)`` float64 and
    the new state (keys ``lp``, ``bp``, ``pre`` as the unfused filterbank; ``state`` is
    not modified)."""
    tc.require()
    lp_sos, prefilter_sos, pole, gain, use_abs, scale = filters
    starts, stops, counts = frames
    lead = x.shape[:-2]
    C, T = x.shape[-2], x.shape[-1]
    xs = tc.dense(x.reshape(-1, C, T))
    B, M = xs.shape[0], pole.shape[-1]
    dev = x.device
    state = state or {}
    pre = torch.zeros((0, 6)) if prefilter_sos is None else prefilter_sos.reshape(-1, 6)
    lp = lp_sos.reshape(-1, 6)
    SP, SL = pre.shape[0], lp.shape[0]
    zp = _zi(state, "pre", (B, C, SP, 2), dev)
    zl = _zi(state, "lp", (B, C, SL, 2), dev)
    if "bp" in state:
        bp = torch.view_as_real(state["bp"].detach().to(torch.complex128).reshape(B, C, M))
        zb = bp.to(dev).contiguous().clone()
    else:
        zb = torch.zeros((B, C, M, 2), dtype=torch.float64, device=dev)
    p = pole.detach().to(torch.complex128).reshape(C, M)
    g = gain.detach().to(torch.complex128).reshape(C, M)
    sc = tc.f64(scale).reshape(C, M + 1)
    band = torch.stack(
        [p.real, p.imag, g.real, g.imag, sc[:, 1:], tc.f64(use_abs).reshape(C, M)], -1
    ).contiguous()
    starts = tc.i64(starts).to(dev).reshape(B, -1)
    stops = tc.i64(stops).to(dev).reshape(B, -1)
    F = starts.shape[1]
    out = torch.zeros((B, C, M + 1, F), dtype=torch.float64, device=dev)
    npl = SP + SL + 1
    if B > 0 and T > 0:
        _modulation_pooled_kernel[tp.channel_grid(B, C, block)](
            xs, out, tp.pooled_scratch(B, C, npl, ck, block, dev), tc.f64(pre).to(dev),
            tc.f64(lp), sc[:, 0].contiguous(), band, zp, zl, zb, starts, stops,
            tc.i64(counts).to(dev).reshape(B), C, T, SP, SL, M, F, int(R), float(R), npl,
            RMS=bool(rms), ROUND32=xs.dtype == torch.float32,
            MB=triton.next_power_of_2(max(M, 1)), CK=ck, BLOCK=block, num_warps=1,
        )  # fmt: skip
    new = {
        "lp": zl.reshape(*lead, C, SL, 2),
        "bp": torch.view_as_complex(zb).reshape(*lead, C, M, 1),
    }
    if prefilter_sos is not None:
        new["pre"] = zp.reshape(*lead, C, SP, 2)
    return out.reshape(*lead, C, M + 1, F), new


def pool_held(
    y: torch.Tensor,
    cols: torch.Tensor,
    starts: torch.Tensor,
    stops: torch.Tensor,
    R: int,
    rms: bool,
    block: int = tc.BLOCK_ROWS,
) -> torch.Tensor:
    """Triton version of :func:`lhotse_amt.kernels.paulick.pool_held`: the frame means
    (rms if ``rms``) of rows ``cols`` of ``y (D, M)`` held over ``R`` input samples per
    sample, frame ``f`` over input samples ``[starts[f], stops[f])``; ``(len(cols), F)``
    in ``y``'s dtype (float64 accumulation, the CPU kernel's order)."""
    tc.require()
    dev = y.device
    cols = tc.i64(cols).to(dev)
    starts = tc.i64(starts).to(dev)
    stops = tc.i64(stops).to(dev)
    NC, F = cols.shape[0], starts.shape[0]
    out = torch.empty((NC, F), dtype=y.dtype, device=dev)
    if NC > 0 and F > 0:
        _pool_held_kernel[(triton.cdiv(NC, block),)](
            tc.dense(y), cols, starts, stops, out, NC, y.shape[1], F, int(R), float(R),
            RMS=bool(rms), BLOCK=block, num_warps=1,
        )  # fmt: skip
    return out

"""Triton kernel (CUDA) of Paulick et al. (2024)'s fused front end, the CUDA kernel of the
operator ``lhotse_amt::paulick_frontend``: DRNL filterbank -> inner hair cell ->
adaptation loops (-> FIR decimator) in one pass over the samples, storing only the last
stage (:func:`frontend`; same arguments, results and semantics as the CPU kernel
:func:`lhotse_amt.kernels.paulick_frontend.frontend`).

A program handles ``BLOCK`` channels of one batch item (the prologue of the pooled chains,
:func:`lhotse_amt.kernels.triton_pooled.channel_block`) and walks through the item's
samples in blocks of ``CK``; per block, each stage runs over the block with its states in
registers, the signals between stages in float64 scratch planes (programs, planes, CK,
BLOCK) whose size does not depend on the length:

* the DRNL's linear path (gain, gammatone and low-pass sections) and non-linear path
  (sections, broken-stick compression ``sign(u) min(a |u|, b |u|^c)``, sections), summed
  (:func:`~lhotse_amt.kernels.triton_sos.sos_planes`);
* the IHC membrane recursion (Paulick et al. 2024, Eqs. 3-5: the explicit Euler step of
  :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference`), then the loops'
  floor ``max(v, minlvl)``;
* the adaptation loops with the overshoot limiter
  (:func:`~lhotse_amt.kernels.triton_adaptation.adapt_planes`) and the model-unit output
  ``(v - out_offset) out_scale`` (rounded to float32 for a float32 signal, as the
  CPU kernel's decimator sees it);
* with a decimator by ``R``: the FIR ``sum_q w[q] u[n - K + 1 + q]`` at the samples
  ``n = j0 + i R``, over a scratch window that holds the last ``K - 1`` values before the
  block and the block (taps in order: every output has one summation order whatever the
  chunking).

Every recursion runs in float64 whatever the signal's dtype, as on the CPU; outputs are
written in the signal's dtype (float32 or float64). The CPU kernel's float32 models
compute the limiter's correction in float32; this kernel in float64 (they agree to float32
rounding). One launch per call.
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from .ihc_paulick_grad import IHC_STEP_KEYS
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .triton_adaptation import adapt_planes
    from .triton_pooled import channel_block, channel_grid, pooled_scratch
    from .triton_sos import sos_planes

__all__ = ["frontend"]

Tensor = torch.Tensor

#: channels per program, samples per block of the stage-by-stage pass
BLOCK_CHANNELS = 8
CHUNK = 128

if HAVE_TRITON:

    @triton.jit
    def _stick(u, sa, sb, c, QUARTER: tl.constexpr):
        """``sign(u) min(a |u|, b |u|^c)`` (``c = 1/4``: two square roots)."""
        m = tl.abs(u)
        if QUARTER:
            hi = sb * tl.sqrt(tl.sqrt(m))
        else:
            hi = sb * tl.where(m > 0.0, tl.exp(c * tl.log(m)), 0.0)
        lo = sa * m
        v = tl.where(lo < hi, lo, hi)
        return tl.where(u < 0.0, -v, v)

    @triton.jit
    def _frontend_kernel(
        x_ptr, y_ptr, w_ptr, g_ptr, lin_ptr, nl1_ptr, nl2_ptr, sa_ptr, sb_ptr, ihc_ptr,
        aa_ptr, am_ptr, wd_ptr, zl_ptr, z1_ptr, z2_ptr, zw_ptr, za_ptr, h_ptr,
        C, T, SL, S1, S2, J, K, M, R, j0, NPL,
        c: tl.float64, minlvl: tl.float64, off: tl.float64, scale: tl.float64,
        QUARTER: tl.constexpr, USE_LIMIT: tl.constexpr, ROUND32: tl.constexpr,
        DEC: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # x (B, T); y (B, C, M) (DEC) or (B, C, T); coefficients per channel: g, sa, sb
        # (C,), sections (C, S, 6), loops aa, am (C, J), taps wd (K,); ihc: the 12 step
        # constants (scale, gmax, x0, 1/s0, 1/s1, zmax, k, gkf, gks, dep, dkf, dks);
        # states float64, advanced in place: sections (B, C, S, 2), IHC (B, C), loops
        # (B, C, J), decimator history (B, C, K - 1). Scratch planes: 0, 1 the linear
        # path then the chain; 2, 3 the non-linear path; from 4 the decimator window
        # (K - 1 + CK samples).
        b, rm, cc, r64, RV, PV, wp = channel_block(w_ptr, C, NPL, CK, BLOCK)
        g = tl.load(g_ptr + cc)
        sa = tl.load(sa_ptr + cc)
        sb = tl.load(sb_ptr + cc)
        i_sc, i_gm, i_x0 = tl.load(ihc_ptr), tl.load(ihc_ptr + 1), tl.load(ihc_ptr + 2)
        i_r0, i_r1, i_zm = tl.load(ihc_ptr + 3), tl.load(ihc_ptr + 4), tl.load(ihc_ptr + 5)
        i_k, i_gf, i_gs = tl.load(ihc_ptr + 6), tl.load(ihc_ptr + 7), tl.load(ihc_ptr + 8)
        i_de, i_df, i_ds = tl.load(ihc_ptr + 9), tl.load(ihc_ptr + 10), tl.load(ihc_ptr + 11)
        W = tl.load(zw_ptr + r64, mask=rm, other=0.0)
        pl = wp
        pn = wp + 2 * PV
        ph = wp + 4 * PV
        K1 = K - 1
        if DEC:
            for q in range(K1):
                tl.store(ph + q * RV, tl.load(h_ptr + r64 * K1 + q, mask=rm, other=0.0))
        xb = x_ptr + b * T + tl.zeros([BLOCK], tl.int64)
        yo = y_ptr + r64 * M
        nxt = j0  # the next decimated sample (index in this call)
        for blk in range(tl.cdiv(T, CK)):
            t0 = blk * CK
            n = tl.minimum(CK, T - t0)
            for i in range(n):
                xv = tl.load(xb + t0 + i).to(tl.float64)
                tl.store(pl + i * RV, g * xv)
                tl.store(pn + i * RV, xv)
            sos_planes(n, lin_ptr, cc, SL, zl_ptr, r64, rm, pl, RV, PV, 2)
            sos_planes(n, nl1_ptr, cc, S1, z1_ptr, r64, rm, pn, RV, PV, 2)
            ps = pn + (S1 % 2) * PV
            for i in range(n):
                tl.store(pn + i * RV, _stick(tl.load(ps + i * RV), sa, sb, c, QUARTER))
            sos_planes(n, nl2_ptr, cc, S2, z2_ptr, r64, rm, pn, RV, PV, 2)
            # sum of the paths -> IHC -> the loops' floor, into plane 0
            pa = pl + (SL % 2) * PV
            pb = pn + (S2 % 2) * PV
            for i in range(n):
                v = tl.load(pa + i * RV) + tl.load(pb + i * RV)
                z = tl.minimum(i_x0 - i_sc * v, i_zm)
                G = i_gm / (1.0 + tl.exp(z * i_r1) * (1.0 + tl.exp(z * i_r0)))
                W = W + i_k * (-G * (W + i_de) - i_gf * (W + i_df) - i_gs * (W + i_ds))
                tl.store(pl + i * RV, tl.maximum(W, minlvl))
            adapt_planes(n, aa_ptr, am_ptr, cc, J, za_ptr, r64, rm, pl, RV, PV, USE_LIMIT,
                         False)  # fmt: skip
            po = pl + (J % 2) * PV
            if DEC:
                for i in range(n):
                    u = (tl.load(po + i * RV) - off) * scale
                    if ROUND32:
                        u = u.to(tl.float32).to(tl.float64)
                    tl.store(ph + (K1 + i) * RV, u)
                # outputs at the samples nxt, nxt + R, ... of this block: window rows
                # (n - t0) ... (n - t0) + K - 1 hold u[n - K + 1] ... u[n]. A loop with a
                # unit step over the output count: a loop with a run-time step
                # range(nxt, t0 + n, R) skipped every full block's outputs on an H200
                # (right in Triton's interpreter)
                cnt = tl.cdiv(tl.maximum(t0 + n - nxt, 0), R)
                for i in range(cnt):
                    p = nxt + i * R
                    acc = tl.zeros([BLOCK], tl.float64)
                    pw = ph + (p - t0) * RV
                    for q in range(K):
                        acc += tl.load(wd_ptr + q) * tl.load(pw + q * RV)
                    tl.store(yo + (p - j0) // R, acc.to(y_ptr.dtype.element_ty), mask=rm)
                nxt += cnt * R
                # keep the last K - 1 values for the next block
                for q in range(K1):
                    tl.store(ph + q * RV, tl.load(ph + (q + n) * RV))
            else:
                for i in range(n):
                    u = (tl.load(po + i * RV) - off) * scale
                    tl.store(yo + t0 + i, u.to(y_ptr.dtype.element_ty), mask=rm)
            tl.debug_barrier()
        tl.store(zw_ptr + r64, W, mask=rm)
        if DEC:
            for q in range(K1):
                tl.store(h_ptr + r64 * K1 + q, tl.load(ph + q * RV), mask=rm)


def _ihc_row(consts: dict[str, float]) -> list[float]:
    """The kernel's 12 IHC step constants (:data:`IHC_STEP_KEYS` order, the slopes ``s0``,
    ``s1`` as reciprocals)."""
    v = [float(consts[k]) for k in IHC_STEP_KEYS]
    v[3], v[4] = 1.0 / v[3], 1.0 / v[4]
    return v


def frontend(
    x: Tensor, drnl_coefs: tuple, drnl_state: dict | None, ihc_consts: dict[str, float],
    ihc_state: Tensor, adapt_a: Tensor, adapt_m: Tensor, adapt_state: Tensor, minlvl: float,
    use_limit: bool, out_offset: float, out_scale: float, dec_weight: Tensor | None = None,
    dec_factor: int = 0, dec_state: dict | None = None, block: int = BLOCK_CHANNELS,
    ck: int = CHUNK,
) -> tuple[Tensor, dict, Tensor, Tensor, dict | None]:  # fmt: skip
    """DRNL -> IHC -> adaptation loops (-> FIR decimator) on ``x (..., T)``: the arguments
    and results of :func:`lhotse_amt.kernels.paulick_frontend.frontend` (states are not
    modified; the new ones are returned); ``block`` channels per program, ``ck`` samples
    per stage pass."""
    tc.require()
    g, lin_sos, nl1_sos, nl2_sos, a, b, c = drnl_coefs
    lead, T = tuple(x.shape[:-1]), x.shape[-1]
    xf = tc.dense(x.reshape(-1, T))
    N, C, J = xf.shape[0], g.shape[0], adapt_a.shape[-1]
    dev = xf.device

    def f64(t: Tensor, *shape: int) -> Tensor:
        return tc.f64(t.to(dev).expand(*shape))

    sos = [f64(s, C, s.shape[-2], 6) for s in (lin_sos, nl1_sos, nl2_sos)]
    st = drnl_state or {}
    zs = [
        f64(st[k], *lead, C, s.shape[1], 2).reshape(N, C, -1, 2).clone()
        if st.get(k) is not None
        else torch.zeros((N, C, s.shape[1], 2), dtype=torch.float64, device=dev)
        for k, s in zip(("lin", "nl1", "nl2"), sos)
    ]
    zw = f64(ihc_state, *lead, C).reshape(N, C).clone()
    za = f64(adapt_state, *lead, C, J).reshape(N, C, J).clone()
    R = int(dec_factor) if dec_weight is not None else 0
    if R > 0:
        wd = f64(dec_weight.reshape(-1), dec_weight.numel())
        K = wd.shape[0]
        ds = dec_state or {}
        t0 = int(ds.get("t", 0))
        h = ds.get("hist")
        hist = (
            torch.zeros((N, C, K - 1), dtype=torch.float64, device=dev)
            if h is None
            else f64(h, *lead, C, K - 1).reshape(N, C, K - 1).clone()
        )
        j0 = (-t0) % R
        M = max(0, -(-(T - j0) // R))
    else:
        wd = torch.zeros(1, dtype=torch.float64, device=dev)
        K, t0, j0, M = 1, 0, 0, T
        hist = torch.zeros((N, C, 1), dtype=torch.float64, device=dev)  # unused
    ydt = torch.float32 if x.dtype == torch.float32 else torch.float64
    y = torch.empty((N, C, M), dtype=ydt, device=dev)
    if T > 0 and N > 0:
        npl = 4 + (-(-(K - 1 + ck) // ck) if R > 0 else 0)
        ihc = torch.tensor(_ihc_row(ihc_consts), dtype=torch.float64, device=dev)
        _frontend_kernel[channel_grid(N, C, block)](
            xf, y, pooled_scratch(N, C, npl, ck, block, dev), f64(g, C), *sos, f64(a, C),
            f64(b, C), ihc, f64(adapt_a, C, J), f64(adapt_m, C, J), wd, *zs, zw, za, hist,
            C, T, sos[0].shape[1], sos[1].shape[1], sos[2].shape[1], J, K, M, max(R, 1),
            j0, npl, float(c), float(minlvl), float(out_offset), float(out_scale),
            QUARTER=float(c) == 0.25, USE_LIMIT=bool(use_limit),
            ROUND32=x.dtype == torch.float32, DEC=R > 0, CK=ck, BLOCK=block, num_warps=1,
        )  # fmt: skip
    new_drnl = {k: z.reshape(*lead, C, -1, 2) for k, z in zip(("lin", "nl1", "nl2"), zs)}
    new_dec = None
    if R > 0:
        new_dec = {"hist": hist.reshape(*lead, C, K - 1).to(x.dtype), "t": t0 + T}
    return y.reshape(*lead, C, M), new_drnl, zw.reshape(*lead, C), za.reshape(*lead, C, J), new_dec

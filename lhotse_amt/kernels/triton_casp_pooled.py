"""Triton kernel (CUDA) of the fused pooled CASP chain (operator ``lhotse_amt::casp_pooled``,
Dau et al. 1997 / Osses & Kohlrausch 2021): gammatone filterbank -> half-wave rectification
+ IHC low-pass -> adaptation loops -> modulation filterbank (``efilt``) -> per-frame sums,
in one launch and without a sample-rate tensor.

Same arguments and results as :func:`lhotse_amt.kernels.casp.casp_pooled` (the CPU
kernel): block sums ``(B, C, M + 1, ceil(T / hop))`` float64 of the features over blocks
of ``hop`` samples (of squares if ``square``; 0 for bands a channel lacks), band 0 the
low-pass band. The recursions are those of the CPU kernel with its ``precise`` arithmetic
(float64 throughout, also for float32 models). Program layout and pooling:
:mod:`lhotse_amt.kernels.triton_pooled`. The state is this kernel's own
(:data:`STATE_KEYS`, ``(B, C, ...)`` float64 arrays on the device; a stream stays with the
kernel that started it).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from . import triton_pooled as tp
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .triton_adaptation import adapt_planes
    from .triton_pooled import (
        band_coefs,
        band_states,
        band_step,
        channel_block,
        item_length,
        pool_sample,
        prefilter_lowpass,
        rectified_gammatone,
        sums_load,
        sums_save,
    )
    from .triton_sos import sos_planes

__all__ = ["STATE_KEYS", "bands", "launch", "rest_state"]

#: the state arrays: gammatone ``(B, C, K, 2)``, IHC ``(B, C, S, 2)``, adaptation loops
#: ``(B, C, J)``, modulation pre-filter and low-pass ``(B, C, S', 2)``, band-passes
#: ``(B, C, M, 2)`` (real, imaginary)
STATE_KEYS = ("gammatone", "ihc", "adaptation", "prefilter", "lowpass", "bands")

if HAVE_TRITON:

    @triton.jit
    def _casp_pooled_kernel(
        x_ptr, ends_ptr, out_ptr, w_ptr, gam_ptr, ihc_ptr, ad_ptr, pre_ptr, lp_ptr, sc0_ptr,
        band_ptr, zg_ptr, zi_ptr, za_ptr, zp_ptr, zl_ptr, zb_ptr,
        C, T, K, SI, J, SP, SL, M, hop, nblk, NPL, minlvl: tl.float64, off: tl.float64,
        scale: tl.float64,
        USE_LIMIT: tl.constexpr, SQUARE: tl.constexpr, MB: tl.constexpr, CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        # x (B, T); out (B, C, M + 1, nblk) zeros on entry; gam (C, 3) (gammatone_rows);
        # ihc, pre, lp (S, 6); ad (2, J): a, m of the loops; sc0 (C,): low-pass band
        # scale; band (C, M, 6) (band_coefs); states as STATE_KEYS, advanced in place.
        # Scratch planes: 0-3 the gammatone, then 0, 1 the chain up to the loops' output;
        # pre-filter and low-pass from plane 0 on (planes 0 .. SP + SL)
        b, rm, cc, r64, RV, PV, wp = channel_block(w_ptr, C, NPL, CK, BLOCK)
        Tb = item_length(ends_ptr, b, T)
        zero = cc * 0
        sc0 = tl.load(sc0_ptr + cc)
        bpr, bpi, bgr, bgi, bk, bab, bm = band_coefs(band_ptr, cc, M, rm, MB)
        xr, xi, zbo, o0, ob = band_states(zb_ptr, out_ptr, r64, M, nblk, bm, MB)
        xb = x_ptr + b * T + tl.zeros([BLOCK], tl.int64)
        for blk in range(tl.cdiv(Tb, CK)):
            t0 = blk * CK
            n = tl.minimum(CK, Tb - t0)
            rectified_gammatone(xb + t0, n, gam_ptr, cc, K, zg_ptr, r64, rm, wp, RV, PV,
                                0.0, 1.0, 1.0, False)  # fmt: skip
            # IHC low-pass, the loops' floor, the loops, model units
            sos_planes(n, ihc_ptr, zero, SI, zi_ptr, r64, rm, wp, RV, PV, 2)
            ps = wp + (SI % 2) * PV
            pd = wp
            for _i in range(n):
                q = tl.load(ps)
                tl.store(pd, tl.where(q > minlvl, q, minlvl))
                ps += RV
                pd += RV
            adapt_planes(n, ad_ptr, ad_ptr + J, zero, J, za_ptr, r64, rm, wp, RV, PV,
                         USE_LIMIT, False)  # fmt: skip
            ps = wp + (J % 2) * PV
            pd = wp
            for _i in range(n):
                tl.store(pd, (tl.load(ps) - off) * scale)
                ps += RV
                pd += RV
            # modulation filterbank: low-pass band and band-passes, summed per block
            pu, pw = prefilter_lowpass(n, pre_ptr, SP, zp_ptr, lp_ptr, SL, zl_ptr, zero, r64, rm,
                                       wp, RV, PV)  # fmt: skip
            acc0 = sums_load(o0, t0, hop, rm)
            acc = sums_load(ob, t0, hop, bm)
            for i in range(n):
                xr, xi, y = band_step(tl.load(pu)[:, None], xr, xi, bpr, bpi, bgr, bgi, bk, bab)
                acc0 = pool_sample(acc0, sc0 * tl.load(pw), t0 + i, Tb, hop, o0, rm, SQUARE)
                acc = pool_sample(acc, y, t0 + i, Tb, hop, ob, bm, SQUARE)
                pu += RV
                pw += RV
            sums_save(o0, acc0, t0 + n, Tb, hop, rm)
            sums_save(ob, acc, t0 + n, Tb, hop, bm)
            tl.debug_barrier()
        tl.store(zb_ptr + zbo, xr, mask=bm)
        tl.store(zb_ptr + zbo + 1, xi, mask=bm)


def _arrays(plan: Any) -> dict[str, np.ndarray]:
    """The plan's coefficients in this kernel's layout."""
    C, M = plan.C, plan.M1 - 1
    # band lanes (channel, band) back to (C, M, 6): pole, gain (signed lanes: the complex
    # output gain; |.| lanes: its magnitude), scale 1, |.| flag
    band = np.zeros((C, max(M, 1), 6))
    isabs = np.arange(plan.L) >= plan.nsig
    ci = np.where(isabs, 0.0, plan.ci)
    band[plan.lane_c, plan.lane_m] = np.stack(
        [plan.ar, plan.ai, plan.cr, ci, np.ones(plan.L), isabs], -1
    )
    return {
        "gam": tp.gammatone_rows(plan),
        "ihc": plan.ihc,
        "ad": np.stack([plan.aa[:, 0], plan.am[:, 0]]),
        "pre": plan.pre,
        "lp": plan.lp,
        "sc0": plan.sc0[:C],
        "band": band,
        "s0": plan.s0,
    }


def rest_state(plan: Any, B: int, device: torch.device) -> list[torch.Tensor]:
    """The state at rest (zero filter states, the loops at their rest values) for ``B``
    items, in :data:`STATE_KEYS` order."""
    C = plan.C
    z = {"dtype": torch.float64, "device": device}
    s0 = tp.coefficients(plan, device, _arrays)["s0"]
    return [
        torch.zeros((B, C, plan.K, 2), **z),
        torch.zeros((B, C, plan.ihc.shape[0], 2), **z),
        s0.expand(B, C, plan.J).contiguous(),
        torch.zeros((B, C, plan.pre.shape[0], 2), **z),
        torch.zeros((B, C, plan.lp.shape[0], 2), **z),
        torch.zeros((B, C, plan.M1 - 1, 2), **z),
    ]


def bands(plan: Any) -> int:
    """Bands per channel of the block sums."""
    return int(plan.M1)


def launch(plan: Any, x: torch.Tensor, o: tp.Pooled, square: bool, block: int, ck: int) -> None:
    """Run the kernel on ``x (B, T)`` into ``o`` (:func:`~lhotse_amt.kernels.triton_pooled.pooled`;
    the Triton version of :func:`lhotse_amt.kernels.casp.casp_pooled`)."""
    (B, T), C, M = x.shape, plan.C, plan.M1 - 1
    cf = tp.coefficients(plan, x.device, _arrays)
    SP, SL = plan.pre.shape[0], plan.lp.shape[0]
    npl = max(4, SP + SL + 1)
    _casp_pooled_kernel[tp.channel_grid(B, C, block)](
        x, o.ends, o.out, tp.pooled_scratch(B, C, npl, ck, block, x.device), cf["gam"],
        cf["ihc"], cf["ad"], cf["pre"], cf["lp"], cf["sc0"], cf["band"], *o.state,
        C, T, plan.K, plan.ihc.shape[0], plan.J, SP, SL, M, o.hop, o.nblk, npl,
        plan.minlvl, plan.off, plan.scale, USE_LIMIT=plan.use_limit, SQUARE=bool(square),
        MB=triton.next_power_of_2(max(M, 1)), CK=ck, BLOCK=block, num_warps=1,
    )  # fmt: skip

"""Triton kernel (CUDA) of the fused pooled King, Varnet & Lorenzi (2019) chain (operator
``lhotse_amt::king_pooled``): gammatone filterbank -> broken-stick (or power) compression
-> half-wave rectification + IHC low-pass -> high-pass "adaptation" (and the optional
150-Hz low-pass) -> Butterworth modulation band-passes (``gain |.|`` or ``gain x`` per
band) -> per-frame sums, in one launch and without a sample-rate tensor.

Same arguments and results as :func:`lhotse_amt.kernels.king2019.king_pooled` (the CPU
kernel): block sums ``(B, C, M, ceil(T / hop))`` float64 over blocks of ``hop`` samples
(of squares if ``square``). The recursions run in float64; the compression
``c x^n`` above the knee is evaluated as ``c exp(n log x)`` in float64. Program layout
and pooling: :mod:`lhotse_amt.kernels.triton_pooled`. The state is this kernel's own
(:data:`STATE_KEYS`, float64 arrays on the device).
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

    from .triton_pooled import (
        channel_block,
        item_length,
        pool_sample,
        rectified_gammatone,
        sums_load,
        sums_save,
    )
    from .triton_sos import sos_planes

__all__ = ["STATE_KEYS", "bands", "launch", "rest_state"]

#: the state arrays: gammatone ``(B, C, K, 2)``, IHC ``(B, C, S, 2)``, high-pass (and
#: 150-Hz low-pass) ``(B, C, S', 2)``, modulation band-passes ``(M, B, C, S'', 2)``
STATE_KEYS = ("gammatone", "ihc", "post", "bands")

if HAVE_TRITON:

    @triton.jit
    def _king_pooled_kernel(
        x_ptr, ends_ptr, out_ptr, w_ptr, gam_ptr, ihc_ptr, post_ptr, bank_ptr, bg_ptr,
        zg_ptr, zi_ptr, zp_ptr, zb_ptr,
        C, T, K, SI, SO, M, S, hop, nblk, NPL, knee: tl.float64, coef: tl.float64,
        expo: tl.float64,
        SQUARE: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # x (B, T); out (B, C, M, nblk) zeros on entry; gam (C, 3) (gammatone_rows); ihc
        # (SI, 6), post (SO, 6), bank (M, S, 6); bg (2, M): band gain and |.| flag; states
        # as STATE_KEYS, advanced in place. Scratch planes: 0-3 the gammatone, then 0, 1
        # the compressed signal and the IHC, from its output on the high-pass (2 planes)
        # and the band-passes (S + 1 planes)
        b, rm, cc, r64, RV, PV, wp = channel_block(w_ptr, C, NPL, CK, BLOCK)
        Tb = item_length(ends_ptr, b, T)
        zero = cc * 0
        band_states = tl.num_programs(0) * C * S * 2  # one band's (B, C, S, 2)
        xb = x_ptr + b * T + tl.zeros([BLOCK], tl.int64)
        for blk in range(tl.cdiv(Tb, CK)):
            t0 = blk * CK
            n = tl.minimum(CK, Tb - t0)
            rectified_gammatone(xb + t0, n, gam_ptr, cc, K, zg_ptr, r64, rm, wp, RV, PV, knee,
                                coef, expo, True)  # fmt: skip
            # IHC low-pass, high-pass (and 150-Hz low-pass)
            sos_planes(n, ihc_ptr, zero, SI, zi_ptr, r64, rm, wp, RV, PV, 2)
            pv = wp + (SI % 2) * PV
            sos_planes(n, post_ptr, zero, SO, zp_ptr, r64, rm, pv, RV, PV, 2)
            pv += (SO % 2) * PV
            # modulation band-passes, band by band (their input stays in plane pv)
            for m in range(M):
                sos_planes(n, bank_ptr, m, S, zb_ptr + m * band_states, r64, rm, pv, RV, PV,
                           S + 1)  # fmt: skip
                g = tl.load(bg_ptr + m)
                ab = tl.load(bg_ptr + M + m) != 0.0
                o = out_ptr + (r64 * M + m) * nblk
                acc = sums_load(o, t0, hop, rm)
                py = pv + S * PV
                for i in range(n):
                    y = tl.load(py)
                    acc = pool_sample(acc, g * tl.where(ab, tl.abs(y), y), t0 + i, Tb, hop, o, rm,
                                      SQUARE)  # fmt: skip
                    py += RV
                sums_save(o, acc, t0 + n, Tb, hop, rm)
            tl.debug_barrier()


def _arrays(plan: Any) -> dict[str, np.ndarray]:
    """The plan's coefficients in this kernel's layout."""
    return {
        "gam": tp.gammatone_rows(plan),
        "ihc": plan.ihc.reshape(-1, 6),
        "post": plan.post.reshape(-1, 6),
        "bank": plan.bank,
        "bg": np.stack([plan.gain, plan.use_abs.astype(np.float64)]),
    }


def rest_state(plan: Any, B: int, device: torch.device) -> list[torch.Tensor]:
    """Zero states for ``B`` items, in :data:`STATE_KEYS` order."""
    C, S = plan.C, plan.bank.shape[1]
    z = {"dtype": torch.float64, "device": device}
    return [
        torch.zeros((B, C, plan.K, 2), **z),
        torch.zeros((B, C, plan.ihc.shape[1], 2), **z),
        torch.zeros((B, C, plan.post.shape[1], 2), **z),
        torch.zeros((plan.M, B, C, S, 2), **z),
    ]


def bands(plan: Any) -> int:
    """Bands per channel of the block sums."""
    return int(plan.M)


def launch(plan: Any, x: torch.Tensor, o: tp.Pooled, square: bool, block: int, ck: int) -> None:
    """Run the kernel on ``x (B, T)`` into ``o`` (:func:`~lhotse_amt.kernels.triton_pooled.pooled`;
    the Triton version of :func:`lhotse_amt.kernels.king2019.king_pooled`)."""
    (B, T), C, M = x.shape, plan.C, plan.M
    cf = tp.coefficients(plan, x.device, _arrays)
    S = plan.bank.shape[1]
    npl = max(4, S + 3)
    _king_pooled_kernel[tp.channel_grid(B, C, block)](
        x, o.ends, o.out, tp.pooled_scratch(B, C, npl, ck, block, x.device), cf["gam"],
        cf["ihc"], cf["post"], cf["bank"], cf["bg"], *o.state, C, T, plan.K, plan.ihc.shape[1],
        plan.post.shape[1], M, S, o.hop, o.nblk, npl, plan.knee, plan.coef, plan.expo,
        SQUARE=bool(square), CK=ck, BLOCK=block, num_warps=1,
    )  # fmt: skip

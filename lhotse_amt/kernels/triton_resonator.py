"""Triton kernels (CUDA) of the complex one-pole cascade operator ``lhotse_amt::resonator``
and its backward: ``K`` identical complex one-pole sections and a complex gain, real
output (``Re``, or ``|.|`` per coefficient row).

Same arguments, results and semantics as
:func:`lhotse_amt.kernels.autodiff.resonator_forward` and
:func:`~lhotse_amt.kernels.autodiff.resonator_backward` (the adjoint formulas are
documented there). The cascade runs section by section over each block of
:data:`~lhotse_amt.kernels.autodiff.CHECKPOINT_BLOCK` samples through float64 scratch
planes (layout: :mod:`lhotse_amt.kernels.triton_common`); the backward recomputes each
block from its checkpoint, recording the section states before every sample, and runs the
adjoint back over them, from the last block to the first. One launch per call.
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from .autodiff import CHECKPOINT_BLOCK as CK
from .rows import RowKernels
from .triton_common import copy_states, load_plane, plane_rows, reverse_block, store_plane

if tc.HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["resonator_forward", "resonator_backward"]

if tc.HAVE_TRITON:

    @triton.jit
    def _res_coefs(pole_ptr, gain_ptr, mode_ptr, c):
        # pole and gain (real, imaginary) of the rows' coefficient rows c; |.| output or Re
        pr = tl.load(pole_ptr + c * 2)
        pi = tl.load(pole_ptr + c * 2 + 1)
        gr = tl.load(gain_ptr + c * 2)
        gi = tl.load(gain_ptr + c * 2 + 1)
        return pr, pi, gr, gi, tl.load(mode_ptr + c) != 0

    @triton.jit
    def res_planes(n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, RECORD: tl.constexpr):
        """``n`` samples of the rows through ``K`` complex one-pole sections with the
        rows' pole ``pr + i pi``, section by section. Scratch planes from ``rp``: 0-3 the
        chain (slot 0 real, imaginary, the input, already there; slot 1 real, imaginary:
        section ``q`` reads slot ``q % 2``, writes the other; ``u_K`` ends in slot
        ``K % 2``); ``RECORD``: planes ``4 + q`` / ``4 + K + q`` the section states before
        each sample (real / imaginary). States ``z (R, K, 2)`` float64 of rows ``r64``
        advanced in place."""
        for q in range(K):
            zo = (r64 * K + q) * 2
            sr = tl.load(z_ptr + zo, mask=rm, other=0.0)
            si = tl.load(z_ptr + zo + 1, mask=rm, other=0.0)
            ps = rp + (q % 2) * 2 * PV
            pd = rp + ((q + 1) % 2) * 2 * PV
            pu = rp + (4 + q) * PV
            for _i in range(n):
                if RECORD:
                    tl.store(pu, sr)
                    tl.store(pu + K * PV, si)
                    pu += RV
                vr = tl.load(ps)
                vi = tl.load(ps + PV)
                nre = pr * sr - pi * si + vr
                nim = pr * si + pi * sr + vi
                tl.store(pd, nre)
                tl.store(pd + PV, nim)
                sr = nre
                si = nim
                ps += RV
                pd += RV
            tl.store(z_ptr + zo, sr, mask=rm)
            tl.store(z_ptr + zo + 1, si, mask=rm)

    @triton.jit
    def real_input(xp, n, rp, RV, PV):
        """``n`` samples of the rows (``xp``: their first sample) as the real input of
        :func:`res_planes` (slot 0: real part from ``xp``, imaginary part 0)."""
        load_plane(xp, rp, n, RV)
        p = rp + PV
        for _i in range(n):
            tl.store(p, tl.zeros(RV.shape, tl.float64))
            p += RV

    @triton.jit
    def _res_block(xp, n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, RECORD: tl.constexpr):
        # n samples of the rows (xp: their first sample in x) through the K sections
        # (res_planes; scratch layout there)
        real_input(xp, n, rp, RV, PV)
        res_planes(n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, RECORD)

    @triton.jit
    def _res_fwd_kernel(
        x_ptr, xrow_ptr, pole_ptr, gain_ptr, mode_ptr, crow_ptr, z_ptr, y_ptr, ck_ptr, rec_ptr,
        R, RP, T, K, KEEP: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, K, 2): zi on entry, zf on exit; ck (R, nb, K, 2) (KEEP); rec (4, CK, RP)
        # scratch
        rm, r64, rr64, RV, xr, c, PV, rp = plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK, BLOCK)
        pr, pi, gr, gi, ab = _res_coefs(pole_ptr, gain_ptr, mode_ptr, c)
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            if KEEP:
                copy_states(z_ptr, ck_ptr, r64, rm, b, nb, 2 * K, True)
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            _res_block(x_ptr + xr * T + t0, n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, False)
            pu = rp + (K % 2) * 2 * PV
            yp = y_ptr + r64 * T + t0
            for _i in range(n):
                vr = tl.load(pu)
                vi = tl.load(pu + PV)
                wr = gr * vr - gi * vi
                wi = gr * vi + gi * vr
                out = tl.where(ab, tl.sqrt(wr * wr + wi * wi), wr)
                tl.store(yp, out.to(y_ptr.dtype.element_ty), mask=rm)
                pu += RV
                yp += 1
            tl.debug_barrier()

    @triton.jit
    def _res_bwd_kernel(
        gy_ptr, x_ptr, xrow_ptr, pole_ptr, gain_ptr, mode_ptr, crow_ptr, ck_ptr, z_ptr,
        lam_ptr, gx_ptr, gp_ptr, gg_ptr, rec_ptr, R, RP, T, K,
        WANT_X: tl.constexpr, WANT_C: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, K, 2) scratch states; lam (R, K, 2): gzf on entry, gzi on exit;
        # rec (2 K + 6, CK, RP) scratch: the chain (4 planes), the section states before
        # each sample (2 K planes) and the adjoint of the current section's output (2)
        rm, r64, rr64, RV, xr, c, PV, rp = plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK, BLOCK)
        pr, pi, gr, gi, ab = _res_coefs(pole_ptr, gain_ptr, mode_ptr, c)
        gpr = tl.zeros([BLOCK], tl.float64)
        gpi = tl.zeros([BLOCK], tl.float64)
        ggr = tl.zeros([BLOCK], tl.float64)
        ggi = tl.zeros([BLOCK], tl.float64)
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b, t0, n = reverse_block(bb, nb, T, CK)
            copy_states(z_ptr, ck_ptr, r64, rm, b, nb, 2 * K, False)
            tl.debug_barrier()
            _res_block(x_ptr + xr * T + t0, n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, True)
            tl.debug_barrier()
            # output: G_w = gy * (w / |w| or 1); G_g += conj(u_K) G_w; G_{u_K} = conj(g) G_w
            pu = rp + (K % 2) * 2 * PV + (n - 1) * RV
            pg = rp + (2 * K + 4) * PV + (n - 1) * RV
            gyp = gy_ptr + rr64 * T + t0 + n - 1
            for _i in range(n):
                g = tl.load(gyp).to(tl.float64)
                kr = tl.load(pu)
                ki = tl.load(pu + PV)
                wr = gr * kr - gi * ki
                wi = gr * ki + gi * kr
                mag = tl.sqrt(wr * wr + wi * wi)
                inv = tl.where(mag > 0.0, 1.0 / tl.where(mag > 0.0, mag, 1.0), 0.0)
                Gwr = g * tl.where(ab, wr * inv, 1.0)
                Gwi = g * tl.where(ab, wi * inv, 0.0)
                ggr += kr * Gwr + ki * Gwi
                ggi += kr * Gwi - ki * Gwr
                tl.store(pg, gr * Gwr + gi * Gwi)
                tl.store(pg + PV, gr * Gwi - gi * Gwr)
                pu -= RV
                pg -= RV
                gyp -= 1
            tl.debug_barrier()
            for qq in range(K):
                q = K - 1 - qq
                lo = (r64 * K + q) * 2
                lr = tl.load(lam_ptr + lo, mask=rm, other=0.0)
                li = tl.load(lam_ptr + lo + 1, mask=rm, other=0.0)
                pu = rp + (4 + q) * PV + (n - 1) * RV
                pg = rp + (2 * K + 4) * PV + (n - 1) * RV
                for _i in range(n):
                    lkr = lr + tl.load(pg)
                    lki = li + tl.load(pg + PV)
                    ur = tl.load(pu)
                    ui = tl.load(pu + K * PV)
                    # G_p += conj(u_q[n-1]) lambda_q ; carried: conj(p) lambda_q
                    gpr += ur * lkr + ui * lki
                    gpi += ur * lki - ui * lkr
                    lr = pr * lkr + pi * lki
                    li = pr * lki - pi * lkr
                    tl.store(pg, lkr)
                    tl.store(pg + PV, lki)
                    pu -= RV
                    pg -= RV
                tl.store(lam_ptr + lo, lr, mask=rm)
                tl.store(lam_ptr + lo + 1, li, mask=rm)
            if WANT_X:
                store_plane(rp + (2 * K + 4) * PV, gx_ptr + r64 * T + t0, n, RV, rm)
            tl.debug_barrier()
        if WANT_C:
            tl.store(gp_ptr + r64 * 2, gpr, mask=rm)
            tl.store(gp_ptr + r64 * 2 + 1, gpi, mask=rm)
            tl.store(gg_ptr + r64 * 2, ggr, mask=rm)
            tl.store(gg_ptr + r64 * 2 + 1, ggi, mask=rm)


def _fwd(
    x, xrow, pole, gain, mode, crow, zi, y, zf, ck, block: int = tc.BLOCK_ROWS,
    fusion: bool | None = None,
) -> None:  # fmt: skip
    # fusion=False: no fused multiply-adds (the values of the CPU kernel); None: Triton's default
    R, T = y.shape
    _res_fwd_kernel[tc.grid(R, block)](
        x, xrow, pole, gain, tc.i32(mode), crow, zf, y, ck, tc.scratch(4, CK, R, block, x.device),
        R, tc.padded(R, block), T, zi.shape[1], KEEP=ck.shape[1] > 0, CK=CK, BLOCK=block,
        num_warps=1, enable_fp_fusion=fusion,
    )  # fmt: skip


def _bwd(
    gy, gzf, x, xrow, pole, gain, mode, crow, zi, ck, gx, gp, gg, gzi, want_x, want_c,
    block: int = tc.BLOCK_ROWS,
) -> None:  # fmt: skip
    R, T = gy.shape
    K = zi.shape[1]
    _res_bwd_kernel[tc.grid(R, block)](
        gy, x, xrow, pole, gain, tc.i32(mode), crow, ck, torch.empty_like(zi), gzi, gx, gp, gg,
        tc.scratch(2 * K + 6, CK, R, block, x.device), R, tc.padded(R, block), T, K,
        WANT_X=want_x, WANT_C=want_c, CK=CK, BLOCK=block, num_warps=1,
    )  # fmt: skip


KERNELS = RowKernels(_fwd, _bwd, tc.require)
#: Triton version of :data:`lhotse_amt.kernels.resonator_grad.resonator_forward` (same
#: arguments and results; options ``block``: rows per program, ``fusion=False``: no fused
#: multiply-adds)
resonator_forward = KERNELS.forward
#: Triton version of :data:`lhotse_amt.kernels.resonator_grad.resonator_backward`
resonator_backward = KERNELS.backward

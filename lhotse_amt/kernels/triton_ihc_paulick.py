"""Triton kernels (CUDA) of the IHC operator ``lhotse_amt::ihc_paulick`` and its backward.

Same arguments, results and semantics as the numba kernels of
:mod:`lhotse_amt.kernels.ihc_paulick_grad`, which document the membrane recursion of
Paulick, Relaño-Iborra & Dau (2024), its adjoint, the row maps ``xrow``/``crow`` and the
12 step constants (:data:`~lhotse_amt.kernels.ihc_paulick_grad.IHC_STEP_KEYS`). The
recursion runs in float64 whatever the tensor dtype, with the reciprocal slopes
(``z * (1 / s)``) of the CPU kernel.

One program handles a block of rows and walks through time (layout and helpers:
:mod:`lhotse_amt.kernels.triton_common`). The forward keeps the state ``W`` at the start
of every block of :data:`~lhotse_amt.kernels.ihc_paulick_grad.CHECKPOINT_BLOCK` samples;
the backward runs from the last block to the first, recomputes the block from its
checkpoint into four float64 scratch planes (``W[n-1]``, ``A = e1 (1 + e0)``, ``e1 e0``
and ``1 / D`` per sample) and runs the adjoint back over them. One launch per call.
"""

from __future__ import annotations

from . import triton_common as tc
from .autodiff import CHECKPOINT_BLOCK as CK
from .rows import RowKernels
from .triton_common import HAVE_TRITON, plane_rows, reverse_block, row_block

if HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["ihc_paulick_forward", "ihc_paulick_backward"]

if HAVE_TRITON:

    @triton.jit
    def _consts(c_ptr, c):
        # the rows' step constants (IHC_STEP_KEYS order), the slopes as reciprocals
        cp = c_ptr + c * 12
        sc = tl.load(cp)
        gm = tl.load(cp + 1)
        x0 = tl.load(cp + 2)
        r0s = 1.0 / tl.load(cp + 3)
        r1s = 1.0 / tl.load(cp + 4)
        zm = tl.load(cp + 5)
        return sc, gm, x0, r0s, r1s, zm

    @triton.jit
    def _circuit(c_ptr, c):
        # the membrane constants: k = dt / Cm, the K+ conductances, the reversal offsets
        cp = c_ptr + c * 12
        kk = tl.load(cp + 6)
        gkf = tl.load(cp + 7)
        gks = tl.load(cp + 8)
        dep = tl.load(cp + 9)
        dkf = tl.load(cp + 10)
        dks = tl.load(cp + 11)
        return kk, gkf, gks, dep, dkf, dks

    @triton.jit
    def _ihc_fwd_kernel(
        x_ptr, xrow_ptr, c_ptr, crow_ptr, z_ptr, y_ptr, ck_ptr, R, T,
        KEEP: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R,): zi on entry, zf on exit; ck (R, nb) (KEEP)
        rm, r64, rr64, RV, xr, c = row_block(xrow_ptr, crow_ptr, R, R, BLOCK)
        sc, gm, x0, r0s, r1s, zm = _consts(c_ptr, c)
        kk, gkf, gks, dep, dkf, dks = _circuit(c_ptr, c)
        w = tl.load(z_ptr + r64, mask=rm, other=0.0)
        xp = x_ptr + xr * T
        yp = y_ptr + r64 * T
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            if KEEP:
                tl.store(ck_ptr + r64 * nb + b, w, mask=rm)
            n = tl.minimum(CK, T - b * CK)
            for _i in range(n):
                z = tl.minimum(x0 - sc * tl.load(xp).to(tl.float64), zm)
                e1 = tl.exp(z * r1s)
                e0 = tl.exp(z * r0s)
                G = gm / (1.0 + e1 * (1.0 + e0))
                F = -G * (w + dep) - gkf * (w + dkf) - gks * (w + dks)
                w = w + kk * F
                tl.store(yp, w.to(y_ptr.dtype.element_ty), mask=rm)
                xp += 1
                yp += 1
        tl.store(z_ptr + r64, w, mask=rm)

    @triton.jit
    def _ihc_bwd_kernel(
        gy_ptr, x_ptr, xrow_ptr, c_ptr, crow_ptr, ck_ptr, lam_ptr, gx_ptr, gc_ptr,
        rec_ptr, R, RP, T,
        WANT_X: tl.constexpr, WANT_C: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # lam (R,): gzf on entry, gzi on exit; gc (R, 12) zeros on entry; ck (R, nb) the
        # forward's checkpoints; rec (4, CK, RP) scratch: W[n-1], A, B = e1 e0 and 1 / D
        # of every sample of the block
        rm, r64, rr64, RV, xr, c, PV, rp = plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK, BLOCK)
        sc, gm, x0, r0s, r1s, zm = _consts(c_ptr, c)
        kk, gkf, gks, dep, dkf, dks = _circuit(c_ptr, c)
        a = tl.load(lam_ptr + r64, mask=rm, other=0.0)
        g0 = tl.zeros([BLOCK], tl.float64)
        g1 = tl.zeros([BLOCK], tl.float64)
        g2 = tl.zeros([BLOCK], tl.float64)
        g3 = tl.zeros([BLOCK], tl.float64)
        g4 = tl.zeros([BLOCK], tl.float64)
        g5 = tl.zeros([BLOCK], tl.float64)
        g6 = tl.zeros([BLOCK], tl.float64)
        g7 = tl.zeros([BLOCK], tl.float64)
        g8 = tl.zeros([BLOCK], tl.float64)
        g9 = tl.zeros([BLOCK], tl.float64)
        g10 = tl.zeros([BLOCK], tl.float64)
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b, t0, n = reverse_block(bb, nb, T, CK)
            w = tl.load(ck_ptr + r64 * nb + b, mask=rm, other=0.0)
            xp = x_ptr + xr * T + t0
            p = rp
            for _i in range(n):
                z = tl.minimum(x0 - sc * tl.load(xp).to(tl.float64), zm)
                e1 = tl.exp(z * r1s)
                e0 = tl.exp(z * r0s)
                A = e1 * (1.0 + e0)
                iD = 1.0 / (1.0 + A)
                G = gm * iD
                tl.store(p, w)
                tl.store(p + PV, A)
                tl.store(p + 2 * PV, e1 * e0)
                tl.store(p + 3 * PV, iD)
                w = w + kk * (-G * (w + dep) - gkf * (w + dkf) - gks * (w + dks))
                xp += 1
                p += RV
            tl.debug_barrier()
            xp = x_ptr + xr * T + t0 + n - 1
            gyp = gy_ptr + rr64 * T + t0 + n - 1
            gxp = gx_ptr + r64 * T + t0 + n - 1
            p = rp + (n - 1) * RV
            for _i in range(n):
                xv = tl.load(xp).to(tl.float64)
                aq = a + tl.load(gyp).to(tl.float64)
                Wp = tl.load(p)
                A = tl.load(p + PV)
                B = tl.load(p + 2 * PV)
                iD = tl.load(p + 3 * PV)
                u = x0 - sc * xv
                capped = u > zm
                G = gm * iD
                ka = kk * aq
                gG = -ka * (Wp + dep)
                gD = -gG * G * iD
                gz = gD * (A * r1s + B * r0s)
                gu = tl.where(capped, 0.0, gz)
                if WANT_X:
                    tl.store(gxp, (-gu * sc).to(gx_ptr.dtype.element_ty), mask=rm)
                if WANT_C:
                    z = tl.where(capped, zm, u)
                    F = -G * (Wp + dep) - gkf * (Wp + dkf) - gks * (Wp + dks)
                    g0 -= gu * xv
                    g1 += gG * iD
                    g2 += gu
                    g3 -= gD * B * z * r0s * r0s
                    g4 -= gD * A * z * r1s * r1s
                    g5 += gz - gu
                    g6 += aq * F
                    g7 -= ka * (Wp + dkf)
                    g8 -= ka * (Wp + dks)
                    g9 -= ka * G
                    g10 -= ka
                a = aq * (1.0 - kk * (G + gkf + gks))
                xp -= 1
                gyp -= 1
                gxp -= 1
                p -= RV
            tl.debug_barrier()
        tl.store(lam_ptr + r64, a, mask=rm)
        if WANT_C:
            # d W / d dkf = -k gkf and d W / d dks = -k gks per sample: the sums of -k a
            # (g10) times the constant conductances
            gp = gc_ptr + r64 * 12
            tl.store(gp, g0, mask=rm)
            tl.store(gp + 1, g1, mask=rm)
            tl.store(gp + 2, g2, mask=rm)
            tl.store(gp + 3, g3, mask=rm)
            tl.store(gp + 4, g4, mask=rm)
            tl.store(gp + 5, g5, mask=rm)
            tl.store(gp + 6, g6, mask=rm)
            tl.store(gp + 7, g7, mask=rm)
            tl.store(gp + 8, g8, mask=rm)
            tl.store(gp + 9, g9, mask=rm)
            tl.store(gp + 10, g10 * gkf, mask=rm)
            tl.store(gp + 11, g10 * gks, mask=rm)


def _fwd(x, xrow, c, crow, zi, y, zf, ck, block: int = tc.BLOCK_ROWS) -> None:
    R, T = y.shape
    _ihc_fwd_kernel[tc.grid(R, block)](
        x, xrow, c, crow, zf, y, ck, R, T, KEEP=ck.shape[1] > 0, CK=CK, BLOCK=block, num_warps=1
    )  # fmt: skip


def _bwd(
    gy, gzf, x, xrow, c, crow, zi, ck, gx, gc, gzi, want_x, want_c, block=tc.BLOCK_ROWS
) -> None:
    R, T = gy.shape
    _ihc_bwd_kernel[tc.grid(R, block)](
        gy, x, xrow, c, crow, ck, gzi, gx, gc, tc.scratch(4, CK, R, block, x.device), R,
        tc.padded(R, block), T, WANT_X=want_x, WANT_C=want_c, CK=CK, BLOCK=block, num_warps=1,
    )  # fmt: skip


KERNELS = RowKernels(_fwd, _bwd, tc.require)
#: Triton version of :data:`lhotse_amt.kernels.ihc_paulick_grad.ihc_forward` (same
#: arguments and results; option ``block``: rows per program)
ihc_paulick_forward = KERNELS.forward
#: Triton version of :data:`lhotse_amt.kernels.ihc_paulick_grad.ihc_backward`
ihc_paulick_backward = KERNELS.backward

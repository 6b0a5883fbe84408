"""Triton kernels (CUDA) of the adaptation-loop operator ``lhotse_amt::adaptation_loops``
(the feedback loops with the overshoot limiter) and its backward.

Same arguments, results and semantics as
:func:`lhotse_amt.kernels.autodiff.adaptation_forward` and
:func:`~lhotse_amt.kernels.autodiff.adaptation_backward` (the adjoint formulas are
documented there). The ``J`` loops run loop by loop over each block of
:data:`~lhotse_amt.kernels.autodiff.CHECKPOINT_BLOCK` samples through float64 scratch
planes (layout: :mod:`lhotse_amt.kernels.triton_common`); the backward recomputes each
block from its checkpoint, recording the terms of the adjoint step, and runs the adjoint
back over them, from the last block to the first. One launch per call.
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

__all__ = ["adaptation_forward", "adaptation_backward"]

if tc.HAVE_TRITON:

    @triton.jit
    def _lim_e(w, m):
        # e = exp(-2 (w - 1) / m), the argument clamped to [-37.5, 0] as on the CPU
        t = -2.0 * (w - 1.0) / m
        t = tl.where(t > -37.5, t, -37.5)
        t = tl.where(t < 0.0, t, 0.0)
        return tl.exp(t)

    @triton.jit
    def adapt_planes(
        n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV,
        USE_LIMIT: tl.constexpr, RECORD: tl.constexpr,
    ):  # fmt: skip
        """``n`` samples of the rows (already floored at the minimum level) through the
        ``J`` loops (coefficient rows ``c`` of ``a``, ``m`` ``(Rc, J)``), loop by loop.
        Scratch planes from ``rp``: 0, 1 the chain (slot 0: the input; loop ``j`` reads
        slot ``j % 2``, writes the other; the output ends in slot ``J % 2``); ``RECORD``:
        per loop ``j`` the terms of the adjoint step at planes ``3 + p J + j``:
        ``s - v_out`` (p = 0), ``1 / s`` (1), ``w / s`` (2), ``d lim / dw`` (3) and
        ``d lim / dm`` (4) (``USE_LIMIT`` only). States ``z (R, J)`` float64 of rows
        ``r64`` advanced in place."""
        for j in range(J):
            aj = tl.load(a_ptr + c * J + j)
            mj = tl.load(m_ptr + c * J + j)
            sj = tl.load(z_ptr + r64 * J + j, mask=rm, other=1.0)
            ps = rp + (j % 2) * PV
            pd = rp + ((j + 1) % 2) * PV
            pt = rp + (3 + j) * PV
            for _i in range(n):
                q = tl.load(ps) / sj
                v = q
                if USE_LIMIT:
                    e = _lim_e(q, mj)
                    d = 1.0 + e
                    hit = q > 1.0
                    v = tl.where(hit, 2.0 * mj / d - (mj - 1.0), q)
                    if RECORD:
                        dl = tl.where(hit, 4.0 * e / (d * d), 1.0)
                        dm = tl.where(hit, 2.0 / d - 4.0 * e * (q - 1.0) / (mj * d * d) - 1.0, 0.0)
                        tl.store(pt + 3 * J * PV, dl)
                        tl.store(pt + 4 * J * PV, dm)
                if RECORD:
                    iv = 1.0 / sj
                    tl.store(pt, sj - v)
                    tl.store(pt + J * PV, iv)
                    tl.store(pt + 2 * J * PV, q * iv)
                    pt += RV
                tl.store(pd, v)
                sj = aj * sj + (1.0 - aj) * v
                ps += RV
                pd += RV
            tl.store(z_ptr + r64 * J + j, sj, mask=rm)

    @triton.jit
    def _adapt_block(
        xp, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
        USE_LIMIT: tl.constexpr, RECORD: tl.constexpr,
    ):  # fmt: skip
        # n samples of the rows (xp: their first sample in x), floored at minlvl, into
        # slot 0 and through the J loops (adapt_planes; scratch layout there)
        p = rp
        for _i in range(n):
            q0 = tl.load(xp).to(tl.float64)
            tl.store(p, tl.where(q0 > minlvl, q0, minlvl))
            xp += 1
            p += RV
        adapt_planes(n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, USE_LIMIT, RECORD)

    @triton.jit
    def _adapt_fwd_kernel(
        x_ptr, xrow_ptr, a_ptr, m_ptr, crow_ptr, z_ptr, y_ptr, ck_ptr, rec_ptr, R, RP, T, J,
        minlvl: tl.float64, USE_LIMIT: tl.constexpr, KEEP: tl.constexpr, CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, J): zi on entry, zf on exit; ck (R, nb, J) (KEEP); rec (2, CK, RP) scratch
        rm, r64, rr64, RV, xr, c, PV, rp = plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK, BLOCK)
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            if KEEP:
                copy_states(z_ptr, ck_ptr, r64, rm, b, nb, J, True)
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            _adapt_block(
                x_ptr + xr * T + t0, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
                USE_LIMIT, False,
            )  # fmt: skip
            store_plane(rp + (J % 2) * PV, y_ptr + r64 * T + t0, n, RV, rm)
            tl.debug_barrier()

    @triton.jit
    def _adapt_bwd_kernel(
        gy_ptr, x_ptr, xrow_ptr, a_ptr, m_ptr, crow_ptr, ck_ptr, z_ptr, lam_ptr, gx_ptr,
        ga_ptr, gm_ptr, rec_ptr, R, RP, T, J, minlvl: tl.float64,
        USE_LIMIT: tl.constexpr, WANT_X: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, J) scratch states; lam (R, J): gzf on entry, gzi on exit; ga, gm (R, J)
        # zeros on entry; rec (3 + 5 J, CK, RP) scratch: the chain (2 planes), the adjoint
        # of the current loop's output (plane 2) and the recorded terms (see _adapt_block)
        rm, r64, rr64, RV, xr, c, PV, rp = plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK, BLOCK)
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b, t0, n = reverse_block(bb, nb, T, CK)
            copy_states(z_ptr, ck_ptr, r64, rm, b, nb, J, False)
            tl.debug_barrier()
            _adapt_block(
                x_ptr + xr * T + t0, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
                USE_LIMIT, True,
            )  # fmt: skip
            load_plane(gy_ptr + rr64 * T + t0, rp + 2 * PV, n, RV)
            tl.debug_barrier()
            for jj in range(J):
                j = J - 1 - jj
                aj = tl.load(a_ptr + c * J + j)
                lj = tl.load(lam_ptr + r64 * J + j, mask=rm, other=0.0)
                gaj = tl.load(ga_ptr + r64 * J + j, mask=rm, other=0.0)
                gmj = tl.load(gm_ptr + r64 * J + j, mask=rm, other=0.0)
                pg = rp + 2 * PV + (n - 1) * RV
                pt = rp + (3 + j) * PV + (n - 1) * RV
                for _i in range(n):
                    gvt = tl.load(pg) + (1.0 - aj) * lj
                    gaj += lj * tl.load(pt)
                    if USE_LIMIT:
                        gmj += gvt * tl.load(pt + 4 * J * PV)
                        gw = gvt * tl.load(pt + 3 * J * PV)
                    else:
                        gw = gvt
                    tl.store(pg, gw * tl.load(pt + J * PV))
                    lj = aj * lj - gw * tl.load(pt + 2 * J * PV)
                    pg -= RV
                    pt -= RV
                tl.store(lam_ptr + r64 * J + j, lj, mask=rm)
                tl.store(ga_ptr + r64 * J + j, gaj, mask=rm)
                tl.store(gm_ptr + r64 * J + j, gmj, mask=rm)
            if WANT_X:
                pg = rp + 2 * PV
                xp = x_ptr + xr * T + t0
                gxp = gx_ptr + r64 * T + t0
                for _i in range(n):
                    x0 = tl.load(xp).to(tl.float64)
                    gxv = tl.where(x0 > minlvl, tl.load(pg), 0.0)
                    tl.store(gxp, gxv.to(gx_ptr.dtype.element_ty), mask=rm)
                    pg += RV
                    xp += 1
                    gxp += 1
            tl.debug_barrier()


def _fwd(x, xrow, a, m, crow, minlvl, use_limit, zi, y, zf, ck, block=tc.BLOCK_ROWS) -> None:
    R, T = y.shape
    _adapt_fwd_kernel[tc.grid(R, block)](
        x, xrow, a, m, crow, zf, y, ck, tc.scratch(2, CK, R, block, x.device), R,
        tc.padded(R, block), T, zi.shape[1], minlvl, USE_LIMIT=use_limit, KEEP=ck.shape[1] > 0,
        CK=CK, BLOCK=block, num_warps=1,
    )  # fmt: skip


def _bwd(
    gy, gzf, x, xrow, a, m, crow, minlvl, use_limit, zi, ck, gx, ga, gm, gzi, want_x, want_c,
    block: int = tc.BLOCK_ROWS,
) -> None:  # fmt: skip
    R, T = gy.shape
    J = zi.shape[1]
    planes = 3 + (5 if use_limit else 3) * J
    _adapt_bwd_kernel[tc.grid(R, block)](
        gy, x, xrow, a, m, crow, ck, torch.empty_like(zi), gzi, gx, ga, gm,
        tc.scratch(planes, CK, R, block, x.device), R, tc.padded(R, block), T, J, minlvl,
        USE_LIMIT=use_limit, WANT_X=want_x, CK=CK, BLOCK=block, num_warps=1,
    )  # fmt: skip


KERNELS = RowKernels(_fwd, _bwd, tc.require)
#: Triton version of :data:`lhotse_amt.kernels.adaptation_grad.adaptation_forward` (same
#: arguments and results; option ``block``: rows per program)
adaptation_forward = KERNELS.forward
#: Triton version of :data:`lhotse_amt.kernels.adaptation_grad.adaptation_backward`
adaptation_backward = KERNELS.backward

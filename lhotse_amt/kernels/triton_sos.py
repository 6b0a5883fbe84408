"""Triton kernels (CUDA) of the second-order-section operator ``lhotse_amt::sosfilt`` and
its backward (transposed direct form II, as :func:`scipy.signal.sosfilt`).

Same arguments, results and semantics as :func:`lhotse_amt.kernels.autodiff.sos_forward`
and :func:`~lhotse_amt.kernels.autodiff.sos_backward` (the adjoint formulas are documented
there). The cascade runs section by section over each block of
:data:`~lhotse_amt.kernels.autodiff.CHECKPOINT_BLOCK` samples, the signals between the
sections in float64 scratch planes (layout: :mod:`lhotse_amt.kernels.triton_common`), the
section states in registers. The backward recomputes each block's section signals from
its checkpoint and runs the adjoint back over them, from the last block to the first.
One launch per call.
"""

from __future__ import annotations

import torch

from . import triton_common as tc
from .autodiff import CHECKPOINT_BLOCK as CK
from .rows import RowKernels
from .triton_common import copy_states, load_plane, reverse_block, row_block, store_plane

if tc.HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["sos_forward", "sos_backward"]

if tc.HAVE_TRITON:

    @triton.jit
    def _sos_coefs(sos_ptr, c, S, s):
        # b0, b1, b2, a1, a2 of section s of the rows' coefficient rows c
        cb = sos_ptr + (c * S + s) * 6
        return tl.load(cb), tl.load(cb + 1), tl.load(cb + 2), tl.load(cb + 4), tl.load(cb + 5)

    @triton.jit
    def sos_planes(n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, PV, NSLOT):
        """``n`` samples of the rows through the ``S`` sections (coefficient rows ``c`` of
        ``sos (Rc, S, 6)``), section by section over scratch planes: slot ``s`` (plane
        ``wp + s % NSLOT``) holds section ``s``'s input (slot 0: the signal, already
        there), slot ``(s + 1) % NSLOT`` its output, so the result ends in slot
        ``S % NSLOT``; the section states ``z (R, S, 2)`` float64 of rows ``r64`` are
        advanced in place."""
        for s in range(S):
            b0, b1, b2, a1, a2 = _sos_coefs(sos_ptr, c, S, s)
            zo = (r64 * S + s) * 2
            z1 = tl.load(z_ptr + zo, mask=rm, other=0.0)
            z2 = tl.load(z_ptr + zo + 1, mask=rm, other=0.0)
            ps = wp + (s % NSLOT) * PV
            pd = wp + ((s + 1) % NSLOT) * PV
            for _i in range(n):
                v = tl.load(ps)
                out = b0 * v + z1
                z1 = b1 * v - a1 * out + z2
                z2 = b2 * v - a2 * out
                tl.store(pd, out)
                ps += RV
                pd += RV
            tl.store(z_ptr + zo, z1, mask=rm)
            tl.store(z_ptr + zo + 1, z2, mask=rm)

    @triton.jit
    def _sos_block(xp, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, NSLOT, CK: tl.constexpr):
        # n samples of the rows (xp: their first sample in x) into slot 0 of the scratch
        # (NSLOT, CK, RP) at wp and through the S sections (sos_planes)
        load_plane(xp, wp, n, RV)
        sos_planes(n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, RV * CK, NSLOT)

    @triton.jit
    def _sos_fwd_kernel(
        x_ptr, xrow_ptr, sos_ptr, crow_ptr, z_ptr, y_ptr, ck_ptr, w_ptr, R, RP, T, S,
        KEEP: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, S, 2): zi on entry, zf on exit; ck (R, nb, S, 2) (KEEP); w (2, CK, RP) scratch
        rm, r64, rr64, RV, xr, c = row_block(xrow_ptr, crow_ptr, R, RP, BLOCK)
        wp = w_ptr + r64
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            if KEEP:
                copy_states(z_ptr, ck_ptr, r64, rm, b, nb, 2 * S, True)
            _sos_block(x_ptr + xr * T + t0, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, 2, CK)
            store_plane(wp + (S % 2) * (RV * CK), y_ptr + r64 * T + t0, n, RV, rm)
            tl.debug_barrier()

    @triton.jit
    def _sos_bwd_kernel(
        gy_ptr, x_ptr, xrow_ptr, sos_ptr, crow_ptr, z_ptr, lam_ptr, gx_ptr, gc_ptr, ck_ptr,
        w_ptr, g_ptr, R, RP, T, S,
        WANT_X: tl.constexpr, CK: tl.constexpr, BLOCK: tl.constexpr,
    ):  # fmt: skip
        # z (R, S, 2) scratch states; lam (R, S, 2): gzf on entry, gzi on exit; gc (R, S, 6)
        # zeros on entry; ck (R, nb, S, 2) the forward's checkpoints; w (S + 1, CK, RP),
        # g (CK, RP) scratch
        rm, r64, rr64, RV, xr, c = row_block(xrow_ptr, crow_ptr, R, RP, BLOCK)
        PV = RV * CK
        wp = w_ptr + r64
        gp = g_ptr + r64
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b, t0, n = reverse_block(bb, nb, T, CK)
            copy_states(z_ptr, ck_ptr, r64, rm, b, nb, 2 * S, False)
            _sos_block(x_ptr + xr * T + t0, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, S + 1, CK)
            load_plane(gy_ptr + rr64 * T + t0, gp, n, RV)
            tl.debug_barrier()
            for ss in range(S):
                s = S - 1 - ss
                b0, b1, b2, a1, a2 = _sos_coefs(sos_ptr, c, S, s)
                lo = (r64 * S + s) * 2
                l1 = tl.load(lam_ptr + lo, mask=rm, other=0.0)
                l2 = tl.load(lam_ptr + lo + 1, mask=rm, other=0.0)
                go = gc_ptr + (r64 * S + s) * 6
                gb0 = tl.load(go, mask=rm, other=0.0)
                gb1 = tl.load(go + 1, mask=rm, other=0.0)
                gb2 = tl.load(go + 2, mask=rm, other=0.0)
                ga1 = tl.load(go + 4, mask=rm, other=0.0)
                ga2 = tl.load(go + 5, mask=rm, other=0.0)
                pg = gp + (n - 1) * RV
                pv = wp + s * PV + (n - 1) * RV
                for _ii in range(n):
                    v = tl.load(pv)
                    out = tl.load(pv + PV)
                    G = tl.load(pg) - a1 * l1 - a2 * l2
                    tl.store(pg, b0 * G + b1 * l1 + b2 * l2)
                    gb0 += G * v
                    gb1 += l1 * v
                    gb2 += l2 * v
                    ga1 -= l1 * out
                    ga2 -= l2 * out
                    l2 = l1
                    l1 = G
                    pg -= RV
                    pv -= RV
                tl.store(lam_ptr + lo, l1, mask=rm)
                tl.store(lam_ptr + lo + 1, l2, mask=rm)
                tl.store(go, gb0, mask=rm)
                tl.store(go + 1, gb1, mask=rm)
                tl.store(go + 2, gb2, mask=rm)
                tl.store(go + 4, ga1, mask=rm)
                tl.store(go + 5, ga2, mask=rm)
            if WANT_X:
                store_plane(gp, gx_ptr + r64 * T + t0, n, RV, rm)
            tl.debug_barrier()


def _fwd(
    x, xrow, sos, crow, zi, y, zf, ck, block: int = tc.BLOCK_ROWS, fusion: bool | None = None
) -> None:
    # fusion=False: no fused multiply-adds (the values of the CPU kernel); None: Triton's default
    R, T = y.shape
    _sos_fwd_kernel[tc.grid(R, block)](
        x, xrow, sos, crow, zf, y, ck, tc.scratch(2, CK, R, block, x.device), R,
        tc.padded(R, block), T, sos.shape[1], KEEP=ck.shape[1] > 0, CK=CK, BLOCK=block,
        num_warps=1, enable_fp_fusion=fusion,
    )  # fmt: skip


def _bwd(
    gy, gzf, x, xrow, sos, crow, zi, ck, gx, gsos, gzi, want_x, want_c, block=tc.BLOCK_ROWS
) -> None:
    R, T = gy.shape
    S = sos.shape[1]
    dev = x.device
    _sos_bwd_kernel[tc.grid(R, block)](
        gy, x, xrow, sos, crow, torch.empty_like(zi), gzi, gx, gsos, ck,
        tc.scratch(S + 1, CK, R, block, dev), tc.scratch(1, CK, R, block, dev), R,
        tc.padded(R, block), T, S, WANT_X=want_x, CK=CK, BLOCK=block, num_warps=1,
    )  # fmt: skip


KERNELS = RowKernels(_fwd, _bwd, tc.require)
#: Triton version of :data:`lhotse_amt.kernels.sos_grad.sos_forward` (same arguments and
#: results; options ``block``: rows per program, ``fusion=False``: no fused multiply-adds)
sos_forward = KERNELS.forward
#: Triton version of :data:`lhotse_amt.kernels.sos_grad.sos_backward`
sos_backward = KERNELS.backward

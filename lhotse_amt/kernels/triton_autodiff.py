"""Triton kernels (CUDA) of the differentiable recursion operators in :mod:`lhotse_amt.ops`.

Same functions, arguments, results and semantics as the numba kernels in
:mod:`lhotse_amt.kernels.autodiff` (the CPU side of the operators), which document the
recursions, the row maps ``xrow``/``crow`` and the adjoint formulas. Every recursion runs in
float64 whatever the tensor dtype; ``y``/``gx`` come back in ``x``'s dtype, states and
coefficient gradients in float64 (final states in ``zi``'s dtype).

One program handles a block of rows (the rows are vectorised across the program) and walks
through time inside the kernel; a cascade runs section by section over each block of
:data:`CHECKPOINT_BLOCK` samples, the signals between sections in a float64 scratch buffer
(the recursions' states stay in registers). The forwards keep the states at the start of
every block (the checkpoints); each
backward runs from the last block to the first: it recomputes the block's internal values
from its checkpoint into a float64 scratch buffer the host wrapper allocates (rows
innermost, so the accesses of a program are coalesced), then runs the adjoint recursion
back over the block. No host loop over blocks: one launch per call.

Importing this module never fails: without Triton (or without a CUDA device)
:func:`available` is ``False``. Set ``TRITON_INTERPRET=1`` to run the kernels on CPU
tensors with Triton's interpreter (tests).
"""

from __future__ import annotations

import torch

from . import triton_interpreted
from .autodiff import CHECKPOINT_BLOCK, checkpoint_blocks

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    _HAVE_TRITON = True
except Exception:  # pragma: no cover
    _HAVE_TRITON = False

__all__ = [
    "available",
    "interpreted",
    "sos_forward",
    "sos_backward",
    "resonator_forward",
    "resonator_backward",
    "adaptation_forward",
    "adaptation_backward",
]

#: rows per program
BLOCK_ROWS = 32
_CK = CHECKPOINT_BLOCK


def interpreted() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return triton_interpreted()


def available() -> bool:
    """True when the Triton kernels can run (CUDA device, or Triton's CPU interpreter)."""
    return _HAVE_TRITON and (torch.cuda.is_available() or interpreted())


def _check() -> None:
    if not available():
        raise RuntimeError("Triton kernels need triton and a CUDA device (or TRITON_INTERPRET=1)")


if _HAVE_TRITON:
    # ----------------------------------------------------------------------------------
    # second-order sections (transposed direct form II)
    # ----------------------------------------------------------------------------------

    @triton.jit
    def _sos_block(xp, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, NSLOT, CK: tl.constexpr):
        # n samples of the rows (xp: their first sample in x) through the S sections,
        # section by section: w slot s holds section s's input (slot 0: x), slot
        # (s + 1) % NSLOT its output (wp: slot 0, sample 0 of the rows in the scratch
        # (NSLOT, CK, RP)); the section states z (R, S, 2) float64 are advanced in place
        p = wp
        for _i in range(n):
            tl.store(p, tl.load(xp).to(tl.float64))
            xp += 1
            p += RV
        PV = RV * CK
        for s in range(S):
            cb = (c * S + s) * 6
            b0 = tl.load(sos_ptr + cb)
            b1 = tl.load(sos_ptr + cb + 1)
            b2 = tl.load(sos_ptr + cb + 2)
            a1 = tl.load(sos_ptr + cb + 4)
            a2 = tl.load(sos_ptr + cb + 5)
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
    def _sos_states(z_ptr, ck_ptr, r64, rm, b, nb, S, TO_CK: tl.constexpr):
        # section states z (R, S, 2) <-> checkpoint b of ck (R, nb, S, 2)
        for s in range(S):
            for k in range(2):
                zo = (r64 * S + s) * 2 + k
                co = ((r64 * nb + b) * S + s) * 2 + k
                if TO_CK:
                    tl.store(ck_ptr + co, tl.load(z_ptr + zo, mask=rm, other=0.0), mask=rm)
                else:
                    tl.store(z_ptr + zo, tl.load(ck_ptr + co, mask=rm, other=0.0), mask=rm)

    @triton.jit
    def _sos_fwd_kernel(
        x_ptr,
        xrow_ptr,
        sos_ptr,
        crow_ptr,
        z_ptr,
        y_ptr,
        ck_ptr,
        w_ptr,
        R,
        RP,
        T,
        S,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, S, 2): zi on entry, zf on exit; ck (R, nb, S, 2); w (2, CK, RP) scratch
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        wp = w_ptr + r64
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            _sos_states(z_ptr, ck_ptr, r64, rm, b, nb, S, True)
            _sos_block(x_ptr + xr * T + t0, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, 2, CK)
            ps = wp + (S % 2) * (RV * CK)
            yp = y_ptr + r64 * T + t0
            for _i in range(n):
                tl.store(yp, tl.load(ps).to(y_ptr.dtype.element_ty), mask=rm)
                ps += RV
                yp += 1
            tl.debug_barrier()

    @triton.jit
    def _sos_bwd_kernel(
        gy_ptr,
        x_ptr,
        xrow_ptr,
        sos_ptr,
        crow_ptr,
        z_ptr,
        lam_ptr,
        gx_ptr,
        gc_ptr,
        ck_ptr,
        w_ptr,
        g_ptr,
        R,
        RP,
        T,
        S,
        WANT_X: tl.constexpr,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, S, 2) scratch states; lam (R, S, 2): gzf on entry, gzi on exit; gc (R, S, 6)
        # zeros on entry; ck (R, nb, S, 2) the forward's checkpoints; w (S + 1, CK, RP),
        # g (CK, RP) scratch
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        rr64 = rr.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        PV = RV * CK
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        wp = w_ptr + r64
        gp = g_ptr + r64
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b = nb - 1 - bb
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            _sos_states(z_ptr, ck_ptr, r64, rm, b, nb, S, False)
            _sos_block(x_ptr + xr * T + t0, n, sos_ptr, c, S, z_ptr, r64, rm, wp, RV, S + 1, CK)
            gyp = gy_ptr + rr64 * T + t0
            pg = gp
            for _i in range(n):
                tl.store(pg, tl.load(gyp).to(tl.float64))
                gyp += 1
                pg += RV
            tl.debug_barrier()
            for ss in range(S):
                s = S - 1 - ss
                cb = (c * S + s) * 6
                b0 = tl.load(sos_ptr + cb)
                b1 = tl.load(sos_ptr + cb + 1)
                b2 = tl.load(sos_ptr + cb + 2)
                a1 = tl.load(sos_ptr + cb + 4)
                a2 = tl.load(sos_ptr + cb + 5)
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
                pg = gp
                gxp = gx_ptr + r64 * T + t0
                for _i in range(n):
                    tl.store(gxp, tl.load(pg).to(gx_ptr.dtype.element_ty), mask=rm)
                    pg += RV
                    gxp += 1
            tl.debug_barrier()

    # ----------------------------------------------------------------------------------
    # cascade of K complex one-pole sections with a complex gain, real output
    # ----------------------------------------------------------------------------------

    @triton.jit
    def _res_block(xp, n, pr, pi, K, z_ptr, r64, rm, rp, RV, PV, RECORD: tl.constexpr):
        # n samples of the rows (xp: their first sample in x) through the K sections,
        # section by section. Scratch planes (CK, RP) from rp: 0-3 the chain (slot 0 real,
        # imaginary, slot 1 real, imaginary: section q reads slot q % 2, writes the other;
        # u_K ends in slot K % 2); RECORD: 4 + q / 4 + K + q the section states before
        # each sample (real / imaginary). States z (R, K, 2) float64 advanced in place.
        p = rp
        for _i in range(n):
            tl.store(p, tl.load(xp).to(tl.float64))
            tl.store(p + PV, tl.zeros(RV.shape, tl.float64))
            xp += 1
            p += RV
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
    def _res_fwd_kernel(
        x_ptr,
        xrow_ptr,
        pole_ptr,
        gain_ptr,
        mode_ptr,
        crow_ptr,
        z_ptr,
        y_ptr,
        ck_ptr,
        rec_ptr,
        R,
        RP,
        T,
        K,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, K, 2): zi on entry, zf on exit; ck (R, nb, K, 2); rec (4, CK, RP) scratch
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        PV = RV * CK
        rp = rec_ptr + r64
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        pr = tl.load(pole_ptr + c * 2)
        pi = tl.load(pole_ptr + c * 2 + 1)
        gr = tl.load(gain_ptr + c * 2)
        gi = tl.load(gain_ptr + c * 2 + 1)
        ab = tl.load(mode_ptr + c) != 0
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            for k in range(2 * K):
                v = tl.load(z_ptr + r64 * (2 * K) + k, mask=rm, other=0.0)
                tl.store(ck_ptr + (r64 * nb + b) * (2 * K) + k, v, mask=rm)
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
        gy_ptr,
        x_ptr,
        xrow_ptr,
        pole_ptr,
        gain_ptr,
        mode_ptr,
        crow_ptr,
        ck_ptr,
        z_ptr,
        lam_ptr,
        gx_ptr,
        gp_ptr,
        gg_ptr,
        rec_ptr,
        R,
        RP,
        T,
        K,
        WANT_X: tl.constexpr,
        WANT_C: tl.constexpr,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, K, 2) scratch states; lam (R, K, 2): gzf on entry, gzi on exit;
        # rec (2 K + 6, CK, RP) scratch: the chain (4 planes), the section states before
        # each sample (2 K planes) and the adjoint of the current section's output (2)
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        rr64 = rr.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        PV = RV * CK
        rp = rec_ptr + r64
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        pr = tl.load(pole_ptr + c * 2)
        pi = tl.load(pole_ptr + c * 2 + 1)
        gr = tl.load(gain_ptr + c * 2)
        gi = tl.load(gain_ptr + c * 2 + 1)
        ab = tl.load(mode_ptr + c) != 0
        gpr = tl.zeros([BLOCK], tl.float64)
        gpi = tl.zeros([BLOCK], tl.float64)
        ggr = tl.zeros([BLOCK], tl.float64)
        ggi = tl.zeros([BLOCK], tl.float64)
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b = nb - 1 - bb
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            for k in range(2 * K):
                v = tl.load(ck_ptr + (r64 * nb + b) * (2 * K) + k, mask=rm, other=0.0)
                tl.store(z_ptr + r64 * (2 * K) + k, v, mask=rm)
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
                pg = rp + (2 * K + 4) * PV
                gxp = gx_ptr + r64 * T + t0
                for _i in range(n):
                    tl.store(gxp, tl.load(pg).to(gx_ptr.dtype.element_ty), mask=rm)
                    pg += RV
                    gxp += 1
            tl.debug_barrier()
        if WANT_C:
            tl.store(gp_ptr + r64 * 2, gpr, mask=rm)
            tl.store(gp_ptr + r64 * 2 + 1, gpi, mask=rm)
            tl.store(gg_ptr + r64 * 2, ggr, mask=rm)
            tl.store(gg_ptr + r64 * 2 + 1, ggi, mask=rm)

    # ----------------------------------------------------------------------------------
    # adaptation loops with the overshoot limiter
    # ----------------------------------------------------------------------------------

    @triton.jit
    def _lim_e(w, m):
        # e = exp(-2 (w - 1) / m), the argument clamped to [-37.5, 0] as on the CPU
        t = -2.0 * (w - 1.0) / m
        t = tl.where(t > -37.5, t, -37.5)
        t = tl.where(t < 0.0, t, 0.0)
        return tl.exp(t)

    @triton.jit
    def _adapt_block(
        xp, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
        USE_LIMIT: tl.constexpr, RECORD: tl.constexpr,
    ):  # fmt: skip
        # n samples of the rows (xp: their first sample in x) through the J loops, loop
        # by loop. Scratch planes (CK, RP) from rp: 0, 1 the chain (loop j reads slot
        # j % 2, writes the other; the output ends in slot J % 2); RECORD: per loop j the
        # terms of the adjoint step at planes 3 + p J + j: s - v_out (p = 0), 1 / s (1),
        # w / s (2), d lim / dw (3) and d lim / dm (4) (USE_LIMIT only). States z (R, J)
        # float64 advanced in place.
        p = rp
        for _i in range(n):
            q0 = tl.load(xp).to(tl.float64)
            tl.store(p, tl.where(q0 > minlvl, q0, minlvl))
            xp += 1
            p += RV
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
    def _adapt_fwd_kernel(
        x_ptr,
        xrow_ptr,
        a_ptr,
        m_ptr,
        crow_ptr,
        z_ptr,
        y_ptr,
        ck_ptr,
        rec_ptr,
        R,
        RP,
        T,
        J,
        minlvl,
        USE_LIMIT: tl.constexpr,
        KEEP: tl.constexpr,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, J): zi on entry, zf on exit; ck (R, nb, J) (KEEP); rec (2, CK, RP) scratch
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        PV = RV * CK
        rp = rec_ptr + r64
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        nb = tl.cdiv(T, CK)
        for b in range(nb):
            if KEEP:
                for j in range(J):
                    v = tl.load(z_ptr + r64 * J + j, mask=rm, other=0.0)
                    tl.store(ck_ptr + (r64 * nb + b) * J + j, v, mask=rm)
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            _adapt_block(
                x_ptr + xr * T + t0, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
                USE_LIMIT, False,
            )  # fmt: skip
            ps = rp + (J % 2) * PV
            yp = y_ptr + r64 * T + t0
            for _i in range(n):
                tl.store(yp, tl.load(ps).to(y_ptr.dtype.element_ty), mask=rm)
                ps += RV
                yp += 1
            tl.debug_barrier()

    @triton.jit
    def _adapt_bwd_kernel(
        gy_ptr,
        x_ptr,
        xrow_ptr,
        a_ptr,
        m_ptr,
        crow_ptr,
        ck_ptr,
        z_ptr,
        lam_ptr,
        gx_ptr,
        ga_ptr,
        gm_ptr,
        rec_ptr,
        R,
        RP,
        T,
        J,
        minlvl,
        USE_LIMIT: tl.constexpr,
        WANT_X: tl.constexpr,
        CK: tl.constexpr,
        BLOCK: tl.constexpr,
    ):
        # z (R, J) scratch states; lam (R, J): gzf on entry, gzi on exit; ga, gm (R, J)
        # zeros on entry; rec (3 + 5 J, CK, RP) scratch: the chain (2 planes), the adjoint
        # of the current loop's output (plane 2) and the recorded terms (see _adapt_block)
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        r64 = r.to(tl.int64)
        rr64 = rr.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        PV = RV * CK
        rp = rec_ptr + r64
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        nb = tl.cdiv(T, CK)
        for bb in range(nb):
            b = nb - 1 - bb
            t0 = b * CK
            n = tl.minimum(CK, T - t0)
            for j in range(J):
                v = tl.load(ck_ptr + (r64 * nb + b) * J + j, mask=rm, other=1.0)
                tl.store(z_ptr + r64 * J + j, v, mask=rm)
            tl.debug_barrier()
            _adapt_block(
                x_ptr + xr * T + t0, n, a_ptr, m_ptr, c, J, z_ptr, r64, rm, rp, RV, PV, minlvl,
                USE_LIMIT, True,
            )  # fmt: skip
            pg = rp + 2 * PV
            gyp = gy_ptr + rr64 * T + t0
            for _i in range(n):
                tl.store(pg, tl.load(gyp).to(tl.float64))
                pg += RV
                gyp += 1
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


# --------------------------------------------------------------------------------------
# host wrappers (same arguments and results as those of lhotse_amt.kernels.autodiff)
# --------------------------------------------------------------------------------------


def _f64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.float64).contiguous()


def _i64(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.int64).contiguous()


def _i32(t: torch.Tensor) -> torch.Tensor:
    return t.detach().to(torch.int32).contiguous()


def _check_ck(ck: torch.Tensor, shape: tuple[int, ...]) -> None:
    if tuple(ck.shape) != shape:
        raise ValueError(
            f"ck: expected the forward's checkpoints of shape {shape}, got {tuple(ck.shape)}"
        )


def _padded(R: int, block: int) -> int:
    # scratch columns: every program's rows, so that scratch accesses need no mask
    return triton.cdiv(R, block) * block


def _grid(R: int, block: int) -> tuple[int]:
    return (triton.cdiv(R, block),)


def sos_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    sos: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``, ``xrow (R,)``, ``sos (Rc, S, 6)``, ``crow (R,)``, ``zi (R, S, 2)`` ->
    ``y (R, T)`` in ``x``'s dtype, ``zf (R, S, 2)`` in ``zi``'s and the backward's
    checkpoints ``(R, checkpoint_blocks(T), S, 2)`` float64."""
    _check()
    R, T = xrow.shape[0], x.shape[1]
    S = sos.shape[1]
    dev = x.device
    y = torch.empty((R, T), dtype=x.dtype, device=dev)
    zf = _f64(zi).clone()
    ck = torch.empty((R, checkpoint_blocks(T), S, 2), dtype=torch.float64, device=dev)
    if R > 0 and T > 0:
        RP = _padded(R, block)
        w = torch.empty((2, _CK, RP), dtype=torch.float64, device=dev)
        _sos_fwd_kernel[_grid(R, block)](
            x.detach().contiguous(), _i64(xrow), _f64(sos), _i64(crow), zf, y, ck, w, R, RP, T,
            S, CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    return y, zf.to(zi.dtype), ck


def sos_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    sos: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row gradients ``gx (R, T)``, ``gsos (R, S, 6)``, ``gzi (R, S, 2)`` (float64
    for the coefficient and state gradients, ``x``'s dtype for ``gx``) from the forward's
    checkpoints ``ck``."""
    _check()
    R, T = gy.shape
    S = sos.shape[1]
    dev = x.device
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype, device=dev)
    gc = torch.zeros((R, S, 6), dtype=torch.float64, device=dev)
    lam = _f64(gzf).clone()
    if R > 0 and T > 0:
        _check_ck(ck, (R, checkpoint_blocks(T), S, 2))
        RP = _padded(R, block)
        z = torch.empty((R, S, 2), dtype=torch.float64, device=dev)
        w = torch.empty((S + 1, _CK, RP), dtype=torch.float64, device=dev)
        g = torch.empty((_CK, RP), dtype=torch.float64, device=dev)
        _sos_bwd_kernel[_grid(R, block)](
            gy.detach().contiguous(), x.detach().contiguous(), _i64(xrow), _f64(sos),
            _i64(crow), z, lam, gx, gc, _f64(ck), w, g, R, RP, T, S,
            WANT_X=bool(want_x), CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    if not want_c:
        gc.zero_()
    return gx, gc, lam


def resonator_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    mode: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``; ``pole``, ``gain`` ``(Rc, 2)`` (real, imaginary); ``mode (Rc,)``
    (0: ``Re``, 1: ``|.|``); ``zi (R, K, 2)`` -> ``y (R, T)``, ``zf (R, K, 2)`` and the
    backward's checkpoints ``(R, checkpoint_blocks(T), K, 2)`` float64."""
    _check()
    R, T = xrow.shape[0], x.shape[1]
    K = zi.shape[1]
    dev = x.device
    y = torch.empty((R, T), dtype=x.dtype, device=dev)
    zf = _f64(zi).clone()
    ck = torch.empty((R, checkpoint_blocks(T), K, 2), dtype=torch.float64, device=dev)
    if R > 0 and T > 0:
        RP = _padded(R, block)
        rec = torch.empty((4, _CK, RP), dtype=torch.float64, device=dev)
        _res_fwd_kernel[_grid(R, block)](
            x.detach().contiguous(), _i64(xrow), _f64(pole), _f64(gain), _i32(mode), _i64(crow),
            zf, y, ck, rec, R, RP, T, K,
            CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    return y, zf.to(zi.dtype), ck


def resonator_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    pole: torch.Tensor,
    gain: torch.Tensor,
    mode: torch.Tensor,
    crow: torch.Tensor,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row ``gx (R, T)``, ``gpole (R, 2)``, ``ggain (R, 2)``, ``gzi (R, K, 2)``
    (complex gradients as PyTorch defines them: ``dL/dRe + i dL/dIm``)."""
    _check()
    R, T = gy.shape
    K = zi.shape[1]
    dev = x.device
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype, device=dev)
    gp = torch.zeros((R, 2), dtype=torch.float64, device=dev)
    gg = torch.zeros((R, 2), dtype=torch.float64, device=dev)
    gzi = _f64(gzf).clone()
    if R > 0 and T > 0:
        _check_ck(ck, (R, checkpoint_blocks(T), K, 2))
        RP = _padded(R, block)
        rec = torch.empty((2 * K + 6, _CK, RP), dtype=torch.float64, device=dev)
        z = torch.empty((R, K, 2), dtype=torch.float64, device=dev)
        _res_bwd_kernel[_grid(R, block)](
            gy.detach().contiguous(), x.detach().contiguous(), _i64(xrow), _f64(pole),
            _f64(gain), _i32(mode), _i64(crow), _f64(ck), z, gzi, gx, gp, gg, rec, R, RP, T, K,
            WANT_X=bool(want_x), WANT_C=bool(want_c), CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    return gx, gp, gg, gzi


def adaptation_forward(
    x: torch.Tensor,
    xrow: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    crow: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    zi: torch.Tensor,
    keep: bool,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``x (Rx, T)``, ``a``, ``m`` ``(Rc, J)``, ``zi (R, J)`` -> raw loop output
    ``v (R, T)``, final states ``(R, J)`` and (``keep``) the checkpoints of the backward
    ``(R, checkpoint_blocks(T), J)`` float64 (else ``(R, 0, J)``)."""
    _check()
    R, T = xrow.shape[0], x.shape[1]
    J = zi.shape[1]
    dev = x.device
    y = torch.empty((R, T), dtype=x.dtype, device=dev)
    zf = _f64(zi).clone()
    ck = torch.empty((R, checkpoint_blocks(T) if keep else 0, J), dtype=torch.float64, device=dev)
    if R > 0 and T > 0:
        RP = _padded(R, block)
        rec = torch.empty((2, _CK, RP), dtype=torch.float64, device=dev)
        _adapt_fwd_kernel[_grid(R, block)](
            x.detach().contiguous(), _i64(xrow), _f64(a), _f64(m), _i64(crow), zf, y, ck, rec,
            R, RP, T, J, float(minlvl),
            USE_LIMIT=bool(use_limit), KEEP=bool(keep), CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    return y, zf.to(zi.dtype), ck


def adaptation_backward(
    gy: torch.Tensor,
    gzf: torch.Tensor,
    x: torch.Tensor,
    xrow: torch.Tensor,
    a: torch.Tensor,
    m: torch.Tensor,
    crow: torch.Tensor,
    minlvl: float,
    use_limit: bool,
    zi: torch.Tensor,
    ck: torch.Tensor,
    want_x: bool,
    want_c: bool,
    block: int = BLOCK_ROWS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row ``gx (R, T)``, ``ga (R, J)``, ``gm (R, J)``, ``gzi (R, J)`` from the
    forward's checkpoints ``ck``."""
    _check()
    R, T = gy.shape
    J = zi.shape[1]
    dev = x.device
    gx = torch.empty((R, T) if want_x else (R, 0), dtype=x.dtype, device=dev)
    ga = torch.zeros((R, J), dtype=torch.float64, device=dev)
    gm = torch.zeros((R, J), dtype=torch.float64, device=dev)
    gzi = _f64(gzf).clone()
    if R > 0 and T > 0:
        _check_ck(ck, (R, checkpoint_blocks(T), J))
        RP = _padded(R, block)
        planes = 3 + (5 if use_limit else 3) * J
        rec = torch.empty((planes, _CK, RP), dtype=torch.float64, device=dev)
        z = torch.empty((R, J), dtype=torch.float64, device=dev)
        _adapt_bwd_kernel[_grid(R, block)](
            gy.detach().contiguous(), x.detach().contiguous(), _i64(xrow), _f64(a), _f64(m),
            _i64(crow), _f64(ck), z, gzi, gx, ga, gm, rec, R, RP, T, J, float(minlvl),
            USE_LIMIT=bool(use_limit), WANT_X=bool(want_x), CK=_CK, BLOCK=block, num_warps=1,
        )  # fmt: skip
    if not want_c:
        ga.zero_()
        gm.zero_()
    return gx, ga, gm, gzi

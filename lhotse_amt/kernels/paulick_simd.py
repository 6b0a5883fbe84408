"""The fused Paulick et al. (2024) front end with its states in vector registers.

DRNL -> IHC -> adaptation loops -> FIR decimator: the recursion of
:func:`lhotse_amt.kernels.paulick_frontend.frontend` (its channel-vectorised kernel keeps every
filter state in memory, and loads and stores, not arithmetic, set its speed). Here the
channels are cut into blocks of 8 (one float64 vector, :mod:`lhotse_amt.kernels.simd`) and
groups of up to ``_GROUP`` blocks; each group runs over the signal in chunks of ``_CHUNK``
samples, in three passes per chunk:

1. DRNL, block by block, with the block's 26 filter states in registers for the whole
   chunk (time innermost), into a small buffer ``(K - 1 + chunk, G, 8)``;
2. IHC and adaptation loops in place on the buffer, the group's blocks side by side (the
   adaptation loops are a serial chain of divisions and limiter evaluations per sample;
   independent blocks fill the pipeline while one waits);
3. the FIR decimator at the kept samples ``n = R m`` only, reading the buffer (whose first
   ``K - 1`` rows hold the previous values, so no ring is needed).

The code is generated per structure (numbers of DRNL sections per path, adaptation loops,
decimator taps and factor, group size, limiter and float32-rounding flags; numba caches each
on disk), for the broken-stick exponent 1/4 of every DRNL parameter set in this package;
other exponents, and the stage-wise outputs, use the channel-vectorised kernel.

Each output sample's arithmetic is that of the channel-vectorised kernel in the same order,
with explicit fused multiply-adds (results agree to a few ulp before the low-frequency DRNL
sections and the adaptation loops amplify last-bit differences, to ~1e-11 relative in
float64). Two differences in form: the overshoot limiter is evaluated for every lane and
selected where ``x > 1`` (no branch), and the decimator sums its taps phase by phase (taps
``q = p, p + R, ...`` of each phase ``p``, then the ``R`` partial sums in phase order, the
grouping of the stage-wise :func:`lhotse_amt.kernels.paulick.fir`). Every output has one
fixed operation order, so chunked and one-shot processing agree bit for bit.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .fastmath import NO_CFUNC, denormals_off, restore_fp_mode
from .jobs import literal_entry, run_jobs
from .simd import WIDTH, Codegen, VecBuilder, group_job, vector_codegen

__all__ = ["Packed", "frontend_kernel", "pack", "supported"]

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)
_I64 = ir.IntType(64)
_N_IHC = 12  # scale, gmax, x0, 1/s0, 1/s1, zmax, dt/Cm, Gkf, Gks, dEP, dKf, dKs
_N_LOOP = 6  # per adaptation loop: a, 1 - a, 2 m, m - 1, -2 / m, m


def _layout(SL: int, S1: int, S2: int, J: int) -> dict[str, int]:
    """Row offsets of the parameter block ``P (NP, 8)`` and the state block ``Z (NZ, 8)``."""
    o: dict[str, int] = {"g": 0, "lin": 1}
    o["nl1"] = o["lin"] + 5 * SL
    o["nl2"] = o["nl1"] + 5 * S1
    o["stick"] = o["nl2"] + 5 * S2  # a, b
    o["ihc"] = o["stick"] + 2
    o["loops"] = o["ihc"] + _N_IHC
    o["out"] = o["loops"] + _N_LOOP * J  # minlvl, c0, scale
    o["NP"] = o["out"] + 3
    o["zlin"] = 0
    o["z1"] = 2 * SL
    o["z2"] = o["z1"] + 2 * S1
    o["w"] = o["z2"] + 2 * S2
    o["s"] = o["w"] + 1
    o["NZ"] = o["s"] + J
    return o


def _lits(*ts):  # noqa: ANN001, ANN202
    """The values of integer-literal types, or None when one is not a literal."""
    if not all(isinstance(t, types.IntegerLiteral) for t in ts):
        return None
    return tuple(int(t.literal_value) for t in ts)


def _sections(vb: VecBuilder, par, zslots, v, off: int, zoff: int, n: int):  # noqa: ANN001, ANN202
    """``n`` transposed-direct-form-II biquads in series on ``v``: ``o = b0 w + z0``,
    ``z0 = b1 w - a1 o + z1``, ``z1 = b2 w - a2 o`` (parameter rows ``off + 5 s + (b0, b1,
    b2, -a1, -a2)``, state slots ``zoff + 2 s + (0, 1)``)."""
    b = vb.b
    for s in range(n):
        b0, b1, b2, na1, na2 = (par(off + 5 * s + i) for i in range(5))
        z0s, z1s = zslots[zoff + 2 * s], zslots[zoff + 2 * s + 1]
        z0, z1 = b.load(z0s), b.load(z1s)
        o = vb.fma(b0, v, z0)
        b.store(vb.fma(b1, v, vb.fma(na1, o, z1)), z0s)
        b.store(vb.fma(na2, o, vb.mul(b2, v)), z1s)
        v = o
    return v


def _state_slots(vb: VecBuilder, zp, rows: range) -> dict[int, ir.Value]:  # noqa: ANN001
    return {i: vb.var(vb.load(zp, i)) for i in rows}


def _store_states(vb: VecBuilder, zp, slots: dict[int, ir.Value]) -> None:  # noqa: ANN001
    for i, slot in slots.items():
        vb.store(vb.b.load(slot), zp, i)


def _in_f32(vb: VecBuilder, per_block: list, fn):  # noqa: ANN001, ANN202
    """``fn`` on float32 copies of each block's float64 arguments (``per_block[g]``), two
    blocks per 16-lane vector (the last alone when the count is odd); the results back in
    float64, per block."""
    vs8 = VecBuilder(vb.b, single=True)
    vs16 = VecBuilder(vb.b, width=2 * WIDTH, single=True)
    out = []
    nG = len(per_block)
    for g in range(0, nG, 2):
        if g + 1 < nG:
            packed = [
                vs8.concat(vb.to(a, vs8), vb.to(c, vs8))
                for a, c in zip(per_block[g], per_block[g + 1])
            ]
            res = fn(vs16, *packed)
            pairs = [vs8.halves(r) for r in res]
            out.append([vs8.to(p[0], vb) for p in pairs])
            out.append([vs8.to(p[1], vb) for p in pairs])
        else:
            res = fn(vs8, *[vb.to(a, vs8) for a in per_block[g]])
            out.append([vs8.to(r, vb) for r in res])
    return out


def adaptation_loops_blocks(
    vb: VecBuilder, vv: list, state: list, loop_par, nJ: int, use_limit: bool, round32: bool
) -> list:  # noqa: ANN001
    """One sample of the ``nJ`` adaptation loops (Dau et al. 1996; the overshoot limiter of
    Muenkner et al. 1996 with ``use_limit``) on the vectors ``vv[g]`` of several blocks,
    loop by loop with the blocks side by side (the divisions of independent blocks fill
    the pipeline): divide by the loop state, limit where the quotient exceeds 1 (every
    lane evaluated, selected), update the state. ``state[g][j]``: the state slot of loop
    ``j`` of block ``g``; ``loop_par(g, j, i)``: loop ``j``'s ``a, 1 - a, 2 m, m - 1,
    -2 / m, m`` (``i = 0 ... 5``). ``round32``: the limiter's correction ``m (1 - e) /
    (1 + e)`` in float32 (absolute error < 1e-6 on a value >= 1), as the
    channel-vectorised kernels of float32 models. Returns the outputs."""
    builder = vb.b
    one = vb.const(1.0)
    nG = len(vv)
    vv = list(vv)
    for j in range(nJ):
        xs, olds = [], []
        for g in range(nG):
            s_old = builder.load(state[g][j])
            olds.append(s_old)
            xs.append(vb.div(vv[g], s_old))
        if use_limit:
            if round32:

                def correction(u: VecBuilder, t, m):  # noqa: ANN001, ANN202
                    t = u.minimum(u.maximum(t, u.const(-37.5)), u.const(0.0))
                    e = u.exp32_nonpos(t)
                    one32 = u.const(1.0)
                    return (u.div(u.mul(m, u.sub(one32, e)), u.add(one32, e)),)

                targs = [
                    (vb.mul(vb.sub(xs[g], one), loop_par(g, j, 4)), loop_par(g, j, 5))
                    for g in range(nG)
                ]
                lims = [vb.add(one, c[0]) for c in _in_f32(vb, targs, correction)]
            else:
                lims = []
                for g in range(nG):
                    e = vb.exp(vb.mul(vb.sub(xs[g], one), loop_par(g, j, 4)))
                    lim = vb.div(loop_par(g, j, 2), vb.add(one, e))
                    lims.append(vb.sub(lim, loop_par(g, j, 3)))
            xs = [vb.select(vb.gt(xs[g], one), lims[g], xs[g]) for g in range(nG)]
        for g in range(nG):
            vv[g] = xs[g]
            upd = vb.mul(loop_par(g, j, 1), xs[g])
            builder.store(vb.fma(loop_par(g, j, 0), olds[g], upd), state[g][j])
    return vv


@intrinsic
def _drnl8(typingctx, x, n0, nt, P, Z, buf, row0, g, G, SL, S1, S2):  # noqa: ANN001
    """DRNL of ``x[n0 : n0 + nt]`` for block ``g`` of a group of ``G`` blocks of 8 channels:
    ``P (G, NP, 8)`` parameters, ``Z (G, NZ, 8)`` states (updated), output into
    ``buf (rows, G, 8)`` rows ``row0 ..``."""
    lit = _lits(G, SL, S1, S2)
    if lit is None:
        return None
    nG, nSL, nS1, nS2 = lit
    lay = _layout(nSL, nS1, nS2, 0)
    sig = types.none(x, n0, nt, P, Z, buf, row0, g, G, SL, S1, S2)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        xp = cg.ptr(0)
        # NP / NZ depend on the number of adaptation loops (not a literal here): block g's
        # parameters and states are located through the arrays' shapes
        pp, zp = cg.block_ptrs(args[7], 3, 4)
        bp = cg.ptr(5)
        slots = _state_slots(vb, zp, range(lay["w"]))

        def par(row: int) -> ir.Value:
            return vb.load(pp, row)

        gG = ir.Constant(_I64, nG)
        with cgutils.for_range(builder, args[2]) as loop:
            n = loop.index
            xv = vb.splat(builder.load(builder.gep(xp, [builder.add(args[1], n)])))
            v = _sections(vb, par, slots, vb.mul(par(lay["g"]), xv), lay["lin"], lay["zlin"], nSL)
            u = _sections(vb, par, slots, xv, lay["nl1"], lay["z1"], nS1)
            m = vb.fabs(u)
            lo = vb.mul(par(lay["stick"]), m)
            hi = vb.mul(par(lay["stick"] + 1), vb.sqrt(vb.sqrt(m)))
            u = vb.copysign(vb.select(vb.lt(lo, hi), lo, hi), u)
            u = _sections(vb, par, slots, u, lay["nl2"], lay["z2"], nS2)
            row = builder.add(args[6], n)
            vb.store(vb.add(v, u), bp, builder.add(builder.mul(row, gG), args[7]))
        _store_states(vb, zp, slots)

    return sig, codegen


@intrinsic
def _hair8(typingctx, buf, row0, nt, P, Z, G, SL, S1, S2, J, FLAGS):  # noqa: ANN001
    """IHC and adaptation loops in place on ``buf (rows, G, 8)`` rows ``row0 .. row0 + nt``
    for all ``G`` blocks of a group at once (the adaptation loops are a chain of divisions
    and limiter evaluations per sample: independent blocks side by side keep the pipeline
    full). FLAGS bit 0: overshoot limiter, bit 1: round the output to float32."""
    lit = _lits(G, SL, S1, S2, J, FLAGS)
    if lit is None:
        return None
    nG, nSL, nS1, nS2, nJ, flags = lit
    use_limit, round32 = bool(flags & 1), bool(flags & 2)
    lay = _layout(nSL, nS1, nS2, nJ)
    NP, NZ = lay["NP"], lay["NZ"]
    sig = types.none(buf, row0, nt, P, Z, G, SL, S1, S2, J, FLAGS)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        bp, pp, zp = cg.ptrs(0, 3, 4)
        slots = [_state_slots(vb, zp, range(g * NZ + lay["w"], g * NZ + NZ)) for g in range(nG)]
        one = vb.const(1.0)

        def par(g: int, row: int) -> ir.Value:
            return vb.load(pp, g * NP + row)

        def loop_par(g: int, j: int, i: int) -> ir.Value:
            # loop j: a, 1 - a, 2 m, m - 1, -2 / m, m
            return par(g, lay["loops"] + _N_LOOP * j + i)

        with cgutils.for_range(builder, args[2]) as loop:
            row = builder.add(args[1], loop.index)
            base = builder.mul(row, ir.Constant(_I64, nG))
            vv = []
            zz = []
            for g in range(nG):
                idx = builder.add(base, ir.Constant(_I64, g))
                v = vb.load(bp, idx)
                # IHC (Paulick et al. 2024 circuit, forward Euler step)
                ih = [par(g, lay["ihc"] + i) for i in range(6)]
                scale, gmax, x0, r0, r1, zmax = ih
                z = vb.minimum(vb.sub(x0, vb.mul(scale, v)), zmax)
                zz.append((vb.mul(z, r1), vb.mul(z, r0), gmax))
            # the conductance in float64 even for float32 output: the receptor potential is
            # a small difference from the resting potential (~1e-4 of it near threshold),
            # which would amplify float32 rounding of the conductance ~1e4 times
            conds = [
                vb.div(gm, vb.add(one, vb.mul(vb.exp(a1), vb.add(one, vb.exp(a0)))))
                for a1, a0, gm in zz
            ]
            for g in range(nG):
                kk, gkf, gks, dep, dkf, dks = (par(g, lay["ihc"] + i) for i in range(6, _N_IHC))
                G_ = conds[g]
                ws = slots[g][g * NZ + lay["w"]]
                W = builder.load(ws)
                cur = vb.sub(
                    vb.sub(vb.mul(builder.fneg(G_), vb.add(W, dep)), vb.mul(gkf, vb.add(W, dkf))),
                    vb.mul(gks, vb.add(W, dks)),
                )
                W = vb.fma(kk, cur, W)
                builder.store(W, ws)
                vv.append(vb.maximum(W, par(g, lay["out"])))
            # adaptation loops, loop by loop, the blocks side by side
            state = [[slots[g][g * NZ + lay["s"] + j] for j in range(nJ)] for g in range(nG)]
            vv = adaptation_loops_blocks(vb, vv, state, loop_par, nJ, use_limit, round32)
            for g in range(nG):
                o = lay["out"]
                v = vb.mul(vb.sub(vv[g], par(g, o + 1)), par(g, o + 2))
                idx = builder.add(base, ir.Constant(_I64, g))
                vb.store(vb.round_to_f32(v) if round32 else v, bp, idx)
        for g in range(nG):
            _store_states(vb, zp, slots[g])

    return sig, codegen


@intrinsic
def _decim8(typingctx, buf, first, count, wd, yb, g, G, R, K):  # noqa: ANN001
    """Block ``g`` of ``buf (rows, G, 8)``: ``yb[g, o] = sum_q wd[q] buf[first + o R + q, g]``
    for ``o < count`` (``yb (G, M, 8)``, ``M >= count``): the taps of each phase ``p`` in
    order, then the phases in order."""
    lit = _lits(G, R, K)
    if lit is None:
        return None
    nG, nR, nK = lit
    sig = types.none(buf, first, count, wd, yb, g, G, R, K)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        bp, wp = cg.ptrs(0, 3)
        yp = cg.block_ptr(4, args[5])
        gG = ir.Constant(_I64, nG)
        taps = [vb.splat(builder.load(builder.gep(wp, [ir.Constant(_I64, q)]))) for q in range(nK)]
        with cgutils.for_range(builder, args[2]) as loop:
            o = loop.index
            base = builder.add(args[1], builder.mul(o, ir.Constant(_I64, nR)))
            total = None
            for ph in range(nR):
                acc = None
                for q in range(ph, nK, nR):
                    row = builder.add(base, ir.Constant(_I64, q))
                    rq = vb.load(bp, builder.add(builder.mul(row, gG), args[5]))
                    acc = vb.mul(taps[q], rq) if acc is None else vb.fma(taps[q], rq, acc)
                if acc is not None:
                    total = acc if total is None else vb.add(total, acc)
            vb.store(total, yp, o)

    return sig, codegen


#: most blocks of 8 channels per group. The adaptation loops are a chain of divisions and
#: limiter evaluations per sample: one block alone leaves the pipeline mostly waiting
#: (measured, 50 channels: hair-cell pass 0.10 s per second of audio with 1 block per
#: group, 0.05 with 2, 0.04 with 4, 0.03 with all 7). A group is one job of
#: :func:`~lhotse_amt.kernels.jobs.run_jobs`: with several threads, small batches
#: parallelise over fewer jobs.
_GROUP = 8

#: samples per pass of each group (its buffer, (K - 1 + _CHUNK) x G x 8 float64, stays
#: in the L1/L2 caches)
_CHUNK = 256


@njit(inline="always", **_NOPY)
def shift_history(buf, tc, H):  # pragma: no cover - compiled
    # buf (H + chunk, G, 8): the last H rows of a chunk of tc rows to the front, the
    # decimator's history for the next chunk (a forward copy: no overlap)
    for q in range(H):
        for g in range(buf.shape[1]):
            for lane in range(8):
                buf[q, g, lane] = buf[tc + q, g, lane]


@njit(**_NOPY)
def _blocks_kernel(t0, t1, x, P, Z, hist, wd, y, j0, G, SL, S1, S2, J, K, R, FLAGS):  # noqa: E501  # pragma: no cover
    # jobs t0 .. t1 of N * NG (row, group of G blocks)
    N, T = x.shape
    NG = P.shape[0] // G
    Cy = y.shape[1]
    H = K - 1
    for t in range(t0, t1):
        r, b0 = group_job(t, NG, G)
        fp = denormals_off()
        Pg = P[b0 : b0 + G]
        Zg = Z[r, b0 : b0 + G]
        buf = np.empty((H + _CHUNK, G, 8))
        for g in range(G):  # element loops: array assignment compiles a costly error path
            for q in range(H):
                for lane in range(8):
                    buf[q, g, lane] = hist[r, b0 + g, q, lane]
        yb = np.empty((G, _CHUNK // R + 1, 8))  # one chunk's decimated outputs
        nxt = j0
        i = 0
        for c0 in range(0, T, _CHUNK):
            tc = min(_CHUNK, T - c0)
            for g in range(G):
                _drnl8(x[r], c0, tc, Pg, Zg, buf, H, g, G, SL, S1, S2)
            _hair8(buf, H, tc, Pg, Zg, G, SL, S1, S2, J, FLAGS)
            first = nxt - c0
            if first < tc:
                cnt = (tc - 1 - first) // R + 1
                for g in range(G):
                    _decim8(buf, first, cnt, wd, yb, g, G, R, K)
                    for lane in range(8):
                        k = (b0 + g) * 8 + lane
                        if k < Cy:
                            for ii in range(cnt):
                                y[r, k, i + ii] = yb[g, ii, lane]
                i += cnt
                nxt += cnt * R
            shift_history(buf, tc, H)
        for g in range(G):
            for q in range(H):
                for lane in range(8):
                    hist[r, b0 + g, q, lane] = buf[q, g, lane]
        restore_fp_mode(fp)


def supported(c: float, R: int) -> bool:
    """The register kernel applies: broken-stick exponent 1/4 and a decimator (``R >= 1``)."""
    return float(c) == 0.25 and int(R) >= 1


def _blocks(a: np.ndarray) -> np.ndarray:
    """``(..., rows, Cp)`` -> ``(..., Cp / 8, rows, 8)`` (C-contiguous)."""
    *lead, rows, cp = a.shape
    b = a.reshape(*lead, rows, cp // WIDTH, WIDTH)
    return np.ascontiguousarray(np.moveaxis(b, -2, -3))


def _unblock(b: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_blocks`."""
    *lead, nb, rows, w = b.shape
    return np.moveaxis(b, -3, -2).reshape(*lead, rows, nb * w)


class Packed(NamedTuple):
    """The front end's arguments in the register kernels' block layout: parameters
    ``P (NG G, NP, 8)``, states ``Z (N, NG G, NZ, 8)``, decimator history
    ``hist (N, NG G, K - 1, 8)`` (``NG`` groups of ``G`` blocks of 8 channels, the last
    block repeated to fill the last group) and the literal structure ``G, SL, S1, S2, J``
    and ``flags`` (1: overshoot limiter, 2: float32 rounding)."""

    P: np.ndarray
    Z: np.ndarray
    hist: np.ndarray
    G: int
    SL: int
    S1: int
    S2: int
    J: int
    flags: int


def pack(
    g, lin, nl1, nl2, a, b, zl, z1, z2, p, w, aa, mm, s, minlvl, use_limit, c0, sc, hist, round32,
) -> Packed:  # fmt: skip
    """:class:`Packed` of the channel-padded arguments of
    :func:`lhotse_amt.kernels.paulick_frontend._frontend_kernel` (channel axis a multiple
    of 8)."""
    N = zl.shape[0]
    SL, S1, S2 = lin.shape[1], nl1.shape[1], nl2.shape[1]
    J = aa.shape[0]
    cp = g.shape[0]
    lay = _layout(SL, S1, S2, J)

    def sec_rows(cf: np.ndarray) -> np.ndarray:  # (5, S, Cp) b0 b1 b2 a1 a2 -> (5 S, Cp)
        r = cf.copy()
        r[3:] = -r[3:]
        return r.transpose(1, 0, 2).reshape(-1, cp)

    rows = [g[None], sec_rows(lin), sec_rows(nl1), sec_rows(nl2), a[None], b[None]]
    rows.append(np.repeat(np.asarray(p, np.float64)[:, None], cp, 1))
    for j in range(J):
        rows.append(np.stack([aa[j], 1.0 - aa[j], 2.0 * mm[j], mm[j] - 1.0, -2.0 / mm[j], mm[j]]))
    rows.append(np.repeat(np.array([[minlvl], [c0], [sc]], np.float64), cp, 1))
    Pm = np.concatenate(rows, 0)
    assert Pm.shape[0] == lay["NP"]

    def zrows(z: np.ndarray) -> np.ndarray:  # (N, 2, S, Cp) -> (N, 2 S, Cp)
        return z.transpose(0, 2, 1, 3).reshape(N, -1, cp)

    Zm = np.concatenate([zrows(zl), zrows(z1), zrows(z2), w[:, None], s], 1)
    # groups of G blocks (the adaptation loops run G blocks side by side): at most
    # _GROUP per group, as few groups as possible, the last block repeated to fill the last
    nb = cp // WIDTH
    G = -(-nb // -(-nb // _GROUP))
    cg = -(-nb // G) * G * WIDTH

    def padded(a: np.ndarray) -> np.ndarray:
        if cg == cp:
            return a
        return np.concatenate([a, np.repeat(a[..., -1:], cg - cp, -1)], -1)

    flags = int(bool(use_limit)) | (2 * int(bool(round32)))
    blocks = (_blocks(padded(Pm)), _blocks(padded(Zm)), _blocks(padded(hist)))
    return Packed(*blocks, G, SL, S1, S2, J, flags)


def frontend_kernel(
    x, g, lin, nl1, nl2, a, b, c, zl, z1, z2, p, w, aa, mm, s,
    minlvl, use_limit, c0, sc, wd, hist, j0, R, round32, y,
) -> None:  # fmt: skip
    """Drop-in for :func:`lhotse_amt.kernels.paulick_frontend._frontend_kernel` with ``R >= 1`` and
    ``c = 1/4`` (same arguments: channel axis padded to a multiple of 8, states updated in
    place, ``y (N, C, M)`` written)."""
    N = x.shape[0]
    k = pack(
        g,
        lin,
        nl1,
        nl2,
        a,
        b,
        zl,
        z1,
        z2,
        p,
        w,
        aa,
        mm,
        s,
        minlvl,
        use_limit,
        c0,
        sc,
        hist,
        round32,
    )  # noqa: E501
    K = wd.shape[0]
    args = (x, k.P, k.Z, k.hist, np.ascontiguousarray(wd, np.float64), y, int(j0))
    args = (*args, k.G, k.SL, k.S1, k.S2, k.J, K, int(R), k.flags)
    run_jobs(literal_entry(_blocks_kernel, (0, 0, *args), 8), N * (k.P.shape[0] // k.G), args)
    cp = g.shape[0]
    lay = _layout(k.SL, k.S1, k.S2, k.J)
    Zn = _unblock(k.Z)[..., :cp]
    o = 0
    for z, S in ((zl, k.SL), (z1, k.S1), (z2, k.S2)):
        z[:] = Zn[:, o : o + 2 * S].reshape(N, S, 2, cp).transpose(0, 2, 1, 3)
        o += 2 * S
    w[:] = Zn[:, lay["w"]]
    s[:] = Zn[:, lay["s"] : lay["s"] + k.J]
    hist[:] = _unblock(k.hist)[..., :cp]

"""The fused CASP forward (Dau1997, Osses2021) with the states of 8 channels in vector
registers.

:func:`lhotse_amt.kernels.casp.casp_samples` runs gammatone -> IHC -> adaptation loops ->
modulation filterbank with every loop over the channels (and band lanes) innermost, so
every filter state is loaded and stored once per sample. Here
(:mod:`lhotse_amt.kernels.simd`) the channels are cut into blocks of 8 (one float64
vector) and groups of ``G`` blocks; each group runs over the signal in chunks of
``modbank_simd._CHUNK`` samples:

1. per block: gammatone (complex one-pole stages), half-wave rectification, IHC low-pass
   and the floor of the adaptation loops, with the block's states in registers, into a
   buffer ``(G, chunk, 8)``;
2. the adaptation loops in place on the buffer, the group's blocks side by side
   (:func:`lhotse_amt.kernels.paulick_simd.adaptation_loops_blocks`: a chain of divisions
   per sample, which independent blocks overlap), then the output scaling to model units;
3. per block: the modulation filterbank of
   :func:`lhotse_amt.kernels.modbank_simd._mod8` (pre-filter, low-pass band, resonators;
   a channel's missing bands have scale 0 and are not written);
4. each band is written to its output rows as 8 x 8 tiles transposed in registers
   (:func:`samples`, the model forward), or summed over the frames' blocks of samples in
   registers (:func:`pooled`, the features of the ``amt-dau1997`` and ``amt-osses2021``
   extractors, whose chunks carry this kernel's states).

Used for float32 models (float64 ones keep the library ``exp`` and ``sqrt`` of the
channel-vectorised kernel); the arithmetic is that kernel's with explicit fused
multiply-adds (the outputs agree to float32 rounding).
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
from .modbank_simd import _CHUNK, _mod8
from .modbank_simd import _layout as _mod_layout
from .paulick_simd import _lits, _sections, adaptation_loops_blocks
from .simd import WIDTH, Codegen, group_job, store_tiles, vector_codegen

__all__ = ["acc8", "block_segments", "pooled", "samples", "supported"]

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)
_I64 = ir.IntType(64)
_N_LOOP = 6  # per adaptation loop: a, 1 - a, 2 m, m - 1, -2 / m, m
#: blocks of 8 channels side by side in the adaptation loops
_GROUP = 4


class _Layout(NamedTuple):
    """Rows of the front parameter block ``P (NB, NP, 8)`` and state block ``Z (NB, NZ,
    8)``."""

    pr: int
    pi: int
    g2: int
    minlvl: int
    ihc: int
    loops: int
    off: int
    scale: int
    NP: int
    gre: int
    gim: int
    zihc: int
    s: int
    NZ: int


def _layout(K: int, SI: int, J: int) -> _Layout:
    """The :class:`_Layout` of ``K`` gammatone stages, ``SI`` IHC sections, ``J`` loops."""
    loops = 4 + 5 * SI
    off = loops + _N_LOOP * J
    s = 2 * K + 2 * SI
    return _Layout(0, 1, 2, 3, 4, loops, off, off + 1, off + 2, 0, K, 2 * K, s, s + J)


@intrinsic
def _gt8(typingctx, x, n0, nt, P, Z, buf, blk, g, K, SI, J):  # noqa: ANN001
    """Gammatone, half-wave rectification, IHC and floor of block ``blk`` (of ``P``/``Z``
    ``(NB, rows, 8)``) over samples ``n0 .. n0 + nt`` of ``x (T,)`` (float64, the same
    for every lane) into ``buf (G, chunk, 8)`` row ``g``."""
    lit = _lits(K, SI, J)
    if lit is None:
        return None
    nK, nSI, nJ = lit
    lay = _layout(nK, nSI, nJ)
    sig = types.none(x, n0, nt, P, Z, buf, blk, g, K, SI, J)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        xp = cg.ptr(0)
        pp, zp = cg.block_ptrs(args[6], 3, 4)
        bp = cg.block_ptr(5, args[7])
        n0, nt = args[1], args[2]

        def par(row: int) -> ir.Value:
            return vb.load(pp, row)

        slots = {r: vb.var(vb.load(zp, r)) for r in range(lay.s)}
        pr, pim, g2, floor = par(lay.pr), par(lay.pi), par(lay.g2), par(lay.minlvl)
        npim = builder.fneg(pim)
        zero = vb.const(0.0)
        with cgutils.for_range(builder, nt) as loop:
            n = loop.index
            ur = vb.splat(builder.load(builder.gep(xp, [builder.add(n0, n)])))
            ui = zero
            for k in range(nK):
                sr, si = slots[lay.gre + k], slots[lay.gim + k]
                gr, gi = builder.load(sr), builder.load(si)
                nr = vb.fma(pr, gr, vb.fma(npim, gi, ur))
                ni = vb.fma(pr, gi, vb.fma(pim, gr, ui))
                builder.store(nr, sr)
                builder.store(ni, si)
                ur, ui = nr, ni
            v = vb.maximum(vb.mul(g2, ur), zero)
            v = _sections(vb, par, slots, v, lay.ihc, lay.zihc, nSI)
            vb.store(vb.maximum(v, floor), bp, n)
        for r, slot in slots.items():
            vb.store(builder.load(slot), zp, r)

    return sig, codegen


@intrinsic
def _adapt8(typingctx, buf, nt, P, Z, blk0, G, K, SI, J, FLAGS):  # noqa: ANN001
    """The adaptation loops of blocks ``blk0 .. blk0 + G`` side by side, in place on
    ``buf (G, chunk, 8)`` rows ``0 .. nt``, then ``(v - off) scale``. FLAGS bit 0:
    overshoot limiter; bit 1: its correction in float32."""
    lit = _lits(G, K, SI, J, FLAGS)
    if lit is None:
        return None
    nG, nK, nSI, nJ, flags = lit
    use_limit, round32 = bool(flags & 1), bool(flags & 2)
    lay = _layout(nK, nSI, nJ)
    sig = types.none(buf, nt, P, Z, blk0, G, K, SI, J, FLAGS)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        blocks = [builder.add(args[4], ir.Constant(_I64, g)) for g in range(nG)]
        pps = [cg.block_ptr(2, b) for b in blocks]
        zps = [cg.block_ptr(3, b) for b in blocks]
        bps = [cg.block_ptr(0, ir.Constant(_I64, g)) for g in range(nG)]
        state = [[vb.var(vb.load(zps[g], lay.s + j)) for j in range(nJ)] for g in range(nG)]
        lp = {
            (g, j, i): vb.load(pps[g], lay.loops + _N_LOOP * j + i)
            for g in range(nG)
            for j in range(nJ)
            for i in range(_N_LOOP)
        }

        def loop_par(g: int, j: int, i: int) -> ir.Value:
            return lp[(g, j, i)]

        off = [vb.load(pps[g], lay.off) for g in range(nG)]
        scale = [vb.load(pps[g], lay.scale) for g in range(nG)]
        with cgutils.for_range(builder, args[1]) as loop:
            n = loop.index
            vv = [vb.load(bps[g], n) for g in range(nG)]
            vv = adaptation_loops_blocks(vb, vv, state, loop_par, nJ, use_limit, round32)
            for g in range(nG):
                vb.store(vb.mul(vb.sub(vv[g], off[g]), scale[g]), bps[g], n)
        for g in range(nG):
            for j in range(nJ):
                vb.store(builder.load(state[g][j]), zps[g], lay.s + j)

    return sig, codegen


@njit(**_NOPY)
def _samples_kernel(j0, j1, x, P, Z, PM, ZM, rowoff, y, K, SI, J, G, FLAGS, SP, SL, M1):  # noqa: E501  # pragma: no cover
    # jobs j0 .. j1 of B * NG (item, group of G blocks); x (B, T) float64; P (NBp, NP, 8),
    # Z (B, NBp, NZ, 8): front; PM (NBp, NPM, 8), ZM (B, NBp, NZM, 8): modulation
    # filterbank (modbank_simd layout); rowoff (NBp, M1 + 1, 8): output row of (block,
    # band, lane), -1 where not written; y (B, R, T)
    B, R, T = y.shape
    NG = P.shape[0] // G
    yflat = y.reshape(-1)
    for job in range(j0, j1):
        b, blk0 = group_job(job, NG, G)
        fp = denormals_off()
        buf = np.zeros((G, _CHUNK, 8))
        ob = np.empty((M1 + 1, _CHUNK, 8))
        offs = np.empty(8, np.int64)
        xb = x[b]
        Zb = Z[b]
        for n0 in range(0, T, _CHUNK):
            nt = min(_CHUNK, T - n0)
            for g in range(G):
                _gt8(xb, n0, nt, P, Zb, buf, blk0 + g, g, K, SI, J)
            _adapt8(buf, nt, P, Zb, blk0, G, K, SI, J, FLAGS)
            nt8 = nt // 8
            for g in range(G):
                blk = blk0 + g
                _mod8(buf[g], nt, PM[blk], ZM[b, blk], ob, SP, SL, M1, 0)
                for m in range(M1 + 1):
                    for lane in range(8):
                        r = rowoff[blk, m, lane]
                        offs[lane] = (b * R + r) * T + n0 if r >= 0 else -1
                    store_tiles(ob, m, nt8, yflat, offs)
                    for lane in range(8):
                        r = rowoff[blk, m, lane]
                        if r >= 0:
                            for n in range(nt8 * 8, nt):
                                y[b, r, n0 + n] = ob[m, n, lane]
        restore_fp_mode(fp)


def supported(plan: object) -> bool:
    """The register kernel applies: a float32 model (``precise`` off)."""
    return not plan.precise


def _params(plan: object) -> tuple:
    """Front and modulation parameter blocks, output rows and the block-group size of a
    :class:`~lhotse_amt.kernels.casp.CASPPooledPlan` (cached on the plan)."""
    held = plan.register_params
    if held is not None:
        return held
    C, K, J = plan.C, plan.K, plan.J
    SI = plan.ihc.shape[0]
    NB = -(-C // WIDTH)
    # whole groups (extra blocks repeat channel 0 and are never written): of the group
    # sizes 2 ... _GROUP (one block alone would leave the divisions' latency exposed) the
    # one that needs the fewest extra blocks, the larger one on a tie
    sizes = range(min(2, NB), min(_GROUP, NB) + 1)
    G = min(sizes, key=lambda g: (-(-NB // g) * g, -g))
    NBp = -(-NB // G) * G
    CP = NBp * WIDTH
    lanes = np.r_[np.arange(C), np.zeros(CP - C, np.int64)]
    lay = _layout(K, SI, J)
    Pf = np.zeros((lay.NP, CP))
    Pf[lay.pr] = plan.pr[lanes]
    Pf[lay.pi] = plan.pi[lanes]
    Pf[lay.g2] = plan.g2[lanes]
    Pf[lay.minlvl] = plan.minlvl

    def sections(P: np.ndarray, off: int, sos: np.ndarray, sign: float = -1.0) -> None:
        # b0 b1 b2 -a1 -a2 (paulick_simd._sections); b0 b1 b2 a1 a2 (sign 1: _mod8)
        for s in range(sos.shape[0]):
            b0, b1, b2, _, a1, a2 = sos[s]
            P[off + 5 * s : off + 5 * s + 5] = np.array([b0, b1, b2, sign * a1, sign * a2])[:, None]

    sections(Pf, lay.ihc, plan.ihc)
    for j in range(J):
        a, m = plan.aa[j, 0], plan.am[j, 0]
        loop = [a, 1.0 - a, 2.0 * m, m - 1.0, plan.aq[j, 0], m]
        Pf[lay.loops + _N_LOOP * j : lay.loops + _N_LOOP * (j + 1)] = np.array(loop)[:, None]
    Pf[lay.off], Pf[lay.scale] = plan.off, plan.scale
    # modulation filterbank (modbank_simd layout): band lanes -> (channel, band)
    SP, SL, M1 = plan.pre.shape[0], plan.lp.shape[0], plan.M1 - 1
    ml = _mod_layout(SP, SL, M1)
    Pm = np.zeros((ml.NP, CP))
    sections(Pm, ml.pre, plan.pre, 1.0)
    sections(Pm, ml.lp, plan.lp, 1.0)
    Pm[ml.s0] = plan.sc0[lanes]
    rowoff = np.full((M1 + 1, CP), -1, np.int64)
    first = np.r_[0, np.cumsum(plan.n_bands)[:-1]]
    rowoff[0, :C] = first
    isabs = np.arange(plan.L) >= plan.nsig
    for i, (c, mb) in enumerate(zip(plan.lane_c, plan.lane_m)):
        row = ml.bands + 6 * mb
        Pm[row : row + 6, c] = (
            plan.ar[i], plan.ai[i], plan.cr[i], plan.ci[i], 1.0, float(isabs[i]),
        )  # fmt: skip
        rowoff[mb + 1, c] = first[c] + mb + 1

    def blocks(a: np.ndarray) -> np.ndarray:  # (rows, CP) -> (NBp, rows, 8)
        return np.ascontiguousarray(a.reshape(a.shape[0], NBp, WIDTH).transpose(1, 0, 2))

    held = (blocks(Pf), blocks(Pm), blocks(rowoff), G, (SP, SL, M1))
    plan.register_params = held
    return held


def samples(plan: object, xn: np.ndarray, y: np.ndarray) -> None:
    """:func:`lhotse_amt.kernels.casp.casp_samples` (from rest) on ``xn (B, T)`` (float64)
    into ``y (B, R, T)`` by the register kernel (the same values to float32 rounding)."""
    Pf, Pm, rowoff, G, (SP, SL, M1) = _params(plan)
    B = xn.shape[0]
    NBp = Pf.shape[0]
    lay = _layout(plan.K, plan.ihc.shape[0], plan.J)
    Z = np.zeros((B, NBp, lay.NZ, WIDTH))
    Z[:, :, lay.s : lay.s + plan.J] = plan.s0[None, None, :, None]
    ZM = np.zeros((B, NBp, _mod_layout(SP, SL, M1).NZ, WIDTH))
    flags = int(plan.use_limit) | 2
    args = (xn, Pf, Z, Pm, ZM, rowoff, y, plan.K, plan.ihc.shape[0], plan.J, G, flags, SP, SL, M1)
    run_jobs(literal_entry(_samples_kernel, (0, 0, *args), 8), B * (NBp // G), args)


@intrinsic
def acc8(typingctx, ob, m, na, nb, acc, SQUARE):  # noqa: ANN001
    """``acc[m] += sum_{na <= n < nb} ob[m, n]`` (of squares with ``SQUARE`` 1) for ``ob
    (bands, chunk, 8)`` and ``acc (bands, 8)`` (float64, C-contiguous), the sum in a
    register, in sample order."""
    lit = _lits(SQUARE)
    if lit is None:
        return None
    square = bool(lit[0])
    sig = types.none(ob, m, na, nb, acc, SQUARE)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        op, ap = cg.ptrs(0, 4)
        m, na, nb = args[1], args[2], args[3]
        ary = cg.array(0)
        base = builder.mul(m, builder.extract_value(ary.shape, 1))
        s = vb.var(vb.load(ap, m))
        one = ir.Constant(_I64, 1)
        with cgutils.for_range_slice(builder, na, nb, one, inc=True) as (n, _):
            q = vb.load(op, builder.add(base, n))
            old = builder.load(s)
            builder.store(vb.fma(q, q, old) if square else vb.add(old, q), s)
        vb.store(builder.load(s), ap, m)

    return sig, codegen


@njit(inline="always", **_NOPY)
def block_segments(n0, nt, Tb, hop, cnt, seg):  # pragma: no cover - compiled
    # the samples n0 .. n0 + nt of a signal pooled over blocks of hop samples (the last
    # block ends at sample Tb - 1), cnt samples of the current block before n0, cut at
    # the block ends: seg[k] = (start, stop, 1 where the segment closes a block), k < ns
    # (seg: at least nt // hop + 2 rows). Returns ns and the count after the chunk
    ns = 0
    start = 0
    while start < nt:
        stop = min(nt, start + hop - cnt)
        closes = stop == start + hop - cnt or n0 + stop == Tb
        seg[ns, 0] = start
        seg[ns, 1] = stop
        seg[ns, 2] = 1 if closes else 0
        ns += 1
        cnt = 0 if closes else cnt + stop - start
        start = stop
    return ns, cnt


@njit(**_NOPY)
def _pooled_kernel(
    j0, j1, x, ends, hop, P, Z, PM, ZM, rowoff, sums, K, SI, J, G, FLAGS, SP, SL, M1, SQUARE
):  # noqa: E501  # pragma: no cover
    # as _samples_kernel, but every band is summed (squared with SQUARE) over blocks of
    # hop samples into sums (B, C, M1 + 1, nblk) instead of written; item b stops at
    # ends[b] (its states are those after sample ends[b] - 1, as the channel-vectorised
    # kernel's)
    B, T = x.shape
    NG = P.shape[0] // G
    for job in range(j0, j1):
        b, blk0 = group_job(job, NG, G)
        fp = denormals_off()
        buf = np.zeros((G, _CHUNK, 8))
        ob = np.empty((M1 + 1, _CHUNK, 8))
        acc = np.zeros((G, M1 + 1, 8))
        seg = np.empty((_CHUNK + 2, 3), np.int64)  # start, stop, closes a block
        xb = x[b]
        Zb = Z[b]
        Tb = min(T, ends[b])
        cnt = 0  # samples of the current block so far
        blk_out = 0  # index of the current block
        for n0 in range(0, Tb, _CHUNK):
            nt = min(_CHUNK, Tb - n0)
            # the chunk cut at block ends (the same for every band and channel)
            ns, cnt = block_segments(n0, nt, Tb, hop, cnt, seg)
            for g in range(G):
                _gt8(xb, n0, nt, P, Zb, buf, blk0 + g, g, K, SI, J)
            _adapt8(buf, nt, P, Zb, blk0, G, K, SI, J, FLAGS)
            for g in range(G):
                blk = blk0 + g
                _mod8(buf[g], nt, PM[blk], ZM[b, blk], ob, SP, SL, M1, 0)
                ag = acc[g]
                f = blk_out
                for k in range(ns):
                    for m in range(M1 + 1):
                        acc8(ob, m, seg[k, 0], seg[k, 1], ag, SQUARE)
                    if seg[k, 2]:
                        for m in range(M1 + 1):
                            for lane in range(8):
                                if rowoff[blk, m, lane] >= 0:
                                    sums[b, blk * 8 + lane, m, f] = ag[m, lane]
                                ag[m, lane] = 0.0
                        f += 1
            for k in range(ns):
                blk_out += seg[k, 2]
        restore_fp_mode(fp)


def pooled(
    plan: object,
    xn: np.ndarray,
    state: dict | None,
    hop: int,
    ends: np.ndarray,
    square: bool,
) -> tuple[np.ndarray, dict]:
    """:func:`lhotse_amt.kernels.casp.casp_pooled` by the register kernel: the block
    sums ``(B, C, M + 1, ceil(T / hop))`` of the chain on ``xn (B, T)`` (float64) from
    ``state`` (this function's layout, ``None``: from rest) and the new state."""
    Pf, Pm, rowoff, G, (SP, SL, M1) = _params(plan)
    B, T = xn.shape
    NBp = Pf.shape[0]
    if state is None:
        lay = _layout(plan.K, plan.ihc.shape[0], plan.J)
        Z = np.zeros((B, NBp, lay.NZ, WIDTH))
        Z[:, :, lay.s : lay.s + plan.J] = plan.s0[None, None, :, None]
        ZM = np.zeros((B, NBp, _mod_layout(SP, SL, M1).NZ, WIDTH))
    else:
        Z, ZM = state["front"].copy(), state["mod"].copy()
    sums = np.zeros((B, plan.C, M1 + 1, -(-T // hop)))
    flags = int(plan.use_limit) | 2
    args = (
        xn, np.asarray(ends, np.int64), int(hop), Pf, Z, Pm, ZM, rowoff, sums,
        plan.K, plan.ihc.shape[0], plan.J, G, flags, SP, SL, M1, int(bool(square)),
    )  # fmt: skip
    run_jobs(literal_entry(_pooled_kernel, (0, 0, *args), 9), B * (NBp // G), args)
    return sums, {"front": Z, "mod": ZM}

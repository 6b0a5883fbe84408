"""The King et al. (2019) forward of float32 models with the filter states of 8 channels
in vector registers (:mod:`lhotse_amt.kernels.simd`): the first pass; the envelope pass
is in :mod:`lhotse_amt.kernels.king2019_envelope_simd`.

The channel-vectorised kernels of :mod:`lhotse_amt.kernels.king2019` run their loops
over the channels innermost, so every filter state is loaded and stored once per sample;
those memory operations, not the arithmetic, set their speed. Here the channels are cut
into blocks of 8 (one float64 vector) and each block runs over the signal in chunks of
``_CHUNK`` samples, the time loop innermost:

**First pass** (:func:`samples`; :func:`lhotse_amt.kernels.king2019._king_item`): per
chunk, gammatone, compression (the inline ``pow`` of float32 models, as a vector
function), half-wave rectification, IHC low-pass and the post filters into a buffer
``(chunk, 8)`` (:func:`_front8`); the modulation band-passes, two per pass over the
buffer, into ``(bands, chunk, 8)`` (:func:`_bands8`, with the sums the rms matching needs);
each written band and the band-pass input go to their output rows as 8 x 8 tiles
transposed in registers (:func:`lhotse_amt.kernels.simd.store_tiles`).
:func:`pooled` (the ``amt-king2019`` features, :func:`lhotse_amt.kernels.king2019.
king_pooled`) runs the same two steps and sums every band over the frames' blocks of
samples in registers instead (its chunks carry this kernel's states).

Each output sample has the arithmetic of the channel-vectorised kernels in the same
order, with explicit fused multiply-adds (the results agree to ~1e-12 relative in float64
and to float32 rounding in float32).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .casp_simd import acc8, block_segments
from .fastmath import denormals_off, restore_fp_mode
from .jobs import literal_entry, run_jobs
from .king2019_envelope_simd import _CHUNK, _I64, _NOPY, _write_rows
from .paulick_simd import _lits, _sections
from .simd import WIDTH, Codegen, VecBuilder, lane_block, vector_codegen

__all__ = ["pooled", "samples", "supported"]


# ---- the first pass: the chain up to the modulation band-passes -----------------------


class _FrontLayout(NamedTuple):
    """Rows of the parameter block ``P (NP, 8)`` and the state block ``Z (NZ, 8)`` of
    :func:`_front8` and :func:`_bands8`."""

    pr: int
    pi: int
    g2: int
    knee: int
    coef: int
    expo: int
    ihc: int
    post: int
    bank: int  # per band: 5 S coefficients, gain, 1.0 where |.|
    NPB: int
    NP: int
    gre: int
    gim: int
    zihc: int
    zpost: int
    zbank: int  # per band: z0, z1 per section
    sums: int  # per band: sum y^2, sum y, sum (-1)^n y
    NZ: int


def _front_layout(K: int, SI: int, SO: int, M: int, S: int) -> _FrontLayout:
    """The :class:`_FrontLayout` of ``K`` gammatone stages, ``SI`` IHC and ``SO`` post
    sections and ``M`` bands of ``S`` sections."""
    post = 6 + 5 * SI
    bank = post + 5 * SO
    NPB = 5 * S + 2
    zpost = 2 * K + 2 * SI
    zbank = zpost + 2 * SO
    sums = zbank + 2 * S * M
    return _FrontLayout(
        0, 1, 2, 3, 4, 5, 6, post, bank, NPB, bank + M * NPB,
        0, K, 2 * K, zpost, zbank, sums, sums + 3 * M,
    )  # fmt: skip


def _pow_pos(vb: VecBuilder, a: ir.Value, n: ir.Value) -> ir.Value:
    """``a^n`` per lane for normal positive ``a`` and ``|n log a| < 700``:
    :func:`lhotse_amt.kernels.fastmath.pow_pos_inline` (same constants and steps, fused
    multiply-adds; relative error < 1e-9)."""
    from .fastmath import _LN2, _LN2HI, _LN2LO, _LOG2E, _MANT, _ONE_BITS, _SQRT2

    b = vb.b
    ity = vb.ity

    def iconst(v: int) -> ir.Constant:
        return ir.Constant(ity, [ir.Constant(_I64, int(v))] * vb.w)

    bits = b.bitcast(a, ity)
    e = b.sub(b.lshr(bits, iconst(52)), iconst(1023))
    m = b.bitcast(b.or_(b.and_(bits, iconst(_MANT)), iconst(_ONE_BITS)), vb.ty)
    big = vb.gt(m, vb.const(_SQRT2))
    m = vb.select(big, vb.mul(m, vb.const(0.5)), m)
    e = b.select(big, b.add(e, iconst(1)), e)
    s = vb.div(vb.sub(m, vb.const(1.0)), vb.add(m, vb.const(1.0)))
    z = vb.mul(s, s)
    q = vb.fma(z, vb.const(1.0 / 11.0), vb.const(1.0 / 9.0))
    for c in (1.0 / 7.0, 0.2, 1.0 / 3.0, 1.0):
        q = vb.fma(z, q, vb.const(c))
    lm = vb.mul(vb.mul(vb.const(2.0), s), q)
    y = vb.mul(n, vb.fma(b.sitofp(e, vb.ty), vb.const(_LN2), lm))
    k = vb.floor(vb.fma(y, vb.const(_LOG2E), vb.const(0.5)))
    nk = b.fneg(k)
    r = vb.fma(nk, vb.const(_LN2LO), vb.fma(nk, vb.const(_LN2HI), y))
    p = vb.const(1.0 / 40320.0)
    for c in (1.0 / 5040.0, 1.0 / 720.0, 1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0):
        p = vb.fma(p, r, vb.const(c))
    scale = b.bitcast(b.shl(b.add(b.fptosi(k, ity), iconst(1023)), iconst(52)), vb.ty)
    return vb.mul(p, scale)


@intrinsic
def _front8(typingctx, x, n0, nt, P, Z, ub, K, SI, SO, M, S):  # noqa: ANN001
    """Gammatone (``K`` complex one-pole stages), compression, half-wave rectification,
    IHC low-pass (``SI`` sections) and the post filters (``SO`` sections) of one block of
    8 channels over samples ``n0 .. n0 + nt`` of ``x (T,)`` (float64, the same for every
    lane), into ``ub (chunk, 8)`` (the band-pass input). Parameters ``P``, states ``Z``
    (updated) in the :func:`_front_layout` rows."""
    lit = _lits(K, SI, SO, M, S)
    if lit is None:
        return None
    nK, nSI, nSO, nM, nS = lit
    lay = _front_layout(nK, nSI, nSO, nM, nS)
    sig = types.none(x, n0, nt, P, Z, ub, K, SI, SO, M, S)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        xp, pp, zp, op = cg.ptrs(0, 3, 4, 5)
        n0, nt = args[1], args[2]

        def par(row: int) -> ir.Value:
            return vb.load(pp, row)

        rows = range(lay.zbank)
        slots = {r: vb.var(vb.load(zp, r)) for r in rows}
        pr, pim, g2 = par(lay.pr), par(lay.pi), par(lay.g2)
        knee, coef, expo = par(lay.knee), par(lay.coef), par(lay.expo)
        zero = vb.const(0.0)
        tiny = vb.const(1e-200)
        with cgutils.for_range(builder, nt) as loop:
            n = loop.index
            xs = builder.load(builder.gep(xp, [builder.add(n0, n)]))
            ur, ui = vb.splat(xs), zero
            for k in range(nK):
                sr, si = slots[lay.gre + k], slots[lay.gim + k]
                gr, gi = builder.load(sr), builder.load(si)
                nr = vb.fma(pr, gr, vb.fma(builder.fneg(pim), gi, ur))
                ni = vb.fma(pr, gi, vb.fma(pim, gr, ui))
                builder.store(nr, sr)
                builder.store(ni, si)
                ur, ui = nr, ni
            # broken stick then half-wave rectification: coef q^n above the knee, else
            # max(q, 0) (the sign of q is kept, so only q > 0 survives the rectifier)
            q = vb.mul(g2, ur)
            comp = vb.mul(coef, _pow_pos(vb, vb.maximum(q, tiny), expo))
            v = vb.select(vb.gt(q, knee), comp, vb.maximum(q, zero))
            v = _sections(vb, par, slots, v, lay.ihc, lay.zihc, nSI)
            v = _sections(vb, par, slots, v, lay.post, lay.zpost, nSO)
            vb.store(v, op, n)
        for r, slot in slots.items():
            vb.store(builder.load(slot), zp, r)

    return sig, codegen


@intrinsic
def _bands8(typingctx, ub, n0, nt, P, Z, ob, K, SI, SO, M, S, NG, SUMS):  # noqa: ANN001
    """The ``M`` band-passes (``S`` sections each) over ``ub (chunk, 8)`` rows ``0 ..
    nt`` into ``ob (M, chunk, 8)`` (``gain y``, ``gain |y|`` where flagged), ``NG``
    bands per pass over the chunk; bands whose bit is set in ``SUMS`` also add ``y^2``,
    ``y`` and ``(-1)^(n0 + n) y`` to their sums (:func:`_front_layout` rows)."""
    lit = _lits(K, SI, SO, M, S, NG, SUMS)
    if lit is None:
        return None
    nK, nSI, nSO, nM, nS, nG, sums = lit
    lay = _front_layout(nK, nSI, nSO, nM, nS)
    sig = types.none(ub, n0, nt, P, Z, ob, K, SI, SO, M, S, NG, SUMS)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        up, pp, zp, op = cg.ptrs(0, 3, 4, 5)
        n0, nt = args[1], args[2]
        chunk = ir.Constant(_I64, _CHUNK)
        zero = vb.const(0.0)
        for first in range(0, nM, nG):
            bands = range(first, min(first + nG, nM))
            par_rows = {}
            slots = {}
            acc = {}
            for m in bands:
                base = lay.bank + m * lay.NPB
                for i in range(lay.NPB):
                    par_rows[(m, i)] = vb.load(pp, base + i)
                zb = lay.zbank + 2 * nS * m
                for r in range(2 * nS):
                    slots[zb + r] = vb.var(vb.load(zp, zb + r))
                if (sums >> m) & 1:
                    for k in range(3):
                        acc[(m, k)] = vb.var(vb.load(zp, lay.sums + 3 * m + k))
            with cgutils.for_range(builder, nt) as loop:
                n = loop.index
                u = vb.load(up, n)
                odd = builder.trunc(builder.add(n0, n), ir.IntType(1))
                for m in bands:
                    zb = lay.zbank + 2 * nS * m

                    def par(row: int, m: int = m, rows: dict = par_rows) -> ir.Value:
                        return rows[(m, row)]

                    y = _sections(vb, par, slots, u, 0, zb, nS)
                    if (sums >> m) & 1:
                        a0, a1, a2 = (acc[(m, k)] for k in range(3))
                        builder.store(vb.fma(y, y, builder.load(a0)), a0)
                        builder.store(vb.add(builder.load(a1), y), a1)
                        sy = builder.select(odd, builder.fneg(y), y)
                        builder.store(vb.add(builder.load(a2), sy), a2)
                    gain, absf = par(5 * nS), par(5 * nS + 1)
                    use_abs = builder.fcmp_ordered("!=", absf, zero)
                    out = vb.mul(gain, vb.select(use_abs, vb.fabs(y), y))
                    idx = builder.add(builder.mul(ir.Constant(_I64, m), chunk), n)
                    vb.store(out, op, idx)
            for r, slot in slots.items():
                vb.store(builder.load(slot), zp, r)
            for (m, k), slot in acc.items():
                vb.store(builder.load(slot), zp, lay.sums + 3 * m + k)

    return sig, codegen


@njit(**_NOPY)
def _samples_kernel(j0, j1, x, P, Z, y, written, urow, K, SI, SO, M, S, NG, SUMS):  # noqa: E501  # pragma: no cover
    # jobs j0 .. j1 of B * NB (item, block of 8 channels); x (B, T) float64; P (NB,
    # NP, 8); Z (B, NB, NZ, 8) (updated); y (B, C, M, T): band m
    # written where written[m]; the band-pass input into the rows of band urow (>= 0)
    B, C, _, T = y.shape
    NB = P.shape[0]
    yflat = y.reshape(-1)
    for job in range(j0, j1):
        b, blk, c0, nl = lane_block(job, NB, C)
        fp = denormals_off()
        ub = np.zeros((1, _CHUNK, 8))
        offs = np.empty(8, np.int64)
        ob = np.empty((M, _CHUNK, 8))
        xb = x[b]
        Pj = P[blk]
        Zj = Z[b, blk]
        for n0 in range(0, T, _CHUNK):
            nt = min(_CHUNK, T - n0)
            _front8(xb, n0, nt, Pj, Zj, ub[0], K, SI, SO, M, S)
            _bands8(ub[0], n0, nt, Pj, Zj, ob, K, SI, SO, M, S, NG, SUMS)
            if urow >= 0:
                _write_rows(ub, 0, y, yflat, b, c0, nl, urow, n0, nt, offs)
            for m in range(M):
                if written[m]:
                    _write_rows(ob, m, y, yflat, b, c0, nl, m, n0, nt, offs)
        restore_fp_mode(fp)


#: modulation bands per pass over a chunk in :func:`_bands8`
_BAND_GROUP = 2


def supported(plan: object) -> bool:
    """The register kernel applies: the inline ``pow`` (not the library one of float64
    models, ``precise``)."""
    return not plan.precise


def _front_params(plan: object) -> np.ndarray:
    """The parameter block ``(NB, NP, 8)`` of a :class:`~lhotse_amt.kernels.king2019.
    KingPooledPlan` (lanes ``P``: padding lanes repeat channel 0, finite values)."""
    SI, SO = plan.ihc.shape[1], plan.post.shape[1]
    M, S = plan.bank.shape[:2]
    lay = _front_layout(plan.K, SI, SO, M, S)
    P = np.zeros((lay.NP, plan.P))
    P[lay.pr], P[lay.pi], P[lay.g2] = plan.pr, plan.pi, plan.g2
    P[lay.knee], P[lay.coef], P[lay.expo] = plan.knee, plan.coef, plan.expo

    def sections(off: int, sos: np.ndarray) -> None:
        for s in range(sos.shape[0]):
            b0, b1, b2, _, a1, a2 = sos[s]
            P[off + 5 * s : off + 5 * s + 5] = np.array([b0, b1, b2, -a1, -a2])[:, None]

    sections(lay.ihc, plan.ihc[0])
    sections(lay.post, plan.post[0])
    for m in range(M):
        off = lay.bank + m * lay.NPB
        sections(off, plan.bank[m])
        P[off + 5 * S] = plan.gain[m]
        P[off + 5 * S + 1] = float(plan.use_abs[m])
    NB = plan.P // WIDTH
    return np.ascontiguousarray(P.reshape(lay.NP, NB, WIDTH).transpose(1, 0, 2))


def _front_arrays(
    plan: object, B: int, state: dict | None
) -> tuple[np.ndarray, np.ndarray, tuple[int, int, int, int]]:
    """The parameter block of ``plan`` (built on first use), the state block ``(B, NB,
    NZ, 8)`` (zeros, or a copy of ``state["front"]``) and the structure ``(SI, SO, M,
    S)`` of the first-pass kernels."""
    SI, SO = plan.ihc.shape[1], plan.post.shape[1]
    M, S = plan.bank.shape[:2]
    P = plan.register_params
    if P is None:
        P = plan.register_params = _front_params(plan)
    if state is None:
        nz = _front_layout(plan.K, SI, SO, M, S).NZ
        Z = np.zeros((B, P.shape[0], nz, WIDTH))
    else:
        Z = state["front"].copy()
    return P, Z, (SI, SO, M, S)


def samples(
    plan: object, xn: np.ndarray, y: np.ndarray, lin: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The first pass of :func:`lhotse_amt.kernels.king2019.king_samples` (the same
    values to rounding): the chain on ``xn (B, T)`` (float64) from rest, band ``m``
    (times ``gain[m]``, ``|.|`` first where ``use_abs[m]``) into ``y (B, C, M, T)`` for
    ``m`` not in ``lin``; with ``lin`` the band-pass input into the rows of band
    ``lin[0]`` and the sums of ``y^2``, ``y``, ``(-1)^n y`` of the ``lin`` bands. Returns
    the final band-pass states ``(B, 2, M, S, P)`` and the sums ``(B, 3, M, P)``."""
    B, T = xn.shape
    P, Z, (SI, SO, M, S) = _front_arrays(plan, B, None)
    written = np.asarray([m not in lin for m in range(M)], np.bool_)
    urow = lin[0] if lin else -1
    sums = sum(1 << m for m in lin)
    args = (xn, P, Z, y, written, urow, plan.K, SI, SO, M, S, _BAND_GROUP, sums)
    run_jobs(literal_entry(_samples_kernel, (0, 0, *args), 7), B * P.shape[0], args)
    # (B, NB, rows, 8) -> (B, rows, P)
    lay = _front_layout(plan.K, SI, SO, M, S)
    Zl = Z.transpose(0, 2, 1, 3).reshape(B, lay.NZ, P.shape[0] * WIDTH)
    zb = Zl[:, lay.zbank : lay.sums].reshape(B, M, S, 2, -1)
    bank = np.ascontiguousarray(zb.transpose(0, 3, 1, 2, 4))
    pis = np.ascontiguousarray(Zl[:, lay.sums :].reshape(B, M, 3, -1).transpose(0, 2, 1, 3))
    return bank, pis


@njit(**_NOPY)
def _pooled_kernel(j0, j1, x, ends, hop, P, Z, sums, K, SI, SO, M, S, NG, SQUARE):  # noqa: E501  # pragma: no cover
    # jobs j0 .. j1 of B * NB (item, block of 8 channels): the first pass without
    # outputs: every band (gain, |.| where flagged) summed (squared
    # with SQUARE) over blocks of hop samples into sums (B, C, M, nblk); item b stops at
    # ends[b] (its states are those after sample ends[b] - 1, as the channel-vectorised
    # kernel's)
    B, T = x.shape
    C = sums.shape[1]
    NB = P.shape[0]
    for job in range(j0, j1):
        b, blk, c0, nl = lane_block(job, NB, C)
        fp = denormals_off()
        ub = np.zeros((_CHUNK, 8))
        ob = np.empty((M, _CHUNK, 8))
        acc = np.zeros((M, 8))
        seg = np.empty((_CHUNK + 2, 3), np.int64)
        xb = x[b]
        Pj = P[blk]
        Zj = Z[b, blk]
        Tb = min(T, ends[b])
        cnt = 0
        f = 0
        for n0 in range(0, Tb, _CHUNK):
            nt = min(_CHUNK, Tb - n0)
            ns, cnt = block_segments(n0, nt, Tb, hop, cnt, seg)
            _front8(xb, n0, nt, Pj, Zj, ub, K, SI, SO, M, S)
            _bands8(ub, n0, nt, Pj, Zj, ob, K, SI, SO, M, S, NG, 0)
            for k in range(ns):
                for m in range(M):
                    acc8(ob, m, seg[k, 0], seg[k, 1], acc, SQUARE)
                if seg[k, 2]:
                    for m in range(M):
                        for lane in range(8):
                            if lane < nl:
                                sums[b, c0 + lane, m, f] = acc[m, lane]
                            acc[m, lane] = 0.0
                    f += 1
        restore_fp_mode(fp)


def pooled(
    plan: object, xn: np.ndarray, state: dict | None, hop: int, ends: np.ndarray, square: bool
) -> tuple[np.ndarray, dict]:
    """:func:`lhotse_amt.kernels.king2019.king_pooled` by the register kernel: the block
    sums ``(B, C, M, ceil(T / hop))`` of the chain on ``xn (B, T)`` (float64) from
    ``state`` (this function's layout; ``None``: from rest) and the new state."""
    B, T = xn.shape
    P, Z, (SI, SO, M, S) = _front_arrays(plan, B, state)
    sums = np.zeros((B, plan.C, M, -(-T // hop)))
    args = (
        xn, np.asarray(ends, np.int64), int(hop), P, Z, sums,
        plan.K, SI, SO, M, S, _BAND_GROUP, int(bool(square)),
    )  # fmt: skip
    run_jobs(literal_entry(_pooled_kernel, (0, 0, *args), 7), B * P.shape[0], args)
    return sums, {"front": Z}

"""The envelope pass of the King et al. (2019) forward of float32 models
(:func:`lhotse_amt.kernels.king2019_envelope.hilbert_envelopes_`) with the filter states of
8 channels in vector registers (:mod:`lhotse_amt.kernels.simd`; the first pass is in
:mod:`lhotse_amt.kernels.king2019_simd`).

(:func:`envelopes`; :func:`lhotse_amt.kernels.king2019_envelope._envelope_item`):
per chunk, ``u`` and ``H{u}`` of the block's 8 channels are copied into two buffers;
band by band, the band-pass over ``u`` (the band output ``b``) and, periodically, over
``H{u}`` (``H{b}`` after the wrap-around correction) and the envelope ``gain |b + i H{b}|``
run with their states in registers; the periodic initial states come from a pass over
the last ``L`` samples of ``H{u}`` from rest, mapped by ``Q``
(:func:`lhotse_amt.kernels.king2019_envelope.periodic_state_maps`).

Each output sample has the arithmetic of the channel-vectorised kernel in the same order,
with explicit fused multiply-adds; the envelope ``sqrt`` is taken in the output's
precision, as there.
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
from .paulick_simd import _lits, _sections
from .simd import WIDTH, Codegen, VecBuilder, lane_block, store_tiles, vector_codegen

__all__ = ["envelopes"]

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)
_I64 = ir.IntType(64)

#: samples per pass of a block (the two input buffers and one band's output buffer,
#: 3 x chunk x 8 float64, stay in the L1 cache)
_CHUNK = 128


class _Layout(NamedTuple):
    """Per band: rows of the parameter block ``P`` (``NPB``; the final states from ``zf``,
    the gain at ``gain``) and of the state block ``Z`` (``NZB``; ``F(u)`` from ``w``)."""

    NPB: int
    zf: int
    gain: int
    NZB: int
    w: int


def _layout(S: int) -> _Layout:
    """The :class:`_Layout` of bands of ``S`` sections."""
    # P: b0, b1, b2, -a1, -a2 per section; the final states zf0, zf1 per section; gain
    # Z: F_circ(H{u}) states z0, z1 per section, then F(u) states w0, w1 per section
    return _Layout(NPB=7 * S + 1, zf=5 * S, gain=7 * S, NZB=4 * S, w=2 * S)


@intrinsic
def _band8(typingctx, ub, hb, nt, n0, T, P, Z, G, ob, i, S, FLAGS, TAIL):  # noqa: ANN001
    """Band ``i`` over rows ``0 .. nt`` of the chunk starting at sample ``n0`` of ``T``:
    ``ub``/``hb (chunk, 8)`` hold ``u`` and ``H{u}``; parameters ``P (., 8)`` and states
    ``Z (., 8)`` (updated) in the :func:`_layout` rows of band ``i``; ``G`` the flat
    wrap-around basis ``(bands, S, T)``. Writes ``gain sqrt(b^2 + H{b}^2)`` to ``ob
    (chunk, 8)`` (FLAGS bit 0: the square root in float32 of the float32-rounded sum).
    ``TAIL`` 1: only the ``H{u}`` cascade runs (the tail pass of the periodic states)."""
    lit = _lits(S, FLAGS, TAIL)
    if lit is None:
        return None
    nS, flags, ntail = lit
    single, tail = bool(flags & 1), bool(ntail)
    lay = _layout(nS)
    sig = types.none(ub, hb, nt, n0, T, P, Z, G, ob, i, S, FLAGS, TAIL)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        vs = VecBuilder(builder, single=True)
        up, hp, pp, zp, gp, op = cg.ptrs(0, 1, 5, 6, 7, 8)
        nt, n0, T, band = args[2], args[3], args[4], args[9]
        pbase = builder.mul(band, ir.Constant(_I64, lay.NPB))
        zbase = builder.mul(band, ir.Constant(_I64, lay.NZB))

        def par(row: int) -> ir.Value:
            return vb.load(pp, builder.add(pbase, ir.Constant(_I64, row)))

        def zidx(row: int) -> ir.Value:
            return builder.add(zbase, ir.Constant(_I64, row))

        nz = 2 * nS if tail else 4 * nS
        slots = {r: vb.var(vb.load(zp, zidx(r))) for r in range(nz)}
        coef = {r: par(r) for r in range(5 * nS)}
        if not tail:
            zf = [par(lay.zf + k) for k in range(2 * nS)]
            gain = par(lay.gain)
            gain32 = vb.to(gain, vs) if single else None
            # basis rows of band i: G[(i S + s) T + n]; the previous sample's value of each
            # section is carried in a scalar (at n0 = 0: the circular predecessor T - 1)
            grow = [
                builder.mul(
                    builder.add(builder.mul(band, ir.Constant(_I64, nS)), ir.Constant(_I64, s)),
                    T,
                )
                for s in range(nS)
            ]
            first = builder.icmp_signed("==", n0, ir.Constant(_I64, 0))
            prev_n = builder.select(
                first,
                builder.sub(T, ir.Constant(_I64, 1)),
                builder.sub(n0, ir.Constant(_I64, 1)),
            )
            gprev = []
            for s in range(nS):
                slot = cgutils.alloca_once(builder, ir.DoubleType())
                builder.store(builder.load(builder.gep(gp, [builder.add(grow[s], prev_n)])), slot)
                gprev.append(slot)

        def cpar(row: int) -> ir.Value:
            return coef[row]

        def _envelope(n: ir.Value, h: ir.Value) -> None:
            b = _sections(vb, cpar, slots, vb.load(up, n), 0, lay.w, nS)
            t = builder.add(n0, n)
            for s in range(nS):
                g0 = builder.load(builder.gep(gp, [builder.add(grow[s], t)]))
                g1 = builder.load(gprev[s])
                builder.store(g0, gprev[s])
                corr = vb.fma(zf[2 * s], vb.splat(g0), vb.mul(zf[2 * s + 1], vb.splat(g1)))
                h = vb.sub(h, corr)
            e2 = vb.fma(b, b, vb.mul(h, h))
            if single:
                e = vs.to(vs.mul(gain32, vs.sqrt(vb.to(e2, vs))), vb)
            else:
                e = vb.mul(gain, vb.sqrt(e2))
            vb.store(e, op, n)

        with cgutils.for_range(builder, nt) as loop:
            n = loop.index
            h = _sections(vb, cpar, slots, vb.load(hp, n), 0, 0, nS)
            if not tail:
                _envelope(n, h)

        for r, slot in slots.items():
            vb.store(builder.load(slot), zp, zidx(r))

    return sig, codegen


@njit(inline="always", **_NOPY)
def _load_rows(src, b, c0, nl, n0, nt, buf):  # pragma: no cover - compiled
    # buf[n, lane] = src[b, c0 + lane, n0 + n] (padding lanes repeat the last channel)
    for lane in range(8):
        row = src[b, c0 + min(lane, nl - 1)]
        for n in range(nt):
            buf[n, lane] = np.float64(row[n0 + n])


@njit(inline="always", **_NOPY)
def _write_rows(buf, k, y, yflat, b, c0, nl, m, n0, nt, offs):  # pragma: no cover - compiled
    # y[b, c0 + lane, m, n0 + n] = buf[k, n, lane] for lanes < nl (buf (., chunk, 8)):
    # tiles of 8 samples transposed in registers, the rest sample by sample (offs: (8,)
    # int64 scratch)
    C, M, T = y.shape[1], y.shape[2], y.shape[3]
    nt8 = nt // 8
    base = ((b * C + c0) * M + m) * T + n0
    for lane in range(8):
        offs[lane] = base + lane * M * T if lane < nl else -1
    store_tiles(buf, k, nt8, yflat, offs)
    for lane in range(nl):
        for n in range(nt8 * 8, nt):
            y[b, c0 + lane, m, n0 + n] = buf[k, n, lane]


@njit(**_NOPY)
def _envelopes_kernel(j0, j1, u, h, y, bands, P, Z, Q, L, G, S, FLAGS):  # noqa: E501  # pragma: no cover
    # jobs j0 .. j1 of B * NB (item, block of 8 channels); u, h (B, C, T): band-pass
    # input and its Hilbert transform (views, may be rows of y);
    # y (B, C, M, T) output, band bands[i] written; P (B, NB, bands * NPB, 8); Z (B, NB,
    # bands * NZB, 8) zeros; Q (bands, 2 S, 2 S); L (bands,); G (bands * S * T,)
    B, C, M, T = y.shape
    NB = P.shape[1]
    nband = bands.shape[0]
    NZB = 4 * S
    yflat = y.reshape(-1)
    for job in range(j0, j1):
        b, blk, c0, nl = lane_block(job, NB, C)
        fp = denormals_off()
        ub = np.zeros((_CHUNK, 8))
        hb = np.zeros((_CHUNK, 8))
        ob = np.empty((1, _CHUNK, 8))
        offs = np.empty(8, np.int64)
        Pj = P[b, blk]
        Zj = Z[b, blk]
        vec = np.empty(2 * S)
        # periodic initial states of the H{u} cascades: the last L samples from rest, then Q
        for i in range(nband):
            for n0 in range(T - L[i], T, _CHUNK):
                nt = min(_CHUNK, T - n0)
                _load_rows(h, b, c0, nl, n0, nt, hb)
                _band8(ub, hb, nt, n0, T, Pj, Zj, G, ob[0], i, S, FLAGS, 1)
            for lane in range(8):
                for j in range(2 * S):
                    vec[j] = Zj[i * NZB + j, lane]
                for r in range(2 * S):
                    a = 0.0
                    for j in range(2 * S):
                        a += Q[i, r, j] * vec[j]
                    Zj[i * NZB + r, lane] = a
        # the envelopes: u and H{u} of a chunk are read before its rows are written
        for n0 in range(0, T, _CHUNK):
            nt = min(_CHUNK, T - n0)
            _load_rows(u, b, c0, nl, n0, nt, ub)
            _load_rows(h, b, c0, nl, n0, nt, hb)
            for i in range(nband):
                _band8(ub, hb, nt, n0, T, Pj, Zj, G, ob[0], i, S, FLAGS, 0)
                _write_rows(ob, 0, y, yflat, b, c0, nl, bands[i], n0, nt, offs)
        restore_fp_mode(fp)


def envelopes(
    bank: np.ndarray,
    bands: list[int],
    Q: np.ndarray,
    L: np.ndarray,
    gam: np.ndarray,
    zf: np.ndarray,
    gain: np.ndarray,
    u: np.ndarray,
    h: np.ndarray,
    y: np.ndarray,
) -> None:
    """Write band ``bands[i]`` of ``y (B, C, M, T)`` as ``gain[b, i, c] |b + i H{b}|``
    (:func:`lhotse_amt.kernels.king2019._envelope_item`): ``bank (M, S, 6)`` the
    band-pass sections; ``Q (bands, 2S, 2S)``, ``L (bands,)`` the periodic state maps;
    ``gam (bands, S, T)`` the wrap-around basis; ``zf (B, 2, M, S, P)`` the final
    section states of the first pass (lanes ``P >= C``); ``gain (B, bands, P)``; ``u``,
    ``h (B, C, T)`` the band-pass input and its Hilbert transform (may be rows of ``y``).
    """
    B, C, M, T = y.shape
    S = bank.shape[1]
    nb = len(bands)
    NB = -(-C // WIDTH)
    CP = NB * WIDTH
    lay = _layout(S)

    def lanes(a: np.ndarray) -> np.ndarray:  # (..., >= C) -> (..., CP), padding = last
        a = np.asarray(a, np.float64)[..., :C]
        return np.concatenate([a, np.repeat(a[..., -1:], CP - C, -1)], -1)

    P = np.zeros((B, nb, lay.NPB, CP))
    for i, m in enumerate(bands):
        for s in range(S):
            b0, b1, b2, _, a1, a2 = bank[m, s]
            P[:, i, 5 * s : 5 * s + 5] = np.array([b0, b1, b2, -a1, -a2])[:, None]
            P[:, i, lay.zf + 2 * s] = lanes(zf[:, 0, m, s])
            P[:, i, lay.zf + 2 * s + 1] = lanes(zf[:, 1, m, s])
        P[:, i, lay.gain] = lanes(gain[:, i])
    # (B, rows, NB, 8) -> (B, NB, rows, 8)
    P = np.ascontiguousarray(P.reshape(B, nb * lay.NPB, NB, WIDTH).transpose(0, 2, 1, 3))
    Z = np.zeros((B, NB, nb * lay.NZB, WIDTH))
    flags = int(y.dtype == np.float32)
    args = (
        u, h, y, np.asarray(bands, np.int64), P, Z, np.ascontiguousarray(Q),
        np.asarray(L, np.int64), np.ascontiguousarray(gam).reshape(-1), S, flags,
    )  # fmt: skip
    run_jobs(literal_entry(_envelopes_kernel, (0, 0, *args), 2), B * NB, args)

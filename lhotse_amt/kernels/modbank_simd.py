"""The modulation filterbank (``efilt``) with the states of 8 channels in vector registers.

Same recursions, operation order and output as :func:`lhotse_amt.kernels.modbank.modulation_bank`
(whose kernel runs one channel at a time: its pre-filter and low-pass are a scalar chain of
dependent multiply-adds per sample, and every resonator state goes through memory), so the
results are bit for bit the same. Here the channels are cut into blocks of 8 (one float64
vector, :mod:`lhotse_amt.kernels.simd`); each block runs over the signal in chunks of
``_CHUNK`` samples:

1. the chunk of the block's 8 channels is copied into a buffer ``(chunk, 8)``;
2. pre-filter and low-pass sections with their states in registers: the pre-filtered
   signal replaces the input in the buffer, the scaled low-pass output is band 0;
3. the complex one-pole resonators, ``_BAND_GROUP`` bands per pass over the chunk (their
   states and coefficients in registers), each band's output ``k * |y|`` or ``k * Re y``
   (per channel) into a buffer ``(bands, chunk, 8)``;
4. the buffer is written into the ``(B, C, M, T)`` output as 8 x 8 tiles (8 samples of 8
   channels) transposed in registers, one vector store per channel.

:func:`modulation_bank_pooled` replaces step 4 by the frame pooling of the
``amt-paulick2024`` extractor (:func:`lhotse_amt.kernels.paulick.pool_held`, the same
values), so feature extraction never materialises the ``(B, C, M, T)`` output.

The code is generated per structure (pre-filter and low-pass section counts, number of
resonator bands, output flags; numba caches each on disk).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from .. import _alloc
from . import SIMD
from .cpu import _np
from .fastmath import NO_CFUNC, denormals_off, restore_fp_mode
from .jobs import literal_entry, run_jobs
from .modbank import state_arrays
from .paulick_simd import _lits
from .simd import WIDTH, Codegen, lane_block, store_tiles, vector_codegen

__all__ = ["ENABLED", "modulation_bank", "modulation_bank_pooled"]

#: used by :func:`lhotse_amt.functional.modulation.modulation_filterbank` (``LHOTSE_AMT_SIMD=0``
#: in the environment: the channel-by-channel kernel of :mod:`lhotse_amt.kernels.modbank`)
ENABLED = SIMD

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)
_I64 = ir.IntType(64)

#: samples per pass of a block (buffers (bands + 1) x chunk x 8 float64 stay in cache)
_CHUNK = 256
#: resonator bands per pass over a chunk: 3 bands keep their 6 states and 18 coefficient
#: and mask vectors in the 32 vector registers of AVX-512
_BAND_GROUP = 3
_N_BAND = 6  # per band: Re p, Im p, Re g, Im g, scale k, 1.0 where |y| is taken (else 0.0)


class _Layout(NamedTuple):
    """Row offsets of the parameter block ``P (NP, 8)`` and the state block ``Z (NZ, 8)``."""

    pre: int
    lp: int
    s0: int
    bands: int
    NP: int
    zpre: int
    zlp: int
    zb: int
    NZ: int


def _layout(SP: int, SL: int, M1: int) -> _Layout:
    """The :class:`_Layout` of ``SP`` pre-filter and ``SL`` low-pass sections and ``M1``
    band lanes."""
    s0 = 5 * SP + 5 * SL
    zb = 2 * SP + 2 * SL
    return _Layout(0, 5 * SP, s0, s0 + 1, s0 + 1 + _N_BAND * M1, 0, 2 * SP, zb, zb + 2 * M1)


@intrinsic
def _mod8(typingctx, ib, nt, P, Z, ob, SP, SL, M1, FLAGS):  # noqa: ANN001
    """Pre-filter, low-pass and resonators of one block of 8 channels over ``ib (chunk, 8)``
    rows ``0 .. nt`` (overwritten with the pre-filtered signal): parameters ``P (NP, 8)``,
    states ``Z (NZ, 8)`` (updated), outputs into ``ob (M1 + 1, chunk, 8)``."""
    lit = _lits(SP, SL, M1, FLAGS)
    if lit is None:
        return None
    nSP, nSL, nM1, flags = lit
    by_sample, round32, square = bool(flags & 1), bool(flags & 2), bool(flags & 4)
    lay = _layout(nSP, nSL, nM1)
    sig = types.none(ib, nt, P, Z, ob, SP, SL, M1, FLAGS)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        ip, pp, zp, op = cg.ptrs(0, 2, 3, 4)
        nt = args[1]
        chunk = ir.Constant(_I64, _CHUNK)
        nbands = ir.Constant(_I64, nM1 + 1)

        def out_index(m: int, n: ir.Value) -> ir.Value:
            # ob (M1 + 1, chunk, 8), or (chunk, M1 + 1, 8) with FLAGS bit 0
            mm = ir.Constant(_I64, m)
            if by_sample:
                return builder.add(builder.mul(n, nbands), mm)
            return builder.add(builder.mul(mm, chunk), n)

        def final(v: ir.Value) -> ir.Value:
            # FLAGS bit 1: the value a float32 output holds; bit 2: squared (rms pooling)
            if round32:
                v = vb.round_to_f32(v)
            return vb.mul(v, v) if square else v

        def par(row: int) -> ir.Value:
            return vb.load(pp, row)

        def sections(v, off: int, zoff: int, n: int, slots):  # noqa: ANN001, ANN202
            # o = b0 v + z0; z0 = b1 v - a1 o + z1; z1 = b2 v - a2 o (unfused, in this order)
            for s in range(n):
                b0, b1, b2, a1, a2 = (par(off + 5 * s + i) for i in range(5))
                z0s, z1s = slots[zoff + 2 * s], slots[zoff + 2 * s + 1]
                o = vb.add(vb.mul(b0, v), builder.load(z0s))
                z0 = vb.add(vb.sub(vb.mul(b1, v), vb.mul(a1, o)), builder.load(z1s))
                builder.store(z0, z0s)
                builder.store(vb.sub(vb.mul(b2, v), vb.mul(a2, o)), z1s)
                v = o
            return v

        # pass 1: pre-filter (in place) and low-pass -> band 0
        slots = {i: vb.var(vb.load(zp, i)) for i in range(lay.zb)}
        s0 = par(lay.s0)
        with cgutils.for_range(builder, nt) as loop:
            n = loop.index
            u = sections(vb.load(ip, n), lay.pre, lay.zpre, nSP, slots)
            vb.store(u, ip, n)
            w = sections(u, lay.lp, lay.zlp, nSL, slots)
            vb.store(final(vb.mul(s0, w)), op, out_index(0, n))
        for i, slot in slots.items():
            vb.store(builder.load(slot), zp, i)

        # pass 2: resonators, _BAND_GROUP bands per pass over the chunk
        zero = vb.const(0.0)
        for m0 in range(0, nM1, _BAND_GROUP):
            bands = range(m0, min(m0 + _BAND_GROUP, nM1))
            st = {}
            cf = {}
            for m in bands:
                zr, zi = lay.zb + 2 * m, lay.zb + 2 * m + 1
                st[m] = (vb.var(vb.load(zp, zr)), vb.var(vb.load(zp, zi)))
                row = lay.bands + _N_BAND * m
                pr, pi, gr, gi, k, ab = (par(row + i) for i in range(_N_BAND))
                cf[m] = (pr, pi, gr, gi, k, builder.fcmp_ordered("!=", ab, zero))
            with cgutils.for_range(builder, nt) as loop:
                n = loop.index
                u = vb.load(ip, n)
                for m in bands:
                    pr, pi, gr, gi, k, use_abs = cf[m]
                    xr, xi = builder.load(st[m][0]), builder.load(st[m][1])
                    nr = vb.add(vb.sub(vb.mul(pr, xr), vb.mul(pi, xi)), u)
                    ni = vb.add(vb.mul(pr, xi), vb.mul(pi, xr))
                    builder.store(nr, st[m][0])
                    builder.store(ni, st[m][1])
                    yr = vb.sub(vb.mul(gr, nr), vb.mul(gi, ni))
                    yi = vb.add(vb.mul(gr, ni), vb.mul(gi, nr))
                    mag = vb.sqrt(vb.add(vb.mul(yr, yr), vb.mul(yi, yi)))
                    out = vb.mul(k, vb.select(use_abs, mag, yr))
                    vb.store(final(out), op, out_index(m + 1, n))
            for m in bands:
                vb.store(builder.load(st[m][0]), zp, lay.zb + 2 * m)
                vb.store(builder.load(st[m][1]), zp, lay.zb + 2 * m + 1)

    return sig, codegen


@njit(**_NOPY)
def _blocks_kernel(j0, j1, x, P, Z, sc, y, SP, SL, M1):  # pragma: no cover - compiled
    # jobs j0 .. j1 of B * NB (item, block of 8 channels); x (B, C, T); P (NB, NP, 8);
    # Z (B, NB, NZ, 8); sc (C, M1 + 1); y (B, C, M1 + 1, T)
    B, C, T = x.shape
    NB = P.shape[0]
    yflat = y.reshape(-1)
    for job in range(j0, j1):
        b, blk, c0, nl = lane_block(job, NB, C)
        fp = denormals_off()
        ib = np.empty((_CHUNK, 8))
        ob = np.empty((M1 + 1, _CHUNK, 8))
        offs = np.empty(8, np.int64)
        for n0 in range(0, T, _CHUNK):
            nt = min(_CHUNK, T - n0)
            for lane in range(8):  # padding lanes repeat the block's last channel
                xc = x[b, c0 + min(lane, nl - 1)]
                for n in range(nt):
                    ib[n, lane] = np.float64(xc[n0 + n])
            _mod8(ib, nt, P[blk], Z[b, blk], ob, SP, SL, M1, 0)
            # 8 x 8 tiles transposed in registers, then the tail and the bands a channel
            # does not have (zeros) sample by sample
            nt8 = nt // 8
            for m in range(M1 + 1):
                base = ((b * C + c0) * (M1 + 1) + m) * T + n0
                for lane in range(8):
                    offs[lane] = base + lane * (M1 + 1) * T if lane < nl else -1
                store_tiles(ob, m, nt8, yflat, offs)
                for lane in range(nl):
                    c = c0 + lane
                    ym = y[b, c, m]
                    if m > 0 and sc[c, m] == 0.0:
                        for n in range(nt):
                            ym[n0 + n] = 0.0
                    else:
                        for n in range(nt8 * 8, nt):
                            ym[n0 + n] = ob[m, n, lane]
        restore_fp_mode(fp)


@njit(inline="always", **_NOPY)
def pool_chunk(ob, n0, nt, T, s, e, F, R, f, first, mid, out, c0, nl, rms):  # noqa: E501  # pragma: no cover
    # frames f, f + 1, ... (of F) of one item from the band outputs of one block of 8
    # channels at held samples n0 .. n0 + nt - 1 (of T): ob (nt, D), row n band by band, 8
    # channels each (D = 8 (M1 + 1)); frame g covers input samples [s[g], e[g]) of the
    # signal held over R input samples per sample; out (C, M1 + 1, F) gets the mean (the
    # rms if rms: ob holds squares) of the real lanes c0 .. c0 + nl - 1, with the
    # arithmetic and summation order of lhotse_amt.kernels.paulick._pool_kernel. first/mid
    # (D,) carry the open frame's first held value and inner sum to the next chunk.
    # Returns the next frame
    D = first.shape[0]
    M1 = D // 8 - 1
    n = 0  # frame by frame over the chunk's samples
    while n < nt and f < F:
        q = n0 + n
        sf = s[f]
        ef = e[f]
        qa = sf // R
        qb = min((ef - 1) // R, T - 1)
        if q < qa:  # no frame uses the samples before qa
            n = qa - n0
            continue
        if q == qa:
            for i in range(D):
                first[i] = ob[n, i]
                mid[i] = 0.0
            if qb > qa:
                n += 1
                continue
        else:  # the frame's inner samples in this chunk, in order
            stop = min(qb, n0 + nt) - n0
            for nn in range(n, stop):
                for i in range(D):
                    mid[i] += ob[nn, i]
            n = stop
            if n == nt:
                break
        # sample qb (= q): the frame is complete; the next frame may start at qb too
        d = np.float64(ef - sf)
        wa = np.float64(min(qa * R + R, ef) - sf)
        w1 = np.float64(qa * R + R - sf)
        wr = np.float64(R)
        wb = np.float64(min(qb * R + R, ef) - qb * R)
        for m in range(M1 + 1):
            for lane in range(nl):
                i = m * 8 + lane
                if qb == qa:
                    acc = wa * first[i]
                else:
                    acc = w1 * first[i] + wr * mid[i] + wb * ob[n, i]
                pv = acc / d
                out[c0 + lane, m, f] = math.sqrt(pv) if rms else pv
        f += 1
    return f


@njit(**_NOPY)
def _pooled_kernel(j0, j1, x, P, Z, s, e, nf, R, out, SP, SL, M1, FLAGS):  # noqa: E501  # pragma: no cover
    # as _blocks_kernel, but each band's output is pooled at once instead of written
    # (pool_chunk): out[b, c, m, f] = the mean (or rms) over input samples [s[b, f],
    # e[b, f]) of the band output held over R input samples per sample, on the output
    # rounded to its dtype. FLAGS: 1 (samples band by band in the buffer) | 2 (float32
    # output) | 4 (rms pooling); _mod8 rounds and squares. Bands a channel lacks have
    # scale 0, so their values are +-0.0 (the written output's 0.0; the same pooled values)
    rms = (FLAGS & 4) != 0
    B, C, T = x.shape
    NB = P.shape[0]
    for job in range(j0, j1):
        b, blk, c0, nl = lane_block(job, NB, C)
        fp = denormals_off()
        ib = np.empty((_CHUNK, 8))
        D = (M1 + 1) * 8
        ob = np.empty((_CHUNK, D))  # per sample: band by band, 8 channels each
        first = np.zeros(D)  # value at a frame's first held sample
        mid = np.zeros(D)  # sum over the frame's inner held samples
        f = 0
        for n0 in range(0, T, _CHUNK):
            nt = min(_CHUNK, T - n0)
            for lane in range(8):
                xc = x[b, c0 + min(lane, nl - 1)]
                for n in range(nt):
                    ib[n, lane] = np.float64(xc[n0 + n])
            _mod8(ib, nt, P[blk], Z[b, blk], ob, SP, SL, M1, FLAGS)
            f = pool_chunk(ob, n0, nt, T, s[b], e[b], nf[b], R, f, first, mid, out[b], c0, nl, rms)
        restore_fp_mode(fp)


class _Packed:
    """Arguments of the kernels in their block layout, and the way back for the states."""

    def __init__(self, x: torch.Tensor, filters: tuple, state: dict | None) -> None:
        lp_sos, prefilter_sos, pole, gain, use_abs, scale = filters
        self.lead = x.shape[:-2]
        C, T = x.shape[-2], x.shape[-1]
        self.xn = _np(x.reshape(math.prod(self.lead), C, T))
        B = self.xn.shape[0]
        M1 = pole.shape[-1]
        pre = np.zeros((0, 6)) if prefilter_sos is None else _np(prefilter_sos).astype(np.float64)
        lp = _np(lp_sos).astype(np.float64)
        SP, SL = pre.shape[0], lp.shape[0]
        self.has_pre = prefilter_sos is not None
        self.B, self.C, self.T, self.M1, self.SP, self.SL = B, C, T, M1, SP, SL
        self.lay = lay = _layout(SP, SL, M1)
        self.NB = NB = -(-C // WIDTH)
        CP = NB * WIDTH

        def lanes(a: np.ndarray) -> np.ndarray:
            # (..., C) -> (..., CP): padding lanes repeat the last channel (finite values)
            a = np.asarray(a, np.float64)
            if CP == C:
                return a
            return np.concatenate([a, np.repeat(a[..., -1:], CP - C, -1)], -1)

        def blocks(a: np.ndarray) -> np.ndarray:
            # (..., rows, CP) -> (..., NB, rows, 8)
            *ld, rows, _ = a.shape
            return np.ascontiguousarray(np.moveaxis(a.reshape(*ld, rows, NB, WIDTH), -2, -3))

        def sos_rows(sos: np.ndarray) -> list[np.ndarray]:
            # b0 b1 b2 a1 a2 of every section, the same for all channels
            return [np.full(CP, sos[s, i]) for s in range(sos.shape[0]) for i in (0, 1, 2, 4, 5)]

        self.sc = sc = _np(scale).astype(np.float64).reshape(C, M1 + 1)
        p, g = _np(pole).reshape(C, M1), _np(gain).reshape(C, M1)
        ab = _np(use_abs).reshape(C, M1)
        rows = sos_rows(pre) + sos_rows(lp) + [lanes(sc[:, 0])]
        per_band = (p.real, p.imag, np.real(g), np.imag(g), sc[:, 1:], ab.astype(np.float64))
        for m in range(M1):
            rows.extend(lanes(v[:, m]) for v in per_band)
        self.P = blocks(np.stack(rows))
        assert self.P.shape[1] == lay.NP

        def zi(z: np.ndarray, S: int) -> np.ndarray:  # (B, 2 S, CP), rows z0, z1 per section
            return lanes(z.reshape(B, C, 2 * S).transpose(0, 2, 1))

        zpre, zlp, s = state_arrays(state, B, C, SP, SL, M1)
        zb = np.stack([s.real, s.imag], -1).reshape(B, C, 2 * M1).transpose(0, 2, 1)
        self.Z = blocks(np.concatenate([zi(zpre, SP), zi(zlp, SL), lanes(zb)], 1))

    def literals(self) -> tuple[int, int, int]:
        return self.SP, self.SL, self.M1

    def new_state(self) -> dict[str, torch.Tensor]:
        """The updated states (keys ``pre``, ``lp``, ``bp`` as the unfused function)."""
        B, C, M1, lay, lead = self.B, self.C, self.M1, self.lay, self.lead
        Zn = np.moveaxis(self.Z, -3, -2).reshape(B, lay.NZ, -1)[..., :C]  # (B, NZ, C)

        def zout(off: int, S: int) -> torch.Tensor:
            z = Zn[:, off : off + 2 * S].transpose(0, 2, 1).reshape(B, C, S, 2)
            return torch.from_numpy(np.ascontiguousarray(z)).reshape(*lead, C, S, 2)

        zb = Zn[:, lay.zb :].transpose(0, 2, 1).reshape(B, C, M1, 2)
        new = {
            "lp": zout(lay.zlp, self.SL),
            "bp": torch.complex(
                torch.from_numpy(np.ascontiguousarray(zb[..., 0])),
                torch.from_numpy(np.ascontiguousarray(zb[..., 1])),
            ).reshape(*lead, C, M1, 1),
        }
        if self.has_pre:
            new["pre"] = zout(lay.zpre, self.SP)
        return new


def modulation_bank(
    x: torch.Tensor, filters: tuple, state: dict | None
) -> tuple[torch.Tensor, dict]:
    """Drop-in for :func:`lhotse_amt.kernels.modbank.modulation_bank` (same arguments, state
    keys and results): ``x (..., C, T)`` through the bank's ``filters``. Returns
    ``(..., C, M, T)`` in ``x``'s dtype and the state (keys ``pre``, ``lp``, ``bp``)."""
    k = _Packed(x, filters, state)
    y = _alloc.empty((k.B, k.C, k.M1 + 1, k.T), k.xn.dtype)
    if k.T > 0:
        args = (k.xn, k.P, k.Z, k.sc, y, *k.literals())
        run_jobs(literal_entry(_blocks_kernel, (0, 0, *args), 3), k.B * k.P.shape[0], args)
    return torch.from_numpy(y).reshape(*k.lead, k.C, k.M1 + 1, k.T), k.new_state()


def modulation_bank_pooled(
    x: torch.Tensor,
    filters: tuple,
    state: dict | None,
    starts: np.ndarray,
    ends: np.ndarray,
    counts: np.ndarray,
    R: int,
    rms: bool,
) -> tuple[np.ndarray, dict]:
    """:func:`modulation_bank` followed by frame pooling of the held output, without the
    ``(B, C, M, T)`` output: ``x (B, C, T)`` (other arguments as :func:`modulation_bank`);
    row ``b`` has ``counts[b]`` frames, frame ``f`` covering input samples
    ``[starts[b, f], ends[b, f])`` of the signal held over ``R`` input samples per sample of
    ``x`` (``starts``/``ends`` ``(B, F)`` int64). Returns the frame means (rms if ``rms``)
    ``(B, C, M, F)`` float64, equal bit for bit to
    :func:`lhotse_amt.kernels.paulick.pool_held` of :func:`modulation_bank`'s output, and the
    new state."""
    k = _Packed(x, filters, state)
    starts = np.ascontiguousarray(starts, np.int64).reshape(k.B, -1)
    ends = np.ascontiguousarray(ends, np.int64).reshape(k.B, -1)
    counts = np.ascontiguousarray(counts, np.int64).reshape(k.B)
    out = np.zeros((k.B, k.C, k.M1 + 1, starts.shape[1]))
    if k.T > 0:  # (also without frames: the states advance)
        round32 = k.xn.dtype == np.float32
        flags = 1 | 2 * int(round32) | 4 * int(bool(rms))
        args = (k.xn, k.P, k.Z, starts, ends, counts, int(R), out, *k.literals(), flags)
        run_jobs(literal_entry(_pooled_kernel, (0, 0, *args), 4), k.B * k.P.shape[0], args)
    return out, k.new_state()

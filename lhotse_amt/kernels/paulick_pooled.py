"""Paulick et al. (2024)'s whole no-grad chain, pooled into frames in one pass per batch
row and group of channels, on the CPU.

Ear filter -> DRNL -> IHC -> adaptation loops -> FIR decimator (the register kernels of
:mod:`lhotse_amt.kernels.paulick_simd`) -> modulation filterbank (``efilt``, the register
kernel of :mod:`lhotse_amt.kernels.modbank_simd`) -> frame pooling of the band outputs held
over ``R`` input samples per decimated sample
(:func:`lhotse_amt.kernels.modbank_simd.pool_chunk`). Each job (batch row, group of blocks
of 8 channels) runs over the whole signal in chunks of
:data:`~lhotse_amt.kernels.paulick_simd._CHUNK` input samples with every state in small
buffers, so neither the sample-rate nor the decimated signal is stored: memory is the
input (read in place) and the frames, whatever the signal's length, and the work is one
kernel launch.

The ear filter runs inside too, chunk by chunk from the input (read in place). The
arithmetic is that of the ear filter, the front end and the pooled modulation filterbank
one after the other (:func:`lhotse_amt.kernels.paulick.fir`,
:func:`lhotse_amt.kernels.paulick_frontend.frontend`, then
:func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled`): the decimated samples
rounded to float32 for float32 models as the stage-wise output is, the same operation
order, so the frames equal theirs bit for bit.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit

from .fastmath import NO_CFUNC, denormals_off, restore_fp_mode
from .jobs import literal_entry, run_jobs
from .modbank_simd import _mod8, pool_chunk
from .modbank_simd import _Packed as _ModulationPacked
from .paulick import tap_sums
from .paulick_frontend import kernel_inputs
from .paulick_simd import _CHUNK, _decim8, _drnl8, _hair8, pack, shift_history
from .simd import group_job

__all__ = ["pooled"]

_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)


@njit(**_NOPY)
def _pooled_kernel(
    t0, t1, x, we, P, Z, wd, PM, ZM, s, e, nf, out,
    G, SL, S1, S2, J, K, R, FLAGS, SP, SM, M1, MFLAGS,
):  # noqa: E501  # pragma: no cover - compiled  # fmt: skip
    # jobs t0 .. t1 of N * NG (row, group of G blocks of the front end's layout, P, Z);
    # x (N, T) the input (float32 or float64), we (KE,) the ear filter's flipped taps;
    # the modulation bank's parameters PM (NB, NPM, 8) and states ZM (N, NB, NZM, 8) per
    # block (NB <= NG G: the group padding blocks have none); s, e (N, F) frame spans,
    # nf (N,) frames per row; out (N, C, M1 + 1, F). FLAGS: the front end's (1 limiter,
    # 2 float32), MFLAGS: the pooled bank's (1 | 2 float32 | 4 rms)
    N, T = x.shape
    NG = P.shape[0] // G
    NB = PM.shape[0]
    C = out.shape[1]
    H = K - 1
    Td = (T + R - 1) // R  # decimated samples: n = R m for m < Td
    round32 = (MFLAGS & 2) != 0
    rms = (MFLAGS & 4) != 0
    D = (M1 + 1) * 8
    Mc = _CHUNK // R + 1  # most decimated samples of one chunk
    Rv = np.int64(R)  # not a literal: pool_chunk's one compiled version serves every R
    KE = we.shape[0]
    for t in range(t0, t1):
        r, b0 = group_job(t, NG, G)
        fp = denormals_off()
        Pg = P[b0 : b0 + G]
        Zg = Z[r, b0 : b0 + G]
        xs = np.empty(KE - 1 + _CHUNK)  # the chunk's ear-filter input, history in front
        acc = np.empty(_CHUNK)
        xe = np.empty(_CHUNK)  # the ear filter's output: the DRNL's input
        buf = np.zeros((H + _CHUNK, G, 8))  # the decimator's history at rest: zeros
        yb = np.empty((G, Mc, 8))
        ib = np.empty((Mc, 8))
        ob = np.empty((Mc, D))
        first = np.zeros((G, D))
        mid = np.zeros((G, D))
        fg = np.zeros(G, np.int64)
        i = np.int64(0)  # decimated samples so far (not a literal 0: one pool_chunk version)
        for c0 in range(0, T, _CHUNK):
            tc = min(_CHUNK, T - c0)
            # the ear filter (zeros before the signal), the sum of paulick._fir_kernel
            # (tap_sums), rounded to the input's dtype
            for j in range(KE - 1 + tc):
                n = c0 - (KE - 1) + j
                xs[j] = np.float64(x[r, n]) if n >= 0 else 0.0
            for ii in range(tc):
                acc[ii] = 0.0
            tap_sums(acc, xs, tc, we)
            for ii in range(tc):
                u = 0.0 + acc[ii]
                xe[ii] = np.float64(np.float32(u)) if round32 else u
            for g in range(G):
                _drnl8(xe, 0, tc, Pg, Zg, buf, H, g, G, SL, S1, S2)
            _hair8(buf, H, tc, Pg, Zg, G, SL, S1, S2, J, FLAGS)
            first_row = i * R - c0
            if first_row < tc:
                cnt = (tc - 1 - first_row) // R + 1
                for g in range(min(G, NB - b0)):
                    blk = b0 + g
                    _decim8(buf, first_row, cnt, wd, yb, g, G, R, K)
                    for ii in range(cnt):
                        for lane in range(8):
                            v = yb[g, ii, lane]
                            ib[ii, lane] = np.float64(np.float32(v)) if round32 else v
                    _mod8(ib, cnt, PM[blk], ZM[r, blk], ob, SP, SM, M1, MFLAGS)
                    fg[g] = pool_chunk(
                        ob, i, cnt, Td, s[r], e[r], nf[r], Rv, fg[g], first[g], mid[g], out[r],
                        blk * 8, min(8, C - blk * 8), rms,
                    )  # fmt: skip
                i += cnt
            shift_history(buf, tc, H)
        restore_fp_mode(fp)


def pooled(
    x: torch.Tensor,
    ear_weight: torch.Tensor,
    front: tuple,
    dec_weight: torch.Tensor,
    dec_factor: int,
    mod_filters: tuple,
    frames: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    rms: bool,
) -> torch.Tensor:
    """The ear filter (``ear_weight (K,)``: its flipped taps, ``y[n] = sum_k w[k] x[n - K +
    1 + k]``, zeros before the signal, rounded to ``x``'s dtype: the sum of
    :func:`lhotse_amt.kernels.paulick.fir`), the front end (``front``: the arguments
    ``drnl_coefs, ihc_consts, ihc_state, adapt_a, adapt_m, adapt_state, minlvl, use_limit,
    out_offset, out_scale`` of :func:`lhotse_amt.kernels.paulick_frontend.frontend`; the
    DRNL and the decimator from rest) and the modulation filterbank (``mod_filters``: as
    :func:`lhotse_amt.kernels.modbank_simd.modulation_bank`'s, from rest) on the input ``x
    (N, T)`` (float32 or float64, read in place), pooled: ``frames`` are ``starts, stops,
    counts``; row ``b`` has ``counts[b]`` frames, frame ``f`` the mean (the rms if ``rms``)
    of the band outputs held over ``R = dec_factor`` input samples per decimated sample,
    over input samples ``[starts[b, f], stops[b, f])`` (``(N, F)`` int64, increasing).
    Needs the broken-stick exponent 1/4 and ``R >= 1``
    (:func:`lhotse_amt.kernels.paulick_simd.supported`). Returns ``(N, C, M + 1, F)``
    float64 (0 for bands a channel lacks)."""
    N, T = x.shape
    C = front[0][0].shape[0]
    minlvl, use_limit, out_offset, out_scale = front[6:10]
    wd = np.ascontiguousarray(dec_weight.detach().cpu().numpy().reshape(-1), np.float64)
    K, R = wd.shape[0], int(dec_factor)
    # the kernel starts the DRNL and the decimator from rest (its buffer's history rows are
    # zeros): no decimator history to pack
    k = kernel_inputs(x[:, :0], front, None, np.zeros((N, 0, C)))
    xn = x.detach().numpy()
    we = np.ascontiguousarray(ear_weight.detach().numpy().reshape(-1), np.float64)
    round32 = x.dtype == torch.float32
    f = pack(
        *k.drnl, *k.drnl_state, k.ihc, k.w, k.aa, k.mm, k.s, minlvl, use_limit, out_offset,
        out_scale, k.hist, round32,
    )  # fmt: skip
    mod = _ModulationPacked(x.new_zeros((N, C, 0)), mod_filters, None)
    starts, stops, counts = (np.ascontiguousarray(t.numpy(), np.int64) for t in frames)
    starts, stops, counts = starts.reshape(N, -1), stops.reshape(N, -1), counts.reshape(N)
    out = np.zeros((N, C, mod.M1 + 1, starts.shape[1]))
    if T > 0:
        mflags = 1 | 2 * int(round32) | 4 * int(bool(rms))
        args = (xn, we, f.P, f.Z, wd, mod.P, mod.Z, starts, stops, counts, out)
        args = (*args, f.G, f.SL, f.S1, f.S2, f.J, K, R, f.flags, *mod.literals(), mflags)
        run_jobs(literal_entry(_pooled_kernel, (0, 0, *args), 12), N * (f.P.shape[0] // f.G), args)
    return torch.from_numpy(out)

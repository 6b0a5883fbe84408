"""Phase insensitivity of the fused King, Varnet & Lorenzi (2019) forward from one Hilbert
transform per channel (:func:`lhotse_amt.kernels.king2019.king_samples`): the band-pass
input's transform ``H{u}`` filtered by each band, corrected for the wrap-around of the
circular transform (the comment at "phase insensitivity from the band-pass input's Hilbert
transform"), then the rms-matched envelopes, instead of two FFTs per band output; and the
cascade of second-order sections over a block of samples that the chain's kernel shares.
"""

from __future__ import annotations

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from . import king2019_envelope_simd, modbank_simd
from .casp import _F, _WRITE_BLOCK, _flush
from .fastmath import denormals_off, restore_fp_mode
from .hilbert import hilbert_rows_

__all__ = ["band_rows", "hilbert_envelopes_", "periodic_state_maps", "sections_block", "wrap_basis"]


@njit(inline="always", **_F)
def sections_block(v, nb, sos, z0, z1, m):  # pragma: no cover - compiled
    # cascade m of second-order sections (transposed direct form II; sos (., S, 6),
    # coefficients shared by the lanes) on the first nb rows of the block v (TB, P) in
    # place, section by section (coefficients in scalars, the states of one section stay
    # in the cache over the block); states z0/z1 (., S, P). Per lane the same operations
    # in the same order as sample by sample. Indexing, not views: a view per call would
    # cost reference counting inside the sample loop
    P = v.shape[1]
    for s in range(sos.shape[1]):
        b0, b1, b2, a1, a2 = sos[m, s, 0], sos[m, s, 1], sos[m, s, 2], sos[m, s, 4], sos[m, s, 5]
        for t in range(nb):
            for c in range(P):
                x = v[t, c]
                out = b0 * x + z0[m, s, c]
                z0[m, s, c] = b1 * x - a1 * out + z1[m, s, c]
                z1[m, s, c] = b2 * x - a2 * out
                v[t, c] = out


def band_rows(kcol: np.ndarray, P: int, m: int) -> np.ndarray:
    """Lane ``c`` -> row ``c * M + m`` of an item's ``(C * M, T)`` rows (-1: padding),
    from a plan's lane map ``kcol (M * P,)``."""
    return np.ascontiguousarray(kcol[m * P : (m + 1) * P])


# ---- phase insensitivity from the band-pass input's Hilbert transform -----------------
#
# For one channel let u (length N) be the band-pass input and b = F(u) the output of band
# filter F (state-space A, B, C, D over the section states, from rest). AMT's Hilbert
# transform H is circular (FFT over the N samples), F is not; with s_N the final state
# of F and F_circ the periodic filter (initial state (I - A^N)^-1 times the final state
# of the pass from rest, the steady state of u repeated for ever):
#
#     H{b} = F_circ(H{u}) - sum_j s_N[j] G_j,   G_j = H{ZIR_j} as a DFT:
#     DFT(G_j)[k] = -i sgn(k) C (I - w_k A)^-1 e_j,   w_k = exp(-2 pi i k / N)
#
# (b + ZIR((I - A^N)^-1 s_N) is the circular convolution of u with F's impulse response,
# which H commutes with; the wrap-around term's DFT is C (I - w A)^-1 s_N, the
# z-transform of the zero-input response from s_N). So one Hilbert transform per
# channel (two real FFTs) and a band-pass pass over it replace two real FFTs per band;
# the G_j (2 per section and band, one inverse FFT per section: the z1 one is the z0 one
# a sample later) are shared by every channel and item. By Parseval
# sum(H{b}^2) = sum(b^2) - (sum(b)^2 + [N even] sum((-1)^n b)^2) / N, so the rms
# matching is known before the envelopes are formed.


def _section_step_matrix(sos: np.ndarray) -> np.ndarray:
    """``A`` ``(2S, 2S)``: one step of the section states ``(z0_s, z1_s)`` of the cascade
    ``sos (S, 6)`` (transposed direct form II, as the kernels run it) without input."""
    S = sos.shape[0]
    A = np.zeros((2 * S, 2 * S))
    for j in range(2 * S):
        z = np.zeros(2 * S)
        z[j] = 1.0
        w = 0.0
        new = np.zeros(2 * S)
        for s in range(S):
            b0, b1, b2, _, a1, a2 = sos[s]
            y = b0 * w + z[2 * s]
            new[2 * s] = b1 * w - a1 * y + z[2 * s + 1]
            new[2 * s + 1] = b2 * w - a2 * y
            w = y
        A[:, j] = new
    return A


def periodic_state_maps(
    sos: np.ndarray, N: int, tol: float = 2.0**-60
) -> tuple[np.ndarray, int, float]:
    """For the cascade ``sos (S, 6)`` and ``N`` samples: ``Q = (I - A^N)^-1`` (final
    state of a pass from rest -> initial state of the periodic steady state), the tail
    length ``L <= N`` after which ``max |A^L| < tol`` (a pass over the last ``L``
    samples from rest then gives the final state to ``tol``; ``L = N`` where it does
    not decay that fast) and ``max |A^N|`` (``Q`` is ill-conditioned where it is not
    small: the section states of a band-pass with poles near ``z = 1`` first grow, by
    up to ~500 for the 13.7-Hz band, before they decay)."""
    A = _section_step_matrix(sos)
    AN = np.linalg.matrix_power(A, N)
    Q = np.linalg.inv(np.eye(A.shape[0]) - AN)
    L, AL = 1024, np.linalg.matrix_power(A, 1024)
    while L < N and np.abs(AL).max() >= tol:
        L, AL = 2 * L, AL @ AL
    return Q, min(L, N), float(np.abs(AN).max())


@njit(**_F)
def _wrap_spectra(bank, bands, wr, wi, spec):  # pragma: no cover - compiled
    # spec[i * S + s, k] = -i sgn(k) / A_s(w) prod_{s' > s} B_s'(w) / A_s'(w) for band
    # bands[i] at w = wr[k] + i wi[k] = exp(-2 pi i k / N), k = 0 ... N // 2, as (re, im)
    # pairs (spec (rows, K, 2)): the DFT of H{zero-input response from z0_s = 1}; that
    # from z1_s = 1 is w times it (the same sequence one sample later, circularly).
    # Real arithmetic, vectorised over k; DC and Nyquist are set by the caller
    S = bank.shape[1]
    K = wr.shape[0]
    tr = np.empty(K)
    ti = np.empty(K)
    for i in range(bands.shape[0]):
        m = bands[i]
        for k in range(K):
            tr[k] = 0.0  # tail = -i
            ti[k] = -1.0
        for s in range(S - 1, -1, -1):
            b0, b1, b2, _, a1, a2 = bank[m, s]
            r = i * S + s
            for k in range(K):
                xr = wr[k]
                xi = wi[k]
                x2r = xr * xr - xi * xi
                x2i = 2.0 * xr * xi
                dr = 1.0 + a1 * xr + a2 * x2r
                di = a1 * xi + a2 * x2i
                d2 = dr * dr + di * di
                qr = (tr[k] * dr + ti[k] * di) / d2
                qi = (ti[k] * dr - tr[k] * di) / d2
                spec[r, k, 0] = qr
                spec[r, k, 1] = qi
                nr = b0 + b1 * xr + b2 * x2r
                ni = b1 * xi + b2 * x2i
                tr[k] = qr * nr - qi * ni
                ti[k] = qr * ni + qi * nr


def wrap_basis(bank: np.ndarray, bands: list[int], N: int) -> torch.Tensor:
    """``G (len(bands), S, N)`` (float64) of the comment above for the states ``z0_s``
    (those for ``z1_s`` are the same rows delayed by one sample, circularly): the
    Hilbert transforms of the zero-input responses of each band's section states (one
    batched inverse real FFT). float64 whatever the model dtype: the section states of
    a narrow band-pass are up to ~500 times its output, and their terms cancel."""
    S = bank.shape[1]
    ang = np.arange(N // 2 + 1) * (-2.0 * np.pi / N)
    spec = np.empty((len(bands) * S, N // 2 + 1), np.complex128)
    _wrap_spectra(
        bank,
        np.asarray(bands, np.int64),
        np.cos(ang),
        np.sin(ang),
        spec.view(np.float64).reshape(*spec.shape, 2),
    )
    spec[:, 0] = 0.0  # -i sgn(k): zero at DC and, for even N, at Nyquist
    if N % 2 == 0:
        spec[:, -1] = 0.0
    g = torch.fft.irfft(torch.from_numpy(spec), n=N, dim=-1)
    return g.reshape(len(bands), S, N)


@njit(inline="always", **_F)
def _gather(src, v, kcol, n0, t):  # pragma: no cover - compiled
    # v[s, j] = src[kcol[j], n0 + s] for s < t (0 where kcol[j] < 0): the transpose of
    # casp._flush
    for j in range(v.shape[1]):
        r = kcol[j]
        if r >= 0:
            for s in range(t):
                v[s, j] = src[r, n0 + s]
        else:
            for s in range(t):
                v[s, j] = 0.0


@njit(**_F)
def _envelope_item(
    rows, ucol, hrows, hcol, kb, bands, bank, Q, L, zf0, zf1, gam, gain, tc
):  # pragma: no cover - compiled
    # rows (C * M, T): an item's band outputs; u (the band-pass input) in rows ucol[c],
    # H{u} in hrows[hcol[c]]. Band bands[i] is written to rows kb[i, c] as
    # gain[i, c] |b + i H{b}| (gain in the dtype of rows), b = F(u) from rest and
    # H{b} = F_circ(H{u}) - sum_j s_N[j] G_j (zf0/zf1 (M, S, P): final section states
    # of the first pass; gam (len(bands), S, T): wrap_basis; Q (len(bands), 2S, 2S) and
    # L: periodic_state_maps). u and H{u} of a block are read before any row is written
    T = rows.shape[1]
    S = bank.shape[1]
    P = zf0.shape[2]
    nband = bands.shape[0]
    M = bank.shape[0]
    z0 = np.zeros((M, S, P))  # F_circ(H{u}) of band m
    z1 = np.zeros((M, S, P))
    w0 = np.zeros((M, S, P))  # F(u)
    w1 = np.zeros((M, S, P))
    ub = np.empty((tc, P))
    hb = np.empty((tc, P))
    yb = np.empty((tc, P))
    bb = np.empty((tc, P))
    eb = np.empty((tc, P), rows.dtype)
    vec = np.empty(2 * S)
    # periodic initial states: a pass over the last L samples from rest, then Q
    for i in range(nband):
        m = bands[i]
        for n0 in range(T - L[i], T, tc):
            nb = min(tc, T - n0)
            _gather(hrows, hb, hcol, n0, nb)
            sections_block(hb, nb, bank, z0, z1, m)
        for c in range(P):
            for s in range(S):
                vec[2 * s] = z0[m, s, c]
                vec[2 * s + 1] = z1[m, s, c]
            for s in range(S):
                a = 0.0
                b = 0.0
                for j in range(2 * S):
                    a += Q[i, 2 * s, j] * vec[j]
                    b += Q[i, 2 * s + 1, j] * vec[j]
                z0[m, s, c] = a
                z1[m, s, c] = b
    for n0 in range(0, T, tc):
        nb = min(tc, T - n0)
        _gather(rows, ub, ucol, n0, nb)
        _gather(hrows, hb, hcol, n0, nb)
        for i in range(nband):
            m = bands[i]
            for t in range(nb):
                for c in range(P):
                    yb[t, c] = hb[t, c]
                    bb[t, c] = ub[t, c]
            sections_block(yb, nb, bank, z0, z1, m)
            sections_block(bb, nb, bank, w0, w1, m)
            for s in range(S):
                for t in range(nb):
                    n = n0 + t
                    g0 = np.float64(gam[i, s, n])
                    g1 = np.float64(gam[i, s, n - 1 if n > 0 else T - 1])
                    for c in range(P):
                        yb[t, c] -= zf0[m, s, c] * g0 + zf1[m, s, c] * g1
            for t in range(nb):
                for c in range(P):
                    b = bb[t, c]
                    h = yb[t, c]
                    eb[t, c] = b * b + h * h
            # the square root in the output's precision (float32: twice the lanes)
            for t in range(nb):
                for c in range(P):
                    eb[t, c] = gain[i, c] * np.sqrt(eb[t, c])
            _flush(rows, eb, kb[i], 0, n0, nb)


@njit(parallel=True, **_F)
def _envelope_batch(
    rows, ucol, hrows, hcol, kb, bands, bank, Q, L, zf, gam, gain, tc
):  # pragma: no cover - compiled
    for b in prange(rows.shape[0]):
        fp = denormals_off()
        _envelope_item(
            rows[b], ucol, hrows[b], hcol, kb, bands, bank, Q, L, zf[b, 0], zf[b, 1], gam,
            gain[b], tc,
        )  # fmt: skip
        restore_fp_mode(fp)


def hilbert_envelopes_(
    bank: np.ndarray,
    kcol: np.ndarray,
    ucol: np.ndarray,
    bands: list[int],
    maps: dict[int, tuple[np.ndarray, int, float]],
    gam: torch.Tensor,
    out: torch.Tensor,
    zf: np.ndarray,
    pis: np.ndarray,
) -> None:
    """Second pass of :func:`lhotse_amt.kernels.king2019.king_samples` (band-pass sections
    ``bank (M, S, 6)``, lane maps ``kcol (M * P,)`` and ``ucol (P,)`` of its plan) for
    the bands ``bands`` of ``out (B, C, M, N)``, whose rows of band ``bands[0]`` hold the
    band-pass inputs ``u``: ``H{u}`` (into the rows of ``bands[1]``, or a new array for a
    single band), then the envelopes, given the final band-pass states ``zf (B, 2, M, S,
    P)``, the sums ``pis (B, 3, M, P)`` of the first pass, ``maps``
    (:func:`periodic_state_maps` per band) and ``gam`` (their :func:`wrap_basis`)."""
    B, C, M, N = out.shape
    P = ucol.shape[0]
    per_band = out.view(B * C, M, N)
    rows = out.view(B, C * M, N)
    if len(bands) > 1:
        hrows, hcol = rows, band_rows(kcol, P, bands[1])
        hilbert_rows_(per_band[:, bands[0]], per_band[:, bands[1]])
    else:
        hu = _alloc.empty_tensor((B, C, N), out.dtype)
        hrows, hcol = hu, ucol
        hilbert_rows_(per_band[:, bands[0]], hu.view(B * C, N))
    lin_a = np.asarray(bands, np.int64)
    Q = np.ascontiguousarray(np.stack([maps[m][0] for m in bands]))
    L = np.asarray([maps[m][1] for m in bands], np.int64)
    # rms matching: sum(H{b}^2) from the first pass's sums (Parseval)
    sb, s0, s1 = (pis[:, k][:, lin_a] for k in range(3))
    sh = sb - (s0 * s0 + (s1 * s1 if N % 2 == 0 else 0.0)) / N
    den = sb + np.maximum(sh, 0.0)
    gain = np.where(den > 0.0, np.sqrt(sb / np.where(den > 0.0, den, 1.0)), 0.0)
    gain = np.ascontiguousarray(gain, out.numpy().dtype)
    if modbank_simd.ENABLED:
        yn = out.numpy()
        un = yn[:, :, bands[0]]
        hn = yn[:, :, bands[1]] if len(bands) > 1 else hrows.numpy()
        king2019_envelope_simd.envelopes(bank, bands, Q, L, gam.numpy(), zf, gain, un, hn, yn)
        return
    kb = np.ascontiguousarray(kcol.reshape(M, P)[lin_a])  # kb[i]: band_rows
    _envelope_batch(
        rows.numpy(), kb[0], hrows.numpy(), hcol, kb, lin_a, bank,
        Q, L, zf, gam.numpy(), gain, _WRITE_BLOCK,
    )  # fmt: skip

"""Fused, pooled CPU kernel of the King, Varnet & Lorenzi (2019) chain: gammatone
filterbank -> broken-stick (or power) compression -> half-wave rectification + IHC
low-pass -> high-pass "adaptation" (and the optional 150-Hz low-pass) -> Butterworth
modulation band-passes (``|.|`` above the phase-insensitivity cut-off) -> sums over frame
blocks, in one pass over the samples (no sample-rate intermediate is stored).

Same layout rules as :mod:`lhotse_amt.kernels.casp`: channels padded to ``P`` SIMD lanes,
every loop runs from 0 over contiguous rows with multi-dimensional indexing. The samples
run in blocks of 8, each stage over the whole block before the next (its coefficients in
scalars, its states in the L1 cache; per lane the same arithmetic in the same order as
sample by sample, 1.5 times faster). All recursions run in float64 with the coefficients
of the stage-wise modules.

:func:`king_samples` (the model forward) also runs the phase insensitivity: from one
Hilbert transform per channel of the band-pass input, a second pass that filters it and
corrects for the wrap-around of the circular transform (see the comment at
"phase insensitivity from the band-pass input's Hilbert transform"), instead of two FFTs
per band output.
The compression ``sign(x) c |x|^n`` (``c = K^(1 - n)`` above the knee ``K``) is the only
transcendental: ``precise=True`` (float64 configs) evaluates it with the library ``pow``;
otherwise with an inline, vectorisable ``exp(n log |x|)`` accurate to 1e-9 relative
(:func:`lhotse_amt.kernels.fastmath.pow_pos`), far below the float32 feature resolution.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from . import king2019_simd, modbank_simd
from .casp import _F, _WRITE_BLOCK, _flush, _pad8
from .cpu import _threads
from .fastmath import denormals_off, pow_pos_inline, restore_fp_mode
from .hilbert import hilbert_rows_, phase_insensitivity_cpu_

__all__ = [
    "KingPooledPlan",
    "king_pooled",
    "king_samples",
    "periodic_state_maps",
    "wrap_basis",
]

#: the ``dst`` argument of the pooled mode (float64: the kernel's per-sample buffer takes
#: the dtype of ``dst``; the same specialisation as :func:`king_samples` of float64 models)
_NO_OUTPUT = np.zeros((1, 0, 0, 0))


@njit(inline="always", **_F)
def _sections_block(v, nb, sos, z0, z1, m):  # pragma: no cover - compiled
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


@njit(**_F)
def _king_item(
    x, end, hop, square, precise,
    pr, pi, g2, gre, gim,
    knee, coef, expo,
    ihc, ihz0, ihz1, post, poz0, poz1,
    bank, bz0, bz1, gain, use_abs,
    sums, dst, kcol, tc, ubuf, ucol, pis, pim,
):  # pragma: no cover - compiled  # fmt: skip
    # bank (M, S, 6): the second-order sections of band m (scipy layout); states
    # (M, S, P). The samples run in blocks of tc: every stage runs over the whole block
    # before the next (coefficients in scalars, one stage's states in the cache), which
    # per lane is the same arithmetic in the same order as sample by sample. The band
    # outputs of a block go to vb (tc, M, P); hop > 0 sums them per block of hop samples
    # into sums (nblk, M, P), hop = 0 writes every sample to dst (C, M, T) (vb in the
    # dtype of dst, a transposing buffer that stays in the L1 cache): lane m * P + c ->
    # row kcol[.] of dst seen as (C * M, T). With ubuf (C, T) non-empty (hop = 0) the
    # input of the band-passes goes to ubuf (lane c -> row ucol[c]) and pis (3, M, P)
    # collects, per band m with pim[m] and lane, sum(y^2), sum(y) and sum((-1)^n y) of
    # the band output
    T = min(x.shape[0], end)
    keep_u = ubuf.shape[0] > 0
    rows = dst.reshape(dst.shape[0] * dst.shape[1], dst.shape[2])
    write = hop == 0
    K, P = gre.shape
    M = bank.shape[0]
    ur = np.empty((tc, P))
    ui = np.empty((tc, P))
    v = np.empty((tc, P))
    y = np.empty((tc, P))
    acc = np.zeros((M, P))
    vb = np.empty((tc, M, P), dst.dtype)
    blk = 0
    cnt = 0
    for n0 in range(0, T, tc):
        nb = min(tc, T - n0)
        # gammatone: K complex one-pole stages, stage by stage over the block
        for k in range(K):
            if k == 0:
                for t in range(nb):
                    for c in range(P):
                        ur[t, c] = x[n0 + t]
                        ui[t, c] = 0.0
            for t in range(nb):
                for c in range(P):
                    nr = pr[c] * gre[k, c] - pi[c] * gim[k, c] + ur[t, c]
                    ni = pr[c] * gim[k, c] + pi[c] * gre[k, c] + ui[t, c]
                    gre[k, c] = nr
                    gim[k, c] = ni
                    ur[t, c] = nr
                    ui[t, c] = ni
        # compression: x below the knee, sign(x) coef |x|^n above it; then half-wave
        # rectification
        for t in range(nb):
            if precise:
                for c in range(P):
                    q = g2[c] * ur[t, c]
                    aq = abs(q)
                    comp = math.copysign(coef * aq**expo, q)
                    r = comp if aq > knee else q
                    v[t, c] = r if r > 0.0 else 0.0
            else:
                for c in range(P):
                    q = g2[c] * ur[t, c]
                    aq = abs(q)
                    comp = math.copysign(
                        coef * pow_pos_inline(aq if aq > 1e-200 else 1e-200, expo), q
                    )
                    r = comp if aq > knee else q
                    v[t, c] = r if r > 0.0 else 0.0
        # IHC low-pass, high-pass (and 150-Hz low-pass)
        _sections_block(v, nb, ihc, ihz0, ihz1, 0)
        _sections_block(v, nb, post, poz0, poz1, 0)
        if keep_u:
            _flush(ubuf, v, ucol, 0, n0, nb)
        # modulation band-passes, band by band
        for m in range(M):
            for t in range(nb):
                for c in range(P):
                    y[t, c] = v[t, c]
            _sections_block(y, nb, bank, bz0, bz1, m)
            if keep_u and pim[m]:
                for t in range(nb):
                    sg = 1.0 - 2.0 * ((n0 + t) & 1)
                    for c in range(P):
                        q = y[t, c]
                        pis[0, m, c] += q * q
                        pis[1, m, c] += q
                        pis[2, m, c] += sg * q
            g = gain[m]
            if use_abs[m]:
                for t in range(nb):
                    for c in range(P):
                        vb[t, m, c] = g * abs(y[t, c])
            else:
                for t in range(nb):
                    for c in range(P):
                        vb[t, m, c] = g * y[t, c]
        if write:
            _flush(rows, vb.reshape(tc, M * P), kcol, 0, n0, nb)
            continue
        for t in range(nb):
            for m in range(M):
                for c in range(P):
                    q = vb[t, m, c]
                    acc[m, c] += q * q if square else q
            cnt += 1
            if cnt == hop or n0 + t == T - 1:
                for m in range(M):
                    for c in range(P):
                        sums[blk, m, c] = acc[m, c]
                        acc[m, c] = 0.0
                blk += 1
                cnt = 0


@njit(parallel=True, **_F)
def _king_batch(
    x, ends, hop, square, precise,
    pr, pi, g2, gre, gim,
    knee, coef, expo,
    ihc, ihz, post, poz,
    bank, bz, gain, use_abs,
    sums, out, kcol, tc, ubuf, ucol, pis, pim,
):  # pragma: no cover - compiled  # fmt: skip
    for b in prange(x.shape[0]):
        fp = denormals_off()
        _king_item(
            x[b], ends[b], hop, square, precise,
            pr, pi, g2, gre[b], gim[b],
            knee, coef, expo,
            ihc, ihz[b, 0], ihz[b, 1], post, poz[b, 0], poz[b, 1],
            bank, bz[b, 0], bz[b, 1], gain, use_abs,
            sums[b], out[b], kcol, tc, ubuf[b], ucol, pis[b], pim,
        )  # fmt: skip
        restore_fp_mode(fp)


class KingPooledPlan:
    """Coefficients of the fused King et al. (2019) kernel for one
    :class:`~lhotse_amt.models.King2019` model (built once per model).

    Args:
        model: the model (``form="sos"`` modulation filterbank).
        gain, use_abs: per modulation band: output gain and whether ``|.|`` is taken.
        precise: library ``pow`` for the compression (module docstring).
        gammatone: complex poles and real gains ``(C,)`` of the model's gammatone
            (:func:`lhotse_amt.functional.gammatone.gammatone_poles`, float64).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        gain: np.ndarray,
        use_abs: np.ndarray,
        precise: bool,
        gammatone: tuple[torch.Tensor, torch.Tensor],
    ) -> None:
        fb = model.filterbank
        pole, g = gammatone
        p = pole.detach().cpu().numpy().astype(np.complex128)
        C = p.shape[0]
        P = _pad8(C)
        pad = np.r_[np.arange(C), np.zeros(P - C, np.int64)]
        self.C, self.P, self.K, self.precise = C, P, int(fb.n), bool(precise)
        self.pr = np.ascontiguousarray(p.real[pad])
        self.pi = np.ascontiguousarray(p.imag[pad])
        self.g2 = np.ascontiguousarray(2.0 * g.detach().cpu().numpy().astype(np.float64)[pad])
        comp = model.compression
        self.expo = float(comp.exponent.detach())
        knee = getattr(comp, "knee", None)  # broken stick; a power law has none
        if knee is not None:
            self.knee = float(knee)
            self.coef = self.knee ** (1.0 - self.expo)
        else:  # power law: no knee (x = 0 stays 0: below the "knee" 0)
            self.knee, self.coef = 0.0, 1.0

        def sos(t: torch.Tensor) -> np.ndarray:
            return t.detach().cpu().numpy().astype(np.float64).reshape(1, -1, 6)

        self.ihc = sos(model.ihc.sos)
        post = [sos(model.adaptation_filter.sos)]
        if model.lp150_filter is not None:
            post.append(sos(model.lp150_filter.sos))
        self.post = np.ascontiguousarray(np.concatenate(post, axis=1))
        bank = model.modulation_filterbank.sos.detach().cpu().numpy().astype(np.float64)
        M = bank.shape[0]
        self.M = M
        # (M, S, 6): section s of band m
        self.bank = np.ascontiguousarray(bank)
        # buffer lane m * P + c -> row c * M + m of the (C * M, T) sample output (-1:
        # padding lane)
        m_, c_ = np.divmod(np.arange(M * P), P)
        self.kcol = np.where(c_ < C, c_ * M + m_, -1).astype(np.int64)
        # lane c -> row c of a (C, T) array (-1: padding lane)
        lanes = np.arange(P)
        self.ucol = np.where(lanes < C, lanes, -1).astype(np.int64)
        self.gain = np.ascontiguousarray(np.asarray(gain, np.float64))
        self.use_abs = np.ascontiguousarray(np.asarray(use_abs, np.bool_))
        # the last signal length's periodic_terms (repeated lengths are the rule: fixed
        # stimuli, fixed-length chunks); a tuple, replaced whole (threads may share)
        self._length_terms: tuple | None = None
        #: parameter blocks of the register kernels (:mod:`.king2019_simd`), built on first use
        self.register_params: np.ndarray | None = None

    def periodic_terms(
        self, bands: list[int], N: int
    ) -> tuple[dict[int, tuple[np.ndarray, int, float]], list[int], torch.Tensor | None]:
        """For the phase-insensitive ``bands`` (ascending) and ``N`` samples: the
        :func:`periodic_state_maps` of each band, the bands that take the route through
        ``H{u}`` (``max |A^N| < _DIRECT_ABOVE``) and their :func:`wrap_basis` (``None``
        if none). They depend on the length only, not on the signal: the last length's
        are kept (when the basis is at most ``_LENGTH_CACHE_BYTES``) and reused."""
        key = (tuple(bands), int(N))
        held = self._length_terms
        if held is not None and held[0] == key:
            return held[1]
        maps = {m: periodic_state_maps(self.bank[m], N) for m in bands}
        lin = [m for m in bands if maps[m][2] < _DIRECT_ABOVE]
        gam = wrap_basis(self, lin, N) if lin else None
        terms = (maps, lin, gam)
        if gam is None or gam.numel() * 8 <= _LENGTH_CACHE_BYTES:
            self._length_terms = (key, terms)
        return terms

    def initial_state(self, B: int) -> dict[str, np.ndarray]:
        """Zero states for ``B`` items."""
        P, S = self.P, self.bank.shape[1]
        return {
            "gre": np.zeros((B, self.K, P)),
            "gim": np.zeros((B, self.K, P)),
            "ihc": np.zeros((B, 2, 1, self.ihc.shape[1], P)),
            "post": np.zeros((B, 2, 1, self.post.shape[1], P)),
            "bank": np.zeros((B, 2, self.M, S, P)),
        }


def king_pooled(
    plan: KingPooledPlan,
    x: torch.Tensor,
    state: dict[str, np.ndarray] | None,
    hop: int,
    ends: list[int],
    square: bool,
) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Run the fused chain on ``x (B, T)`` and sum band ``m`` (times ``gain[m]``, ``|.|``
    first where ``use_abs[m]``) over blocks of ``hop`` samples (samples at or after
    ``ends[b]`` unused). Returns sums ``(B, C, M, ceil(T / hop))`` (of squares if
    ``square``) and the new state (this function's own layout; the input is not
    modified)."""
    _threads()
    xn = np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float64)
    # the register kernel (float32 models) keeps its own state layout: a stream stays
    # with the kernel that started it
    simd = modbank_simd.ENABLED if state is None else "front" in state
    if simd and king2019_simd.supported(plan):
        sums, new = king2019_simd.pooled(plan, xn, state, hop, np.asarray(ends, np.int64), square)
        return torch.from_numpy(sums), new
    B, T = xn.shape
    st = plan.initial_state(B) if state is None else {k: v.copy() for k, v in state.items()}
    nblk = -(-T // hop)
    sums = np.zeros((B, nblk, plan.M, plan.P))
    p = plan
    _king_batch(
        xn, np.asarray(ends, np.int64), int(hop), bool(square), p.precise,
        p.pr, p.pi, p.g2, st["gre"], st["gim"],
        p.knee, p.coef, p.expo,
        p.ihc, st["ihc"], p.post, st["post"],
        p.bank, st["bank"], p.gain, p.use_abs,
        sums, _NO_OUTPUT, p.kcol, _WRITE_BLOCK, np.zeros((B, 0, 0)), p.ucol, np.zeros((B, 3, 0, 0)),
        np.zeros(p.M, np.bool_),
    )  # fmt: skip
    out = torch.from_numpy(sums[..., : p.C]).permute(0, 3, 2, 1)
    return out, st


def king_samples(
    plan: KingPooledPlan, x: torch.Tensor, out: torch.Tensor, pi_bands: list[int] | None = None
) -> None:
    """Run the fused chain on ``x (B, T)`` (from rest) and write every sample of band
    ``m`` (times ``gain[m]``, ``|.|`` first where ``use_abs[m]``) into ``out (B, C, M,
    T)`` (float32 or float64, C-contiguous, CPU): the modulation filterbank output of
    :class:`~lhotse_amt.models.King2019` without another sample-rate array (items in
    parallel over the kernel threads).

    ``pi_bands`` (ascending): bands whose output then becomes the rms-matched Hilbert
    envelope (the phase insensitivity, :func:`lhotse_amt.functional.king2019_modulation.
    phase_insensitivity`; ``gain`` 1 and no ``|.|`` on them), computed from the Hilbert
    transform of each channel's band-pass input rather than of each band output (see the
    comment below; bands whose filter states do not decay within ``T`` samples take the
    direct route)."""
    _threads()
    B, T = x.shape
    if out.shape != (B, plan.C, plan.M, T) or not out.is_contiguous():
        raise ValueError(f"out must be contiguous {(B, plan.C, plan.M, T)}, got {tuple(out.shape)}")
    p = plan
    bands = sorted(pi_bands or [])
    maps, lin, gam = p.periodic_terms(bands, T)
    direct = [m for m in bands if m not in lin]
    xn = _alloc.empty((B, T), np.float64)
    xn[...] = x.detach().cpu().numpy()
    if modbank_simd.ENABLED and king2019_simd.supported(p):
        zf, pis = king2019_simd.samples(p, xn, out.numpy(), lin)
    else:
        zf, pis = _samples_by_lanes(p, xn, out, lin)
    if direct:
        phase_insensitivity_cpu_(out, direct)
    if lin:
        _hilbert_envelopes_(p, lin, maps, gam, out, zf, pis)


def _samples_by_lanes(
    p: KingPooledPlan, xn: np.ndarray, out: torch.Tensor, lin: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The first pass of :func:`king_samples` by the channel-vectorised kernel: returns
    the final band-pass states ``(B, 2, M, S, P)`` and the sums ``(B, 3, M, P)``."""
    B, T = xn.shape
    st = p.initial_state(B)
    rows = out.view(B, p.C * p.M, T)
    kcol = p.kcol.copy()
    for m in lin:  # written by the envelope pass; meanwhile lin[0]'s rows hold u
        kcol[m * p.P : (m + 1) * p.P] = -1
    ucol = _band_rows(p, lin[0]) if lin else p.ucol
    pis = np.zeros((B, 3, p.M, p.P) if lin else (B, 3, 0, 0))
    _king_batch(
        xn, np.full(B, T, np.int64), 0, False, p.precise,
        p.pr, p.pi, p.g2, st["gre"], st["gim"],
        p.knee, p.coef, p.expo,
        p.ihc, st["ihc"], p.post, st["post"],
        p.bank, st["bank"], p.gain, p.use_abs,
        np.zeros((B, 0, p.M, p.P)), out.numpy(), kcol, _WRITE_BLOCK,
        rows.numpy() if lin else np.zeros((B, 0, 0), out.numpy().dtype), ucol, pis,
        np.isin(np.arange(p.M), lin),
    )  # fmt: skip
    return st["bank"], pis


def _band_rows(plan: KingPooledPlan, m: int) -> np.ndarray:
    """Lane ``c`` -> row ``c * M + m`` of an item's ``(C * M, T)`` rows (-1: padding)."""
    return np.ascontiguousarray(plan.kcol[m * plan.P : (m + 1) * plan.P])


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


def wrap_basis(plan: KingPooledPlan, bands: list[int], N: int) -> torch.Tensor:
    """``G (len(bands), S, N)`` (float64) of the comment above for the states ``z0_s``
    (those for ``z1_s`` are the same rows delayed by one sample, circularly): the
    Hilbert transforms of the zero-input responses of each band's section states (one
    batched inverse real FFT). float64 whatever the model dtype: the section states of
    a narrow band-pass are up to ~500 times its output, and their terms cancel."""
    S = plan.bank.shape[1]
    ang = np.arange(N // 2 + 1) * (-2.0 * np.pi / N)
    spec = np.empty((len(bands) * S, N // 2 + 1), np.complex128)
    _wrap_spectra(
        plan.bank,
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
            _sections_block(hb, nb, bank, z0, z1, m)
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
            _sections_block(yb, nb, bank, z0, z1, m)
            _sections_block(bb, nb, bank, w0, w1, m)
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


#: bands whose ``max |A^N|`` is at least this take the direct route (two FFTs per band
#: output): ``Q`` would lose digits (signals shorter than a few time constants of the
#: band-pass, where the FFTs are short anyway)
_DIRECT_ABOVE = 0.5

#: largest wrap-around basis a plan keeps for the next call of the same length (10 s at
#: 44.1 kHz: 21 MB)
_LENGTH_CACHE_BYTES = 256 << 20


def _hilbert_envelopes_(
    plan: KingPooledPlan,
    bands: list[int],
    maps: dict[int, tuple[np.ndarray, int, float]],
    gam: torch.Tensor,
    out: torch.Tensor,
    zf: np.ndarray,
    pis: np.ndarray,
) -> None:
    """Second pass of :func:`king_samples` for the bands ``bands`` of ``out (B, C, M,
    N)``, whose rows of band ``bands[0]`` hold the band-pass inputs ``u``: ``H{u}`` (into
    the rows of ``bands[1]``, or a new array for a single band), then the envelopes,
    given the final band-pass states ``zf (B, 2, M, S, P)``, the sums ``pis (B, 3, M,
    P)`` of the first pass, ``maps`` (:func:`periodic_state_maps` per band) and ``gam``
    (their :func:`wrap_basis`)."""
    B, C, M, N = out.shape
    per_band = out.view(B * C, M, N)
    rows = out.view(B, C * M, N)
    if len(bands) > 1:
        hrows, hcol = rows, _band_rows(plan, bands[1])
        hilbert_rows_(per_band[:, bands[0]], per_band[:, bands[1]])
    else:
        hu = _alloc.empty_tensor((B, C, N), out.dtype)
        hrows, hcol = hu, plan.ucol
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
        king2019_simd.envelopes(plan.bank, bands, Q, L, gam.numpy(), zf, gain, un, hn, yn)
        return
    kb = np.ascontiguousarray(plan.kcol.reshape(M, plan.P)[lin_a])  # kb[i]: _band_rows
    _envelope_batch(
        rows.numpy(), kb[0], hrows.numpy(), hcol, kb, lin_a, plan.bank,
        Q, L, zf, gam.numpy(), gain, _WRITE_BLOCK,
    )  # fmt: skip

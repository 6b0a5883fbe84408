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
corrects for the wrap-around of the circular transform
(:mod:`lhotse_amt.kernels.king2019_envelope`), instead of two FFTs per band output.
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
from .._validation import normalise_sections
from . import king2019_simd, modbank_simd
from .casp import _F, _WRITE_BLOCK, _flush, gammatone_lanes, pooled_start
from .cpu import _threads, complex_pole_lanes
from .fastmath import denormals_off, pow_pos_inline, restore_fp_mode
from .hilbert import phase_insensitivity_cpu_
from .king2019_envelope import (
    band_rows,
    hilbert_envelopes_,
    periodic_state_maps,
    sections_block,
    wrap_basis,
)

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
                complex_pole_lanes(P, pr, pi, gre[k], gim[k], ur[t], ui[t])
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
        sections_block(v, nb, ihc, ihz0, ihz1, 0)
        sections_block(v, nb, post, poz0, poz1, 0)
        if keep_u:
            _flush(ubuf, v, ucol, 0, n0, nb)
        # modulation band-passes, band by band
        for m in range(M):
            for t in range(nb):
                for c in range(P):
                    y[t, c] = v[t, c]
            sections_block(y, nb, bank, bz0, bz1, m)
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
        pad, self.pr, self.pi, self.g2 = gammatone_lanes(*gammatone)
        C, P = len(gammatone[0]), len(pad)
        self.C, self.P, self.K, self.precise = C, P, int(fb.n), bool(precise)
        comp = model.compression
        self.expo = float(comp.exponent.detach())
        knee = getattr(comp, "knee", None)  # broken stick; a power law has none
        if knee is not None:
            self.knee = float(knee)
            self.coef = self.knee ** (1.0 - self.expo)
        else:  # power law: no knee (x = 0 stays 0: below the "knee" 0)
            self.knee, self.coef = 0.0, 1.0

        def sos(t: torch.Tensor) -> np.ndarray:
            # sections divided by their a0 as sosfilt does (a learnable a0 may have moved)
            a = normalise_sections(t.detach().to("cpu", torch.float64))
            return a.numpy().reshape(-1, t.shape[-2], 6)

        self.ihc = sos(model.ihc.sos)
        post = [sos(model.adaptation_filter.sos)]
        if model.lp150_filter is not None:
            post.append(sos(model.lp150_filter.sos))
        self.post = np.ascontiguousarray(np.concatenate(post, axis=1))
        bank = sos(model.modulation_filterbank.sos)
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
        gam = wrap_basis(self.bank, lin, N) if lin else None
        terms = (maps, lin, gam)
        if gam is None or gam.numel() * 8 <= _LENGTH_CACHE_BYTES:
            self._length_terms = (key, terms)
        return terms

    def chain_args(self, st: dict[str, np.ndarray]) -> tuple:
        """The coefficients and the states ``st`` (:meth:`initial_state`'s layout) in the
        order of :func:`_king_batch`'s arguments ``pr`` ... ``use_abs``."""
        return (
            self.pr, self.pi, self.g2, st["gre"], st["gim"],
            self.knee, self.coef, self.expo,
            self.ihc, st["ihc"], self.post, st["post"],
            self.bank, st["bank"], self.gain, self.use_abs,
        )  # fmt: skip

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
    xn, ends_a, done, st = pooled_start(plan, king2019_simd, x, state, hop, ends, square)
    if done is not None:
        return done
    B, T = xn.shape
    nblk = -(-T // hop)
    sums = np.zeros((B, nblk, plan.M, plan.P))
    p = plan
    _king_batch(
        xn, ends_a, int(hop), bool(square), p.precise,
        *p.chain_args(st),
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
    transform of each channel's band-pass input rather than of each band output
    (:mod:`lhotse_amt.kernels.king2019_envelope`; bands whose filter states do not decay
    within ``T`` samples take the direct route)."""
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
        hilbert_envelopes_(p.bank, p.kcol, p.ucol, lin, maps, gam, out, zf, pis)


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
    ucol = band_rows(p.kcol, p.P, lin[0]) if lin else p.ucol
    pis = np.zeros((B, 3, p.M, p.P) if lin else (B, 3, 0, 0))
    _king_batch(
        xn, np.full(B, T, np.int64), 0, False, p.precise,
        *p.chain_args(st),
        np.zeros((B, 0, p.M, p.P)), out.numpy(), kcol, _WRITE_BLOCK,
        rows.numpy() if lin else np.zeros((B, 0, 0), out.numpy().dtype), ucol, pis,
        np.isin(np.arange(p.M), lin),
    )  # fmt: skip
    return st["bank"], pis


#: bands whose ``max |A^N|`` is at least this take the direct route (two FFTs per band
#: output): ``Q`` would lose digits (signals shorter than a few time constants of the
#: band-pass, where the FFTs are short anyway)
_DIRECT_ABOVE = 0.5

#: largest wrap-around basis a plan keeps for the next call of the same length (10 s at
#: 44.1 kHz: 21 MB)
_LENGTH_CACHE_BYTES = 256 << 20

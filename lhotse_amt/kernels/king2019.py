"""Fused, pooled CPU kernel of the King, Varnet & Lorenzi (2019) chain: gammatone
filterbank -> broken-stick (or power) compression -> half-wave rectification + IHC
low-pass -> high-pass "adaptation" (and the optional 150-Hz low-pass) -> Butterworth
modulation band-passes (``|.|`` above the phase-insensitivity cut-off) -> sums over frame
blocks, in one pass over the samples (no sample-rate intermediate is stored).

Same layout rules as :mod:`lhotse_amt.kernels.casp`: channels padded to ``P`` SIMD lanes,
every loop inside the sample loop runs from 0 over contiguous rows with multi-dimensional
indexing. All recursions run in float64 with the coefficients of the stage-wise modules.
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

from .casp import _F, _WRITE_BLOCK, _flush, _pad8, _sections
from .cpu import _threads
from .fastmath import denormals_off, pow_pos_inline, restore_fp_mode

__all__ = ["KingPooledPlan", "king_pooled", "king_samples", "rms_matched_envelope_"]

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
    sums, dst, kcol, tc,
):  # pragma: no cover - compiled  # fmt: skip
    # bank (S, 5, M, P): b0, b1, b2, a1, a2 per section, band and lane; states (S, M, P).
    # Each sample's band outputs go to vb[t]; hop > 0 sums them per block of hop samples
    # into sums (nblk, M, P), hop = 0 writes every sample to dst (C, M, T) through vb as
    # a transposing buffer of tc samples (in the dtype of dst: 8 kB in float32, which with
    # the filter states stays in the L1 cache): lane m * P + c -> row kcol[.] of dst
    # seen as (C * M, T)
    T = min(x.shape[0], end)
    rows = dst.reshape(dst.shape[0] * dst.shape[1], dst.shape[2])
    write = hop == 0
    K, P = gre.shape
    S = bank.shape[0]
    M = bank.shape[2]
    ur = np.empty(P)
    ui = np.empty(P)
    v = np.empty(P)
    y = np.empty((M, P))
    acc = np.zeros((M, P))
    vb = np.empty((tc if write else 1, M, P), dst.dtype)
    blk = 0
    cnt = 0
    t = 0
    for n in range(T):
        xn = x[n]
        for c in range(P):
            ur[c] = xn
            ui[c] = 0.0
        for k in range(K):
            for c in range(P):
                nr = pr[c] * gre[k, c] - pi[c] * gim[k, c] + ur[c]
                ni = pr[c] * gim[k, c] + pi[c] * gre[k, c] + ui[c]
                gre[k, c] = nr
                gim[k, c] = ni
                ur[c] = nr
                ui[c] = ni
        # compression: x below the knee, sign(x) coef |x|^n above it
        if precise:
            for c in range(P):
                q = g2[c] * ur[c]
                aq = abs(q)
                comp = math.copysign(coef * aq**expo, q)
                v[c] = comp if aq > knee else q
        else:
            for c in range(P):
                q = g2[c] * ur[c]
                aq = abs(q)
                comp = math.copysign(coef * pow_pos_inline(aq if aq > 1e-200 else 1e-200, expo), q)
                v[c] = comp if aq > knee else q
        # half-wave rectification, IHC low-pass, high-pass (and 150-Hz low-pass)
        for c in range(P):
            q = v[c]
            v[c] = q if q > 0.0 else 0.0
        _sections(v, ihc, ihz0, ihz1)
        _sections(v, post, poz0, poz1)
        # modulation band-passes on every (band, channel) lane
        for m in range(M):
            for c in range(P):
                y[m, c] = v[c]
        for s in range(S):
            for m in range(M):
                for c in range(P):
                    w = y[m, c]
                    out = bank[s, 0, m, c] * w + bz0[s, m, c]
                    bz0[s, m, c] = bank[s, 1, m, c] * w - bank[s, 3, m, c] * out + bz1[s, m, c]
                    bz1[s, m, c] = bank[s, 2, m, c] * w - bank[s, 4, m, c] * out
                    y[m, c] = out
        for m in range(M):
            g = gain[m]
            if use_abs[m]:
                for c in range(P):
                    vb[t, m, c] = g * abs(y[m, c])
            else:
                for c in range(P):
                    vb[t, m, c] = g * y[m, c]
        if write:
            t += 1
            if t == tc or n == T - 1:
                _flush(rows, vb.reshape(tc, M * P), kcol, 0, n + 1 - t, t)
                t = 0
            continue
        for m in range(M):
            for c in range(P):
                q = vb[0, m, c]
                acc[m, c] += q * q if square else q
        cnt += 1
        if cnt == hop or n == T - 1:
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
    sums, out, kcol, tc,
):  # pragma: no cover - compiled  # fmt: skip
    for b in prange(x.shape[0]):
        fp = denormals_off()
        _king_item(
            x[b], ends[b], hop, square, precise,
            pr, pi, g2, gre[b], gim[b],
            knee, coef, expo,
            ihc, ihz[b, 0], ihz[b, 1], post, poz[b, 0], poz[b, 1],
            bank, bz[b, 0], bz[b, 1], gain, use_abs,
            sums[b], out[b], kcol, tc,
        )  # fmt: skip
        restore_fp_mode(fp)


class KingPooledPlan:
    """Coefficients of the fused King et al. (2019) kernel for one
    :class:`~lhotse_amt.models.King2019` model (built once per model).

    Args:
        model: the model (``form="sos"`` modulation filterbank).
        gain, use_abs: per modulation band: output gain and whether ``|.|`` is taken.
        precise: library ``pow`` for the compression (module docstring).
    """

    def __init__(
        self, model: torch.nn.Module, gain: np.ndarray, use_abs: np.ndarray, precise: bool
    ) -> None:
        from ..functional.gammatone import gammatone_poles
        from ..modules.compression import BrokenStickCompression

        fb = model.filterbank
        pole, g = gammatone_poles(fb.fc.double(), fb.fs, fb.n, fb.erb_scale.double())
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
        if isinstance(comp, BrokenStickCompression):
            self.knee = float(comp.knee)
            self.coef = self.knee ** (1.0 - self.expo)
        else:  # power law: no knee (x = 0 stays 0: below the "knee" 0)
            self.knee, self.coef = 0.0, 1.0

        def sos(t: torch.Tensor) -> np.ndarray:
            return t.detach().cpu().numpy().astype(np.float64).reshape(-1, 6)

        self.ihc = sos(model.ihc.sos)
        post = [sos(model.adaptation_filter.sos)]
        if model.lp150_filter is not None:
            post.append(sos(model.lp150_filter.sos))
        self.post = np.ascontiguousarray(np.concatenate(post))
        bank = model.modulation_filterbank.sos.detach().cpu().numpy().astype(np.float64)
        M, S = bank.shape[0], bank.shape[1]
        self.M = M
        # (S, 5, M, P): b0, b1, b2, a1, a2 of section s of band m, repeated over lanes
        cf = bank[:, :, [0, 1, 2, 4, 5]].transpose(1, 2, 0)  # (S, 5, M)
        self.bank = np.ascontiguousarray(np.broadcast_to(cf[..., None], (S, 5, M, P)))
        # buffer lane m * P + c -> row c * M + m of the (C * M, T) sample output (-1:
        # padding lane)
        m_, c_ = np.divmod(np.arange(M * P), P)
        self.kcol = np.where(c_ < C, c_ * M + m_, -1).astype(np.int64)
        self.gain = np.ascontiguousarray(np.asarray(gain, np.float64))
        self.use_abs = np.ascontiguousarray(np.asarray(use_abs, np.bool_))

    def initial_state(self, B: int) -> dict[str, np.ndarray]:
        """Zero states for ``B`` items."""
        P, S = self.P, self.bank.shape[0]
        return {
            "gre": np.zeros((B, self.K, P)),
            "gim": np.zeros((B, self.K, P)),
            "ihc": np.zeros((B, 2, self.ihc.shape[0], P)),
            "post": np.zeros((B, 2, self.post.shape[0], P)),
            "bank": np.zeros((B, 2, S, self.M, P)),
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
        sums, _NO_OUTPUT, p.kcol, 1,
    )  # fmt: skip
    out = torch.from_numpy(sums[..., : p.C]).permute(0, 3, 2, 1)
    return out, st


def king_samples(plan: KingPooledPlan, x: torch.Tensor, out: torch.Tensor) -> None:
    """Run the fused chain on ``x (B, T)`` (from rest) and write every sample of band
    ``m`` (times ``gain[m]``, ``|.|`` first where ``use_abs[m]``) into ``out (B, C, M,
    T)`` (float32 or float64, C-contiguous, CPU): the modulation filterbank output of
    :class:`~lhotse_amt.models.King2019` without another sample-rate array (items in
    parallel over the kernel threads)."""
    _threads()
    B, T = x.shape
    if out.shape != (B, plan.C, plan.M, T) or not out.is_contiguous():
        raise ValueError(f"out must be contiguous {(B, plan.C, plan.M, T)}, got {tuple(out.shape)}")
    p = plan
    xn = np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float64)
    st = plan.initial_state(B)
    _king_batch(
        xn, np.full(B, T, np.int64), 0, False, p.precise,
        p.pr, p.pi, p.g2, st["gre"], st["gim"],
        p.knee, p.coef, p.expo,
        p.ihc, st["ihc"], p.post, st["post"],
        p.bank, st["bank"], p.gain, p.use_abs,
        np.zeros((B, 0, p.M, p.P)), out.numpy(), p.kcol, _WRITE_BLOCK,
    )  # fmt: skip


@njit(inline="always", **_F)
def _sum_squares(x):  # pragma: no cover - compiled
    # float64 sum of x^2 in eight interleaved partial sums (vectorised; fixed order)
    T = x.shape[0]
    part = np.zeros(8)
    n8 = T // 8 * 8
    for n0 in range(0, n8, 8):
        for j in range(8):
            a = np.float64(x[n0 + j])
            part[j] += a * a
    for n in range(n8, T):
        a = np.float64(x[n])
        part[0] += a * a
    return part.sum()


@njit(**_F)
def rms_matched_envelope_(x, h):  # pragma: no cover - compiled
    """``x <- |x + i h| rms(x) / rms(|x + i h|)`` in place, for C-contiguous rows ``x``
    and ``h`` (``(T,)``, float32 or float64; ``h`` the Hilbert transform of ``x``): the
    phase insensitivity of King et al. (2019) given the transform (the envelope's mean
    square is ``mean(x^2) + mean(h^2)``; a zero envelope gives zeros). Sums in float64,
    the envelope in the array's precision."""
    sx = _sum_squares(x)
    se = sx + _sum_squares(h)
    g = x.dtype.type(math.sqrt(sx / se) if se > 0.0 else 0.0)
    for n in range(x.shape[0]):
        a = x[n]
        b = h[n]
        x[n] = g * math.sqrt(a * a + b * b)

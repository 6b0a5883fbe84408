"""Fused, pooled CPU kernel of the CASP chain (Dau et al. 1997 / Osses & Kohlrausch 2021):
gammatone filterbank -> half-wave rectification + IHC low-pass -> adaptation loops ->
modulation filterbank (``efilt``) -> sums over frame blocks, in one pass over the samples.

Nothing sample-rate sized is stored: per sample, every stage updates a few rows of state
that stay in the L1 cache, and only the per-block sums ``(nblk, D)`` are written. Layout
for SIMD (numba / LLVM vectorise the innermost loops):

* the auditory channels are padded to ``P`` (a multiple of 8) lanes; padding lanes repeat
  channel 0 and are dropped;
* the modulation bands run as one flat row of ``L`` "band lanes", one per (channel, band)
  pair that exists, grouped by output rule (signed real part first, then ``|.|``) and
  padded to multiples of 8, so a single contiguous loop updates every complex one-pole
  band of every channel.

Arithmetic (``precise=True``): float64 throughout, the same recursions as
:func:`lhotse_amt.functional.gammatone.gammatone`, :func:`lhotse_amt.functional.ihc`,
:func:`lhotse_amt.functional.adaptation.adaptation_loops_reference` and
:func:`lhotse_amt.functional.modulation.modulation_filterbank` (agreement ~1e-13 relative;
the library ``exp`` of the overshoot limiter is an inline polynomial accurate to ~1 ulp).
``precise=False`` (float32 features) keeps every recursion and state in float64 but
evaluates the two non-recursive, expensive per-sample functions in float32: the limiter
correction ``m (1 - e) / (1 + e)``, ``e = exp(-2 (v - 1) / m)`` (absolute error < 1e-6
on a value >= 1), and the band magnitude ``sqrt(re^2 + im^2)`` (relative error < 1e-7).
float32 sqrt and division run 3-4 times faster than float64 on x86 SIMD units.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from numba import njit, prange

from .._validation import normalise_sections
from . import casp_simd, modbank_simd
from .cpu import _threads, adaptation_loops_lanes, complex_pole_lanes
from .fastmath import KERNEL_OPTS, denormals_off, restore_fp_mode

__all__ = ["CASPPooledPlan", "casp_pooled", "casp_samples", "fused_supported"]

_F = KERNEL_OPTS

#: samples per transposing block of :func:`casp_samples` and
#: :func:`lhotse_amt.kernels.king2019.king_samples` (small enough for the block to stay
#: in the L1 cache with the filter states; measured: 8 is faster than 16 or 64)
_WRITE_BLOCK = 8


@njit(inline="always", **_F)
def _sections(v, sos, z0, z1):  # pragma: no cover - compiled
    # S second-order sections (transposed direct form II, shared coefficients) on the row
    # v in place; states z0/z1 (S, P). 2-D indexing, no row views: views inside the
    # sample loop cost reference-count updates that the branches keep numba from pruning
    P = v.shape[0]
    for s in range(sos.shape[0]):
        b0, b1, b2, a1, a2 = sos[s, 0], sos[s, 1], sos[s, 2], sos[s, 4], sos[s, 5]
        for c in range(P):
            x = v[c]
            out = b0 * x + z0[s, c]
            z0[s, c] = b1 * x - a1 * out + z1[s, c]
            z1[s, c] = b2 * x - a2 * out
            v[c] = out


@njit(inline="always", **_F)
def _flush(out, v, kcol, k0, n0, t):  # pragma: no cover - compiled
    # out[kcol[k0 + j], n0 + s] = v[s, j], s < t (kcol < 0: not written); full blocks of
    # _WRITE_BLOCK samples with a constant trip count (unrolled by LLVM)
    for j in range(v.shape[1]):
        r = kcol[k0 + j]
        if r >= 0:
            if t == _WRITE_BLOCK:
                for s in range(_WRITE_BLOCK):
                    out[r, n0 + s] = v[s, j]
            else:
                for s in range(t):
                    out[r, n0 + s] = v[s, j]


@njit(**_F)
def _casp_item(
    x, end, hop, square, precise,
    pr, pi, g2, gre, gim,
    ihc, ihz0, ihz1,
    aa, ab, am, aq, ast, minlvl, use_limit, off, scale,
    pre, prz0, prz1, lp, lpz0, lpz1, sc0,
    runs, nsig, ar, ai, cr, ci, xr, xi,
    sums, out, kcol, tc,
):  # pragma: no cover - compiled  # fmt: skip
    # every loop inside the sample loop runs from 0 over contiguous rows with 2-D
    # indexing (no views, non-negative indices): LLVM vectorises all of them. Each
    # sample's outputs go to row t of vals (P low-pass lanes, nsig signed band lanes,
    # nabs |.| band lanes); hop > 0 sums them per block of hop samples into sums, hop = 0
    # writes every sample: out[kcol[j], n] = vals[t, j] (kcol < 0: lane not written),
    # through vals as a transposing buffer of tc samples
    T = min(x.shape[0], end)
    K, P = gre.shape
    L = ar.shape[0]
    nabs = L - nsig
    write = hop == 0
    v = np.empty(P)
    w = np.empty(P)
    ur = np.empty(P)
    ui = np.empty(P)
    t32 = np.empty(P, np.float32)
    am32 = am.astype(np.float32)
    u = np.empty(L)
    nt = tc if write else 1
    # per-sample outputs: low-pass, signed and |.| lanes (in the dtype of out, float32:
    # 9 kB, which with the filter states stays in the L1 cache)
    vl = np.empty((nt, P), out.dtype)
    vs = np.empty((nt, nsig), out.dtype)
    va = np.empty((nt, nabs), out.dtype)
    acc0 = np.zeros(P)
    acc = np.zeros(nsig)
    acca = np.zeros(nabs)
    # |.| lanes as separate arrays starting at 0
    xra = xr[nsig:].copy()
    xia = xi[nsig:].copy()
    ara = ar[nsig:].copy()
    aia = ai[nsig:].copy()
    cra = cr[nsig:].copy()
    m32 = np.empty(nabs, np.float32)
    ua = u[nsig:]
    R = runs.shape[0]
    blk = 0
    cnt = 0
    t = 0
    for n in range(T):
        # gammatone: K complex one-pole stages, output 2 Re(.) g
        xn = x[n]
        for c in range(P):
            ur[c] = xn
            ui[c] = 0.0
        for k in range(K):
            complex_pole_lanes(P, pr, pi, gre[k], gim[k], ur, ui)
        # half-wave rectification, IHC low-pass, floor of the adaptation loops
        for c in range(P):
            q = g2[c] * ur[c]
            v[c] = q if q > 0.0 else 0.0
        _sections(v, ihc, ihz0, ihz1)
        for c in range(P):
            q = v[c]
            v[c] = q if q > minlvl else minlvl
        adaptation_loops_lanes(v, ast, aa, ab, am, aq, use_limit, not precise, am32, t32)
        for c in range(P):
            v[c] = (v[c] - off) * scale
        # modulation filterbank: optional pre-filter, low-pass band, band lanes
        _sections(v, pre, prz0, prz1)
        for c in range(P):
            w[c] = v[c]
        _sections(w, lp, lpz0, lpz1)
        for c in range(P):
            q = sc0[c] * w[c]
            vl[t, c] = q
        for r in range(R):  # band lanes <- runs of consecutive channels
            o = runs[r, 0]
            c0 = runs[r, 1]
            for i in range(runs[r, 2]):
                u[o + i] = v[c0 + i]
        for i in range(nsig):
            nr = ar[i] * xr[i] - ai[i] * xi[i] + u[i]
            ni = ar[i] * xi[i] + ai[i] * xr[i]
            xr[i] = nr
            xi[i] = ni
            q = cr[i] * nr - ci[i] * ni
            vs[t, i] = q
        for i in range(nabs):
            nr = ara[i] * xra[i] - aia[i] * xia[i] + ua[i]
            ni = ara[i] * xia[i] + aia[i] * xra[i]
            xra[i] = nr
            xia[i] = ni
        if precise:
            for i in range(nabs):
                a = xra[i]
                b = xia[i]
                q = cra[i] * math.sqrt(a * a + b * b)
                va[t, i] = q
        else:
            for i in range(nabs):
                a = xra[i]
                b = xia[i]
                m32[i] = np.float32(a * a + b * b)
            for i in range(nabs):  # pure float32
                m32[i] = math.sqrt(m32[i])
            for i in range(nabs):
                q = cra[i] * np.float64(m32[i])
                va[t, i] = q
        if write:
            t += 1
            if t == tc or n == T - 1:
                n0 = n + 1 - t
                _flush(out, vl, kcol, 0, n0, t)
                _flush(out, vs, kcol, P, n0, t)
                _flush(out, va, kcol, P + nsig, n0, t)
                t = 0
        else:
            for c in range(P):
                q = vl[0, c]
                acc0[c] += q * q if square else q
            for i in range(nsig):
                q = vs[0, i]
                acc[i] += q * q if square else q
            for i in range(nabs):
                q = va[0, i]
                acca[i] += q * q if square else q
            cnt += 1
            if cnt == hop or n == T - 1:
                for c in range(P):
                    sums[blk, c] = acc0[c]
                    acc0[c] = 0.0
                for i in range(nsig):
                    sums[blk, P + i] = acc[i]
                    acc[i] = 0.0
                for i in range(nabs):
                    sums[blk, P + nsig + i] = acca[i]
                    acca[i] = 0.0
                blk += 1
                cnt = 0
    xr[nsig:] = xra
    xi[nsig:] = xia


@njit(parallel=True, **_F)
def _casp_batch(
    x, ends, hop, square, precise,
    pr, pi, g2, gre, gim,
    ihc, ihz,
    aa, ab, am, aq, ast, minlvl, use_limit, off, scale,
    pre, prz, lp, lpz, sc0,
    runs, nsig, ar, ai, cr, ci, xr, xi,
    sums, out, kcol, tc,
):  # pragma: no cover - compiled  # fmt: skip
    for b in prange(x.shape[0]):
        fp = denormals_off()
        _casp_item(
            x[b], ends[b], hop, square, precise,
            pr, pi, g2, gre[b], gim[b],
            ihc, ihz[b, 0], ihz[b, 1],
            aa, ab, am, aq, ast[b], minlvl, use_limit, off, scale,
            pre, prz[b, 0], prz[b, 1], lp, lpz[b, 0], lpz[b, 1], sc0,
            runs, nsig, ar, ai, cr, ci, xr[b], xi[b],
            sums[b], out[b], kcol, tc,
        )  # fmt: skip
        restore_fp_mode(fp)


#: the ``out`` argument of the pooled mode (float64: the kernel's per-sample buffers take
#: the dtype of ``out``; the same specialisation as :func:`casp_samples` of float64 models)
_NO_OUTPUT = np.zeros((1, 0, 0))


def _pad8(n: int) -> int:
    return (n + 7) // 8 * 8


def fused_supported(model: torch.nn.Module) -> bool:
    """Whether the fused kernel runs ``model``'s chain: one pole per modulation band and no
    feed-through (``efilt``), a second-order-section IHC and one time constant per
    adaptation loop."""
    mod = model.modulation
    return (
        mod.poles.shape[-1] == 1
        and not bool((mod.direct != 0).any())
        and model.ihc.sos.dim() == 2
        and model.adaptation.tau.dim() == 1
    )


def gammatone_lanes(
    pole: torch.Tensor, gain: torch.Tensor
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The gammatone of ``C`` channels (complex ``pole`` and real ``gain`` ``(C,)``) on
    ``P = _pad8(C)`` lanes: the lane -> channel map ``(P,)`` (padding lanes repeat channel
    0) and the pole's real and imaginary parts and twice the gain per lane (float64)."""
    p = pole.detach().cpu().numpy().astype(np.complex128)
    C = p.shape[0]
    pad = np.r_[np.arange(C), np.zeros(_pad8(C) - C, np.int64)]
    g2 = np.ascontiguousarray(2.0 * gain.detach().cpu().numpy().astype(np.float64)[pad])
    return pad, np.ascontiguousarray(p.real[pad]), np.ascontiguousarray(p.imag[pad]), g2


class CASPPooledPlan:
    """Coefficients of the fused kernel for one model, laid out once (per model and
    hop; reuse it for every chunk).

    Args:
        model: a :class:`~lhotse_amt.models.Dau1997` / :class:`~lhotse_amt.models.Osses2021`
            (anything with ``filterbank``, ``ihc.sos (S, 6)``, ``adaptation`` and an
            ``efilt`` ``modulation`` module with one pole per band).
        precise: float64 limiter and band magnitudes (module docstring).
        gammatone: complex poles and real gains ``(C,)`` of the model's gammatone
            (:func:`lhotse_amt.functional.gammatone.gammatone_poles`, float64).
        adaptation: per loop ``a``, ``m`` and the rest state ``s0`` ``(J,)``
            (:func:`lhotse_amt.functional.adaptation.adaptation_coefficients`, float64).
    """

    def __init__(
        self,
        model: torch.nn.Module,
        precise: bool,
        gammatone: tuple[torch.Tensor, torch.Tensor],
        adaptation: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
    ) -> None:
        fb, mod, ad = model.filterbank, model.modulation, model.adaptation
        pad, self.pr, self.pi, self.g2 = gammatone_lanes(*gammatone)
        C, P = len(gammatone[0]), len(pad)
        self.C, self.P, self.K, self.precise = C, P, int(fb.n), bool(precise)
        # sections divided by their a0 as sosfilt does (a learnable a0 may have moved)
        ihc = normalise_sections(model.ihc.sos.detach().to("cpu", torch.float64), "ihc.sos")
        self.ihc = np.ascontiguousarray(ihc.numpy())
        # adaptation loops
        minlvl = 10.0 ** ((ad.minspl - ad.dboffset) / 20.0)
        a, m, s0 = adaptation
        J = a.shape[-1]
        self.J = J
        self.aa = np.ascontiguousarray(np.broadcast_to(a.numpy()[:, None], (J, P)))
        self.ab = np.ascontiguousarray(1.0 - self.aa)
        self.am = np.ascontiguousarray(np.broadcast_to(m.numpy()[:, None], (J, P)))
        self.use_limit = bool(ad.limit > 1.0)
        with np.errstate(divide="ignore"):
            self.aq = -2.0 / self.am if self.use_limit else np.zeros_like(self.am)
        self.s0 = s0.numpy().astype(np.float64)
        self.minlvl = float(minlvl)
        self.off = float(minlvl ** (1.0 / 2.0**J))
        self.scale = 100.0 / (1.0 - self.off)
        # modulation filterbank: pre-filter, low-pass band 0, band lanes
        self.pre = (
            np.zeros((0, 6))
            if mod.prefilter_sos is None
            else mod.prefilter_sos.detach().cpu().numpy().astype(np.float64).reshape(-1, 6)
        )
        self.lp = mod.lp_sos.detach().cpu().numpy().astype(np.float64).reshape(-1, 6)
        sc = mod.scale.detach().cpu().numpy().astype(np.float64)  # (C, M + 1)
        M1 = sc.shape[1]
        self.M1 = M1
        self.sc0 = np.ascontiguousarray(sc[:, 0][pad])
        bp = mod.poles[:, 1:, 0].detach().cpu().numpy().astype(np.complex128)  # (C, M)
        g = mod.gains[:, 1:, 0].detach().cpu().numpy().astype(np.complex128)
        ab = mod.use_abs[:, 1:].detach().cpu().numpy().astype(bool)
        scb = sc[:, 1:]
        # band lanes, band-major within each output group (signed, then |.|): each band's
        # channels form runs of consecutive channels, copied per sample as slices
        live = scb != 0.0
        runs, lane_c, lane_m = [], [], []
        for want_abs in (False, True):
            for mb in range(bp.shape[1]):
                cs = np.flatnonzero(live[:, mb] & (ab[:, mb] == want_abs))
                for run in np.split(cs, np.flatnonzero(np.diff(cs) != 1) + 1):
                    if run.size:
                        runs.append((len(lane_c), int(run[0]), int(run.size)))
                        lane_c.extend(run.tolist())
                        lane_m.extend([mb] * run.size)
            if not want_abs:
                self.nsig = len(lane_c)
        cc, mm = np.asarray(lane_c, np.int64), np.asarray(lane_m, np.int64)
        #: channel and band (0 = the first band-pass) of each band lane
        self.lane_c, self.lane_m = cc, mm
        pp = bp[cc, mm]
        gg = g[cc, mm] * scb[cc, mm]
        isabs = np.arange(cc.size) >= self.nsig
        # (first lane, first channel, length) of each run, unsigned (no wraparound)
        self.runs = np.asarray(runs, np.uint64).reshape(-1, 3)
        self.ar, self.ai = np.ascontiguousarray(pp.real), np.ascontiguousarray(pp.imag)
        self.cr = np.ascontiguousarray(np.where(isabs, np.abs(gg), gg.real))
        self.ci = np.ascontiguousarray(np.where(isabs, 0.0, gg.imag))
        self.L = int(cc.size)
        col = cc * M1 + mm + 1
        # kernel column (P + L) -> output position c * M1 + m (band 0 = low-pass)
        kcol = np.r_[np.where(np.arange(P) < C, np.arange(P) * M1, -1), col]
        keep = np.flatnonzero(kcol >= 0)
        self.scatter_from = torch.as_tensor(keep)
        self.scatter_to = torch.as_tensor(kcol[keep])
        # the bands of each channel, band 0 (low-pass) first, as rows of the compact
        # output of casp_samples: kernel column -> row (-1: padding lane)
        cm = np.sort(kcol[keep])
        ch, band = cm // M1, cm % M1
        #: number of bands (low-pass included) of each channel
        self.n_bands = np.bincount(ch, minlength=C)
        off = np.r_[0, np.cumsum(self.n_bands)[:-1]]
        if not np.array_equal(band, np.arange(cm.size) - off[ch]):
            raise ValueError("the fused kernel needs each channel's bands to be 0 ... n - 1")
        self.kcol = np.where(kcol >= 0, off[kcol // M1] + kcol % M1, -1).astype(np.int64)
        #: parameter blocks of the register kernels (:mod:`.casp_simd`), built on first use
        self.register_params: tuple | None = None

    def chain_args(self, st: dict[str, np.ndarray]) -> tuple:
        """The coefficients and the states ``st`` (:meth:`initial_state`'s layout) in the
        order of :func:`_casp_batch`'s arguments ``pr`` ... ``xi``."""
        return (
            self.pr, self.pi, self.g2, st["gre"], st["gim"],
            self.ihc, st["ihc"],
            self.aa, self.ab, self.am, self.aq, st["adapt"], self.minlvl, self.use_limit,
            self.off, self.scale,
            self.pre, st["pre"], self.lp, st["lp"], self.sc0,
            self.runs, self.nsig, self.ar, self.ai, self.cr, self.ci, st["xr"], st["xi"],
        )  # fmt: skip

    def initial_state(self, B: int) -> dict[str, np.ndarray]:
        """Zero filter states and the adaptation loops at rest (``B`` items)."""
        P, K, J, L = self.P, self.K, self.J, self.L
        return {
            "gre": np.zeros((B, K, P)),
            "gim": np.zeros((B, K, P)),
            "ihc": np.zeros((B, 2, self.ihc.shape[0], P)),
            "adapt": np.ascontiguousarray(np.broadcast_to(self.s0[None, :, None], (B, J, P))),
            "pre": np.zeros((B, 2, self.pre.shape[0], P)),
            "lp": np.zeros((B, 2, self.lp.shape[0], P)),
            "xr": np.zeros((B, L)),
            "xi": np.zeros((B, L)),
        }


def pooled_start(
    plan: Any,
    register: Any,
    x: torch.Tensor,
    state: dict[str, np.ndarray] | None,
    hop: int,
    ends: list[int],
    square: bool,
) -> tuple[
    np.ndarray,
    np.ndarray,
    tuple[torch.Tensor, dict[str, np.ndarray]] | None,
    dict[str, np.ndarray] | None,
]:
    """The start shared by the pooled fused chains: ``x (B, T)`` as float64 rows and
    ``ends`` as int64; then either the result of the register kernel module ``register``
    (its ``supported``/``pooled``; float32 models, and a stream stays with the kernel
    that started it, whose state layout differs) or, for the channel-vectorised kernel,
    a copy of ``state`` (``None``: ``plan.initial_state``) with the kernel threads set
    (the register kernels launch on :mod:`lhotse_amt.kernels.jobs` threads and leave
    numba's threading layer unstarted)."""
    xn = np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float64)
    ends_a = np.asarray(ends, np.int64)
    simd = modbank_simd.ENABLED if state is None else "front" in state
    if simd and register.supported(plan):
        sums, new = register.pooled(plan, xn, state, hop, ends_a, square)
        return xn, ends_a, (torch.from_numpy(sums), new), None
    _threads()
    B = xn.shape[0]
    st = plan.initial_state(B) if state is None else {k: v.copy() for k, v in state.items()}
    return xn, ends_a, None, st


def casp_pooled(
    plan: CASPPooledPlan,
    x: torch.Tensor,
    state: dict[str, np.ndarray] | None,
    hop: int,
    ends: list[int],
    square: bool,
) -> tuple[torch.Tensor, dict[str, np.ndarray]]:
    """Run the fused chain on ``x (B, T)`` (the gammatone input) and sum the features over
    blocks of ``hop`` samples (samples at or after ``ends[b]`` are not used).

    Returns the block sums ``(B, C, M + 1, ceil(T / hop))`` (of squares if ``square``;
    zero for bands a channel lacks; band 0 is the low-pass band) and the new state (numpy
    arrays in this function's own layout, see :meth:`CASPPooledPlan.initial_state`, or
    that of :func:`lhotse_amt.kernels.casp_simd.pooled` for float32 models; the input
    state is not modified).
    """
    xn, ends_a, done, st = pooled_start(plan, casp_simd, x, state, hop, ends, square)
    if done is not None:
        return done
    B, T = xn.shape
    nblk = -(-T // hop)
    sums = np.zeros((B, nblk, plan.P + plan.L))
    p = plan
    _casp_batch(
        xn, ends_a, int(hop), bool(square), p.precise,
        *p.chain_args(st),
        sums, _NO_OUTPUT, p.kcol, 1,
    )  # fmt: skip
    out = torch.zeros((B, nblk, p.C * p.M1), dtype=torch.float64)
    out[:, :, p.scatter_to] = torch.from_numpy(sums)[:, :, p.scatter_from]
    return out.reshape(B, nblk, p.C, p.M1).permute(0, 2, 3, 1), st


def casp_samples(plan: CASPPooledPlan, x: torch.Tensor, out: torch.Tensor) -> None:
    """Run the fused chain on ``x (B, T)`` (the gammatone input, from rest) and write
    every sample of every band into ``out (B, R, T)`` (float32 or float64, C-contiguous,
    CPU): the bands of channel 0 (low-pass first), then those of channel 1, ...,
    ``R = sum(plan.n_bands)`` rows; the modulation output of
    :meth:`lhotse_amt.models.Osses2021.forward` without another sample-rate array (items
    in parallel over the kernel threads, see :func:`lhotse_amt.kernels.cpu._threads`)."""
    B, T = x.shape
    R = int(plan.n_bands.sum())
    if out.shape != (B, R, T) or not out.is_contiguous():
        raise ValueError(f"out must be contiguous {(B, R, T)}, got {tuple(out.shape)}")
    p = plan
    xn = np.ascontiguousarray(x.detach().cpu().numpy(), dtype=np.float64)
    if modbank_simd.ENABLED and casp_simd.supported(p):
        casp_simd.samples(p, xn, out.numpy())
        return
    _threads()
    st = plan.initial_state(B)
    _casp_batch(
        xn, np.full(B, T, np.int64), 0, False, p.precise,
        *p.chain_args(st),
        np.zeros((B, 0, p.P + p.L)), out.numpy(), p.kcol, _WRITE_BLOCK,
    )  # fmt: skip

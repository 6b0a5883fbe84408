"""Fused CPU kernels for the no-grad path of the Moore–Glasberg loudness models.

Used by :meth:`lhotse_amt.ops.loudness_fast.FastExcitation.specific_loudness_frames`, which
runs the chain ear-filtered signal -> spectrum -> excitation -> specific loudness in chunks of
frames so that every temporary stays in cache, and by
:func:`lhotse_amt.ops.loudness_fast.multires_intensity_fast`:

* :func:`power_into` -- component intensities ``re**2 + im**2`` of one analysis window written
  straight into the ``(N, 960)`` spectrum (numpy, in place: no temporaries).
* :func:`windowed_autocorr` -- autocorrelation (float64, lags ``0 … L-1``) of the windowed
  2-ms segments by direct summation (the FFT route of the torch path, same values).
* :func:`kept_components` -- the pruning rules of the Cambridge/AMT code
  (``I > max(I_max, 1000) * 1e-6``) or the Glasberg2002 floor (``I > floor``) in one pass:
  kept intensities, per-row and per-column flags.
* :func:`specific_loudness_tail` -- ``E = max(upper + lower, 1e-10)`` and the specific
  loudness ``N'`` (sone/Cam) of Moore, Glasberg & Baer (1997), Eqs. 2–4 / ANSI S3.4-2007,
  Eqs. 17–19 (same branches as :func:`lhotse_amt.functional.loudness.specific_loudness`),
  times a per-channel mask and zero in frames without any kept component. In float32 the
  powers are ``exp(y log2(x) ln 2)`` evaluated in float64 with inline, vectorisable
  ``log2`` (atanh series, < 3e-11 absolute) and ``exp`` (:mod:`lhotse_amt.kernels.loudness`,
  ~2 ulp), i.e. more accurate than the float32 ``pow`` of the torch path, with ``a ** alpha``
  by the same expression so that excitations far below threshold give exactly 0 (never a
  negative rounding residue); in float64 libm ``pow``. Optionally the excitation is written
  as a level in dB.
* :func:`binaural_inhibition_apply` -- the elementwise part of the binaural inhibition of
  Moore et al. (2016) in one pass.
* :func:`subtract_pruned` -- sparse removal of pruned components from the
  autocorrelation-based level/upper-skirt product.
* :func:`sliding_dft_power` -- Hann-windowed DFT power of the long analysis windows by the
  sliding-DFT recursion (:func:`sliding_plan` designs it once per model).

Loops that start at a run-time offset index with unsigned integers: numba then emits no
negative-index wraparound code and LLVM vectorises them (with signed offsets such loops ran
scalar, ~10x slower).

The lower skirt itself is :func:`lhotse_amt.kernels.loudness.lower_skirt_numpy`.

No gradient, no state: inputs are numpy arrays, one row per frame and ear; outputs are new
arrays or caller-provided ones.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .fastmath import NO_CFUNC, prefer_wide_vectors
from .loudness import _LN2, _exp64, _log2_pos32
from .loudness_plans import KeepRule, TailConstants
from .matmul import matmul

__all__ = [
    "binaural_inhibition_apply",
    "kept_components",
    "power_into",
    "sliding_dft_power",
    "sliding_plan",
    "specific_loudness_tail",
    "subtract_pruned",
    "windowed_autocorr",
]

_FM = {"reassoc", "contract"}


@njit(cache=True, nogil=True, fastmath=_FM, error_model="numpy", **NO_CFUNC)
def _tail(
    upper, lower, anyk, g, a, a_alpha, alpha, thr, mask, k, db, empty_db, e_out, n_out
):  # pragma: no cover - compiled
    prefer_wide_vectors()
    # k: constants in the computation dtype: floor, big, C, high-level divisor and exponent, 2
    floor, big, c, hi_div, hi_exp, two = k[0], k[1], k[2], k[3], k[4], k[5]
    zero = k[0] - k[0]
    n_rows, n_ch = upper.shape
    for r in range(n_rows):
        kept = anyk[r]
        for ch in range(n_ch):
            e = max(upper[r, ch] + lower[r, ch], floor)
            e_out[r, ch] = e
            if not kept or mask[ch] == zero:
                n_out[r, ch] = zero
                continue
            if e > thr[ch] and e > big:
                val = c * math.pow(e / hi_div, hi_exp)
            else:
                val = c * (math.pow(g[ch] * e + a[ch], alpha[ch]) - a_alpha[ch])
                if e <= thr[ch]:
                    t = two * e / (e + thr[ch])
                    val *= t * math.sqrt(t)
            n_out[r, ch] = val * mask[ch]
        if db:
            for ch in range(n_ch):
                e_out[r, ch] = 10.0 * math.log10(e_out[r, ch]) if kept else empty_db


_DB_LOG2 = 10.0 * math.log10(2.0)  # 10 log10(x) = _DB_LOG2 * log2(x)


@njit(cache=True, nogil=True, fastmath=_FM, error_model="numpy", **NO_CFUNC)
def _tail32(
    upper, lower, anyk, g, a, alpha, thr, mask, k, db, empty_db, e_out, n_out, base, w
):  # pragma: no cover - compiled
    prefer_wide_vectors()
    # float32 rows; branch-free so that the loops over channels vectorise: x**y is
    # exp(y log2(x) ln 2) and 10 log10(E) is 10 log10(2) log2(E), in float64 (relative error
    # ~1e-10, well below float32 rounding). Scratch: base (2 C,) float32, w (4, 2 C) float64
    floor, big, c, hi_div, hi_exp = k[0], k[1], np.float64(k[2]), k[3], np.float64(k[4])
    n_rows, n_ch = upper.shape
    expo, pw, a_alpha_same, lg = w[0], w[1], w[2], w[3]
    # row -1: a**alpha by the same expression as x**alpha, so that x == a (E far below
    # threshold, g E + a rounding to a) gives exactly 0, not the float32 rounding of
    # a**alpha (its E is read from the last row and written there, then rewritten by that
    # row: the caller passes at least one row). Each loop form and each inline expansion of
    # log2 and exp is written once (they cost compile time at a process's first extract):
    # one log2 pass over the power bases and, for the level in dB, the excitations
    for r in range(-1, n_rows):
        first = r < 0
        # one power per channel: (E / hi_div) ** hi_exp above the high-level limit (and
        # above threshold), else (g E + a) ** alpha
        for ch in range(n_ch):
            e = upper[r, ch] + lower[r, ch]
            e = floor if floor > e else e  # max(e, floor), no builtin to compile
            e_out[r, ch] = e
            base[n_ch + ch] = e
            high = e > big and e > thr[ch]
            b = e / hi_div if high else g[ch] * e + a[ch]
            base[ch] = a[ch] if first else b
            expo[ch] = hi_exp if high and not first else np.float64(alpha[ch])
        n_log = 2 * n_ch if db and not first else n_ch
        for i in range(n_log):  # positive normal float32: ~1e-10 absolute
            lg[i] = _log2_pos32(base[i])
        dst = a_alpha_same if first else pw
        for ch in range(n_ch):  # relative error ~1e-10
            dst[ch] = _exp64(expo[ch] * lg[ch] * _LN2)
        if first:
            continue
        kept = 1.0 if anyk[r] else 0.0
        for ch in range(n_ch):
            e = e_out[r, ch]
            core = pw[ch] - a_alpha_same[ch]
            ed = np.float64(e)
            td = np.float64(thr[ch])
            t = 2.0 * ed / (ed + td)
            n_lo = c * (t * np.sqrt(t)) * core
            val = (c * pw[ch] if e > big else c * core) if e > thr[ch] else n_lo
            n_out[r, ch] = np.float32(val * (np.float64(mask[ch]) * kept))
        if db:  # level in dB (a branch in the loop above stops its vectorisation)
            for ch in range(n_ch):
                e_out[r, ch] = np.float32(_DB_LOG2 * lg[n_ch + ch]) if anyk[r] else empty_db


def specific_loudness_tail(
    upper: np.ndarray,
    lower: np.ndarray,
    any_kept: np.ndarray,
    sl: TailConstants,
    c: float,
    high_level: str,
    e_out: np.ndarray,
    n_out: np.ndarray,
    empty_db: float | None = None,
) -> None:
    """``E = max(upper + lower, 1e-10)`` and specific loudness ``N'`` into ``e_out``/``n_out``.

    Args:
        upper, lower: upper- and lower-skirt excitation ``(N, C)`` (intensity re (20 µPa)²).
        any_kept: ``(N,)`` bool; rows without a kept component get ``N' = 0``.
        sl: per-channel constants (dtype of ``upper``); see
            :func:`lhotse_amt.functional.loudness.specific_loudness_params`.
        c: loudness constant ``C``.
        high_level: ``"moore2016"`` (``C (E / 1.0707)^0.2`` above 1e10) or ``"mgb1997"``
            (``C (E / 1.04e6)^0.5``).
        e_out, n_out: ``(N, C)`` outputs (dtype of ``upper``).
        empty_db: if given, ``e_out`` receives the excitation level ``10 log10(E)`` (dB) instead
            of ``E``, and ``empty_db`` in rows without a kept component.
    """
    if high_level == "moore2016":
        hi_div, hi_exp = 1.0707, 0.2
    elif high_level == "mgb1997":
        hi_div, hi_exp = 1.04e6, 0.5
    else:
        raise ValueError(f"unknown high_level {high_level!r}")
    k = np.array([1e-10, 1e10, c, hi_div, hi_exp, 2.0], dtype=upper.dtype)
    rest = (
        sl.alpha,
        sl.e_thrq,
        sl.mask,
        k,
        empty_db is not None,
        upper.dtype.type(0.0 if empty_db is None else empty_db),
        e_out,
        n_out,
    )
    if upper.shape[0] == 0:  # the float32 kernel's first pass reads and writes the last row
        return
    if upper.dtype == np.float32:  # a ** alpha recomputed in the kernel, scratch from here
        n_ch = upper.shape[1]
        scratch = (np.empty(2 * n_ch, np.float32), np.empty((4, 2 * n_ch), np.float64))
        _tail32(upper, lower, any_kept, sl.g, sl.a, *rest, *scratch)
    else:
        _tail(upper, lower, any_kept, sl.g, sl.a, sl.a_alpha, *rest)


@njit(cache=True, nogil=True, error_model="numpy", **NO_CFUNC)
def _kept(rows, thr, ik, anyk, kept_n, pruned_n):  # pragma: no cover - compiled
    # branch-free inner loops (vectorised): kept = v > thr[r]; pruned = v != 0 and not kept
    prefer_wide_vectors()
    n_rows, n_bins = rows.shape
    for r in range(n_rows):
        t = thr[r]
        found = np.int32(0)
        for j in range(n_bins):
            v = rows[r, j]
            k = np.int32(v > t)
            ik[r, j] = v if k else v - v
            found += k
            kept_n[j] += k
            pruned_n[j] += np.int32(v != v - v) - k
        anyk[r] = found > 0


def kept_components(
    rows: np.ndarray, keep_rule: KeepRule
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Kept spectral components of each row (frame and ear) in one pass, by ``keep_rule``.

    Thresholds are computed in the dtype of ``rows``, as in the torch reference.

    Returns ``(ik, any_kept, col_kept, col_pruned)``: kept intensities ``(N, K)`` (0 where not
    kept), ``(N,)`` bool (row has a kept component), ``(K,)`` bool (component kept in some row)
    and ``(K,)`` int64 (number of rows in which the component is non-zero but not kept).
    """
    dt = rows.dtype.type
    rows = np.ascontiguousarray(rows)
    if keep_rule.prune:  # max(max_k I, threshold) * 1e-6 per row, in the dtype of the rows
        thr = np.maximum(rows.max(axis=1, initial=dt(0.0)), dt(keep_rule.threshold)) * dt(1e-6)
    else:
        thr = np.full(rows.shape[0], keep_rule.threshold, dtype=rows.dtype)
    ik = np.empty_like(rows)
    anyk = np.empty(rows.shape[0], dtype=np.bool_)
    kept_n = np.zeros(rows.shape[1], dtype=np.int32)
    pruned_n = np.zeros(rows.shape[1], dtype=np.int32)
    _kept(rows, thr, ik, anyk, kept_n, pruned_n)
    col_kept = kept_n > 0
    col_pruned = pruned_n.astype(np.int64)
    return ik, anyk, col_kept, col_pruned


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_CFUNC)
def _subtract_pruned(hi, rows, ik, h0, w, acc, add):  # pragma: no cover - compiled
    # pruned components are where rows != ik (kept: equal; absent: both 0); blocks of 64
    # components are tested first with a vectorised count, so a row with no pruned
    # component costs about one pass of compares. add: acc[r] += hi[r] (cast to acc's
    # dtype) once the row is done, while it is in cache
    prefer_wide_vectors()
    n_rows, n_bins = rows.shape
    n_cols = hi.shape[1]
    for r in range(n_rows):
        for b0 in range(h0, n_bins, 64):
            # unsigned indices: no negative-index wraparound, so the scan vectorises
            u0 = np.uint64(b0)
            u1 = np.uint64(b0 + 64 if b0 + 64 < n_bins else n_bins)
            d = 0.0
            for k in range(u0, u1):
                d += abs(np.float64(rows[r, k]) - np.float64(ik[r, k]))
            if d == 0.0:
                continue
            for k in range(u0, u1):
                v = rows[r, k]
                if v != ik[r, k]:
                    vv = np.float64(v)
                    kk = k - np.uint64(h0)
                    for j in range(n_cols):
                        hi[r, j] -= vv * np.float64(w[kk, j])
        if add:
            for j in range(n_cols):
                acc[r, j] += acc.dtype.type(hi[r, j])


def subtract_pruned(
    hi: np.ndarray,
    rows: np.ndarray,
    ik: np.ndarray,
    h0: int,
    w: np.ndarray,
    add_to: np.ndarray | None = None,
) -> None:
    """``hi[r] -= sum_k rows[r, h0 + k] w[k]`` over the pruned components (``rows != 0``,
    ``ik == 0``) of each row ``r``, in place; ``hi (N, W)`` float64, ``w (K - h0, W)`` float64
    or float32 (products formed in float64), ``rows``/``ik`` ``(N, K)``. Sparse: a row costs
    one ``W``-long update per pruned component (typically about one per frame), not a product
    with every component pruned in any row. ``add_to (N, W)`` (any float dtype): then also
    ``add_to += hi`` (rounded to its dtype) in the same pass."""
    add = add_to is not None
    _subtract_pruned(
        hi,
        np.ascontiguousarray(rows),
        np.ascontiguousarray(ik),
        int(h0),
        w,
        add_to if add else hi,
        add,
    )


def power_into(y: np.ndarray, lo: int, out: np.ndarray) -> None:
    """Component intensities ``out[:, lo:lo + nb] = re**2 + im**2`` from ``y = [re | im]``
    ``(N, 2 nb)`` (the windowed DFT of :func:`lhotse_amt.functional.loudness.multires_intensity`
    on ``nb`` consecutive bins); ``out`` ``(N, K)`` of the same dtype. ``y`` is squared in
    place (it is scratch). Two vectorised numpy passes, no compiled kernel (one would cost
    compile time at a process's first extract)."""
    nb = y.shape[1] // 2
    np.multiply(y, y, out=y)
    np.add(y[:, :nb], y[:, nb:], out=out[:, lo : lo + nb])


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, **NO_CFUNC)
def _autocorr(zp, start, hop, n_frames, window, y, out):  # pragma: no cover - compiled
    # y: (L,) float64 scratch from the caller (an allocation here would compile numpy's
    # allocator into the kernel)
    n_rows = zp.shape[0]
    length = window.shape[0]
    for r in range(n_rows):
        for fr in range(n_frames):
            t0 = np.uint64(start + hop * fr)  # unsigned: no wraparound checks (vectorised)
            for n in range(length):
                y[n] = np.float64(zp[r, t0 + np.uint64(n)]) * window[n]
            for tau in range(length):
                acc = 0.0
                ut = np.uint64(tau)
                for n in range(np.uint64(length) - ut):
                    acc += y[n] * y[n + ut]
                out[r, fr, tau] = acc


def windowed_autocorr(
    zp: np.ndarray, start: int, hop: int, n_frames: int, window: np.ndarray
) -> np.ndarray:
    """Autocorrelation ``r[.., f, tau] = sum_n y_n y_(n + tau)`` (float64, ``tau < L``) of the
    windowed segments ``y_n = zp[.., start + hop f + n] window[n]``, ``n < L`` (``L`` the window
    length); ``zp`` ``(R, M)``; returns ``(R, n_frames, L)``. Direct summation, equal to the
    zero-padded FFT computation up to float64 rounding."""
    out = np.empty((zp.shape[0], n_frames, window.shape[0]), dtype=np.float64)
    y = np.empty(window.shape[0], np.float64)
    _autocorr(np.ascontiguousarray(zp), start, hop, n_frames, window.astype(np.float64), y, out)
    return out


# atanh(t) = t sum_k t^(2k) / (2k + 1); |t| <= 3 - 2 sqrt(2) = 0.1716 below, so terms to t^20
# leave a truncation error < 1e-18 relative
_ATANH = tuple(1.0 / (2 * k + 1) for k in range(11))


@njit(inline="always", fastmath=_FM)
def _log1p_unit(u):  # pragma: no cover - compiled
    # log(1 + u) for 0 <= u <= 1 without forming 1 + u (no cancellation for small u):
    # 1 + u = 2^e m with m in [1/sqrt2, sqrt2], t = (m - 1) / (m + 1), log = e ln2 + 2 atanh t
    hi = u > 0.41421356237309503
    t = (u - 1.0) / (u + 3.0) if hi else u / (2.0 + u)
    t2 = t * t
    q = _ATANH[10]
    q = q * t2 + _ATANH[9]
    q = q * t2 + _ATANH[8]
    q = q * t2 + _ATANH[7]
    q = q * t2 + _ATANH[6]
    q = q * t2 + _ATANH[5]
    q = q * t2 + _ATANH[4]
    q = q * t2 + _ATANH[3]
    q = q * t2 + _ATANH[2]
    q = q * t2 + _ATANH[1]
    q = q * t2 + _ATANH[0]
    return (_LN2 if hi else 0.0) + 2.0 * t * q


@njit(inline="always", fastmath=_FM)
def _sech_pow(x, p):  # pragma: no cover - compiled
    # sech(x)^p for x >= 0: log sech x = ln2 - x - log1p(exp(-2x)); exponents below -700
    # (sech^p < 1e-304) are clamped, which leaves 1 + sech^p at 1 in float64
    lsx = _LN2 - x - _log1p_unit(_exp64(max(-2.0 * x, -700.0)))
    return _exp64(max(p * lsx, -700.0))


@njit(cache=True, nogil=True, fastmath=_FM, error_model="numpy", **NO_CFUNC)
def _binaural(s_l, s_r, h_l, h_r, p, o_l, o_r):  # pragma: no cover - compiled
    # S / I with I = 2 / (1 + sech^p) is S (1 + sech^p) / 2; both ratios from one division
    # flat (contiguous) arrays: one vector loop over all frames and channels
    prefer_wide_vectors()
    for k in range(s_l.shape[0]):
        a = np.float64(h_l[k])
        b = np.float64(h_r[k])
        inv = 1.0 / (a * b)
        o_l[k] = np.float64(s_l[k]) * (0.5 + 0.5 * _sech_pow(b * b * inv, p))
        o_r[k] = np.float64(s_r[k]) * (0.5 + 0.5 * _sech_pow(a * a * inv, p))


def binaural_inhibition_apply(
    s_left: np.ndarray,
    s_right: np.ndarray,
    smooth_left: np.ndarray,
    smooth_right: np.ndarray,
    p: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``(S_L / I_L, S_R / I_R)`` with ``I_L = 2 / (1 + sech(Ŝ_R / Ŝ_L)^p)`` (and symmetrically)
    elementwise for ``(N, C)`` arrays of one dtype: the specific loudness ``S`` and its smoothed
    version ``Ŝ`` (> 0) of :func:`lhotse_amt.functional.loudness.binaural_inhibition`.
    Evaluated in float64 with inline ``exp`` (~2 ulp) and ``log1p`` (atanh series, ~1 ulp), in
    one vectorised pass (the torch expression makes about ten passes over the arrays)."""
    o_l = np.empty(s_left.shape, dtype=s_left.dtype)
    o_r = np.empty(s_right.shape, dtype=s_right.dtype)
    _binaural(
        np.ascontiguousarray(s_left).reshape(-1),
        np.ascontiguousarray(s_right).reshape(-1),
        np.ascontiguousarray(smooth_left).reshape(-1),
        np.ascontiguousarray(smooth_right).reshape(-1),
        float(p),
        o_l.reshape(-1),
        o_r.reshape(-1),
    )
    return o_l, o_r


@njit(cache=True, nogil=True, fastmath={"contract"}, error_model="numpy", **NO_CFUNC)
def _sliding_power(h, n_frames, nbl, rot, wts, offs, nb, lo, refresh, w, out):  # pragma: no cover
    # h: (R, n_frames + nbl - 1, 2 nw) block DFTs [re | im] of hop-sample blocks;
    # rot: (4, nw) = cos/sin of w hop (frame advance) and of -w L (entering block).
    # X_f(w) = sum_{n < L} z[start + hop f + n] exp(-i w n) by the sliding recursion
    # X_(f+1) = e^(i w hop) (X_f - H_f + e^(-i w L) H_(f + nbl)), re-summed from the blocks
    # every `refresh` frames so that rounding cannot accumulate; windowed bins
    # Y_i = sum_t wts[t] X[offs[t] + i]. w: (4, nw) float64 scratch from the caller (an
    # allocation here would compile numpy's allocator into the kernel): X (re, im) and
    # exp(-i w hop b) while re-summing
    prefer_wide_vectors()
    n_rows = h.shape[0]
    nw = rot.shape[1]
    xr, xi, step_re, step_im = w[0], w[1], w[2], w[3]
    # unsigned offsets: no negative-index wraparound code, so the loops vectorise
    o0, o1, o2 = np.uint64(offs[0]), np.uint64(offs[1]), np.uint64(offs[2])
    unw = np.uint64(nw)
    ulo = np.uint64(lo)
    w0, w1, w2 = wts[0], wts[1], wts[2]
    for r in range(n_rows):
        for f in range(n_frames):
            if f % refresh == 0:  # X_f = sum_b H_(f + b) exp(-i w hop b)
                for j in range(nw):
                    xr[j] = 0.0
                    xi[j] = 0.0
                    step_re[j] = 1.0
                    step_im[j] = 0.0
                for b in range(nbl):
                    for j in range(nw):
                        a, c = h[r, f + b, j], h[r, f + b, unw + j]
                        pr, pi = step_re[j], step_im[j]
                        xr[j] += a * pr - c * pi
                        xi[j] += a * pi + c * pr
                        step_re[j] = pr * rot[0, j] + pi * rot[1, j]
                        step_im[j] = pi * rot[0, j] - pr * rot[1, j]
            row = r * n_frames + f
            for i in range(np.uint64(nb)):
                yr = w0 * xr[o0 + i] + w1 * xr[o1 + i] + w2 * xr[o2 + i]
                yi = w0 * xi[o0 + i] + w1 * xi[o1 + i] + w2 * xi[o2 + i]
                out[row, ulo + i] = yr * yr + yi * yi
            if f + 1 < n_frames:
                for j in range(nw):
                    hr, hi = h[r, f + nbl, j], h[r, f + nbl, unw + j]
                    dr = xr[j] - h[r, f, j] + (rot[2, j] * hr - rot[3, j] * hi)
                    di = xi[j] - h[r, f, unw + j] + (rot[2, j] * hi + rot[3, j] * hr)
                    xr[j] = rot[0, j] * dr - rot[1, j] * di
                    xi[j] = rot[0, j] * di + rot[1, j] * dr


def sliding_plan(
    length: int, bins: np.ndarray, periodic: bool, scale: float, hop: int = 32, n_fft: int = 2048
) -> tuple:
    """Plan of :func:`sliding_dft_power` for a Hann window of ``length`` samples (``periodic``:
    ``0.5 - 0.5 cos(2 pi n / L)``; else the symmetric ``np.hanning(L)``, period ``L - 1``) and
    the bins ``bins`` (contiguous, ascending) of an ``n_fft``-point grid, intensities scaled by
    ``scale**2``.

    A Hann-windowed DFT at ``w`` is ``0.5 X(w) - 0.25 X(w - theta) - 0.25 X(w + theta)`` with
    ``X`` the rectangular-window DFT and ``theta = 2 pi / period``; for the periodic window
    ``theta`` is ``n_fft / L`` bins of the grid, so the three frequency sets overlap.
    """
    bins = np.asarray(bins, dtype=np.int64)
    nb = len(bins)
    if length % hop or nb == 0 or np.any(np.diff(bins) != 1):
        raise ValueError("sliding plan needs length % hop == 0 and contiguous bins")
    if periodic and n_fft % length == 0:
        d = n_fft // length
        omega = 2.0 * np.pi * np.arange(bins[0] - d, bins[-1] + d + 1) / n_fft
        offs = np.array([d, 0, 2 * d], dtype=np.int64)
    else:
        theta = 2.0 * np.pi / (length if periodic else length - 1)
        w = 2.0 * np.pi * bins / n_fft
        omega = np.concatenate([w, w - theta, w + theta])
        offs = np.array([0, nb, 2 * nb], dtype=np.int64)
    n = np.arange(hop)[:, None]
    # block DFT matrix [cos | -sin] (hop, 2 nw): H = block @ basis
    basis = np.concatenate([np.cos(omega[None, :] * n), -np.sin(omega[None, :] * n)], axis=1)
    rot = np.stack(
        [np.cos(omega * hop), np.sin(omega * hop), np.cos(-omega * length), np.sin(-omega * length)]
    )
    wts = np.array([0.5, -0.25, -0.25]) * scale
    return length, hop, np.ascontiguousarray(basis), np.ascontiguousarray(rot), wts, offs, nb


def sliding_dft_power(
    zp: np.ndarray, start: int, n_frames: int, plan: tuple, lo: int, out: np.ndarray
) -> None:
    """Hann-windowed DFT power of ``n_frames`` segments ``zp[r, start + hop f :][:L]`` at a
    band of bins, by the sliding-DFT recursion (float64), into ``out[r * n_frames + f, lo:lo +
    nb]`` (``out`` ``(R n_frames, K)``, ``zp`` ``(R, M)``).

    Same values as the windowed-basis product of
    :func:`lhotse_amt.functional.loudness.multires_intensity` up to float64 rounding
    (~1e-14 relative to the strongest component), but ``O(hop)`` instead of ``O(L)`` operations
    per frame and frequency: each frame adds one block of ``hop`` new samples and removes the
    oldest (sliding DFT, Jacobsen & Lyons 2003, IEEE Signal Process. Mag. 20(2), 110-111); the
    Hann window is applied in the frequency domain (three rectangular-window frequencies per
    bin). The block DFTs are one fixed-order matrix product (:func:`lhotse_amt.kernels.matmul.
    matmul`: the same bits for every thread count); the recursion restarts from the blocks every
    64 frames, so rounding does not accumulate over long inputs. ``plan``: :func:`sliding_plan`.
    """
    length, hop, basis, rot, wts, offs, nb = plan
    nbl = length // hop
    n_blk = n_frames + nbl - 1
    blocks = np.ascontiguousarray(zp[:, start : start + hop * n_blk], dtype=np.float64)
    # fixed-order product (kernels.matmul): bitwise the same for every thread count, and no
    # BLAS thread pool (numpy's spins while idle; torch's stalls on a busy machine)
    h = matmul(blocks.reshape(-1, hop), basis).reshape(zp.shape[0], n_blk, -1)
    w = np.empty((4, rot.shape[1]), np.float64)
    _sliding_power(h, int(n_frames), nbl, rot, wts, offs, nb, int(lo), 64, w, out)

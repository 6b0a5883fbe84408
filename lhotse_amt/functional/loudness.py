"""Stateless stages of the Moore–Glasberg time-varying loudness models.

Implements the building blocks shared by
:class:`lhotse_amt.models.Glasberg2002` (Glasberg & Moore 2002, J. Audio Eng. Soc. 50, 331–342)
and :class:`lhotse_amt.models.Moore2016` (Moore, Glasberg, Varathanathan & Schlittenlacher 2016,
Trends in Hearing 20; with the 2018 AGC constants of Moore, Jervis, Harries & Schlittenlacher).

Conventions
-----------
* Sound pressure is in pascals; intensities are expressed relative to (20 µPa)², so
  ``10 log10(I)`` is a level in dB SPL.
* Sampling rate 32 kHz, one frame per millisecond (hop 32 samples); frame ``j`` is centred on
  input sample ``32 j``.
* The spectral grid is that of a 2048-point DFT (15.625 Hz bins); the models use the bins
  ``k = 1 … 960`` (15.625 Hz … 15 kHz), stored at index ``k - 1``.
* ERB-number (Cam) scale of Glasberg & Moore (1990): ``Cam = 21.366 log10(0.004368 f + 1)``,
  ``ERB(f) = 24.673 (0.004368 f + 1)`` Hz.
* Rounded-exponential weighting ``W(g) = (1 + p|g|) exp(-p|g|)`` with ``g = (f - fc) / fc``,
  ``p = 4 fc / ERB(fc)`` on the upper side and the level-dependent lower slope
  ``p_l = p - 0.35 (p / p(1 kHz)) (X - 51)`` (Moore, Glasberg & Baer 1997, Eq. 4; ANSI S3.4-2007,
  Eq. 5), where ``X`` is an input level per ERB (dB).
"""

from __future__ import annotations

import functools
import math
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from .._serial import all_finite
from .._validation import (
    check_choice,
    check_int,
    check_level_db,
    check_number,
    check_rate,
    check_signal,
    require,
)
from .iir import grad_recorded

__all__ = [
    "FS",
    "HOP",
    "N_FFT",
    "N_BINS",
    "P0",
    "loudness_tables",
    "cam_to_hz",
    "hz_to_cam",
    "erb_hz",
    "roex_p",
    "fir_filter_full",
    "pa_from_full_scale",
    "band_plan",
    "multires_intensity",
    "sliding_plans",
    "autocorr_basis",
    "FastExcitation",
    "prune_components",
    "excitation_moore2016",
    "excitation_gm2002",
    "specific_loudness_params",
    "specific_loudness",
    "agc",
    "agc_reference",
    "binaural_smoothing_matrix",
    "binaural_inhibition",
]

FS = 32000
HOP = 32
N_FFT = 2048
N_BINS = 960  # bins 1 … 960 of the 2048-point grid (15.625 Hz … 15 kHz)
P0 = 20e-6  # reference sound pressure (Pa)
BIN_HZ = FS / N_FFT


# ----------------------------------------------------------------------------------------------
# tables and scales
# ----------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=1)
def loudness_tables() -> dict[str, np.ndarray]:
    """Constants of the loudness models (``lhotse_amt/data/loudness_tables.npz``).

    See ``lhotse_amt/data/README_loudness.md`` for the sources: the 4097-tap free-field
    outer + middle-ear FIR ``ff_32000`` and the threshold, A(G) and alpha(G) tables.
    """
    path = resources.files("lhotse_amt") / "data" / "loudness_tables.npz"
    with resources.as_file(path) as p, np.load(p, allow_pickle=False) as d:
        return {k: np.array(d[k]) for k in d.files}


def cam_to_hz(cam: np.ndarray | float) -> np.ndarray:
    """Frequency (Hz) of ERB-number ``cam``: ``(10**(cam / 21.366) - 1) / 0.004368``."""
    return (10.0 ** (np.asarray(cam, dtype=np.float64) / 21.366) - 1.0) / 0.004368


def hz_to_cam(f: np.ndarray | float) -> np.ndarray:
    """ERB-number (Cam) of frequency ``f`` (Hz): ``21.366 log10(0.004368 f + 1)``."""
    return 21.366 * np.log10(0.004368 * np.asarray(f, dtype=np.float64) + 1.0)


def erb_hz(f: np.ndarray | float) -> np.ndarray:
    """Equivalent rectangular bandwidth (Hz) at ``f`` (Glasberg & Moore 1990)."""
    return 24.673 * (0.004368 * np.asarray(f, dtype=np.float64) + 1.0)


def roex_p(f: np.ndarray | float) -> np.ndarray:
    """Roex slope parameter ``p = 4 f / ERB(f)`` (upper slope; lower slope at 51 dB/ERB)."""
    f = np.asarray(f, dtype=np.float64)
    return 4.0 * f / erb_hz(f)


def _roex(u: np.ndarray) -> np.ndarray:
    return (1.0 + u) * np.exp(-u)


def pa_from_full_scale(x: Tensor, full_scale_db_spl: float) -> Tensor:
    """Convert a digital signal to pascals.

    ``full_scale_db_spl`` is the rms level (dB SPL) of a full-scale sinusoid (peak amplitude 1),
    e.g. 100 for the AMT ``moore2016`` convention: ``x_pa = x * sqrt(2) * 20e-6 * 10**(L / 20)``.
    ``full_scale_db_spl`` must be finite, within [-50, 200] dB SPL.
    """
    check_signal(x, min_samples=0, min_dim=0, max_dim=None, allow_empty=True, name="x")
    check_level_db("full_scale_db_spl", full_scale_db_spl)
    return x * (math.sqrt(2.0) * P0 * 10.0 ** (full_scale_db_spl / 20.0))


# ----------------------------------------------------------------------------------------------
# outer + middle ear
# ----------------------------------------------------------------------------------------------
def fir_filter_full(x: Tensor, h: Tensor) -> Tensor:
    """Full linear convolution ``y = x * h`` along the last axis by FFT.

    Args:
        x: signal ``(..., N)``.
        h: FIR taps ``(M,)``.

    Returns:
        ``(..., N + M - 1)``. For the symmetric 4097-tap ear filters, output index ``m``
        corresponds to input time ``m - 2048`` (zero-phase filtering).

    Without gradient on the CPU the transforms are :mod:`scipy.fft`'s on the calling thread:
    torch's CPU FFT splits its work by the intra-op thread count and its results change in
    the last bits with it, which would make the loudness features depend on
    ``torch.set_num_threads``.
    """
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    check_signal(h, min_samples=1, min_dim=1, max_dim=1, name="FIR taps h")
    n = x.shape[-1] + h.shape[-1] - 1
    nfft = 1 << (n - 1).bit_length()
    if x.device.type == "cpu" and not grad_recorded(x, h):
        import scipy.fft

        xs = x.detach().numpy()
        spec = scipy.fft.rfft(xs, nfft, workers=1)
        spec *= scipy.fft.rfft(h.detach().to(x.dtype).numpy(), nfft, workers=1)
        y_np = scipy.fft.irfft(spec, nfft, overwrite_x=True, workers=1)[..., :n]
        return torch.from_numpy(y_np.astype(xs.dtype, copy=False))
    y = torch.fft.irfft(torch.fft.rfft(x, nfft) * torch.fft.rfft(h.to(x.dtype), nfft), nfft)
    return y[..., :n]


# ----------------------------------------------------------------------------------------------
# multi-resolution spectrum
# ----------------------------------------------------------------------------------------------
WINDOW_LENGTHS = (2048, 1024, 512, 256, 128, 64)  # 64, 32, 16, 8, 4, 2 ms


def band_plan(variant: str) -> list[np.ndarray]:
    """DFT bins (of the 2048-point grid) taken from each of the six windows.

    ``"moore2016"``: the Cambridge/AMT code's 1-based inclusive index ranges for the limits
    20, 80, 500, 1250, 2540, 4050, 15000 Hz, a later window overwriting a shared boundary bin
    (bins 1–4, 5–31, 32–79, 80–161, 162–258, 259–960).
    ``"gm2002"``: half-open frequency bands [10, 80), [80, 500), [500, 1250), [1250, 2540),
    [2540, 4050), [4050, 15001) Hz (Glasberg & Moore 2002, Sec. 2.2).
    """
    if variant == "moore2016":
        lim = [int(f / BIN_HZ) + 1 for f in (20, 80, 500, 1250, 2540, 4050, 15000)]  # 1-based
        out = []
        for i in range(6):
            lo = lim[i] - 1
            hi = lim[i + 1] - 1 if i == 5 else lim[i + 1] - 2  # inclusive, 0-based
            out.append(np.arange(lo, hi + 1))
        return out
    if variant == "gm2002":
        edges = (10.0, 80.0, 500.0, 1250.0, 2540.0, 4050.0, 15001.0)
        k = np.arange(1, N_FFT // 2)
        f = k * BIN_HZ
        return [k[(f >= edges[i]) & (f < edges[i + 1])] for i in range(6)]
    raise ValueError(f"unknown band plan {variant!r}")


def _window_and_scale(variant: str, i: int) -> tuple[np.ndarray, float]:
    # Hann window of the i-th analysis window and the factor giving intensities re (20 uPa)^2
    length = WINDOW_LENGTHS[i]
    if variant == "moore2016":
        return np.hanning(length), (2.0 / N_FFT) * math.sqrt(10.0**0.332 * 2.0**i / 2.0) / P0
    w = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)
    return w, math.sqrt(2.0 / (N_FFT * np.sum(w**2))) / P0


def sliding_plans(variant: str, min_length: int | None = None) -> dict[int, tuple]:
    """Sliding-DFT plans (:func:`lhotse_amt.kernels.loudness_fused.sliding_plan`) of the
    analysis windows that are cheaper by the sliding recursion, keyed by window length.

    The recursion costs a fixed number of operations per frame and frequency (``nw``
    frequencies: the band's bins and their Hann neighbours), the windowed-basis product
    ``L`` per frame and bin. Measured on one core (per frame): sliding ~7.5 ns x ``nw``,
    product ~0.07 ns x ``L`` x bins + 0.4 µs; by default each window takes the cheaper one
    (``"gm2002"``, periodic Hann, shared neighbours: the 2048 … 128-sample windows;
    ``"moore2016"``, symmetric Hann, three frequencies per bin: 2048 … 256). ``min_length``:
    instead, every window of at least this many samples.
    """
    from lhotse_amt.kernels.loudness_fused import sliding_plan

    plans = {}
    for i, (length, bins) in enumerate(zip(WINDOW_LENGTHS, band_plan(variant))):
        if not len(bins):
            continue
        scale = _window_and_scale(variant, i)[1]
        plan = sliding_plan(length, bins, variant != "moore2016", scale, HOP, N_FFT)
        n_freq = plan[3].shape[1]
        if min_length is None:
            use = 7.5 * n_freq <= 0.07 * length * len(bins) + 400.0
        else:
            use = length >= min_length
        if use:
            plans[length] = plan
    return plans


def dft_bases(variant: str) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per window: ``(L, bins, basis)`` with ``basis`` of shape ``(L, 2 * len(bins))``.

    ``basis`` holds window-weighted cosines and sines so that ``seg @ basis`` gives the real and
    imaginary parts of the 2048-point DFT of the windowed, zero-padded segment at ``bins``
    (up to a common phase factor, which does not affect the power), scaled so that the squared
    magnitude summed over real and imaginary parts is the component intensity re (20 µPa)².

    ``"moore2016"``: symmetric Hann (MATLAB ``hann(L)``), amplitude spectrum ``2|X|/2048``,
    power correction ``10**0.332`` and window-length correction ``2**i`` of the Cambridge code.
    ``"gm2002"``: periodic Hann, energy normalisation (a stationary sinusoid's power summed over
    bins equals its mean square).
    """
    out = []
    for i, (length, bins) in enumerate(zip(WINDOW_LENGTHS, band_plan(variant))):
        n = np.arange(length)
        w, scale = _window_and_scale(variant, i)
        ph = 2.0 * np.pi * np.outer(n, bins) / N_FFT
        basis = np.concatenate([w[:, None] * np.cos(ph), w[:, None] * np.sin(ph)], axis=1)
        out.append((length, bins, basis * scale))
    return out


def multires_intensity(
    z: Tensor,
    t0: int,
    j_first: int,
    n_frames: int,
    bases: list[tuple[int, np.ndarray, Tensor]],
    return_autocorr: Tensor | None = None,
    sliding: dict[int, tuple] | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Six-window spectrum with a 1-ms hop, batched over frames (no loop over frames).

    Args:
        z: ear-filtered signal ``(..., M)``; ``z[..., m]`` is the pressure at input time ``m + t0``.
        t0: input time (samples) of ``z[..., 0]``.
        j_first: index of the first frame; frame ``j`` is centred on input sample ``32 j``.
        n_frames: number of frames ``F``.
        bases: output of :func:`dft_bases` with the bases as tensors.
        return_autocorr: window ``(64,)`` of the shortest analysis window (float64, see
            :func:`autocorr_basis`); if given, also return the autocorrelation ``(..., F, 64)``
            (float64) of its windowed segments.
        sliding: plans of :func:`sliding_plans` (same band plan as ``bases``): without
            gradient on the CPU, the windows they cover are computed by the sliding DFT
            (:func:`lhotse_amt.kernels.loudness_fused.sliding_dft_power`, same values).

    Returns:
        Component intensities re (20 µPa)² on bins 1 … 960, shape ``(..., F, 960)``
        (and the autocorrelation, see ``return_autocorr``).
    """
    lead = z.shape[:-1]
    t_lo = HOP * j_first - 1024  # first input time needed
    t_hi = HOP * (j_first + n_frames - 1) + 1024  # one past the last input time needed
    # only the samples in [t_lo, t_hi) are used (cheap when called for a chunk of frames)
    cut_l = max(0, t_lo - t0)
    if cut_l or t_hi - t0 < z.shape[-1]:
        z = z[..., cut_l : max(cut_l, t_hi - t0)]
        t0 += cut_l
    pad_l = max(0, t0 - t_lo)
    pad_r = max(0, t_hi - (t0 + z.shape[-1]))
    zp = torch.nn.functional.pad(z, (pad_l, pad_r))
    base = t_lo - (t0 - pad_l)  # index in zp of input time t_lo
    # no-grad CPU: fused numba kernels for |X|^2 and the autocorrelation (same values)
    compiled = zp.device.type == "cpu" and not (
        torch.is_grad_enabled() and (zp.requires_grad or any(b.requires_grad for *_, b in bases))
    )
    n_cover = sum(len(b) for _, b, _ in bases)
    if (
        compiled
        and n_cover == N_BINS
        and all(len(b) and b[-1] - b[0] + 1 == len(b) for _, b, _ in bases)
    ):
        out = z.new_empty(*lead, n_frames, N_BINS)  # every bin is written below
    else:
        out = z.new_zeros(*lead, n_frames, N_BINS)
    if compiled:
        from lhotse_amt.kernels.loudness_fused import power_into, windowed_autocorr
        from lhotse_amt.kernels.matmul import matmul

        out2 = out.view(-1, N_BINS).numpy()
        zp2 = zp.detach().reshape(-1, zp.shape[-1]).numpy()
    for length, bins, basis in bases:
        start = base + 1024 - length // 2
        if compiled and sliding and length in sliding:
            from lhotse_amt.kernels.loudness_fused import sliding_dft_power

            sliding_dft_power(zp2, start, n_frames, sliding[length], int(bins[0]) - 1, out2)
            continue
        seg = zp[..., start : start + HOP * (n_frames - 1) + length].unfold(-1, length, HOP)
        nb = len(bins)
        lo = int(bins[0]) - 1
        contiguous = nb and int(bins[-1]) - int(bins[0]) + 1 == nb  # bins ascend, no repeats
        if compiled and contiguous:
            # fixed-order product: the same bits for every thread count (torch's product is
            # not); one row of segments is a strided view of the signal, more rows are copied
            # by numpy on this thread (a torch copy would open a parallel region)
            seg2 = seg.detach().numpy().reshape(-1, length)
            power_into(matmul(seg2, basis.detach().numpy()), lo, out2)
            continue
        y = seg.reshape(-1, length) @ basis
        y = y.reshape(*lead, n_frames, basis.shape[1])
        re, im = y[..., :nb], y[..., nb:]
        p = torch.addcmul(re * re, im, im)
        if contiguous:
            out[..., lo : lo + nb] = p
        else:
            out[..., bins - 1] = p
    if return_autocorr is not None:
        length = WINDOW_LENGTHS[-1]
        start = base + 1024 - length // 2
        if compiled:
            r = windowed_autocorr(zp2, start, HOP, n_frames, return_autocorr.double().numpy())
            return out, torch.from_numpy(r).reshape(*lead, n_frames, length)
        seg = zp[..., start : start + HOP * (n_frames - 1) + length].unfold(-1, length, HOP)
        y = seg.to(torch.float64) * return_autocorr.to(torch.float64)
        spec = torch.fft.rfft(y, 2 * length)
        r = torch.fft.irfft(spec.real.square() + spec.imag.square(), 2 * length)[..., :length]
        return out, r
    return out


def autocorr_basis(variant: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Map from the autocorrelation of the shortest window's segment to its component intensities.

    For the 2-ms window (64 samples) the component intensities on its bins are
    ``I_k = scale^2 |sum_n y_n exp(-i w_k n)|^2 = r @ A`` with ``y = window * segment``,
    ``r_tau = sum_n y_n y_(n + tau)`` (``tau = 0 … 63``) and
    ``A[tau, k] = scale^2 (1 if tau == 0 else 2) cos(w_k tau)``, ``w_k = 2 pi k / 2048``.
    Its 702 bins (4 … 15 kHz) are a 32-times oversampled spectrum of a 64-sample segment, so any
    fixed linear map of them (the level-per-ERB and upper-skirt matrices) can be applied to the
    64 autocorrelation values instead of the 702 intensities.

    Returns ``(window (L,), bins (n,), A (L, n))`` in float64.
    """
    length = WINDOW_LENGTHS[-1]
    bins = band_plan(variant)[-1]
    w, scale = _window_and_scale(variant, len(WINDOW_LENGTHS) - 1)
    tau = np.arange(length)
    a = np.cos(2.0 * np.pi * np.outer(tau, bins) / N_FFT) * (scale**2)
    a[1:] *= 2.0
    return w, bins, a


def prune_components(intensity: Tensor, floor: float = 1000.0, rel: float = 1e-6) -> Tensor:
    """Boolean mask of the spectral components kept by the Cambridge/AMT code.

    Per ear and frame, a component is kept if its intensity exceeds ``max(I_max, floor) * rel``
    (at most 60 dB below the strongest component, and above -30 dB SPL).
    """
    mx = intensity.amax(dim=-1, keepdim=True).clamp_min(floor)
    return intensity > mx * rel


# ----------------------------------------------------------------------------------------------
# excitation patterns
# ----------------------------------------------------------------------------------------------
def _bin_hz() -> np.ndarray:
    return np.arange(1, N_BINS + 1) * BIN_HZ


def excitation_matrices(fc: np.ndarray, variant: str) -> dict[str, np.ndarray]:
    """Precomputed (level-independent) roex matrices for the excitation stage.

    Keys: ``level`` (matrix giving the input intensity per ERB; ``(960, 960)`` at the components
    for ``"moore2016"``, ``(960, C)`` at the channel centres for ``"gm2002"``), ``upper``
    ``(960, C)`` (upper-side weights, components at or above ``fc``), ``lower_h`` ``(960, C)``
    (``-p(fc) |g|`` for components below ``fc``, -80 elsewhere), ``n_below`` ``(C,)`` (number of
    bins below each ``fc``). All include the restriction ``g <= 4`` of the reference code.
    """
    f = _bin_hz()
    pc = roex_p(fc)
    g = (f[:, None] - fc[None, :]) / fc[None, :]  # (K, C)
    ok = g <= 4.0
    upper = np.where((f[:, None] >= fc[None, :]) & ok, _roex(pc[None, :] * np.abs(g)), 0.0)
    lower_h = np.where(f[:, None] < fc[None, :], -pc[None, :] * np.abs(g), -80.0)
    if variant == "moore2016":
        pk = roex_p(f)
        gk = (f[None, :] - f[:, None]) / f[:, None]  # (i, k): component i filter at f_k
        level = np.where(gk <= 4.0, _roex(pk[:, None] * np.abs(gk)), 0.0)
    elif variant == "component":
        pk = roex_p(f)
        gk = (f[:, None] - f[None, :]) / f[None, :]  # (i, k): filter at f_k, component i
        level = np.where(gk <= 4.0, _roex(pk[None, :] * np.abs(gk)), 0.0)
    else:
        level = np.where(ok, _roex(pc[None, :] * np.abs(g)), 0.0)
    n_below = (f[:, None] < fc[None, :]).sum(axis=0)
    # weights below 1e-30 are negligible and would be subnormal in float32 (slow matmuls)
    level = np.where(level < 1e-30, 0.0, level)
    upper = np.where(upper < 1e-30, 0.0, upper)
    return {"level": level, "upper": upper, "lower_h": lower_h, "n_below": n_below}


P1000 = float(roex_p(1000.0))
_SLOPE_BETA = 0.35 / P1000


def _lower_branch(
    intensity: Tensor, s: Tensor, lower_h: Tensor, n_below: np.ndarray, per_channel: bool
) -> Tensor:
    """Sum over components below each channel of ``I_k W(p_l |g|)`` with ``p_l |g| = s h``.

    ``s`` is ``(..., K)`` (per component, Moore2016) or ``(..., C)`` (per channel, GM2002).
    Channels are processed in groups; each group uses only the bins below its highest centre.
    """
    c_total = lower_h.shape[1]
    out = []
    # few components (sparse spectra): one group; many: groups of 16 channels, so that the
    # staircase of "bins below fc" is followed closely and the blocks stay cache-sized
    group = c_total if lower_h.shape[0] <= 256 else 16
    for c0 in range(0, c_total, group):
        c1 = min(c0 + group, c_total)
        kmax = int(n_below[c1 - 1])
        if kmax == 0:
            out.append(intensity.new_zeros(*intensity.shape[:-1], c1 - c0))
            continue
        h = lower_h[:kmax, c0:c1]
        # v = -u = -p_l |g|; exp(-80) is still a normal float32 (larger arguments would hit
        # the slow underflow path and contribute nothing)
        if per_channel:
            v = s[..., None, c0:c1] * h
        else:
            v = s[..., :kmax, None] * h
        v = v.clamp_(min=-80.0)
        e = torch.exp(v)
        w = torch.addcmul(e, v, e, value=-1.0)  # (1 + u) exp(-u)
        out.append((intensity[..., None, :kmax] @ w).squeeze(-2))
    return torch.cat(out, dim=-1)


def excitation_moore2016(
    intensity: Tensor, keep: Tensor, mats: dict[str, Tensor], n_below: np.ndarray
) -> tuple[Tensor, Tensor]:
    """Excitation pattern of the Cambridge 2016 code (per frame, per ear).

    1. input level per ERB at each kept component ``X_k = 10 log10(sum_i I_i W(p(f_i), g_ik))``
       (symmetric roex of the component's own frequency, ``g_ik <= 4``);
    2. ``E_c = sum_k I_k W(p, g_kc)`` with ``p = p(fc)`` for ``f_k >= fc`` and
       ``p_l(fc, X_k)`` below; ``E = max(E, 1e-10)``.

    Args:
        intensity: component intensities ``(..., F, 960)`` (re (20 µPa)²).
        keep: boolean mask of kept components, same shape.
        mats: tensors of :func:`excitation_matrices` (variant ``"moore2016"``), possibly restricted
            to a subset of bins (then ``intensity``/``keep`` hold the same subset).
        n_below: number of (subset) bins below each channel centre.

    Returns:
        ``(E, any_kept)``: excitation ``(..., F, C)`` (intensity units) and a ``(..., F)`` mask
        of frames with at least one kept component (the specific loudness is 0 elsewhere).
    """
    i_kept = torch.where(keep, intensity, torch.zeros_like(intensity))
    x_lin = (i_kept @ mats["level"]).clamp_min(1e-30)
    x_db = 10.0 * torch.log10(x_lin)
    s = 1.0 - _SLOPE_BETA * (x_db - 51.0)
    e = i_kept @ mats["upper"] + _lower_branch(i_kept, s, mats["lower_h"], n_below, False)
    return e.clamp_min(1e-10), keep.any(dim=-1)


def excitation_gm2002(
    intensity: Tensor, mats: dict[str, Tensor], n_below: np.ndarray
) -> tuple[Tensor, Tensor]:
    """Excitation pattern with the ANSI S3.4-2007 / Glasberg & Moore (2002) roex filters.

    The lower slope of the filter centred at ``fc`` is set by the input level per ERB at ``fc``,
    ``X_c = 10 log10(sum_k I_k W(p(fc), |g_kc|))`` (Glasberg & Moore 2002, Sec. 2.3;
    ANSI S3.4-2007, Sec. 3.5). Returns ``(E, X_c)``, both ``(..., F, C)``; ``E`` in intensity
    units re (20 µPa)², ``X_c`` in dB.
    """
    x_lin = (intensity @ mats["level"]).clamp_min(1e-30)
    x_db = 10.0 * torch.log10(x_lin)
    s = 1.0 - _SLOPE_BETA * (x_db - 51.0)
    e = intensity @ mats["upper"] + _lower_branch(intensity, s, mats["lower_h"], n_below, True)
    return e, x_db


class FastExcitation:
    """Excitation pattern for inference on the CPU (no gradient): same result as the torch path.

    Used by the models when no gradient is needed. Equal to :func:`excitation_moore2016` with
    the matrices of :func:`excitation_matrices` (any level variant) up to float rounding, but
    computed as

    * level per ERB at the components and upper skirt: one matrix product with the fixed
      ``[level | upper]`` matrix. Frames with few kept components (tones) use the rows/columns of
      the kept components only; otherwise the 702 bins of the 2-ms window (4–15 kHz) enter
      through the 64 autocorrelation values of its windowed segment (:func:`autocorr_basis`,
      float64), minus the components removed by the pruning rule, which cuts the dominant
      product by a factor of about three;
    * lower skirt (level dependent, one exponential per component/channel pair): the fused
      numba kernel :func:`lhotse_amt.kernels.loudness.lower_skirt`, which also computes the
      components' lower-slope factors from their levels per ERB;
    * :meth:`specific_loudness_frames`: the whole no-grad chain from the ear-filtered signal to
      the specific loudness, chunked over frames (temporaries stay in cache) with the floor of
      the excitation and the specific loudness in one kernel
      (:func:`lhotse_amt.kernels.loudness_fused.specific_loudness_tail`); the long analysis
      windows of the spectrum by the sliding DFT (:func:`sliding_plans`).

    No truncation of the roex weights beyond the reference's own (``u <= 80``, ``g <= 4``,
    weights < 1e-30 set to 0), so the results agree with the torch path to float rounding
    (float64: ~1e-13 relative; float32: ~1e-6).

    Args:
        fc: channel centre frequencies (Hz).
        level_variant: ``"moore2016"`` or ``"component"`` (see :func:`excitation_matrices`).
        band_variant: band plan of the spectrum (``"moore2016"`` or ``"gm2002"``).
        dtype: computation dtype.
    """

    def __init__(
        self, fc: np.ndarray, level_variant: str, band_variant: str, dtype: torch.dtype
    ) -> None:
        mats = excitation_matrices(fc, level_variant)
        wu = np.concatenate([mats["level"], mats["upper"]], axis=1)
        window, bins, a = autocorr_basis(band_variant)
        if bins[-1] != N_BINS or np.any(np.diff(bins) != 1):
            raise ValueError("the shortest window must cover a contiguous top band")
        self.h0 = int(bins[0] - 1)
        self.dtype = dtype
        self.n_channels = len(fc)
        self.wu = torch.tensor(wu, dtype=dtype)
        self.awu = torch.tensor(a @ wu[self.h0 :], dtype=torch.float64)
        self.window = torch.tensor(window, dtype=torch.float64)
        self.sliding = sliding_plans(band_variant)
        # weights of the high-band components for removing pruned ones (sparse updates read
        # one 1110-wide row per pruned component: in the computation dtype, so a float32
        # model moves half the bytes; the float64 autocorrelation route itself is accurate to
        # ~1e-13 of the band's energy, coarser than float32 weights on these tiny terms)
        self.wu_high_np = np.ascontiguousarray(
            wu[self.h0 :], dtype=np.float64 if dtype == torch.float64 else np.float32
        )
        self.fc = np.asarray(fc, dtype=np.float64)
        self.p = roex_p(self.fc)
        self.f = _bin_hz()
        self.n_below = mats["n_below"]

    def level_upper(
        self,
        rows: Tensor,
        ik: Tensor,
        autocorr: Tensor,
        col_kept: np.ndarray,
        col_pruned: np.ndarray,
    ) -> Tensor:
        """Level per ERB at the components and upper skirt, ``(N, 960 + C)`` (no chunking).

        Args:
            rows: intensities ``(N, 960)``; ``ik``: kept intensities (``rows`` where kept,
                else 0); ``autocorr``: ``(N, 64)`` of the shortest window (float64).
            col_kept: ``(960,)`` bool, component kept in any row; ``col_pruned``: ``(960,)``
                number of rows in which the component is non-zero but not kept.
        """
        h0 = self.h0
        cols = np.flatnonzero(col_kept)
        n_u = cols.size
        if n_u == 0:
            return rows.new_zeros(rows.shape[0], self.wu.shape[1])
        # cost per row in float32 matrix rows (measured, one thread): the union of kept
        # components (gathered, or all 960) vs the low band + the autocorrelation (64
        # float64 rows with a short inner dimension: ~320) + ~14 per pruned component of
        # the row (sparse float64 updates, see subtract_pruned)
        pruned_per_row = float(col_pruned[h0:].sum()) / max(rows.shape[0], 1)
        auto_cost = h0 + 320.0 + 14.0 * pruned_per_row
        # the products are fixed-order (kernels.matmul): the same bits for every thread
        # count, and no BLAS thread pool to stall on a busy machine
        from lhotse_amt.kernels.loudness_fused import subtract_pruned
        from lhotse_amt.kernels.matmul import matmul

        ik_np = ik.numpy()
        wu = self.wu.numpy()
        if n_u <= auto_cost:
            if n_u == N_BINS:
                return torch.from_numpy(matmul(ik_np, wu))
            return torch.from_numpy(matmul(ik_np[:, cols], wu[cols]))
        acc = torch.from_numpy(matmul(ik_np[:, :h0], wu[:h0]))
        hi = torch.from_numpy(matmul(autocorr.to(torch.float64).numpy(), self.awu.numpy()))

        # minus the not-kept components the autocorrelation includes, and acc += hi, in one
        # pass (a row without pruned components costs a scan of compares)
        subtract_pruned(
            hi.numpy(), rows.numpy(), ik.numpy(), h0, self.wu_high_np, add_to=acc.numpy()
        )
        return acc

    def _kept(self, rows: Tensor, keep_rule: tuple[str, float]) -> tuple:
        from lhotse_amt.kernels.loudness_fused import kept_components

        return kept_components(rows.numpy(), keep_rule)

    def __call__(self, inten: Tensor, keep: Tensor, autocorr: Tensor, chunk: int = 256) -> Tensor:
        """Excitation ``(..., F, C)`` (not floored) from intensities and kept mask
        ``(..., F, 960)`` and the shortest window's autocorrelation ``(..., F, 64)``."""
        lead = inten.shape[:-1]
        rows = inten.reshape(-1, N_BINS).to(self.dtype)
        kp = keep.reshape(-1, N_BINS)
        rr = autocorr.reshape(-1, autocorr.shape[-1])
        out = rows.new_empty(rows.shape[0], self.n_channels)
        for r0 in range(0, rows.shape[0], chunk):
            r1 = min(r0 + chunk, rows.shape[0])
            rc, kc = rows[r0:r1], kp[r0:r1]
            ik = torch.where(kc, rc, torch.zeros_like(rc))
            col_kept = kc.any(0).numpy()
            col_pruned = ((~kc) & (rc != 0)).sum(0).numpy()
            y = self.level_upper(rc, ik, rr[r0:r1], col_kept, col_pruned)
            low = self._lower(ik.numpy(), y)
            out[r0:r1] = y[:, N_BINS:] + torch.from_numpy(low)
        return out.reshape(*lead, self.n_channels)

    def _lower(self, ik: np.ndarray, y: Tensor) -> np.ndarray:
        # lower skirt; the kernel computes each kept component's lower-slope factor
        # s = p_l / p = 1 - 0.35 / p(1 kHz) (X - 51) from its level per ERB
        # X = 10 log10(max(., 1e-30)) (the first 960 columns of y)
        from lhotse_amt.kernels.loudness import lower_skirt_numpy

        level = y.numpy()[:, :N_BINS]
        slope = (1.0 + 51.0 * _SLOPE_BETA, -10.0 * _SLOPE_BETA)
        return lower_skirt_numpy(ik, level, self.p, self.fc, self.f, self.n_below, slope)

    def specific_loudness_frames(
        self,
        z: Tensor,
        t0: int,
        j_first: int,
        n_frames: int,
        bases: list[tuple[int, np.ndarray, Tensor]],
        keep_rule: tuple[str, float],
        sl: dict[str, np.ndarray],
        c: float,
        high_level: str,
        chunk: int = 128,
        excitation_db: float | None = None,
    ) -> tuple[Tensor, Tensor, Tensor]:
        """Spectrum, excitation and specific loudness, chunked over frames (no gradient).

        Frames are processed in chunks of ``chunk`` so that every temporary stays in cache:
        :func:`multires_intensity` -> kept components (``keep_rule``: ``("prune", floor)`` =
        :func:`prune_components`, ``("floor", x)`` = intensity above ``x``) ->
        :meth:`level_upper` -> lower skirt (:func:`lhotse_amt.kernels.loudness.
        lower_skirt_numpy`) -> ``E = max(E, 1e-10)`` and ``N'``
        (:func:`lhotse_amt.kernels.loudness_fused.specific_loudness_tail`, same branches as
        :func:`specific_loudness`).

        Args:
            z, t0, j_first, n_frames, bases: as for :func:`multires_intensity`; ``z (..., M)``.
            sl: numpy per-channel ``g``, ``a``, ``alpha``, ``e_thrq`` and ``mask`` (0/1).
            c, high_level: as for :func:`specific_loudness`.
            excitation_db: if given, the excitation is returned as a level ``10 log10(E)``
                (dB), with this value in frames without kept components.

        Returns:
            ``(N', E, any_kept)``: ``(..., F, C)`` specific loudness (sone/Cam, 0 in frames
            without kept components and in masked channels), ``(..., F, C)`` excitation
            (intensity units, floored at 1e-10; or dB, see ``excitation_db``) and
            ``(..., F)`` bool.
        """
        from lhotse_amt.kernels.loudness_fused import specific_loudness_tail

        lead = z.shape[:-1]
        n_lead = int(np.prod(lead)) if lead else 1
        nsp = z.new_empty(n_lead, n_frames, self.n_channels, dtype=self.dtype)
        exc = torch.empty_like(nsp)
        anyk = torch.empty(n_lead, n_frames, dtype=torch.bool)
        zz = z.reshape(n_lead, z.shape[-1])
        for f0 in range(0, n_frames, chunk):
            nf = min(chunk, n_frames - f0)
            inten, rr = multires_intensity(
                zz, t0, j_first + f0, nf, bases, return_autocorr=self.window, sliding=self.sliding
            )
            rows = inten.reshape(-1, N_BINS).to(self.dtype)
            ik_np, ak_np, col_kept, col_pruned = self._kept(rows, keep_rule)
            ik, ak = torch.from_numpy(ik_np), torch.from_numpy(ak_np)
            y = self.level_upper(rows, ik, rr.reshape(-1, rr.shape[-1]), col_kept, col_pruned)
            low = self._lower(ik_np, y)
            # copies by numpy on this thread (each torch copy of this size would open a
            # parallel region, costly on a busy machine; lhotse_amt._serial)
            upper = np.ascontiguousarray(y.numpy()[:, N_BINS:])
            if n_lead == 1:  # the chunk's rows are contiguous rows of the outputs
                e_np, n_np = exc[0, f0 : f0 + nf].numpy(), nsp[0, f0 : f0 + nf].numpy()
            else:
                e_np, n_np = np.empty_like(upper), np.empty_like(upper)
            specific_loudness_tail(
                upper, low, ak.numpy(), sl, c, high_level, e_np, n_np, excitation_db
            )
            if n_lead > 1:
                exc.numpy()[:, f0 : f0 + nf] = e_np.reshape(n_lead, nf, -1)
                nsp.numpy()[:, f0 : f0 + nf] = n_np.reshape(n_lead, nf, -1)
            anyk.numpy()[:, f0 : f0 + nf] = ak_np.reshape(n_lead, nf)
        shape = (*lead, n_frames)
        return (
            nsp.reshape(*shape, self.n_channels),
            exc.reshape(*shape, self.n_channels),
            anyk.reshape(shape),
        )


def fast_path_ok(x: Tensor, module: torch.nn.Module) -> bool:
    """True if the no-grad CPU kernels may be used: CPU tensors and no gradient required."""
    return x.device.type == "cpu" and not grad_recorded(x, *module.parameters())


# ----------------------------------------------------------------------------------------------
# specific loudness
# ----------------------------------------------------------------------------------------------
def _pchip(x: np.ndarray, y: np.ndarray, xi: np.ndarray, extrapolate: bool) -> np.ndarray:
    from scipy.interpolate import PchipInterpolator

    out = PchipInterpolator(x, y, extrapolate=True)(xi)
    if not extrapolate:
        out = np.where((xi < x[0]) | (xi > x[-1]), np.nan, out)
    return out


def specific_loudness_params(
    fc: np.ndarray, a_outside: str = "extrapolate"
) -> dict[str, np.ndarray]:
    """Per-channel parameters of the specific-loudness function (MGB 1997 / ANSI S3.4-2007).

    ``E_thrq`` (excitation at threshold, linear): table interpolated linearly in frequency below
    500 Hz and held flat below 50 Hz, 3.63 dB from 500 Hz up; ``G = E_thrq(500) / E_thrq(f)``;
    ``alpha(G)`` linear in G (dB), flat outside the table; ``A(G)`` piecewise-cubic Hermite in G.
    ``a_outside``: ``"extrapolate"`` (MATLAB ``interp1(..., 'pchip')``) or ``"nan"`` (GNU Octave,
    as in the AMT reference run: the channel gets A = NaN and its specific loudness is set to 0).
    """
    t = loudness_tables()
    fc = np.asarray(fc, dtype=np.float64)
    thr = np.interp(fc, t["threshold_freq_hz"], t["threshold_excitation_db"])
    thr = np.where(fc < 500.0, thr, 3.63)
    g_db = 3.63 - thr
    alpha = np.interp(g_db, t["g_db_for_alpha"], t["alpha_for_g"])
    a = _pchip(t["g_db_for_a"], t["a_for_g"], g_db, a_outside == "extrapolate")
    return {"e_thrq": 10.0 ** (thr / 10.0), "g": 10.0 ** (g_db / 10.0), "alpha": alpha, "a": a}


def specific_loudness(
    e: Tensor,
    params: dict[str, Tensor],
    c: float,
    high_level: str = "moore2016",
) -> Tensor:
    """Specific loudness ``N'`` (sone/Cam) from excitation ``E`` (intensity units), per channel.

    Moore, Glasberg & Baer (1997), Eqs. 2–4; ANSI S3.4-2007, Eqs. 17–19:

    * ``E_thrq < E <= 1e10``: ``N' = C [(G E + A)^alpha - A^alpha]``;
    * ``E <= E_thrq``: ``N' = C (2E / (E + E_thrq))^1.5 [(G E + A)^alpha - A^alpha]``;
    * ``E > 1e10``: ``C (E / 1.0707)^0.2`` (``high_level="moore2016"``, Cambridge 2016 code) or
      ``C (E / 1.04e6)^0.5`` (``"mgb1997"``, as in Glasberg & Moore 2002).

    Args:
        e: ``(..., C)``; params: tensors ``e_thrq``, ``g``, ``alpha``, ``a`` of shape ``(C,)``.
    """
    g, a, alpha, thr = params["g"], params["a"], params["alpha"], params["e_thrq"]
    core = (g * e + a) ** alpha - a**alpha
    n1 = c * core
    n2 = c * (2.0 * e / (e + thr)) ** 1.5 * core
    big = e > 1e10
    e_hi = torch.where(big, e, torch.full_like(e, 1e10))
    if high_level == "moore2016":
        n3 = c * (e_hi / 1.0707) ** 0.2
    elif high_level == "mgb1997":
        n3 = c * (e_hi / 1.04e6) ** 0.5
    else:
        raise ValueError(f"unknown high_level {high_level!r}")
    return torch.where(e > thr, torch.where(big, n3, n1), n2)


# ----------------------------------------------------------------------------------------------
# AGC temporal integration
# ----------------------------------------------------------------------------------------------
def _check_agc_args(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int,
    state: Tensor | None = None,
) -> None:
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    check_int("dim", dim, min=-x.dim(), max=x.dim() - 1)
    if state is not None and not (torch.is_tensor(state) and state.is_floating_point()):
        raise TypeError(f"state must be a floating-point tensor or None, got {state!r}")
    inner = x.shape[: dim % x.dim()] + x.shape[dim % x.dim() + 1 :]
    for name, v in (("attack", attack), ("release", release), ("state", state)):
        if not torch.is_tensor(v):
            if v is not None:
                check_number(name, v, min=0.0, max=1.0, min_inclusive=False)
            continue
        if not v.is_floating_point():
            raise TypeError(f"{name} must be a number or a floating-point tensor, got {v.dtype}")
        try:
            ok = torch.broadcast_shapes(v.shape, inner) == inner
        except RuntimeError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} of shape {tuple(v.shape)} must broadcast against the input's non-time "
                f"axes {tuple(inner)} (x {tuple(x.shape)}, dim={dim})"
            )
        if name != "state":
            require(((v > 0.0) & (v <= 1.0)).all(), f"{name} must lie in (0, 1] (every element)")


def agc_reference(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int = -1,
    state: Tensor | None = None,
) -> Tensor:
    """Attack/release one-pole smoother, plain-torch reference (differentiable).

    ``S[j] = S[j-1] + a (N[j] - S[j-1])`` with ``a = attack`` if ``N[j] > S[j-1]`` else
    ``release``, ``S[-1] = 0`` (Glasberg & Moore 2002, Sec. 2.6; Moore et al. 2016, Eqs. 4–5)
    or ``state``. ``attack``, ``release`` (in (0, 1], per frame) and ``state`` may be tensors
    broadcasting against the shape of ``x`` without ``dim``. Loops over time (``dim``); all
    other axes are processed in parallel. Computed in the dtype of ``x``.
    """
    _check_agc_args(x, attack, release, dim, state)
    xt = x.movedim(dim, 0)
    zero = torch.zeros_like(xt[0])
    s = zero if state is None else zero + state.to(x.dtype)
    att = attack.to(x.dtype) if torch.is_tensor(attack) else torch.full_like(zero, attack)
    rel = release.to(x.dtype) if torch.is_tensor(release) else torch.full_like(zero, release)
    out = []
    for v in xt:
        a = torch.where(v > s, att, rel)
        s = s + a * (v - s)
        out.append(s)
    return torch.stack(out, 0).movedim(0, dim)


#: ``backend`` values of :func:`agc`
AGC_BACKENDS = ("auto", "operator", "torch", "reference", "numba", "triton")


def agc(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int = -1,
    backend: str = "auto",
    state: Tensor | None = None,
) -> Tensor:
    """Attack/release AGC (see :func:`agc_reference`) of ``x`` along ``dim``.

    ``backend="auto"``: eager CPU calls without gradient (number coefficients, no
    ``state``, not traced by ``torch.compile``/``torch.export``) run the numba kernel of
    :mod:`lhotse_amt.kernels.agc`; everything else runs the registered operator
    ``lhotse_amt::agc`` (:func:`lhotse_amt.ops.loudness.agc`: compiled CPU kernel, compiled
    backward w.r.t. ``x``, ``attack``, ``release`` and ``state``; same values as the numba
    kernel), except CUDA tensors without a CUDA kernel of the operator, which keep the
    Triton no-grad kernel (no gradient) or the reference. ``"operator"`` forces the
    operator, ``"torch"``/``"reference"`` the plain-torch reference, ``"numba"`` and
    ``"triton"`` the no-grad kernels (number coefficients, no ``state``, no gradient).
    """
    _check_agc_args(x, attack, release, dim, state)
    check_choice("backend", backend, AGC_BACKENDS)
    from lhotse_amt.kernels import agc as kagc

    plain = state is None and not torch.is_tensor(attack) and not torch.is_tensor(release)
    if backend == "auto":
        eager_nograd = not torch.compiler.is_compiling() and not grad_recorded(
            x,
            *(v for v in (attack, release, state) if torch.is_tensor(v)),
        )
        if x.device.type == "cpu":
            backend = "numba" if plain and eager_nograd else "operator"
        elif _agc_device_kernel():
            backend = "operator"
        elif plain and eager_nograd and x.device.type == "cuda" and kagc.HAS_TRITON:
            backend = "triton"
        else:
            backend = "torch"
    if backend in ("torch", "reference"):
        return agc_reference(x, attack, release, dim, state)
    if backend == "operator":
        from lhotse_amt.ops.loudness import agc as agc_op

        return agc_op(x, attack, release, dim, state)
    if not plain:
        raise ValueError(
            f"backend={backend!r} takes number attack/release and no state; use "
            "backend='operator' or 'torch' for tensor coefficients or a state"
        )
    if backend == "numba" and x.dim() >= 2 and dim % x.dim() == x.dim() - 2:
        # along frames of (..., F, C): vectorised over channels, no transposes
        y = kagc.agc_numba_cols(x.reshape(-1, *x.shape[-2:]), attack, release)
        return y.reshape(x.shape)
    xt = x.movedim(dim, -1)
    shape = xt.shape
    rows = xt.reshape(-1, shape[-1])
    if backend == "numba":
        y = kagc.agc_numba(rows, attack, release)
    else:
        y = kagc.agc_triton(rows, attack, release)
    return y.reshape(shape).movedim(-1, dim)


@functools.lru_cache(maxsize=1)
def _agc_device_kernel() -> bool:
    # whether the operator lhotse_amt::agc has its CUDA (Triton) kernels
    try:
        from lhotse_amt.kernels import triton_autodiff
    except Exception:  # triton missing or broken
        return False
    return hasattr(triton_autodiff, "agc_forward") and hasattr(triton_autodiff, "agc_backward")


# ----------------------------------------------------------------------------------------------
# binaural inhibition (Moore et al. 2016)
# ----------------------------------------------------------------------------------------------
def binaural_smoothing_matrix(
    n_channels: int = 150, sigma: float = 0.08, step: float = 0.25
) -> np.ndarray:
    """Matrix ``M`` with ``S @ M`` = the cross-channel Gaussian smoothing of Moore et al. (2016).

    Weights ``exp(-(sigma g)^2)``, ``g = -18 … 18`` Cam in ``step`` steps, normalised to unit sum,
    applied as the central part of a full convolution over the ``n_channels`` channels.
    """
    g = np.arange(-18.0, 18.0 + step / 2, step)
    w = np.exp(-((sigma * g) ** 2))
    w = w / w.sum()
    half = len(g) // 2
    m = np.zeros((n_channels, n_channels))
    for i in range(n_channels):
        for o in range(n_channels):
            d = o - i + half
            if 0 <= d < len(w):
                m[i, o] = w[d]
    return m


def _log_sech(x: Tensor) -> Tensor:
    # log sech(x) for x >= 0, stable for large x
    return math.log(2.0) - x - torch.log1p(torch.exp(-2.0 * x))


def binaural_inhibition(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: float = 1.5978
) -> tuple[Tensor, Tensor]:
    """Binaural inhibition of Moore et al. (2016), Eqs. 6–7, as in the Cambridge/AMT code.

    ``Ŝ = S @ smooth + 1e-13``; ``I_L = 2 / (1 + sech(Ŝ_R / Ŝ_L)^p)`` (and symmetrically);
    returns the inhibited specific loudness ``(S_L / I_L, S_R / I_R)``, shapes ``(..., C)``.
    Without gradient, equal inputs (diotic sound) skip the smoothing: the ratio is exactly 1;
    other CPU inputs take the elementwise part in one compiled pass
    (:func:`lhotse_amt.kernels.loudness_fused.binaural_inhibition_apply`, same values to ~2 ulp).
    """
    grad = torch.is_grad_enabled() and (
        s_left.requires_grad or s_right.requires_grad or torch.is_tensor(p) and p.requires_grad
    )
    if not grad and torch.equal(s_left, s_right):
        # equal ears (diotic): Ŝ_R / Ŝ_L = 1 exactly, so I_L = I_R = 2 / (1 + sech(1)^p)
        one = torch.ones((), dtype=s_left.dtype, device=s_left.device)
        inh = 2.0 / (1.0 + torch.exp(p * _log_sech(one)))
        return s_left / inh, s_right / inh
    if not grad and s_left.device.type == "cpu":
        from lhotse_amt.kernels.loudness_fused import binaural_inhibition_apply
        from lhotse_amt.kernels.matmul import matmul

        p = float(p)  # a tensor p without gradient (the models' buffer) is a constant here
        lead = s_left.shape[:-1]
        c = s_left.shape[-1]
        # fixed-order products (the same bits for every thread count) on this thread
        s2 = [t.detach().reshape(-1, c).numpy() for t in (s_left, s_right)]
        sm = smooth.detach().to(s_left.dtype).numpy()
        sl_np, sr_np = (matmul(v, sm) + 1e-13 for v in s2)
        o_l, o_r = binaural_inhibition_apply(*s2, sl_np, sr_np, p)
        return torch.from_numpy(o_l).reshape(*lead, c), torch.from_numpy(o_r).reshape(*lead, c)
    sl = s_left @ smooth + 1e-13
    sr = s_right @ smooth + 1e-13
    inh_l = 2.0 / (1.0 + torch.exp(p * _log_sech(sr / sl)))
    inh_r = 2.0 / (1.0 + torch.exp(p * _log_sech(sl / sr)))
    return s_left / inh_l, s_right / inh_r


# ----------------------------------------------------------------------------------------------
# input handling
# ----------------------------------------------------------------------------------------------
def check_pressure_signal(x: Tensor, what: str, min_samples: int) -> None:
    """Raise ``ValueError`` for non-finite or too-short signals (time on the last axis)."""
    if not torch.is_floating_point(x):
        raise ValueError(f"{what}: expected a floating-point tensor (pascals), got {x.dtype}")
    if x.shape[-1] < min_samples:
        raise ValueError(
            f"{what}: need at least {min_samples} samples on the last (time) axis, "
            f"got {x.shape[-1]}"
        )
    if x.numel() == 0:
        raise ValueError(f"{what}: empty batch (shape {tuple(x.shape)})")
    if torch.compiler.is_compiling():
        require(torch.isfinite(x).all(), f"{what}: input contains NaN or inf")
    elif not all_finite(x):  # numpy on this thread for CPU tensors (no parallel region)
        raise ValueError(f"{what}: input contains NaN or inf")


def resample_to_32k(x: Tensor, fs: float) -> Tensor:
    """Resample ``x (..., T)`` from ``fs`` to 32 kHz with :func:`scipy.signal.resample_poly`.

    Polyphase FIR resampling (Kaiser window, scipy defaults). Not differentiable: the result is
    a new tensor without gradient history. ``fs`` must be a whole number of Hz.
    """
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    fs = check_rate("fs", fs, integral=True)
    from fractions import Fraction

    from scipy.signal import resample_poly

    if fs == FS:
        return x
    fr = Fraction(FS, 1) / Fraction(fs).limit_denominator(10_000)
    y = resample_poly(x.detach().cpu().double().numpy(), fr.numerator, fr.denominator, axis=-1)
    return torch.from_numpy(np.ascontiguousarray(y)).to(device=x.device, dtype=x.dtype)

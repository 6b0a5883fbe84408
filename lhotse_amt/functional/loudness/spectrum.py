"""Outer/middle-ear filtering and the six-window spectrum of the loudness models (plain torch).

Glasberg & Moore (2002), Sec. 2.1–2.2; Moore et al. (2016), Sec. II (Cambridge/AMT code).
Frame ``j`` is centred on input sample ``32 j``; component intensities are re (20 µPa)² on the
bins 1 … 960 of a 2048-point grid (see :mod:`lhotse_amt.functional.loudness.scales`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..._validation import (
    FLOAT_DTYPES,
    check_choice,
    check_int,
    check_number,
    check_signal,
    check_tensor,
)
from .scales import BIN_HZ, HOP, N_BINS, N_FFT, P0

__all__ = [
    "VARIANTS",
    "WINDOW_LENGTHS",
    "fir_filter_full",
    "band_plan",
    "window_and_scale",
    "dft_bases",
    "frame_span",
    "multires_intensity",
    "autocorr_basis",
    "prune_components",
]

#: analysis window lengths (samples at 32 kHz): 64, 32, 16, 8, 4, 2 ms
WINDOW_LENGTHS = (2048, 1024, 512, 256, 128, 64)
#: band plans (``variant`` of :func:`band_plan`, :func:`dft_bases`, ...)
VARIANTS = ("moore2016", "gm2002")


def fir_filter_full(x: Tensor, h: Tensor) -> Tensor:
    """Full linear convolution ``y = x * h`` along the last axis by FFT (``torch.fft``).

    Args:
        x: signal ``(..., N)``.
        h: FIR taps ``(M,)``.

    Returns:
        ``(..., N + M - 1)``. For the symmetric 4097-tap ear filters, output index ``m``
        corresponds to input time ``m - 2048`` (zero-phase filtering).
    """
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x", dtypes=FLOAT_DTYPES)
    check_signal(h, min_samples=1, min_dim=1, max_dim=1, name="FIR taps h")
    n = x.shape[-1] + h.shape[-1] - 1
    nfft = 1 << (n - 1).bit_length()
    y = torch.fft.irfft(torch.fft.rfft(x, nfft) * torch.fft.rfft(h.to(x.dtype), nfft), nfft)
    return y[..., :n]


def band_plan(variant: str) -> list[np.ndarray]:
    """DFT bins (of the 2048-point grid) taken from each of the six windows.

    ``"moore2016"``: the Cambridge/AMT code's 1-based inclusive index ranges for the limits
    20, 80, 500, 1250, 2540, 4050, 15000 Hz, a later window overwriting a shared boundary bin
    (bins 1–4, 5–31, 32–79, 80–161, 162–258, 259–960).
    ``"gm2002"``: half-open frequency bands [10, 80), [80, 500), [500, 1250), [1250, 2540),
    [2540, 4050), [4050, 15001) Hz (Glasberg & Moore 2002, Sec. 2.2).
    """
    check_choice("variant", variant, VARIANTS)
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
    raise AssertionError(variant)  # pragma: no cover (checked above)


def window_and_scale(variant: str, i: int) -> tuple[np.ndarray, float]:
    """Hann window of the ``i``-th analysis window and the factor giving intensities re
    (20 µPa)² (see :func:`dft_bases`); ``i`` in 0 … 5."""
    check_choice("variant", variant, VARIANTS)
    length = WINDOW_LENGTHS[check_int("i", i, min=0, max=len(WINDOW_LENGTHS) - 1)]
    if variant == "moore2016":
        return np.hanning(length), (2.0 / N_FFT) * math.sqrt(10.0**0.332 * 2.0**i / 2.0) / P0
    w = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)
    return w, math.sqrt(2.0 / (N_FFT * np.sum(w**2))) / P0


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
        w, scale = window_and_scale(variant, i)
        ph = 2.0 * np.pi * np.outer(n, bins) / N_FFT
        basis = np.concatenate([w[:, None] * np.cos(ph), w[:, None] * np.sin(ph)], axis=1)
        out.append((length, bins, basis * scale))
    return out


def frame_span(z: Tensor, t0: int, j_first: int, n_frames: int) -> tuple[Tensor, int]:
    """The samples that frames ``j_first … j_first + n_frames - 1`` read, zero-padded.

    Args:
        z: signal ``(..., M)``; ``z[..., m]`` is the pressure at input time ``m + t0``.

    Returns:
        ``(zp, base)``: ``zp (..., M')`` holds input times ``[32 j_first - 1024, 32 (j_first +
        n_frames - 1) + 1024)`` and ``base`` is the index in ``zp`` of the first of them.
    """
    check_signal(z, 0, None, name="z", allow_empty=True, finite=False)
    t0, j_first = check_int("t0", t0), check_int("j_first", j_first)
    n_frames = check_int("n_frames", n_frames, min=1)
    t_lo = HOP * j_first - 1024  # first input time needed
    t_hi = HOP * (j_first + n_frames - 1) + 1024  # one past the last input time needed
    cut_l = max(0, t_lo - t0)
    if cut_l or t_hi - t0 < z.shape[-1]:
        z = z[..., cut_l : max(cut_l, t_hi - t0)]
        t0 += cut_l
    pad_l = max(0, t0 - t_lo)
    pad_r = max(0, t_hi - (t0 + z.shape[-1]))
    zp = torch.nn.functional.pad(z, (pad_l, pad_r))
    return zp, t_lo - (t0 - pad_l)


def multires_intensity(
    z: Tensor,
    t0: int,
    j_first: int,
    n_frames: int,
    bases: list[tuple[int, np.ndarray | range, Tensor]],
    return_autocorr: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Six-window spectrum with a 1-ms hop, batched over frames (no loop over frames).

    Args:
        z: ear-filtered signal ``(..., M)``; ``z[..., m]`` is the pressure at input time ``m + t0``.
        t0: input time (samples) of ``z[..., 0]``.
        j_first: index of the first frame; frame ``j`` is centred on input sample ``32 j``.
        n_frames: number of frames ``F``.
        bases: output of :func:`dft_bases` with the bases as tensors (the bins may be given
            as ``range`` objects).
        return_autocorr: window ``(64,)`` of the shortest analysis window (float64, see
            :func:`autocorr_basis`); if given, also return the autocorrelation ``(..., F, 64)``
            (float64) of its windowed segments.

    Returns:
        Component intensities re (20 µPa)² on bins 1 … 960, shape ``(..., F, 960)``
        (and the autocorrelation, see ``return_autocorr``).
    """
    check_signal(z, 0, None, name="z", allow_empty=True, finite=False, dtypes=FLOAT_DTYPES)
    for i, (length, bins, basis) in enumerate(bases):
        check_tensor(f"bases[{i}] basis", basis, trailing=(length, 2 * len(bins)), max_dim=2)
        if basis.dtype != z.dtype:
            raise TypeError(f"bases[{i}] basis has dtype {basis.dtype}, z has {z.dtype}")
    n = WINDOW_LENGTHS[-1]
    check_tensor("return_autocorr", return_autocorr, trailing=(n,), max_dim=1, allow_none=True)
    lead = z.shape[:-1]
    zp, base = frame_span(z, t0, j_first, n_frames)
    parts = []
    covered = 0
    for length, bins, basis in bases:
        nb = len(bins)
        lo = int(bins[0]) - 1 if nb else 0
        contiguous = nb and int(bins[-1]) - int(bins[0]) + 1 == nb and lo == covered
        if not contiguous:
            break
        start = base + 1024 - length // 2
        seg = zp[..., start : start + HOP * (n_frames - 1) + length].unfold(-1, length, HOP)
        # one 2-D product over all frames (a batched product of the strided view is slower)
        y = (seg.reshape(-1, length) @ basis).reshape(*lead, n_frames, -1)
        re, im = y[..., :nb], y[..., nb:]
        parts.append(torch.addcmul(re * re, im, im))
        covered += nb
    if covered == N_BINS and len(parts) == len(bases):
        out = torch.cat(parts, dim=-1)  # bands tile bins 1 … 960 in order
    else:  # general band plans: scatter each band into its bins
        out = z.new_zeros(*lead, n_frames, N_BINS)
        for length, bins, basis in bases:
            if not len(bins):
                continue
            start = base + 1024 - length // 2
            seg = zp[..., start : start + HOP * (n_frames - 1) + length].unfold(-1, length, HOP)
            y = (seg.reshape(-1, length) @ basis).reshape(*lead, n_frames, -1)
            re, im = y[..., : len(bins)], y[..., len(bins) :]
            out[..., np.asarray(bins) - 1] = torch.addcmul(re * re, im, im)
    if return_autocorr is None:
        return out
    length = WINDOW_LENGTHS[-1]
    start = base + 1024 - length // 2
    seg = zp[..., start : start + HOP * (n_frames - 1) + length].unfold(-1, length, HOP)
    y = seg.to(torch.float64) * return_autocorr.to(torch.float64)
    spec = torch.fft.rfft(y, 2 * length)
    r = torch.fft.irfft(spec.real.square() + spec.imag.square(), 2 * length)[..., :length]
    return out, r


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
    w, scale = window_and_scale(variant, len(WINDOW_LENGTHS) - 1)
    tau = np.arange(length)
    a = np.cos(2.0 * np.pi * np.outer(tau, bins) / N_FFT) * (scale**2)
    a[1:] *= 2.0
    return w, bins, a


def prune_components(intensity: Tensor, floor: float = 1000.0, rel: float = 1e-6) -> Tensor:
    """Boolean mask of the spectral components kept by the Cambridge/AMT code.

    Per ear and frame, a component is kept if its intensity exceeds ``max(I_max, floor) * rel``
    (at most 60 dB below the strongest component, and above -30 dB SPL).
    ``intensity (..., K)``, ``K >= 1``; ``floor >= 0``, ``rel > 0``.
    """
    check_tensor("intensity", intensity, min_dim=1, shape="(..., K)")
    if intensity.shape[-1] == 0:
        raise ValueError(f"intensity has no components (shape {tuple(intensity.shape)})")
    check_number("floor", floor, min=0.0)
    check_number("rel", rel, min=0.0, min_inclusive=False)
    mx = intensity.amax(dim=-1, keepdim=True).clamp_min(floor)
    return intensity > mx * rel

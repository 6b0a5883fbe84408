"""Outer/middle-ear FIR filters of the Osses et al. (2021) model (AMT ``osses2021`` front end).

Two 513-tap FIR filters (order 512) designed by frequency sampling from published data:

* **headphone + outer ear** (:func:`headphone_fir`): gain of Sennheiser HD 250 Linear
  headphones measured at the eardrum, Pralong & Carlile (1996), Fig. 1(e);
* **middle ear** (:func:`middle_ear_fir`): stapes peak velocity per pascal derived from
  Goode et al. (1994), Fig. 1 (peak-to-peak displacement ``d`` in um at 104 dB SPL;
  velocity ``v = sqrt(2) 2 pi f d 1e-6 10^(-104/20)`` at 0 dB SPL = 20 uPa) with the
  extrapolated points of Lopez-Poveda & Meddis (2001), Fig. 2b; divided by 20e-6 Pa.

The tables live in ``lhotse_amt/data/ear_tables.json`` (sources named there).

**Design** (:func:`fir2_design`): the response points ``(f, m)`` are completed with
``m = 0`` at 0 Hz; points at or above ``fs/2`` are dropped. Above the last point the
response is extended to ``fs/2`` in steps of at most 1 kHz, the value dropping by the
factor ``1 + step / 10 kHz`` per step (headphone filter: ``m = 0`` at ``fs/2``). The
piecewise-linear response is sampled on ``grid_n + 1 = 513`` equally spaced frequencies
``0 ... fs/2``, transformed by a ``2 grid_n``-point inverse DFT, centred, cut to
``numtaps`` and multiplied by a Hamming window (the ``fir2`` frequency-sampling method).
This reproduces the AMT 1.4 filters to ~1e-15 relative
(``tests/models/test_osses2021_reference.py``).

**Minimum phase** (:func:`minimum_phase_rceps`): real cepstrum of the ``numtaps``-point DFT,
folded onto the causal part, exponentiated (same length; the ``numtaps``-point DFT
magnitude is kept exactly). AMT 1.4 uses a linear-phase headphone filter and a
minimum-phase middle-ear filter; the middle-ear filter is normalised to a 0-dB maximum
(``max 20 log10 |H|`` over 8192 frequencies ``k pi / 8192``).

**Delay compensation** (:func:`fir_filter_compensated`): AMT appends ``delay = 257`` zeros,
filters and drops the first ``delay`` output samples (same length, advanced by ``delay``
samples: non-causal). ``"trim"`` (torch_amt convention) drops ``(numtaps - 1) / 2 = 256``
samples without padding (output shorter). :func:`fir_filter` is the causal, streamable
filter with explicit state.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources

import numpy as np
import torch
from torch import Tensor

from .._dispatch import no_grad_kernels
from .._validation import check_bool, check_choice, check_int, check_rate, check_signal

__all__ = [
    "fir_block_length",
    "fir_spectrum",
    "load_ear_tables",
    "headphone_response_points",
    "middle_ear_response_points",
    "fir2_design",
    "minimum_phase_rceps",
    "headphone_fir",
    "middle_ear_fir",
    "fir_filter",
    "fir_filter_compensated",
    "COMPENSATIONS",
]

#: delay-compensation modes: causal, AMT 1.4 (257-sample advance, same length), torch_amt trim
COMPENSATIONS = ("none", "amt", "trim")
_P0 = 20e-6  # reference pressure (Pa): 0 dB SPL


@lru_cache(maxsize=1)
def load_ear_tables() -> dict:
    """The published data tables (``lhotse_amt/data/ear_tables.json``) as numpy arrays."""
    text = resources.files("lhotse_amt").joinpath("data/ear_tables.json").read_text()
    raw = json.loads(text)
    out: dict = {}
    for name, tab in raw.items():
        out[name] = {
            k: (np.asarray(v, dtype=np.float64) if isinstance(v, list) else v)
            for k, v in tab.items()
        }
    return out


def _check_fs(fs: float) -> None:
    check_rate("fs", fs)


def headphone_response_points(fs: float) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints ``(f Hz, linear gain)`` of the headphone + outer-ear response,
    ``0 ... fs/2`` (Pralong & Carlile 1996 Fig. 1e; 0 at DC and at ``fs/2``)."""
    _check_fs(fs)
    t = load_ear_tables()["pralong1996"]
    keep = t["frequency_hz"] < fs / 2
    f = np.r_[0.0, t["frequency_hz"][keep], fs / 2]
    m = np.r_[0.0, t["gain"][keep], 0.0]
    return f, m


def stapes_velocity_table() -> tuple[np.ndarray, np.ndarray]:
    """Stapes peak velocity (m/s) at 0 dB SPL vs frequency: Goode et al. (1994) converted
    (``v = sqrt(2) 2 pi f d 1e-6 10^(-104/20)``), with the Lopez-Poveda & Meddis (2001)
    extrapolated points below and above the Goode range."""
    tabs = load_ear_tables()
    g, e = tabs["goode1994"], tabs["lopezpoveda2001_extrapolated"]
    fg = g["frequency_hz"]
    v = g["displacement_um_pp"] * 1e-6 * 2 * np.pi * fg
    v = v * 10 ** (-float(g["level_db_spl"]) / 20) * np.sqrt(2)
    fe, ve = e["frequency_hz"], e["velocity_m_per_s"]
    lo, hi = fe < fg[0], fe > fg[-1]
    return np.r_[fe[lo], fg, fe[hi]], np.r_[ve[lo], v, ve[hi]]


def middle_ear_response_points(fs: float) -> tuple[np.ndarray, np.ndarray]:
    """Breakpoints ``(f Hz, stapes velocity per pascal)`` of the middle-ear response,
    ``0 ... fs/2``: 0 at DC, table points below ``fs/2``, then the extension rule of the
    module docstring up to ``fs/2``."""
    _check_fs(fs)
    f, v = stapes_velocity_table()
    keep = f < fs / 2
    if not keep.any():
        raise ValueError(
            f"fs={fs:g} Hz is too low for the middle-ear filter: its table starts at "
            f"{float(f[0]):g} Hz, so fs must exceed {2 * float(f[0]):g} Hz"
        )
    f, v = list(f[keep]), list(v[keep])
    nyq = fs / 2
    while f[-1] < nyq:
        step = min(1000.0, nyq - f[-1])
        f.append(f[-1] + step)
        v.append(v[-1] / (1.0 + step / 10000.0))
    return np.r_[0.0, f], np.r_[0.0, v] / _P0


def fir2_design(
    numtaps: int, freqs: np.ndarray, gains: np.ndarray, fs: float, grid_n: int | None = None
) -> np.ndarray:
    """Linear-phase FIR by frequency sampling (the ``fir2`` method), odd ``numtaps``.

    Args:
        numtaps: filter length (odd: type-I linear phase).
        freqs: breakpoints in Hz, increasing from 0 to ``fs/2``.
        gains: linear gains at ``freqs``.
        fs: sampling rate (Hz).
        grid_n: frequency grid intervals (default ``max(512, 2^ceil(log2(numtaps - 1)))``).

    Returns:
        ``(numtaps,)`` float64 coefficients (symmetric, delay ``(numtaps - 1) / 2``).
    """
    if numtaps < 3 or numtaps % 2 == 0:
        raise ValueError(f"numtaps must be odd and >= 3, got {numtaps}")
    f = np.asarray(freqs, dtype=np.float64) / (fs / 2)
    m = np.asarray(gains, dtype=np.float64)
    if f[0] != 0 or abs(f[-1] - 1) > 1e-12 or np.any(np.diff(f) < 0):
        raise ValueError("freqs must increase from 0 to fs/2")
    if grid_n is None:
        grid_n = max(512, 2 ** math.ceil(math.log2(numtaps - 1)))
    grid = np.interp(np.linspace(0.0, 1.0, grid_n + 1), f, m)
    b = np.fft.ifft(np.concatenate([grid, grid[grid_n - 1 : 0 : -1]])).real
    half = (numtaps - 1) // 2
    b = np.concatenate([b[len(b) - half :], b[: half + 1]])
    return b * np.hamming(numtaps)


def minimum_phase_rceps(b: np.ndarray) -> np.ndarray:
    """Minimum-phase FIR of the same length with the same ``len(b)``-point DFT magnitude
    (real cepstrum folded onto its causal part)."""
    b = np.asarray(b, dtype=np.float64)
    n = len(b)
    mag = np.abs(np.fft.fft(b))
    if np.any(mag <= 0):
        raise ValueError("minimum-phase conversion needs a DFT without exact zeros")
    c = np.fft.ifft(np.log(mag)).real
    w = np.zeros(n)
    w[0] = 1.0
    w[1 : (n + 1) // 2] = 2.0
    if n % 2 == 0:
        w[n // 2] = 1.0
    return np.fft.ifft(np.exp(np.fft.fft(w * c))).real


def _phase(b: np.ndarray, phase: str) -> np.ndarray:
    if phase == "linear":
        return b
    if phase == "minimum":
        return minimum_phase_rceps(b)
    raise ValueError(f"phase must be 'minimum' or 'linear', got {phase!r}")


def headphone_fir(fs: float, numtaps: int = 513, phase: str = "linear") -> np.ndarray:
    """Headphone + outer-ear FIR (Pralong & Carlile 1996). AMT 1.4 ``headphonefilter`` is
    the ``phase="linear"`` design (513 taps)."""
    check_int("numtaps", numtaps, min=1)
    check_choice("phase", phase, ("linear", "minimum"))
    return _phase(fir2_design(numtaps, *headphone_response_points(fs), fs), phase)


def middle_ear_fir(
    fs: float, numtaps: int = 513, phase: str = "minimum", normalize: bool = True
) -> np.ndarray:
    """Middle-ear FIR (Lopez-Poveda & Meddis 2001 stapes data). ``normalize`` scales the
    maximum of ``|H|`` over 8192 frequencies to 0 dB (AMT ``osses2021``: the
    ``-me_gain_TF_dB`` gain); without it the gain is stapes velocity per pascal."""
    check_int("numtaps", numtaps, min=1)
    check_choice("phase", phase, ("linear", "minimum"))
    check_bool("normalize", normalize)
    b = _phase(fir2_design(numtaps, *middle_ear_response_points(fs), fs), phase)
    if normalize:
        b = b / np.abs(np.fft.rfft(b, 16384)[:8192]).max()
    return b


def _fft_len(n: int) -> int:
    return 1 << max(1, (n - 1).bit_length())


def fir_block_length(numtaps: int) -> int:
    """FFT length of the overlap-save blocks for ``numtaps`` taps (8x the filter length,
    rounded up to a power of two: each block yields ``nfft - numtaps + 1`` outputs)."""
    return _fft_len(8 * numtaps)


def fir_spectrum(h: Tensor, nfft: int) -> Tensor:
    """``rfft(h, nfft)``: the taps' spectrum for :func:`fir_filter` (compute once per
    filter, FFT length, dtype and device and pass it as ``spectrum``)."""
    return torch.fft.rfft(h, nfft)


def _fir_numpy(xx: np.ndarray, h: np.ndarray, T: int) -> np.ndarray:
    # the last T outputs of xx (..., N - 1 + T) convolved with h (N,): the FFT convolution
    # of fir_filter (overlap-save blocks of fir_block_length(N)) by numpy, in xx's dtype
    N = h.shape[0]
    nfft = fir_block_length(N)
    step = nfft - (N - 1)
    if T <= 2 * step:
        L = _fft_len(xx.shape[-1] + N - 1)
        return np.fft.irfft(np.fft.rfft(xx, L) * np.fft.rfft(h, L), L)[..., N - 1 : N - 1 + T]
    nb = -(-T // step)
    pad = np.zeros((*xx.shape[:-1], nb * step + N - 1 - xx.shape[-1]), xx.dtype)
    xp = np.concatenate([xx, pad], -1)
    frames = np.lib.stride_tricks.sliding_window_view(xp, nfft, axis=-1)[..., ::step, :]
    yb = np.fft.irfft(np.fft.rfft(frames, nfft) * np.fft.rfft(h, nfft), nfft)[..., N - 1 :]
    return yb.reshape(*yb.shape[:-2], nb * step)[..., :T]


def fir_filter(
    x: Tensor,
    h: Tensor,
    state: Tensor | None = None,
    *,
    return_state: bool = False,
    spectrum: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Causal FIR ``y[n] = sum_k h[k] x[n - k]`` along the last axis (FFT convolution,
    differentiable in ``x`` and ``h``).

    Long inputs run as overlap-save over blocks of :func:`fir_block_length` samples (all
    blocks in one batched FFT); short ones as one zero-padded FFT convolution. Both are
    exact convolutions up to FFT rounding (~1e-7 relative in float32, ~1e-16 in float64).

    Args:
        x: real ``(..., T)``.
        h: ``(N,)`` taps.
        state: the previous ``N - 1`` input samples ``(..., N - 1)`` (zeros if ``None``).
        return_state: also return the new state (the last ``N - 1`` inputs).
        spectrum: ``fir_spectrum(h, fir_block_length(N))`` precomputed in ``x``'s dtype
            and device (saves one FFT per call; ignored for short inputs).

    Returns:
        ``y (..., T)`` (and the state).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, min_dim=1, max_dim=None, allow_empty=True, name="x")
    check_signal(h, min_samples=1, min_dim=1, max_dim=1, name="FIR taps h")
    N = h.shape[-1]
    T = x.shape[-1]
    h = h.to(dtype=x.dtype, device=x.device)
    if state is None:
        state = x.new_zeros((*x.shape[:-1], N - 1))
    else:
        state = state.to(dtype=x.dtype, device=x.device).expand(*x.shape[:-1], N - 1)
    xx = torch.cat([state, x], dim=-1)
    if xx.device.type == "cpu" and no_grad_kernels(xx, h):
        # eager CPU inference: the same FFT convolution by numpy on the calling thread
        # (torch's FFTs and pads open thread pools that oversubscribe a busy machine)
        xn = xx.detach().numpy()
        yn = _fir_numpy(xn, h.detach().numpy(), T)
        y = torch.from_numpy(np.ascontiguousarray(yn, dtype=xn.dtype))
        if not return_state:
            return y
        return y, xx[..., xx.shape[-1] - (N - 1) :]
    nfft = fir_block_length(N)
    step = nfft - (N - 1)
    if T <= 2 * step:
        L = _fft_len(xx.shape[-1] + N - 1)
        y = torch.fft.irfft(torch.fft.rfft(xx, L) * torch.fft.rfft(h, L), L)[..., N - 1 : N - 1 + T]
    else:
        # overlap-save: block k reads xx[k step : k step + nfft] and yields y[k step :
        # (k + 1) step] (its last `step` circular-convolution outputs)
        nb = -(-T // step)
        xp = torch.nn.functional.pad(xx, (0, nb * step + N - 1 - xx.shape[-1]))
        frames = xp.unfold(-1, nfft, step)  # (..., nb, nfft)
        H = fir_spectrum(h, nfft) if spectrum is None else spectrum
        yb = torch.fft.irfft(torch.fft.rfft(frames, nfft) * H, nfft)[..., N - 1 :]
        y = yb.reshape(*yb.shape[:-2], nb * step)[..., :T]
    if not return_state:
        return y
    return y, xx[..., xx.shape[-1] - (N - 1) :]


def fir_filter_compensated(x: Tensor, h: Tensor, compensation: str = "amt") -> Tensor:
    """One-shot FIR with delay compensation (see the module docstring).

    ``"amt"``: append ``(N + 1) // 2`` zeros, filter, drop as many leading samples (same
    length as ``x``); ``"trim"``: drop the first ``(N - 1) // 2`` output samples (shorter);
    ``"none"``: causal.
    """
    check_choice("compensation", compensation, COMPENSATIONS)
    check_signal(x, min_samples=0, min_dim=1, max_dim=None, allow_empty=True, name="x")
    N = h.shape[-1]
    if compensation == "none":
        return fir_filter(x, h)
    if compensation == "amt":
        d = (N + 1) // 2
        y = fir_filter(torch.nn.functional.pad(x, (0, d)), h)
        return y[..., d:]
    if compensation == "trim":
        return fir_filter(x, h)[..., (N - 1) // 2 :]
    raise ValueError(f"compensation must be one of {COMPENSATIONS}, got {compensation!r}")

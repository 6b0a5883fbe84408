"""CPU Hilbert transforms and the in-place phase insensitivity of King, Varnet & Lorenzi
(2019) over blocks of rows (the kernels behind
:func:`lhotse_amt.functional.king2019_modulation.phase_insensitivity` with ``inplace=True``
and behind the forward of :func:`lhotse_amt.kernels.king2019.king_samples`).

``H{x}`` is the imaginary part of the analytic signal (FFT over the whole length, as
:func:`scipy.signal.hilbert`); the phase-insensitive output of a band is the Hilbert
envelope ``|x + i H{x}|`` scaled by ``rms(x) / rms(|x + i H{x}|)``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit
from torch import Tensor

from .. import _alloc
from .fastmath import KERNEL_OPTS as _F

__all__ = ["BLOCK_SAMPLES", "hilbert_rows_", "phase_insensitivity_cpu_", "rms_matched_envelope_"]

#: samples per block of the in-place phase insensitivity (float32: 32 MB of spectrum;
#: at 10 s and 44.1 kHz 18 rows: batched FFTs are faster per row than single ones)
BLOCK_SAMPLES = 1 << 23


def hilbert_block_(src: Tensor, dst: Tensor, spec: Tensor) -> None:
    """``dst <- H{src}`` for rows ``(n, T)`` through the spectrum buffer ``spec (n,
    T // 2 + 1)`` (``dst`` may be ``src``)."""
    T = src.shape[-1]
    torch.fft.rfft(src, dim=-1, out=spec)
    spec[..., 0] = 0
    if T % 2 == 0:
        spec[..., -1] = 0
    torch.fft.irfft(spec.mul_(-1j), n=T, dim=-1, out=dst)


def _block_buffers(rows: int, width: int, T: int, dtype: torch.dtype) -> tuple[int, Tensor]:
    """Rows per FFT block (about :data:`BLOCK_SAMPLES` samples) and its spectrum buffer."""
    per = min(rows, max(1, BLOCK_SAMPLES // max(T * width, 1)))
    cdtype = torch.complex64 if dtype == torch.float32 else torch.complex128
    return per, _alloc.empty_tensor((per, width, T // 2 + 1), cdtype)


def hilbert_rows_(x: Tensor, out: Tensor | None = None) -> None:
    """``out <- H{x}`` (:func:`~lhotse_amt.functional.king2019_modulation.hilbert_transform`;
    ``out`` defaults to ``x``: in place) for the rows of float32/float64 CPU tensors
    ``(R, T)`` with unit stride along ``T``, a block of rows per batched FFT (one spectrum
    buffer of tens of MB, reused from block to block)."""
    out = x if out is None else out
    R, T = x.shape
    if R == 0:
        return
    per, spec = _block_buffers(R, 1, T, x.dtype)
    spec = spec[:, 0]
    xt, ot = x.detach(), out.detach()
    for r0 in range(0, R, per):
        rows = xt[r0 : r0 + per]
        hilbert_block_(rows, ot[r0 : r0 + per], spec[: rows.shape[0]])


def phase_insensitivity_cpu_(x: Tensor, bands: list[int]) -> None:
    """In-place phase insensitivity of the bands ``bands`` (ascending) of a C-contiguous
    CPU tensor ``x (..., M, T)``, each run of consecutive bands at once: blocks of rows
    through batched real FFTs (one spectrum and one transform buffer, reused from block
    to block: no fresh pages per block) and one compiled pass per row for the
    rms-matched envelope (:func:`rms_matched_envelope_`)."""
    M, T = x.shape[-2:]
    xt = x.detach().reshape(-1, M, T)
    if xt.numel() == 0 or not bands:
        return
    runs: list[list[int]] = []
    for m in bands:
        if runs and m == runs[-1][-1] + 1:
            runs[-1].append(m)
        else:
            runs.append([m])
    width = max(len(r) for r in runs)
    per, spec_buf = _block_buffers(xt.shape[0], width, T, x.dtype)
    hil_buf = _alloc.empty_tensor((per * width * T,), x.dtype)
    for run in runs:
        k = len(run)
        spec = spec_buf.view(-1)[: per * k * (T // 2 + 1)].view(per, k, T // 2 + 1)
        hil = hil_buf[: per * k * T].view(per, k, T)
        for r0 in range(0, xt.shape[0], per):
            rows = xt[r0 : r0 + per, run[0] : run[0] + k]  # (n, k, T) view
            n = rows.shape[0]
            h = hil[:n]
            hilbert_block_(rows, h, spec[:n])
            rn, hn = rows.numpy(), h.numpy()
            for i in range(n):
                for j in range(k):
                    rms_matched_envelope_(rn[i, j], hn[i, j])


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

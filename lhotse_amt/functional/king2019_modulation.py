"""Modulation filterbank and phase insensitivity of King, Varnet & Lorenzi (2019)
(AMT ``king2019_modfilterbank``, ``phase_insens_hilbert``).

**Centre frequencies** (constant Q): ``mfc_k = mflow r^k <= mfhigh`` with
``r = (sqrt(4 Q^2 + 1) + 1) / (sqrt(4 Q^2 + 1) - 1)`` (2.618 for ``Q = 1``: 2, 5.236,
13.708, 35.889, 93.957 Hz for 2 ... 150 Hz), or ``nmod`` log-spaced frequencies.

**Band-passes**: 2nd-order Butterworth band-pass prototype (4th order overall), bilinear
transform, edges ``f_{1,2} = mfc (sqrt(4 + 1/Q^2) -/+ 1/Q) / 2`` (bandwidth ``mfc / Q``,
geometric centre ``mfc``). The default realisation is second-order sections; AMT runs
the expanded transfer function (``form="tf"``), which is ill-conditioned for the 2- and
5.2-Hz bands (poles within ~2e-4 of ``z = 1``): their output depends on the last bits of
the coefficients (reference README section 6).

**Phase insensitivity** (:func:`phase_insensitivity`): for bands with ``mfc > cutoff``
(10 Hz) the output is the Hilbert envelope ``|x + i H{x}|`` (FFT over the whole signal)
scaled by ``rms(x) / rms(|x + i H{x}|)`` (whole-signal rms per channel and band); bands
at or below the cut-off pass unchanged. This step is non-causal.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from .._dispatch import kernel_device
from .._validation import (
    check_bool,
    check_broadcast,
    check_choice,
    check_int,
    check_number,
    check_positive_finite,
    check_rate,
    check_signal,
    check_tensor,
    normalise_sections,
)
from .butter import butter
from .iir import lti_filter, resolve_backend, sosfilt

__all__ = [
    "king2019_modulation_frequencies",
    "king2019_band_edges",
    "king2019_modulation_sos",
    "king2019_modulation_tf",
    "tf_filter",
    "tf_to_statespace",
    "king2019_modulation_filterbank",
    "hilbert_transform",
    "hilbert_envelope",
    "phase_insensitivity",
]


def king2019_modulation_frequencies(
    mflow: float = 2.0, mfhigh: float = 150.0, qfactor: float = 1.0, nmod: int | None = None
) -> np.ndarray:
    """Modulation centre frequencies (Hz), see the module docstring."""
    check_positive_finite("mflow", mflow)
    check_positive_finite("mfhigh", mfhigh)
    check_number("qfactor", qfactor, min=0.0, max=100.0, min_inclusive=False)
    check_int("nmod", nmod, min=1, allow_none=True)
    if not (0 < mflow <= mfhigh):
        raise ValueError(f"need 0 < mflow <= mfhigh, got {mflow}, {mfhigh}")
    if qfactor <= 0:
        raise ValueError("qfactor must be positive")
    if nmod is not None:
        if nmod < 1:
            raise ValueError("nmod must be >= 1")
        return np.exp(np.linspace(math.log(mflow), math.log(mfhigh), int(nmod)))
    s = math.sqrt(4 * qfactor**2 + 1)
    r = (s + 1) / (s - 1)
    K = math.floor(math.log(mfhigh / mflow) / math.log(r) + 1e-9)
    return mflow * r ** np.arange(K + 1)


def king2019_band_edges(mfc: np.ndarray, qfactor: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """Lower and upper edges (Hz) of the band-passes: ``mfc (sqrt(4 + 1/Q^2) -/+ 1/Q) / 2``."""
    check_number("qfactor", qfactor, min=0.0, max=100.0, min_inclusive=False)
    mfc = np.asarray(mfc, dtype=np.float64)
    if not (np.isfinite(mfc).all() and (mfc > 0).all()):
        raise ValueError(f"mfc must be finite and > 0 (Hz), got {mfc}")
    c = mfc / 2 * math.sqrt(4 + 1 / qfactor**2)
    return c - mfc / (2 * qfactor), c + mfc / (2 * qfactor)


def _check_edges(fs: float, f2: np.ndarray) -> None:
    check_rate("fs", fs)
    if np.any(f2 >= fs / 2):
        raise ValueError(
            f"modulation band edge {float(np.max(f2)):.1f} Hz is not below fs/2 = {fs / 2:g} Hz"
        )


def king2019_modulation_sos(
    fs: float, mfc: np.ndarray, qfactor: float = 1.0, order: int = 2
) -> np.ndarray:
    """Second-order sections ``(M, order, 6)`` of the band-passes."""
    check_rate("fs", fs)
    check_int("order", order, min=1)
    f1, f2 = king2019_band_edges(mfc, qfactor)
    _check_edges(fs, f2)
    return np.stack(
        [butter(order, [a, b], "bandpass", fs=fs, output="sos") for a, b in zip(f1, f2)]
    )


def king2019_modulation_tf(
    fs: float, mfc: np.ndarray, qfactor: float = 1.0, order: int = 2
) -> tuple[np.ndarray, np.ndarray]:
    """Transfer-function coefficients ``b, a`` ``(M, 2 order + 1)`` (AMT's form)."""
    check_rate("fs", fs)
    check_int("order", order, min=1)
    f1, f2 = king2019_band_edges(mfc, qfactor)
    _check_edges(fs, f2)
    ba = [butter(order, [a / (fs / 2), b / (fs / 2)], "bandpass") for a, b in zip(f1, f2)]
    return np.stack([b for b, _ in ba]), np.stack([a for _, a in ba])


def tf_to_statespace(b: Tensor, a: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """State-space form of the transposed direct form II (state = scipy ``lfilter``'s
    ``zi``): ``b, a (..., K + 1)`` with ``a[..., 0] == 1``."""
    K = b.shape[-1] - 1
    lead = b.shape[:-1]
    A = b.new_zeros((*lead, K, K))
    A[..., :, 0] = -a[..., 1:]
    if K > 1:
        idx = torch.arange(K - 1)
        A[..., idx, idx + 1] = 1.0
    B = b[..., 1:] - a[..., 1:] * b[..., :1]
    C = b.new_zeros((*lead, 1, K))
    C[..., 0, 0] = 1.0
    D = b[..., :1]
    return A, B, C, D


def tf_filter(
    x: Tensor,
    b: Tensor,
    a: Tensor,
    zi: Tensor | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Direct-form IIR ``b(z) / a(z)`` along the last axis (``scipy.signal.lfilter``
    semantics, transposed direct form II), coefficients broadcast with ``x.shape[:-1]``.

    ``backend="numba"`` runs the sample recursion (operator ``lhotse_amt::lfilter``);
    ``"torch"`` the chunked state-space evaluation (differentiable; mathematically equal
    but not bit-identical, which matters for ill-conditioned polynomials).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    check_tensor("b", b, min_dim=1, shape="(..., K + 1)")
    check_tensor("a", a, min_dim=1, shape="(..., K + 1)")
    if b.shape[-1] != a.shape[-1]:
        raise ValueError("b and a must have the same number of coefficients")
    dtype = torch.promote_types(x.dtype, b.dtype)
    x = x.to(dtype)
    b = b.to(dtype=dtype, device=x.device)
    a = a.to(dtype=dtype, device=x.device)
    if bool((a[..., 0] != 1).any()):
        b, a = b / a[..., :1], a / a[..., :1]
    K = b.shape[-1] - 1
    lead = check_broadcast(("x", x.shape[:-1]), ("b", b.shape[:-1]), ("a", a.shape[:-1]))
    be = resolve_backend(backend, x, b, a, zi)
    T = x.shape[-1]
    if be == "numba":
        from ..ops import filterbanks

        xf = x.expand(*lead, T).reshape(-1, T)
        bf = b.expand(*lead, K + 1).reshape(-1, K + 1)
        af = a.expand(*lead, K + 1).reshape(-1, K + 1)
        z0 = None if zi is None else zi.to(dtype).expand(*lead, K).reshape(-1, K)
        y, zf = filterbanks.lfilter(xf, bf, af, z0)
        y, zf = y.reshape(*lead, T), zf.reshape(*lead, K)
    else:
        A, B, C, D = tf_to_statespace(b, a)
        y, zf = lti_filter(x, A, B, C, D, None if zi is None else zi.to(dtype))
        y = y[..., 0, :]
    return (y, zf) if return_state else y


def king2019_modulation_filterbank(
    x: Tensor,
    sos: Tensor | None = None,
    b: Tensor | None = None,
    a: Tensor | None = None,
    state: Tensor | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Band-pass bank on ``x (..., C, T)`` -> ``(..., C, M, T)``.

    Give either ``sos (M, S, 6)`` or the transfer functions ``b, a (M, K + 1)``. The
    filters run in the coefficients' dtype (keep them float64: the low bands have poles
    close to ``z = 1``); the output has ``x``'s dtype. ``state``: the filter states of a
    previous call (``(..., C, M, S, 2)`` or ``(..., C, M, K)``).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=1, min_dim=2, max_dim=None, name="x (..., C, T)")
    check_tensor("sos", sos, min_dim=2, trailing=(6,), shape="(M, S, 6)", allow_none=True)
    check_tensor("state", state, allow_none=True)
    if sos is not None and state is not None and sos.dim() == 3:
        check_tensor("state", state, trailing=(*sos.shape[:2], 2), shape="(..., C, M, S, 2)")
    u = x.unsqueeze(-2)
    if sos is not None and sos.dim() == 3 and resolve_backend(backend, x, sos, state) == "numba":
        from ..ops import filterbanks

        lead, (C, T) = x.shape[:-2], x.shape[-2:]
        M, S = sos.shape[0], sos.shape[1]
        z0 = None if state is None else state.reshape(-1, M, S, 2)
        y, st = filterbanks.sos_bank(x.reshape(-1, T), normalise_sections(sos), z0)
        y = y.reshape(*lead, C, M, T).to(x.device)
        st = st.reshape(*lead, C, M, S, 2).to(x.device)
        return (y, st) if return_state else y
    if sos is not None:
        y, st = sosfilt(u, sos, state, return_state=True, backend=backend, out_dtype=x.dtype)
    elif b is not None and a is not None:
        y, st = tf_filter(u, b, a, state, return_state=True, backend=backend)
    else:
        raise ValueError("give sos or (b, a)")
    y = y.to(x.dtype)
    return (y, st) if return_state else y


def hilbert_transform(x: Tensor) -> Tensor:
    """Hilbert transform ``H{x}`` along the last axis, the imaginary part of the
    analytic signal of :func:`scipy.signal.hilbert` (FFT of the whole length): the
    inverse real FFT of ``-i sign(f) X(f)`` (DC and, for even lengths, Nyquist set to
    zero). Two real-input FFTs instead of a full complex inverse FFT. Same shape and
    real dtype as ``x``."""
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    T = x.shape[-1]
    X = torch.fft.rfft(x, dim=-1)
    X[..., 0] = 0
    if T % 2 == 0:
        X[..., -1] = 0
    # -i (a + ib) = b - ia
    X = torch.complex(X.imag, -X.real) if X.requires_grad else X.mul_(-1j)
    return torch.fft.irfft(X, n=T, dim=-1)


def hilbert_envelope(x: Tensor) -> Tensor:
    """``|x + i H{x}|`` along the last axis (the magnitude of :func:`scipy.signal.hilbert`
    of ``x``; see :func:`hilbert_transform`). Differentiable (the gradient at a zero
    envelope is zero, as for ``abs``)."""
    h = hilbert_transform(x)
    if torch.is_grad_enabled() and (x.requires_grad or h.requires_grad):
        return torch.complex(x, h).abs()
    return torch.hypot(x, h, out=h)


def _rms_ratio(x: Tensor, env: Tensor) -> Tensor:
    """``rms(x) / rms(env)`` over the last axis (kept, size 1); 0 where ``env`` is all
    zero (with a zero, not NaN, gradient)."""
    rx = x.square().mean(-1, keepdim=True).sqrt()
    re = env.square().mean(-1, keepdim=True).sqrt()
    return torch.where(re > 0, rx / torch.where(re > 0, re, torch.ones_like(re)), 0.0 * re)


def phase_insensitive_bands(mfc: Tensor | np.ndarray, cutoff: float) -> list[int]:
    """Indices of the bands the phase insensitivity turns into envelopes: centre
    frequency ``mfc[m]`` (Hz) above ``cutoff`` (Hz)."""
    return [int(m) for m in np.flatnonzero(np.asarray(mfc, dtype=np.float64) > cutoff)]


def _inplace_op_ok(x: Tensor) -> bool:
    """The operator ``lhotse_amt::phase_insensitivity_`` takes ``x`` (a device with
    kernels: the CPU, CUDA with Triton; a contiguous float tensor)."""
    return (
        kernel_device(x.device)
        and x.dtype in (torch.float32, torch.float64)
        and x.dim() >= 2
        and x.is_contiguous()
    )


def phase_insensitivity(
    x: Tensor,
    mfc: Tensor | np.ndarray | tuple[float, ...],
    cutoff: float = 10.0,
    *,
    inplace: bool = False,
    bands: tuple[int, ...] | None = None,
    backend: str = "auto",
) -> Tensor:
    """Phase-insensitive output of ``x (..., M, T)`` (band ``m`` at ``mfc[m]`` Hz): the
    rms-matched Hilbert envelope for ``mfc > cutoff``, ``x`` otherwise. Non-causal.

    Out of place, ``backend="auto"`` runs the operator ``lhotse_amt::rms_envelope``
    (:func:`lhotse_amt.ops.rms_envelope`: fused CPU kernels, an analytic backward);
    ``"reference"`` (or ``"torch"``) the plain-torch chain that defines it.

    ``inplace=True`` (no autograd) overwrites the selected bands of ``x`` and returns it;
    the envelopes are then computed a few rows at a time, so the temporary FFT buffers
    stay small (tens of MB) whatever the size of ``x``. ``bands`` (the indices with
    ``mfc > cutoff``, precomputed) skips the selection, for traced callers."""
    check_signal(x, min_samples=1, min_dim=2, max_dim=None, name="x (..., M, T)")
    check_number("cutoff", cutoff, min=0.0)
    check_bool("inplace", inplace)
    check_choice("backend", backend, ("auto", "reference", "torch", "numba"))
    if not isinstance(mfc, (list, tuple)):
        mfc = tuple(float(v) for v in np.atleast_1d(np.asarray(mfc, dtype=np.float64)))
    if len(mfc) != x.shape[-2]:
        raise ValueError(f"mfc has {len(mfc)} entries but x has {x.shape[-2]} bands on axis -2")
    sel = list(bands) if bands is not None else [m for m, f in enumerate(mfc) if f > cutoff]
    if not sel:
        return x
    if inplace:
        if torch.is_grad_enabled() and x.requires_grad:
            raise ValueError("phase_insensitivity(inplace=True) needs no autograd on x")
        from ..ops import filterbanks  # compiled kernels: loaded on first use

        if _inplace_op_ok(x):
            filterbanks.phase_insensitivity_(x, sel)
            return x
        T = x.shape[-1]
        rows_per_block = max(1, filterbanks.BLOCK_SAMPLES // max(T, 1))
        with torch.no_grad():
            for m in sel:
                view = x[..., m, :]
                try:
                    flat, copied = view.view(-1, T), False
                except RuntimeError:  # rows not evenly strided: work on a copy
                    flat, copied = view.reshape(-1, T), True
                for r0 in range(0, flat.shape[0], rows_per_block):
                    rows = flat[r0 : r0 + rows_per_block]
                    env = hilbert_envelope(rows)
                    rows.copy_(env.mul_(_rms_ratio(rows, env)))
                if copied:
                    view.copy_(flat.view(view.shape))
        return x
    if backend in ("auto", "numba"):
        from .. import ops

        return ops.rms_envelope(x, sel)
    idx = torch.as_tensor(sel, device=x.device)
    xs = x.index_select(-2, idx)
    env = hilbert_envelope(xs)
    out = x.clone()
    out[..., sel, :] = env * _rms_ratio(xs, env)
    return out

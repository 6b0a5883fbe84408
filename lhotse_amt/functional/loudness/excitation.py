"""Excitation pattern and specific loudness of the loudness models (plain torch).

Rounded-exponential weighting ``W(g) = (1 + p|g|) exp(-p|g|)`` with ``g = (f - fc) / fc``,
``p = 4 fc / ERB(fc)`` on the upper side and the level-dependent lower slope
``p_l = p - 0.35 (p / p(1 kHz)) (X - 51)`` (Moore, Glasberg & Baer 1997, Eq. 4; ANSI S3.4-2007,
Eq. 5), where ``X`` is an input level per ERB (dB). Specific loudness: Moore, Glasberg & Baer
(1997), Eqs. 2–4; ANSI S3.4-2007, Eqs. 17–19.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import torch
from torch import Tensor

from ..._dispatch import no_grad_kernels
from ..._validation import (
    FLOAT_DTYPES,
    check_bool,
    check_broadcast,
    check_choice,
    check_frequencies,
    check_positive_finite,
    check_tensor,
    require,
)
from .scales import bin_hz, loudness_tables, roex, roex_p

__all__ = [
    "P1000",
    "SLOPE_BETA",
    "ExcitationMatrices",
    "excitation_matrices",
    "erb_level_db",
    "excitation_pattern",
    "excitation_moore2016",
    "excitation_gm2002",
    "SpecificLoudnessParams",
    "pchip_interpolate",
    "specific_loudness_params",
    "specific_loudness",
]

#: roex slope ``p`` at 1 kHz
P1000 = float(roex_p(1000.0))
#: lower-slope factor per dB: ``p_l / p = 1 - SLOPE_BETA (X - 51)``
SLOPE_BETA = 0.35 / P1000


@dataclass(frozen=True)
class ExcitationMatrices:
    """Level-independent roex matrices of the excitation stage (numpy, float64).

    Attributes:
        level: matrix giving the input intensity per ERB: ``(960, 960)`` at the components
            (variants ``"moore2016"``, ``"component"``) or ``(960, C)`` at the channel centres
            (``"gm2002"``).
        upper: ``(960, C)`` upper-side weights (components at or above ``fc``).
        lower_h: ``(960, C)``: ``-p(fc) |g|`` for components below ``fc``, -80 elsewhere.
        n_below: ``(C,)`` number of bins below each ``fc``.
    """

    level: np.ndarray
    upper: np.ndarray
    lower_h: np.ndarray
    n_below: np.ndarray


def excitation_matrices(fc: np.ndarray, variant: str) -> ExcitationMatrices:
    """Precomputed roex matrices for channel centres ``fc`` (Hz).

    ``variant``: ``"moore2016"`` (level per ERB at each component from the component's own
    symmetric roex, Cambridge 2016 code), ``"component"`` (level per ERB at each component from
    the roex filter centred there) or ``"gm2002"`` (at the channel centres, Glasberg & Moore
    2002, Sec. 2.3). All include the restriction ``g <= 4`` of the reference code.

    The matrices are designed once per ``(fc, variant)`` and shared by the stages of a
    model (the level, excitation and fast excitation stages each ask for them): they are
    read-only arrays; copy before changing one.
    """
    check_choice("variant", variant, ("moore2016", "component", "gm2002"))
    fc = np.ascontiguousarray(check_frequencies("fc", fc))
    return _excitation_matrices(fc.tobytes(), variant)


@lru_cache(maxsize=8)
def _excitation_matrices(fc_bytes: bytes, variant: str) -> ExcitationMatrices:
    fc = np.frombuffer(fc_bytes, dtype=np.float64)
    f = bin_hz()
    pc = roex_p(fc)
    g = (f[:, None] - fc[None, :]) / fc[None, :]  # (K, C)
    ok = g <= 4.0
    upper = np.where((f[:, None] >= fc[None, :]) & ok, roex(pc[None, :] * np.abs(g)), 0.0)
    lower_h = np.where(f[:, None] < fc[None, :], -pc[None, :] * np.abs(g), -80.0)
    if variant == "moore2016":
        pk = roex_p(f)
        gk = (f[None, :] - f[:, None]) / f[:, None]  # (i, k): component i filter at f_k
        level = np.where(gk <= 4.0, roex(pk[:, None] * np.abs(gk)), 0.0)
    elif variant == "component":
        pk = roex_p(f)
        gk = (f[:, None] - f[None, :]) / f[None, :]  # (i, k): filter at f_k, component i
        level = np.where(gk <= 4.0, roex(pk[None, :] * np.abs(gk)), 0.0)
    else:
        level = np.where(ok, roex(pc[None, :] * np.abs(g)), 0.0)
    n_below = (f[:, None] < fc[None, :]).sum(axis=0)
    # weights below 1e-30 are negligible and would be subnormal in float32 (slow matmuls)
    level = np.where(level < 1e-30, 0.0, level)
    upper = np.where(upper < 1e-30, 0.0, upper)
    for a in (level, upper, lower_h, n_below):
        a.flags.writeable = False
    return ExcitationMatrices(level, upper, lower_h, n_below)


def _check_matrix(name: str, m: Tensor, x: Tensor, x_name: str = "intensity") -> None:
    """``m`` a ``(K, n)`` tensor of ``x``'s dtype, ``K`` the last axis of ``x (..., K)``."""
    check_tensor(x_name, x, min_dim=1, shape="(..., K)")
    check_tensor(name, m, min_dim=2, max_dim=2, shape="(K, C)")
    if m.shape[0] != x.shape[-1] or m.dtype != x.dtype:
        raise ValueError(
            f"{name} {tuple(m.shape)} ({m.dtype}) must have as many rows as {x_name} "
            f"{tuple(x.shape)} has components, and its dtype ({x.dtype})"
        )


def _check_nonnegative(name: str, x: Tensor, unit: str) -> None:
    """Every value of ``x`` finite and ``>= 0`` (NaN fails); ``ValueError`` otherwise."""
    require(((x >= 0) & (x < math.inf)).all(), f"{name} must be finite and >= 0 ({unit})")


def lower_branch_group(lower_h: Tensor) -> int:
    """Channels per group of the lower branch for ``lower_h (K, C)``: all of them for few
    components (sparse spectra), else 16, so that the staircase of "bins below fc" is
    followed closely and the blocks stay cache-sized."""
    return lower_h.shape[1] if lower_h.shape[0] <= 256 else 16


def _lower_branch(
    intensity: Tensor,
    s: Tensor,
    lower_h: Tensor,
    n_below: np.ndarray | tuple[int, ...],
    per_channel: bool,
) -> Tensor:
    """Sum over components below each channel of ``I_k W(p_l |g|)`` with ``p_l |g| = s h``
    (:func:`lower_branch_reference`); without gradient on CUDA, the operator
    ``lhotse_amt::excitation_lower`` (one Triton kernel for every frame and channel, no
    ``(..., K, C)`` intermediate)."""
    if intensity.is_cuda and no_grad_kernels(intensity, s, lower_h):
        from ...ops.loudness import excitation_lower_rows

        return excitation_lower_rows(intensity, s, lower_h, n_below, per_channel)
    return lower_branch_reference(intensity, s, lower_h, n_below, per_channel)


def lower_branch_reference(
    intensity: Tensor,
    s: Tensor,
    lower_h: Tensor,
    n_below: np.ndarray | tuple[int, ...] | Tensor,
    per_channel: bool,
) -> Tensor:
    """Sum over components below each channel of ``I_k W(p_l |g|)`` with ``p_l |g| = s h``.

    ``s`` is ``(..., K)`` (per component, Moore2016) or ``(..., C)`` (per channel, GM2002).
    Channels are processed in groups (:func:`lower_branch_group`); each group uses only the
    bins below its highest centre. Plain torch: defines the semantics.
    """
    c_total = lower_h.shape[1]
    out = []
    group = lower_branch_group(lower_h)
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


def erb_level_db(intensity: Tensor, level: Tensor) -> Tensor:
    """Input level per ERB (dB), ``10 log10(max(I @ level, 1e-30))``.

    ``intensity (..., K)`` re (20 µPa)²; ``level`` of :class:`ExcitationMatrices` ``(K, K)`` (at
    the components) or ``(K, C)`` (at the channel centres).
    """
    _check_matrix("level", level, intensity)
    _check_nonnegative("intensity", intensity, "re (20 µPa)²")
    return 10.0 * torch.log10((intensity @ level).clamp_min(1e-30))


def excitation_pattern(
    intensity: Tensor,
    level_db: Tensor,
    upper: Tensor,
    lower_h: Tensor,
    n_below: np.ndarray | tuple[int, ...],
    per_channel: bool = False,
) -> Tensor:
    """Excitation ``E_c = sum_k I_k W(p, g_kc)`` with ``p = p(fc)`` for ``f_k >= fc`` and the
    level-dependent ``p_l`` below, ``(..., C)`` (intensity units, not floored).

    ``level_db`` is the input level per ERB that sets the lower slope: per component
    ``(..., K)`` (Cambridge code) or, with ``per_channel=True``, per channel ``(..., C)``
    (Glasberg & Moore 2002); the
    other arguments are those of :class:`ExcitationMatrices` (as tensors, possibly restricted to
    a subset of bins, then ``intensity`` holds the same subset).
    """
    _check_matrix("upper", upper, intensity)
    _check_matrix("lower_h", lower_h, intensity)
    _check_nonnegative("intensity", intensity, "re (20 µPa)²")
    if lower_h.shape != upper.shape or len(n_below) != upper.shape[1]:
        raise ValueError(
            f"upper {tuple(upper.shape)}, lower_h {tuple(lower_h.shape)} and n_below "
            f"({len(n_below)},) must have the same channels C"
        )
    per_channel = check_bool("per_channel", per_channel)
    check_tensor("level_db", level_db)
    n = upper.shape[1] if per_channel else intensity.shape[-1]
    check_broadcast(("level_db", level_db.shape), ("intensity", (*intensity.shape[:-1], n)))
    s = 1.0 - SLOPE_BETA * (level_db - 51.0)
    return intensity @ upper + _lower_branch(intensity, s, lower_h, n_below, per_channel)


def _matrix_tensors(
    matrices: ExcitationMatrices, intensity: Tensor
) -> tuple[Tensor, Tensor, Tensor]:
    """``level``, ``upper`` and ``lower_h`` of ``matrices`` in the dtype and on the device
    of ``intensity``."""
    if not isinstance(matrices, ExcitationMatrices):
        raise TypeError(
            f"matrices must be an ExcitationMatrices (excitation_matrices), got "
            f"{type(matrices).__name__}"
        )
    check_tensor("intensity", intensity, min_dim=1, shape="(..., K)")
    kw = dict(dtype=intensity.dtype, device=intensity.device)
    return tuple(torch.tensor(m, **kw) for m in (matrices.level, matrices.upper, matrices.lower_h))


def excitation_moore2016(
    intensity: Tensor, keep: Tensor, matrices: ExcitationMatrices
) -> tuple[Tensor, Tensor]:
    """Excitation pattern of the Cambridge 2016 code (per frame, per ear).

    1. input level per ERB at each kept component ``X_k = 10 log10(sum_i I_i W(p(f_i), g_ik))``;
    2. ``E_c = sum_k I_k W(p, g_kc)`` with ``p_l(fc, X_k)`` below ``fc``; ``E = max(E, 1e-10)``.

    Args:
        intensity: component intensities ``(..., F, 960)`` (re (20 µPa)²) on the 960-bin grid.
        keep: boolean mask of kept components, same shape.
        matrices: :func:`excitation_matrices` of the channel centres, variant ``"moore2016"``
            or ``"component"``.

    Returns:
        ``(E, any_kept)``: excitation ``(..., F, C)`` and a ``(..., F)`` mask of frames with at
        least one kept component (the specific loudness is 0 elsewhere).
    """
    level, upper, lower_h = _matrix_tensors(matrices, intensity)
    if not (isinstance(keep, Tensor) and keep.dtype == torch.bool):
        raise TypeError(f"keep must be a bool tensor, got {getattr(keep, 'dtype', type(keep))}")
    if keep.shape != intensity.shape:
        raise ValueError(
            f"keep {tuple(keep.shape)} must have the shape of intensity {tuple(intensity.shape)}"
        )
    i_kept = torch.where(keep, intensity, torch.zeros_like(intensity))
    x_db = erb_level_db(i_kept, level)
    e = excitation_pattern(i_kept, x_db, upper, lower_h, matrices.n_below)
    return e.clamp_min(1e-10), keep.any(dim=-1)


def excitation_gm2002(intensity: Tensor, matrices: ExcitationMatrices) -> tuple[Tensor, Tensor]:
    """Excitation pattern with the ANSI S3.4-2007 / Glasberg & Moore (2002) roex filters.

    The lower slope of the filter centred at ``fc`` is set by the input level per ERB at ``fc``,
    ``X_c = 10 log10(sum_k I_k W(p(fc), |g_kc|))`` (Glasberg & Moore 2002, Sec. 2.3;
    ANSI S3.4-2007, Sec. 3.5), with ``matrices`` the :func:`excitation_matrices` of the
    channel centres (variant ``"gm2002"``) and ``intensity`` ``(..., F, 960)`` on their
    960-bin grid. Returns ``(E, X_c)``, both ``(..., F, C)``; ``E`` in intensity units
    re (20 µPa)², ``X_c`` in dB.
    """
    level, upper, lower_h = _matrix_tensors(matrices, intensity)
    x_db = erb_level_db(intensity, level)
    return excitation_pattern(intensity, x_db, upper, lower_h, matrices.n_below, True), x_db


# ----------------------------------------------------------------------------------------------
# specific loudness
# ----------------------------------------------------------------------------------------------
def _pchip_slopes(h: np.ndarray, m: np.ndarray) -> np.ndarray:
    # knot derivatives of the shape-preserving piecewise-cubic Hermite interpolant (Fritsch &
    # Carlson 1980; Fritsch & Butland 1984): the weighted harmonic mean of the neighbouring
    # secant slopes m where they have the same sign (else 0); at the ends the one-sided
    # three-point estimate, limited to keep the shape (Moler 2004, Numerical Computing with
    # MATLAB, Sec. 3.6, pchiptx)
    if len(m) == 1:
        return np.array([m[0], m[0]])
    d = np.zeros(len(m) + 1)
    w1 = 2.0 * h[1:] + h[:-1]
    w2 = h[1:] + 2.0 * h[:-1]
    same = (np.sign(m[1:]) == np.sign(m[:-1])) & (m[1:] != 0.0) & (m[:-1] != 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        whmean = (w1 / m[:-1] + w2 / m[1:]) / (w1 + w2)
    d[1:-1][same] = 1.0 / whmean[same]

    def end(h0: float, h1: float, m0: float, m1: float) -> float:
        e = ((2.0 * h0 + h1) * m0 - h0 * m1) / (h0 + h1)
        if np.sign(e) != np.sign(m0):
            return 0.0
        if np.sign(m0) != np.sign(m1) and abs(e) > 3.0 * abs(m0):
            return 3.0 * m0
        return e

    d[0] = end(h[0], h[1], m[0], m[1])
    d[-1] = end(h[-1], h[-2], m[-1], m[-2])
    return d


def pchip_interpolate(x: np.ndarray, y: np.ndarray, xi: np.ndarray) -> np.ndarray:
    """Shape-preserving piecewise-cubic Hermite interpolation (PCHIP; MATLAB ``interp1(...,
    'pchip')``, :class:`scipy.interpolate.PchipInterpolator`) of the knots ``(x, y)``
    (``x`` strictly increasing, at least 2 knots) at ``xi``; outside ``[x[0], x[-1]]`` the
    end pieces are extrapolated. float64."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    xi = np.asarray(xi, dtype=np.float64)
    h = np.diff(x)
    m = np.diff(y) / h
    d = _pchip_slopes(h, m)
    # cubic of each piece in the local coordinate s = xi - x[i]: c0 s^3 + c1 s^2 + c2 s + c3
    t = (d[:-1] + d[1:] - 2.0 * m) / h
    c0 = t / h
    c1 = (m - d[:-1]) / h - t
    i = np.clip(np.searchsorted(x, xi, side="right") - 1, 0, len(x) - 2)
    s = xi - x[i]
    s2 = s * s
    return ((y[:-1][i] + d[:-1][i] * s) + c1[i] * s2) + c0[i] * (s2 * s)


def _pchip(x: np.ndarray, y: np.ndarray, xi: np.ndarray, extrapolate: bool) -> np.ndarray:
    out = pchip_interpolate(x, y, xi)
    if not extrapolate:
        out = np.where((xi < x[0]) | (xi > x[-1]), np.nan, out)
    return out


@dataclass(frozen=True)
class SpecificLoudnessParams:
    """Per-channel constants of the specific-loudness function, ``(C,)`` each (numpy arrays or
    tensors): ``e_thrq`` excitation at threshold (linear), ``g`` low-level gain, ``alpha``
    exponent, ``a`` additive constant."""

    e_thrq: np.ndarray | Tensor
    g: np.ndarray | Tensor
    alpha: np.ndarray | Tensor
    a: np.ndarray | Tensor


def specific_loudness_params(
    fc: np.ndarray, a_outside: str = "extrapolate"
) -> SpecificLoudnessParams:
    """Per-channel parameters of the specific-loudness function (MGB 1997 / ANSI S3.4-2007).

    ``E_thrq`` (excitation at threshold, linear): table interpolated linearly in frequency below
    500 Hz and held flat below 50 Hz, 3.63 dB from 500 Hz up; ``G = E_thrq(500) / E_thrq(f)``;
    ``alpha(G)`` linear in G (dB), flat outside the table; ``A(G)`` piecewise-cubic Hermite in G.
    ``a_outside``: ``"extrapolate"`` (MATLAB ``interp1(..., 'pchip')``) or ``"nan"`` (GNU Octave,
    as in the AMT reference run: the channel gets A = NaN and its specific loudness is set to 0).
    """
    check_choice("a_outside", a_outside, ("extrapolate", "nan"))
    fc = check_frequencies("fc", fc)
    t = loudness_tables()
    thr = np.interp(fc, t["threshold_freq_hz"], t["threshold_excitation_db"])
    thr = np.where(fc < 500.0, thr, 3.63)
    g_db = 3.63 - thr
    alpha = np.interp(g_db, t["g_db_for_alpha"], t["alpha_for_g"])
    a = _pchip(t["g_db_for_a"], t["a_for_g"], g_db, a_outside == "extrapolate")
    return SpecificLoudnessParams(10.0 ** (thr / 10.0), 10.0 ** (g_db / 10.0), alpha, a)


def specific_loudness(
    e: Tensor,
    params: SpecificLoudnessParams,
    c: Tensor | float,
    high_level: str = "moore2016",
) -> Tensor:
    """Specific loudness ``N'`` (sone/Cam) from excitation ``E`` (intensity units), per channel.

    Moore, Glasberg & Baer (1997), Eqs. 2–4; ANSI S3.4-2007, Eqs. 17–19:

    * ``E_thrq < E <= 1e10``: ``N' = C [(G E + A)^alpha - A^alpha]``;
    * ``E <= E_thrq``: ``N' = C (2E / (E + E_thrq))^1.5 [(G E + A)^alpha - A^alpha]``;
    * ``E > 1e10``: ``C (E / 1.0707)^0.2`` (``high_level="moore2016"``, Cambridge 2016 code) or
      ``C (E / 1.04e6)^0.5`` (``"mgb1997"``, as in Glasberg & Moore 2002).

    Args:
        e: ``(..., C)`` (float32/float64); params: tensors of shape ``(C,)``; c: the constant
            ``C`` (a number > 0 or a tensor).
    """
    check_choice("high_level", high_level, ("moore2016", "mgb1997"))
    if not isinstance(params, SpecificLoudnessParams):
        raise TypeError(f"params must be a SpecificLoudnessParams, got {type(params).__name__}")
    if isinstance(c, Tensor):
        check_tensor("c", c)
    else:
        check_positive_finite("c", c)
    n_ch = check_tensor("params.g", params.g, min_dim=1, max_dim=1, shape="(C,)").shape
    for k in ("a", "alpha", "e_thrq"):
        check_tensor(f"params.{k}", getattr(params, k), trailing=n_ch, max_dim=1, shape="(C,)")
    check_tensor("e", e, trailing=n_ch, shape=f"(..., {n_ch[0]})")
    if e.dtype not in FLOAT_DTYPES:
        raise TypeError(f"e must be float32 or float64 (1e10 overflows {e.dtype}), got {e.dtype}")
    _check_nonnegative("e", e, "excitation, intensity units re (20 µPa)²")
    g, a, alpha, thr = params.g, params.a, params.alpha, params.e_thrq
    core = (g * e + a) ** alpha - a**alpha
    n1 = c * core
    n2 = c * (2.0 * e / (e + thr)) ** 1.5 * core
    big = e > 1e10
    e_hi = torch.where(big, e, torch.full_like(e, 1e10))
    if high_level == "moore2016":
        n3 = c * (e_hi / 1.0707) ** 0.2
    else:
        n3 = c * (e_hi / 1.04e6) ** 0.5
    return torch.where(e > thr, torch.where(big, n3, n1), n2)

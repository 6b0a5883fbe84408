"""Modulation filterbank of the CASP model family (Dau, Kollmeier & Kohlrausch 1997b;
Jepsen, Ewert & Dau 2008; AMT ``modfilterbank``).

Per auditory channel with centre frequency ``fc``, on the adaptation-loop output ``x``:

* optional 150-Hz pre-filter: ``u = LP1_150(x)`` (1st-order Butterworth, Jepsen 2008),
  applied to the input of every band, else ``u = x``;
* band 0: 2nd-order Butterworth low-pass at ``lp_cutoff`` (2.5 Hz) of ``u`` (``mfc = 0``);
* bands with ``mfc > 0`` (``filter_type="efilt"``): complex resonator
  ``y = 2 (1 - e0) / (1 - e0 e^{i w0} z^-1) u``, ``w0 = 2 pi mfc / fs``,
  ``e0 = exp(-w / 2)`` with ``w = 2 pi 5 / fs`` (5-Hz bandwidth) for ``mfc < 10`` Hz and
  ``w = w0 / Q`` for ``mfc >= 10`` Hz;
* output ``Re y`` for ``mfc <= 10`` Hz, ``att_factor * |y|`` for ``mfc > 10`` Hz.

Centre frequencies: 0, 5, 10 Hz, then ``12.5 / (1 - 1/(2Q)) r^k`` with
``r = (1 + 1/(2Q)) / (1 - 1/(2Q))`` (16.67, 27.78, 46.30, ... Hz for ``Q = 2``), up to the
upper modulation frequency ``umf = min(upper_factor * fc, max_mfc)`` with the upper-limit
rule, else ``umf = max_mfc`` (Jepsen 2008 eq. 4: filters above a quarter of the channel's
centre frequency are dropped).

``filter_type="butterworth"`` replaces the first-order resonators by 2nd-order Butterworth
low-pass prototypes (cut-off at half the bandwidth) shifted to ``mfc`` (a complex
band-pass with a flat, symmetric pass band); low-pass band and output rules stay the same.
It is an extension, not part of the AMT.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._validation import (
    check_bool,
    check_frequencies,
    check_int,
    check_number,
    check_positive_finite,
    check_rate,
    check_signal,
)
from .butter import butter
from .iir import one_pole_cascade, resolve_backend, sosfilt

__all__ = [
    "MODULATION_PRESETS",
    "ModulationSettings",
    "modulation_center_frequencies",
    "ModulationBankDesign",
    "design_modulation_bank",
    "modulation_filterbank",
]


@dataclass(frozen=True)
class ModulationSettings:
    """The settings of a modulation filterbank that its presets fix (Dau et al. 1997b;
    Jepsen et al. 2008, Eq. 4); see the module docstring for how each enters the design.

    Attributes:
        Q: quality factor of the log-spaced bands (> 0.5: the band spacing
            ``1 - 1/(2Q)`` must be positive).
        max_mfc: highest modulation centre frequency (Hz, > 0).
        lp_cutoff: cut-off of the band-0 low-pass (Hz, > 0 and below ``fs / 2``).
        att_factor: gain of the bands above 10 Hz (> 0; Jepsen 2008: ``1 / sqrt(2)``).
        use_upper_limit: drop the bands above a quarter of the channel's centre frequency.
        lp150: 150-Hz first-order low-pass before the bank (Jepsen 2008).

    Checked at construction: ``TypeError``/``ValueError`` naming the field.
    """

    Q: float = 2.0
    max_mfc: float = 150.0
    lp_cutoff: float = 2.5
    att_factor: float = 1.0
    use_upper_limit: bool = False
    lp150: bool = False

    def __post_init__(self) -> None:
        checked = {
            "Q": check_number("Q", self.Q, min=0.5, min_inclusive=False),
            "max_mfc": check_positive_finite("max_mfc", self.max_mfc),
            "lp_cutoff": check_positive_finite("lp_cutoff", self.lp_cutoff),
            "att_factor": check_positive_finite("att_factor", self.att_factor),
            "use_upper_limit": check_bool("use_upper_limit", self.use_upper_limit),
            "lp150": check_bool("lp150", self.lp150),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)


_DAU = ModulationSettings()
# Jepsen et al. (2008): 150-Hz pre-filter, upper limit 0.25 fc, 1/sqrt(2) above 10 Hz
_JEPSEN = replace(_DAU, att_factor=1 / math.sqrt(2), use_upper_limit=True, lp150=True)

#: the settings of the named modulation filterbanks
MODULATION_PRESETS: dict[str, ModulationSettings] = {
    # torch_amt / CASP presets (max_mfc 150 Hz)
    "dau1997": _DAU,
    "jepsen2008": _JEPSEN,
    "paulick2024": _JEPSEN,
    # the AMT argument groups reproduced by the reference data (upper limit 1000 Hz)
    "amt-0.9.10": replace(_DAU, max_mfc=1000.0, use_upper_limit=True),
    "amt-1.4-jepsen2008": replace(_JEPSEN, max_mfc=1000.0),
    "amt-1.4-dau1997": replace(_DAU, max_mfc=1000.0),
}


def modulation_center_frequencies(
    fc: float,
    Q: float = 2.0,
    max_mfc: float = 150.0,
    use_upper_limit: bool = False,
    upper_factor: float = 0.25,
) -> np.ndarray:
    """Modulation centre frequencies (Hz) of the channel at ``fc``, band 0 (= 0 Hz) first."""
    check_positive_finite("fc", fc)
    # Q <= 1/2 makes the band spacing 1 - 1/(2Q) zero or negative
    check_number("Q", Q, min=0.5, min_inclusive=False)
    check_positive_finite("max_mfc", max_mfc)
    umf = min(upper_factor * fc, max_mfc) if use_upper_limit else max_mfc
    lin = [m for m in (5.0, 10.0) if m <= umf + 1e-12]
    den = 1.0 - 1.0 / (2.0 * Q)
    ratio = (1.0 + 1.0 / (2.0 * Q)) / den
    start = 12.5 / den
    logs = []
    if umf >= start:
        K = math.floor(math.log(umf / start) / math.log(ratio) + 1e-12)
        logs = [start * ratio**k for k in range(K + 1)]
    return np.array([0.0] + lin + logs, dtype=np.float64)


@dataclass
class ModulationBankDesign:
    """Coefficients of a modulation filterbank for ``C`` channels, bands padded to ``M``.

    ``mfc (C, M)`` is NaN in padding; ``n_bands (C,)`` counts valid bands (band 0 = low-pass).
    Band-pass bands are sums of ``P`` complex one-pole terms (``P = 1`` for ``efilt``):
    ``poles``/``gains`` ``(C, M, P)`` complex; ``direct`` ``(C, M)`` complex feed-through.
    ``use_abs`` ``(C, M)`` selects ``scale * |y|`` over ``Re y``; ``scale`` is 0 for padding.
    """

    fs: float
    mfc: np.ndarray
    n_bands: np.ndarray
    lp_sos: np.ndarray
    prefilter_sos: np.ndarray | None
    poles: np.ndarray
    gains: np.ndarray
    direct: np.ndarray
    use_abs: np.ndarray
    scale: np.ndarray


def _efilt_terms(mfc: float, fs: float, Q: float) -> tuple[list, list, complex]:
    w0 = 2 * math.pi * mfc / fs
    w = 2 * math.pi * 5.0 / fs if mfc < 10.0 else w0 / Q
    e0 = math.exp(-w / 2.0)
    return [e0 * complex(math.cos(w0), math.sin(w0))], [2.0 * (1.0 - e0)], 0j


def _butter_terms(mfc: float, fs: float, Q: float) -> tuple[list, list, complex]:
    bw = 5.0 if mfc < 10.0 else mfc / Q
    b, a = butter(2, (bw / 2.0) / (fs / 2.0))
    # partial fractions b(z)/a(z) = k + sum_i r_i / (1 - p_i z^-1) of the two-pole filter
    # (distinct conjugate poles; the z^-2 terms give the direct term k)
    k = [b[2] / a[2]]
    c0, c1 = b[0] - k[0] * a[0], b[1] - k[0] * a[1]
    p = np.roots(a)
    r = [(c0 + c1 / p[i]) / (1.0 - p[1 - i] / p[i]) for i in range(2)]
    rot = complex(math.cos(2 * math.pi * mfc / fs), math.sin(2 * math.pi * mfc / fs))
    # H(z e^{-i w0}): poles rotate, residues stay; factor 2 as for efilt
    direct = 2.0 * complex(k[0]) if len(k) else 0j
    return [complex(pp) * rot for pp in p], [2.0 * complex(rr) for rr in r], direct


def design_modulation_bank(
    fs: float,
    fc: np.ndarray,
    settings: ModulationSettings | None = None,
    *,
    filter_type: str = "efilt",
    upper_factor: float = 0.25,
    max_bands: int | None = None,
) -> ModulationBankDesign:
    """Design the filterbank for channels ``fc`` (Hz) with ``settings`` (default
    :class:`ModulationSettings`: the ``"dau1997"`` preset). Done once per configuration."""
    if settings is None:
        settings = ModulationSettings()
    if not isinstance(settings, ModulationSettings):
        raise TypeError(f"settings must be a ModulationSettings, got {type(settings).__name__}")
    if filter_type not in ("efilt", "butterworth"):
        raise ValueError(f"filter_type must be 'efilt' or 'butterworth', got {filter_type!r}")
    fs = check_rate("fs", fs)
    check_int("max_bands", max_bands, min=1, allow_none=True)
    fc = check_frequencies("fc", fc)
    Q, max_mfc, lp_cutoff = settings.Q, settings.max_mfc, settings.lp_cutoff
    for name, f in (("max_mfc", max_mfc), ("lp_cutoff", lp_cutoff)):
        if f >= fs / 2:
            raise ValueError(f"{name}={f:g} Hz must be below fs/2 = {fs / 2:g} Hz")
    limit = settings.use_upper_limit
    mfcs = [modulation_center_frequencies(f, Q, max_mfc, limit, upper_factor) for f in fc]
    if max_bands is not None:
        mfcs = [m[:max_bands] for m in mfcs]
    C = len(fc)
    M = max(len(m) for m in mfcs)
    P = 1 if filter_type == "efilt" else 2
    terms = _efilt_terms if filter_type == "efilt" else _butter_terms
    mfc = np.full((C, M), np.nan)
    poles = np.zeros((C, M, P), np.complex128)
    gains = np.zeros((C, M, P), np.complex128)
    direct = np.zeros((C, M), np.complex128)
    use_abs = np.zeros((C, M), bool)
    scale = np.zeros((C, M))
    for c, ms in enumerate(mfcs):
        mfc[c, : len(ms)] = ms
        scale[c, 0] = 1.0
        for k, f in enumerate(ms[1:], start=1):
            p, g, d = terms(f, fs, Q)
            poles[c, k, : len(p)] = p
            gains[c, k, : len(g)] = g
            direct[c, k] = d
            use_abs[c, k] = f > 10.0
            scale[c, k] = settings.att_factor if f > 10.0 else 1.0
    lp_sos = butter(2, lp_cutoff / (fs / 2.0), output="sos")
    pre = butter(1, 150.0 / (fs / 2.0), output="sos") if settings.lp150 else None
    return ModulationBankDesign(
        fs=fs,
        mfc=mfc,
        n_bands=np.array([len(m) for m in mfcs]),
        lp_sos=lp_sos,
        prefilter_sos=pre,
        poles=poles,
        gains=gains,
        direct=direct,
        use_abs=use_abs,
        scale=scale,
    )


def unpad_bands(y: Tensor, counts: tuple[int, ...] | list[int]) -> list[Tensor]:
    """Channel ``c`` of a padded filterbank output ``y (..., C, M, T)`` without its padded
    bands: ``y[..., c, :counts[c], :]`` for every channel, as views.

    One split of the ``(..., C * M, T)`` rows: under autograd a single backward node
    writes the gradient of every channel and the zeros of the padding in one pass (a
    slice per channel would each fill and copy a tensor of the whole channel, and the
    channel selects then stack them)."""
    check_signal(y, 0, None, name="y (..., C, M, T)", min_dim=3, allow_empty=True, finite=False)
    C, M = y.shape[-3], y.shape[-2]
    if len(counts) != C or any(not 0 <= int(n) <= M for n in counts):
        raise ValueError(
            f"counts must give 0..{M} bands for each of the {C} channels, got {list(counts)}"
        )
    sizes = [s for n in counts for s in (int(n), M - int(n))]
    parts = y.flatten(-3, -2).split(sizes, dim=-2)
    return list(parts[::2])


def _check_counts(counts: Sequence[int], C: int, M: int) -> tuple[int, ...]:
    counts = tuple(int(n) for n in counts)
    if len(counts) != C or any(not 1 <= n <= M for n in counts):
        raise ValueError(
            f"counts must give 1..{M} bands for each of the {C} channels, got {list(counts)}"
        )
    return counts


def _bandpass_rows(counts: tuple[int, ...], M1: int) -> Tensor:
    """The band-pass bands the channels have, channel by channel, as rows ``c M1 + m`` of
    the ``(C, M1)`` band-pass coefficients."""
    return torch.tensor([c * M1 + m for c, n in enumerate(counts) for m in range(n - 1)])


#: :func:`_bandpass_rows` cached for eager calls (traced calls build it: ``torch.compile``
#: does not trace through a cache)
_bandpass_select = lru_cache(maxsize=32)(_bandpass_rows)


def _packed_bandpass(
    u: Tensor,
    pole: Tensor,
    gain: Tensor,
    use_abs: Tensor,
    counts: tuple[int, ...],
    zi: Tensor | None,
    want_state: bool,
) -> tuple[Tensor, Tensor | None]:
    """The band-pass bands of ``u (..., C, T)`` that the channels have (operator
    ``lhotse_amt::resonator``, one row per band: no padded band is computed).

    ``pole``, ``gain`` (scale folded in), ``use_abs``: ``(C, M1)``. Returns the bands
    ``(..., J, T)`` channel by channel (``J = sum(counts) - C``) and, with ``want_state``,
    the final states in the padded layout ``(..., C, M1, 1)`` complex (zero for padded
    bands); ``zi`` is a state in that layout (``None``: at rest).
    """
    from .. import ops

    lead, C, M1 = u.shape[:-2], u.shape[-2], pole.shape[-1]
    rows = _bandpass_rows if torch.compiler.is_compiling() else _bandpass_select
    sel = rows(counts, M1).to(u.device)
    if zi is not None:
        zi = zi.expand(*lead, C, M1, 1).reshape(*lead, C * M1, 1)[..., sel, :]
    bands, zf = ops.one_pole_cascade(
        u.unsqueeze(-2), pole, gain, order=1, zi=zi, output="mixed", use_abs=use_abs, select=sel
    )
    if not want_state:
        return bands, None
    state = zf.new_zeros((*lead, C * M1, 1)).index_copy(-2, sel, zf)
    return bands, state.reshape(*lead, C, M1, 1)


def _channel_parts(lp: Tensor, bands: Tensor, counts: tuple[int, ...]) -> list[list[Tensor]]:
    """Per channel, its low-pass band ``(..., 1, T)`` and band-pass bands
    ``(..., n_c - 1, T)``: views from two splits (one backward node each)."""
    lps = lp.split(1, dim=-2)
    bps = bands.split([n - 1 for n in counts], dim=-2)
    return [[a, b] if b.shape[-2] else [a] for a, b in zip(lps, bps)]


def _assemble_padded(lp: Tensor, bands: Tensor, counts: tuple[int, ...], M: int) -> Tensor:
    """The padded output ``(..., C, M, T)`` from the low-pass bands ``(..., C, T)`` and
    the packed band-pass bands of :func:`_packed_bandpass` (one concatenation; the
    padding is read from an expanded zero)."""
    lead, T = lp.shape[:-2], lp.shape[-1]
    zero = lp.new_zeros(()).expand(*lead, M, T)
    parts = [
        t
        for part, n in zip(_channel_parts(lp, bands, counts), counts)
        for t in (*part, *([zero[..., : M - n, :]] if n < M else []))
    ]
    return torch.cat(parts, dim=-2).reshape(*lead, len(counts), M, T)


def _lowpass(
    x: Tensor,
    lp_sos: Tensor,
    prefilter_sos: Tensor | None,
    state: dict[str, Tensor],
    backend: str,
) -> tuple[Tensor, Tensor, dict[str, Tensor]]:
    """The band-pass input ``u`` (after the optional pre-filter) and the low-pass band of
    ``x (..., C, T)``, both in ``x``'s dtype, and their new states."""
    new_state: dict[str, Tensor] = {}
    u = x
    if prefilter_sos is not None:
        u, new_state["pre"] = sosfilt(
            u, prefilter_sos, state.get("pre"), return_state=True, backend=backend,
            out_dtype=x.dtype,
        )  # fmt: skip
    lp, new_state["lp"] = sosfilt(
        u, lp_sos, state.get("lp"), return_state=True, backend=backend, out_dtype=x.dtype
    )
    # the sections may run in a wider dtype than x (float64 low-pass, see ModulationFilterbank)
    return u.to(x.dtype), lp.to(x.dtype), new_state


def _packed_bands(
    u: Tensor,
    lp: Tensor,
    poles: Tensor,
    gains: Tensor,
    use_abs: Tensor,
    scale: Tensor,
    counts: tuple[int, ...],
    state: dict[str, Tensor],
    new_state: dict[str, Tensor] | None,
) -> tuple[Tensor, Tensor]:
    """The scaled low-pass bands ``(..., C, T)`` and the band-pass bands the channels have
    ``(..., J, T)`` (one resonator operator call; the scale, >= 0, folds into the gain);
    the band-pass state goes into ``new_state`` (``None``: not wanted)."""
    gain = gains[:, 1:, 0] * scale[:, 1:].to(gains.dtype)
    bands, bp_state = _packed_bandpass(
        u, poles[:, 1:, 0], gain, use_abs[:, 1:], counts, state.get("bp"), new_state is not None
    )
    if new_state is not None:
        new_state["bp"] = bp_state
    return lp * scale[:, 0, None], bands


def modulation_filterbank(
    x: Tensor,
    lp_sos: Tensor,
    poles: Tensor,
    gains: Tensor,
    direct: Tensor,
    use_abs: Tensor,
    scale: Tensor,
    prefilter_sos: Tensor | None = None,
    state: dict[str, Tensor] | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
    counts: Sequence[int] | None = None,
    channels: bool = False,
) -> Tensor | list[Tensor] | tuple[Tensor | list[Tensor], dict[str, Tensor]]:
    """Apply the modulation filterbank to ``x (..., C, T)``.

    Args:
        x: adaptation-loop output, ``(..., C, T)``.
        lp_sos: ``(S, 6)`` low-pass of band 0; ``prefilter_sos``: optional ``(S', 6)``.
        poles, gains: complex ``(C, M, P)``; ``direct`` complex ``(C, M)``;
        use_abs: bool ``(C, M)``; ``scale`` real ``(C, M)`` (0 for padded bands).
        state: dict of streaming states from a previous call.
        counts: bands of each channel (``n_bands`` of the design, as ints). The operator
            path then runs only these bands' resonators: the padded bands are not
            computed nor differentiated (their output is zero either way, their
            coefficients get zero gradients). ``None``: every band is computed.
        channels: return one tensor per channel, ``(..., counts[c], T)``, instead of the
            padded tensor (needs ``counts``): on the operator path each is assembled in
            one copy (no padded tensor), elsewhere they are views of the padded output.

    Returns:
        ``(..., C, M, T)`` with zeros in padded bands, or with ``channels`` the list of
        ``C`` channels (and the new state).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, min_dim=2, max_dim=None, allow_empty=True, name="x (..., C, T)")
    if poles.dim() != 3 or poles.shape[0] != x.shape[-2]:
        raise ValueError(
            f"poles must have shape (C, M, P) with C = {x.shape[-2]} channels of x, got "
            f"{tuple(poles.shape)}"
        )
    if counts is not None:
        counts = _check_counts(counts, poles.shape[0], poles.shape[1])
    elif channels:
        raise ValueError("channels=True needs the band counts (counts=)")

    def done(out: Tensor, new: dict[str, Tensor]) -> Any:
        out = unpad_bands(out, counts) if channels else out
        return (out, new) if return_state else out

    state = state or {}
    P = poles.shape[-1]
    if resolve_backend(backend, x, poles, gains) == "numba" and P == 1 and poles.shape[-2] > 1:
        from ..ops import filterbanks

        filters = (lp_sos, prefilter_sos, poles[:, 1:, 0], gains[:, 1:, 0], use_abs[:, 1:], scale)
        out, st = filterbanks.modulation_bank(x, filters, state)
        return done(out, st)
    u, lp, new_state = _lowpass(x, lp_sos, prefilter_sos, state, backend)
    be = resolve_backend(backend, u, poles, gains)
    M, P = poles.shape[-2], poles.shape[-1]
    if M > 1:
        bp_poles, bp_gains = poles[:, 1:], gains[:, 1:]
        bp_abs, bp_scale, bp_direct = use_abs[:, 1:], scale[:, 1:], direct[:, 1:]
        if P == 1 and backend not in ("torch", "reference") and counts is not None:
            st = new_state if return_state else None
            lp, bands = _packed_bands(u, lp, poles, gains, use_abs, scale, counts, state, st)
            if channels:
                parts = [torch.cat(part, dim=-2) for part in _channel_parts(lp, bands, counts)]
                return (parts, new_state) if return_state else parts
            return done(_assemble_padded(lp, bands, counts, M), new_state)
        elif P == 1 and backend not in ("torch", "reference"):
            from .. import ops

            # one operator call for every band of every channel: the scale (>= 0) folds
            # into the gain, Re or |.| per band
            bands, new_state["bp"] = ops.one_pole_cascade(
                u.unsqueeze(-2),
                bp_poles[..., 0],
                bp_gains[..., 0] * bp_scale.to(bp_gains.dtype),
                order=1,
                zi=state.get("bp"),
                output="mixed",
                use_abs=bp_abs,
            )
        else:
            ys = []
            sts = []
            prev = state.get("bp")
            for p in range(P):
                y, st = one_pole_cascade(
                    u.unsqueeze(-2),
                    bp_poles[..., p],
                    bp_gains[..., p],
                    order=1,
                    zi=None if prev is None else prev[..., p : p + 1],
                    output="complex",
                    return_state=True,
                    backend=be,
                )
                ys.append(y)
                sts.append(st)
            y = sum(ys)
            if bool((bp_direct != 0).any()):
                y = y + bp_direct[..., None] * u.unsqueeze(-2)
            new_state["bp"] = torch.cat(sts, -1)
            sq = y.real.square() + y.imag.square()
            # |y| with a zero (not NaN) gradient where y == 0 (e.g. before the signal starts)
            pos = sq > 0
            mag = torch.where(pos, torch.sqrt(torch.where(pos, sq, torch.ones_like(sq))), 0.0)
            bands = torch.where(bp_abs[..., None], mag, y.real) * bp_scale[..., None]
        out = torch.cat([lp.unsqueeze(-2) * scale[:, :1, None], bands], dim=-2)
    else:
        out = lp.unsqueeze(-2) * scale[:, :1, None]
    return done(out, new_state)

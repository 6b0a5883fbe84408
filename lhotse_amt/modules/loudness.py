"""Stage modules of the Moore–Glasberg loudness models (Glasberg & Moore 2002; Moore et al.
2016): thin ``nn.Module`` wrappers around :mod:`lhotse_amt.functional.loudness` whose
coefficients are designed once in ``__init__`` and stored as buffers (or parameters with
``learnable=True``). :class:`lhotse_amt.models.Glasberg2002` and
:class:`lhotse_amt.models.Moore2016` compose them.

Every ``forward`` is the plain-torch reference (differentiable, traceable by
``torch.compile``); the models' no-gradient CPU fast path
(:mod:`lhotse_amt.ops.loudness_fast`) reads the same buffers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import (
    check_bool,
    check_choice,
    check_dtype,
    check_frequencies,
    check_indices,
    check_number,
    check_positive_finite,
    check_real_array,
    check_tensor,
)
from ..functional import loudness as L
from ._common import register_coefficients

if TYPE_CHECKING:
    from ..kernels.loudness_plans import KeepRule, TailConstants

__all__ = [
    "OuterMiddleEarFilter",
    "MultiResolutionSpectrum",
    "ERBIntegration",
    "ExcitationPattern",
    "SpecificLoudness",
    "LoudnessAGC",
    "LoudnessIntegration",
    "BinauralInhibition",
]


def _buffer(module: nn.Module, name: str, value: np.ndarray | float, dtype: torch.dtype) -> None:
    module.register_buffer(name, torch.tensor(value, dtype=dtype), persistent=False)


class OuterMiddleEarFilter(nn.Module):
    """Outer + middle-ear FIR, applied by FFT convolution (zero phase: its delay is removed).

    Args:
        taps: odd-length, finite FIR taps (default: the 4097-tap free-field ``ff_32000`` filter of
            ANSI S3.4-2007 / Glasberg & Moore 2002 at 32 kHz, ``lhotse_amt/data``).
        dtype: buffer dtype.

    ``forward``: pressure ``(..., T)`` (Pa) -> full convolution ``(..., T + M - 1)``; output index
    ``m`` is input time ``m - delay``.
    """

    def __init__(self, taps: np.ndarray | None = None, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        if taps is None:
            taps = L.loudness_tables()["ff_32000"]
        check_dtype("dtype", dtype)
        taps = check_real_array("ear filter taps", taps)
        if taps.ndim != 1 or len(taps) % 2 == 0:
            raise ValueError(
                f"ear filter taps must be a 1-D array of odd length, got shape {taps.shape}"
            )
        _buffer(self, "fir", taps, dtype)

    @property
    def delay(self) -> int:
        """Delay of the linear-phase FIR (samples), ``(M - 1) / 2``."""
        return (self.fir.shape[0] - 1) // 2

    def forward(self, x: Tensor) -> Tensor:
        return L.fir_filter_full(x, self.fir)

    def extra_repr(self) -> str:
        return f"taps={self.fir.shape[0]}"


class MultiResolutionSpectrum(nn.Module):
    """Six-window spectrum with a 1-ms hop (Hann 64 … 2 ms on a 2048-point grid) and the rule
    that picks the components entering the excitation stage.

    Args:
        variant: band plan and window normalisation, ``"gm2002"`` (Glasberg & Moore 2002,
            periodic Hann, energy normalised) or ``"moore2016"`` (Cambridge/AMT code).
        prune: keep a component only if it is at most 60 dB below the frame's strongest and
            above -30 dB SPL (:func:`lhotse_amt.functional.loudness.prune_components`);
            otherwise keep components above ``floor``.
        floor: intensity (re (20 µPa)²) at or below which a component is ignored when
            ``prune`` is False.
        dtype: buffer dtype.

    Buffers ``basis_0 … basis_5`` ``(L, 2 n)``: the windowed DFT bases of the six windows;
    ``freqs`` ``(960,)`` float64: the components' frequencies (Hz).
    ``forward(z, t0, j_first, n_frames)``: component intensities ``(..., F, 960)`` (see
    :func:`lhotse_amt.functional.loudness.multires_intensity`).
    """

    def __init__(
        self,
        variant: str,
        prune: bool = False,
        floor: float = 0.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        check_choice("variant", variant, L.VARIANTS)
        check_dtype("dtype", dtype)
        self.variant = variant
        self.prune = check_bool("prune", prune)
        self.floor = check_number("floor", floor, min=0.0)
        # each band as a range of bins (contiguous in both plans): plain Python constants,
        # so torch.compile specialises on them instead of tracing numpy
        self.bins: list[range] = []
        for i, (_, bins, basis) in enumerate(L.dft_bases(variant)):
            if len(bins) and int(bins[-1]) - int(bins[0]) + 1 != len(bins):
                raise ValueError(f"band {i} of plan {variant!r} is not contiguous")
            self.bins.append(range(int(bins[0]), int(bins[-1]) + 1) if len(bins) else range(0))
            _buffer(self, f"basis_{i}", basis, dtype)
        _buffer(self, "freqs", L.bin_hz(), torch.float64)

    def bases(self) -> list[tuple[int, range, Tensor]]:
        """``(L, bins, basis)`` per window, the ``bases`` argument of the spectrum functions."""
        return [
            (L.WINDOW_LENGTHS[i], b, getattr(self, f"basis_{i}")) for i, b in enumerate(self.bins)
        ]

    @property
    def keep_rule(self) -> KeepRule:
        """The component rule for the fast kernels."""
        from ..kernels.loudness_plans import KeepRule

        return KeepRule(True, 1000.0) if self.prune else KeepRule(False, self.floor)

    def kept(self, intensity: Tensor) -> Tensor:
        """Boolean mask of the components entering the excitation stage, shape of ``intensity``."""
        if self.prune:
            return L.prune_components(intensity)
        return intensity > self.floor

    def forward(self, z: Tensor, t0: int, j_first: int, n_frames: int) -> Tensor:
        return L.multires_intensity(z, t0, j_first, n_frames, self.bases())

    def extra_repr(self) -> str:
        rule = "prune" if self.prune else f"floor={self.floor:g}"
        return f"variant={self.variant!r}, {rule}"


def _gather_cols(m: Tensor, cols: Tensor | None) -> Tensor:
    """Rows ``cols`` of ``m`` (all rows for ``None``); ``cols`` a 1-D integer tensor."""
    return m if check_indices("cols", cols) is None else m[cols]


def _excitation_design(
    module: nn.Module, fc: np.ndarray, variant: str, dtype: torch.dtype
) -> L.ExcitationMatrices:
    """Checks ``fc`` and ``dtype``, sets ``module``'s ``variant``, ``per_channel`` (the
    per-channel level of ``"gm2002"``) and ``fc_hz`` and returns the roex matrices
    (:func:`lhotse_amt.functional.loudness.excitation_matrices`) of :class:`ERBIntegration`
    and :class:`ExcitationPattern`."""
    check_dtype("dtype", dtype)
    module.fc_hz = check_frequencies("fc", fc)
    module.variant = variant
    module.per_channel = variant == "gm2002"
    return L.excitation_matrices(module.fc_hz, variant)


class ERBIntegration(nn.Module):
    """Input level per ERB (dB) that sets the lower roex slopes (Glasberg & Moore 2002,
    Sec. 2.3; Cambridge 2016 code).

    Args:
        fc: channel centre frequencies (Hz), ``(C,)``.
        variant: ``"gm2002"`` (level at the channel centres), ``"component"`` (at each
            component, roex centred there) or ``"moore2016"`` (at each component, the
            component's own roex); see :func:`lhotse_amt.functional.loudness.excitation_matrices`.
        dtype: buffer dtype.

    ``forward(intensity, cols=None)``: kept intensities ``(..., K)`` -> level ``(..., C)`` or
    ``(..., K)`` (dB); ``cols`` (int64 ``(K,)``): the bins ``intensity`` holds (default all 960).
    """

    def __init__(self, fc: np.ndarray, variant: str, dtype: torch.dtype = torch.float32) -> None:
        super().__init__()
        mats = _excitation_design(self, fc, variant, dtype)
        _buffer(self, "level", mats.level, dtype)

    @property
    def n_erb_bands(self) -> int:
        """Number of channels ``C``."""
        return len(self.fc_hz)

    def forward(self, intensity: Tensor, cols: Tensor | None = None) -> Tensor:
        level = _gather_cols(self.level, cols)
        if cols is not None and not self.per_channel:
            level = level[:, cols]
        return L.erb_level_db(intensity, level)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, n_erb_bands={self.n_erb_bands}"


class ExcitationPattern(nn.Module):
    """Excitation pattern from rounded-exponential filters with level-dependent lower slopes
    (Moore, Glasberg & Baer 1997, Eq. 4; ANSI S3.4-2007, Eq. 5).

    Args:
        fc: channel centre frequencies (Hz), ``(C,)``.
        variant: level variant of :class:`ERBIntegration`.
        with_level: hold the :class:`ERBIntegration` as submodule ``erb_integration`` and compute
            the level itself (Moore2016); otherwise ``forward`` takes it (Glasberg2002, where
            the level is a stage of its own).
        dtype: buffer dtype.

    ``forward(intensity, level_db=None, cols=None)``: kept intensities ``(..., K)`` -> excitation
    ``(..., C)`` (intensity units re (20 µPa)²; floored at 1e-10 for the per-component
    variants, as in the Cambridge code).
    """

    def __init__(
        self,
        fc: np.ndarray,
        variant: str,
        with_level: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        check_bool("with_level", with_level)
        mats = _excitation_design(self, fc, variant, dtype)
        fc = self.fc_hz
        self.n_below = tuple(int(v) for v in mats.n_below)  # constants for torch.compile
        _buffer(self, "upper", mats.upper, dtype)
        _buffer(self, "lower_h", mats.lower_h, dtype)
        self.erb_integration = ERBIntegration(fc, variant, dtype) if with_level else None

    def forward(
        self, intensity: Tensor, level_db: Tensor | None = None, cols: Tensor | None = None
    ) -> Tensor:
        if level_db is None:
            if self.erb_integration is None:
                raise ValueError("level_db is required (this stage has no erb_integration)")
            level_db = self.erb_integration(intensity, cols)
        upper = _gather_cols(self.upper, cols)
        n_below = self.n_below
        if cols is not None:
            n_below = np.searchsorted(cols.cpu().numpy(), n_below)
        e = L.excitation_pattern(
            intensity,
            level_db,
            upper,
            _gather_cols(self.lower_h, cols),
            n_below,
            self.per_channel,
        )
        return e if self.per_channel else e.clamp_min(1e-10)

    def extra_repr(self) -> str:
        return f"variant={self.variant!r}, channels={self.upper.shape[1]}"


class SpecificLoudness(nn.Module):
    """Specific loudness ``N'`` (sone/Cam) from excitation (Moore, Glasberg & Baer 1997,
    Eqs. 2–4; ANSI S3.4-2007, Eqs. 17–19).

    Args:
        fc: channel centre frequencies (Hz), ``(C,)``.
        c: the constant ``C`` (0.046871 in Glasberg & Moore 2002 / ANSI; 0.0631 in Moore 2016).
        high_level: branch above 1e10, ``"mgb1997"`` or ``"moore2016"``.
        lowest_channel: ``"extrapolate"`` (A(G) extrapolated, MATLAB) or ``"zero"`` (channels
            outside the A(G) table get ``N' = 0``, GNU Octave as in the AMT 1.4 reference run).
        learnable: ``C`` becomes a parameter.
        dtype: buffer dtype.

    Buffers ``e_thrq``, ``g``, ``alpha``, ``a``, ``channel_mask`` ``(C,)``; ``c`` (scalar).
    ``forward(e)``: ``(..., C)`` -> ``(..., C)``.
    """

    def __init__(
        self,
        fc: np.ndarray,
        c: float,
        high_level: str = "mgb1997",
        lowest_channel: str = "extrapolate",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        check_choice("high_level", high_level, ("mgb1997", "moore2016"))
        check_choice("lowest_channel", lowest_channel, ("zero", "extrapolate"))
        c = check_positive_finite("c", c)
        check_dtype("dtype", dtype)
        fc = check_frequencies("fc", fc)
        self.high_level = high_level
        self.lowest_channel = lowest_channel
        prm = L.specific_loudness_params(fc, "extrapolate")
        outside = np.isnan(L.specific_loudness_params(fc, "nan").a)
        keep = np.where(outside & (lowest_channel == "zero"), 0.0, 1.0)
        for k in ("e_thrq", "g", "alpha", "a"):
            _buffer(self, k, getattr(prm, k), dtype)
        _buffer(self, "channel_mask", keep, dtype)
        register_coefficients(self, learnable, persistent=False, c=torch.tensor(c, dtype=dtype))
        self._tail: TailConstants | None = None

    def params(self) -> L.SpecificLoudnessParams:
        """The per-channel constants as tensors."""
        return L.SpecificLoudnessParams(self.e_thrq, self.g, self.alpha, self.a)

    def tail_constants(self) -> TailConstants:
        """The constants of the fused CPU kernel (numpy, built once)."""
        if self._tail is None:
            from ..kernels.loudness_plans import TailConstants

            t = {k: getattr(self, k).detach().cpu().numpy() for k in ("g", "a", "alpha", "e_thrq")}
            a_alpha = (self.a**self.alpha).detach().cpu().numpy()
            mask = self.channel_mask.cpu().numpy()
            self._tail = TailConstants(a_alpha=a_alpha, mask=mask, **t)
        return self._tail

    def forward(self, e: Tensor) -> Tensor:
        n = L.specific_loudness(e, self.params(), self.c, self.high_level)
        if self.lowest_channel == "zero":
            n = n * self.channel_mask
        return n

    def extra_repr(self) -> str:
        return f"c={float(self.c):g}, high_level={self.high_level!r}"


class LoudnessAGC(nn.Module):
    """Attack/release AGC along an axis (Glasberg & Moore 2002, Sec. 2.6; Moore et al. 2016,
    Eqs. 4–5): ``S[j] = S[j-1] + a (N[j] - S[j-1])`` with ``a = attack_alpha`` if
    ``N[j] > S[j-1]`` else ``release_alpha`` (per 1-ms frame), ``S[-1] = 0``.

    Each call starts from ``S[-1] = 0``: nothing is carried between calls. ``backend``: that of
    :func:`lhotse_amt.functional.loudness.agc`. ``forward(x, dim=-1)``: same shape.
    """

    def __init__(self, attack_alpha: float, release_alpha: float, backend: str = "auto") -> None:
        super().__init__()
        self.attack_alpha = check_number(
            "attack_alpha", attack_alpha, min=0.0, max=1.0, min_inclusive=False
        )
        self.release_alpha = check_number(
            "release_alpha", release_alpha, min=0.0, max=1.0, min_inclusive=False
        )
        self.backend = check_choice("backend", backend, L.AGC_BACKENDS)

    def forward(self, x: Tensor, dim: int = -1) -> Tensor:
        return L.agc(x, self.attack_alpha, self.release_alpha, dim, self.backend)

    def extra_repr(self) -> str:
        return f"attack_alpha={self.attack_alpha:g}, release_alpha={self.release_alpha:g}"


class LoudnessIntegration(nn.Module):
    """Instantaneous, short- and long-term loudness of Glasberg & Moore (2002), Sec. 2.5–2.6.

    ``inst = ears × Σ N' / 4`` (``ears = 2`` for diotic presentation), short-term loudness
    ``stl`` = AGC of ``inst`` (submodule ``stl_agc``), long-term loudness ``ltl`` = AGC of
    ``stl`` (``ltl_agc``). ``forward(specific_loudness (..., F, C))`` -> ``(inst, stl, ltl)``,
    each ``(..., F)`` (sone).
    """

    def __init__(
        self,
        stl_attack: float,
        stl_release: float,
        ltl_attack: float,
        ltl_release: float,
        diotic: bool = True,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        self.stl_agc = LoudnessAGC(stl_attack, stl_release, backend)
        self.ltl_agc = LoudnessAGC(ltl_attack, ltl_release, backend)
        self.diotic = check_bool("diotic", diotic)

    @property
    def ears(self) -> float:
        """2 for diotic presentation, 1 for monaural."""
        return 2.0 if self.diotic else 1.0

    def forward(self, specific_loudness: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        check_tensor("specific_loudness", specific_loudness, min_dim=2, shape="(..., F, C)")
        inst = self.ears * specific_loudness.sum(-1) / 4.0
        stl = self.stl_agc(inst)
        return inst, stl, self.ltl_agc(stl)

    def extra_repr(self) -> str:
        return f"diotic={self.diotic}"


class BinauralInhibition(nn.Module):
    """Binaural inhibition of Moore et al. (2016), Eqs. 6–7: Gaussian smoothing across
    channels (``exp(-(sigma g)^2)``, ``g = -18 … 18`` Cam) and ``I_L = 2 / (1 + sech(Ŝ_R /
    Ŝ_L)^p)``.

    Args:
        n_channels: channels ``C``; step: channel spacing (Cam).
        sigma: smoothing parameter (0.08); p: inhibition exponent (1.5978).
        learnable: ``p`` becomes a parameter.
        dtype: buffer dtype.

    ``forward(s_left, s_right)`` (``(..., C)`` each) -> inhibited ``(s_left, s_right)``.
    """

    def __init__(
        self,
        n_channels: int,
        sigma: float = 0.08,
        p: float = 1.5978,
        step: float = 0.25,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.sigma = check_positive_finite("sigma", sigma)
        p = check_positive_finite("p", p)
        check_dtype("dtype", dtype)
        _buffer(self, "smooth", L.binaural_smoothing_matrix(n_channels, self.sigma, step), dtype)
        register_coefficients(self, learnable, persistent=False, p=torch.tensor(p, dtype=dtype))

    def forward(self, s_left: Tensor, s_right: Tensor) -> tuple[Tensor, Tensor]:
        return L.binaural_inhibition(s_left, s_right, self.smooth, self.p)

    def extra_repr(self) -> str:
        return f"sigma={self.sigma:g}, p={float(self.p):g}"

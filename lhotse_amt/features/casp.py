"""Lhotse extractors of the CASP model family (modulation-filterbank models).

Feature layout (:meth:`feature_names` names every column):

* ``stage="modulation"`` (default): one column per (auditory channel, modulation band),
  channel-major, low-pass band first. ``layout="compact"`` keeps only the bands each
  channel has (with the upper-limit rule low channels have fewer), ``layout="padded"``
  gives every channel ``max_bands`` columns, zero where a band does not exist, so the
  matrix reshapes to ``(frames, channels, max_bands)``. Both are fixed for a config.
* ``stage="adaptation"``: one column per auditory channel (the adaptation-loop output).

Values are in model units (MU, AMT convention): 0 MU is silence (the adaptation loops'
minimum level), so **pad with 0.0**: :func:`lhotse_amt.pad_cut` / :func:`lhotse_amt.pad_cuts`
and :func:`lhotse_amt.collate_features` do (Lhotse's own ``cut.pad()`` and collation fill
``LOG_EPSILON`` = -23.03 unless ``pad_feat_value=0.0`` is passed; see
:mod:`lhotse_amt.padding`).

**Feature-domain mixing** (``mix``/``compute_energy``/``scale``, used by Lhotse for lazy
``MixedCut`` features) is an approximation: the models are nonlinear. The hooks map each
value to a signed intensity (:func:`mu_to_intensity`: the adaptation loops' steady-state
inverse ``a^2`` with ``MU = (a^(1/32) - c) 100 / (1 - c)``, ``c = 1e-5^(1/32)``, up to
:data:`MIX_KNEE_MU`, linear above it, odd for negative values), add the intensities with
Lhotse's energy factor, and map back, so a negligible addition leaves the features unchanged.
Lhotse's padding values (-1000, -23.03) are treated as silence. Extracting from the mixed
audio (``mix_eagerly=True``, or ``OnTheFlyFeatures`` on mixed cuts) is exact; see the README
for the measured error.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lhotse.features.base import register_extractor
from lhotse.utils import LOG_EPSILON
from torch import Tensor

from .._validation import (
    check_bool,
    check_choice,
    check_int,
    check_level_db,
    check_number,
    check_positive_finite,
)
from ..functional.ihc import IHC_PRESETS
from ..functional.modulation import MODULATION_PRESETS
from ..models.dau1997 import DAU1997_PRESETS, Dau1997
from ..models.king2019 import KING2019_PRESETS
from ..models.osses2021 import OSSES2021_PRESETS
from .base import AuditoryConfig, AuditoryExtractor

__all__ = [
    "Dau1997Config",
    "Dau1997Extractor",
    "King2019Config",
    "King2019Extractor",
    "Osses2021Config",
    "Osses2021Extractor",
    "intensity_to_mu",
    "mu_to_intensity",
]

_MINLVL = 1e-5  # 0 dB SPL on the AMT 100-dB scale
_C = _MINLVL ** (1.0 / 32.0)
#: Lhotse's feature padding values: ``FeatureMixer``'s ``padding_value`` and ``LOG_EPSILON``
#: (``PaddingCut``'s default ``feat_value``); read as silence by the mixing hooks
_LHOTSE_PADDING = (-1000.0, LOG_EPSILON)


def _without_padding(features: np.ndarray) -> np.ndarray:
    """``features`` as float64 with Lhotse's padding values (-1000 and -23.03, within 1e-5 so
    that the float32 and float64 forms both match) replaced by 0 (silence)."""
    f = np.array(features, dtype=np.float64)
    pad = np.zeros(f.shape, dtype=bool)
    for v in _LHOTSE_PADDING:
        pad |= np.abs(f - v) <= 1e-5
    f[pad] = 0.0
    return f


#: model units up to which the mixing hooks read a value as a steady-state level
MIX_KNEE_MU = 30.0
_KNEE_BASE = MIX_KNEE_MU * (1.0 - _C) / 100.0 + _C
_KNEE_INTENSITY = _KNEE_BASE**64 - _MINLVL**2
_KNEE_SLOPE = 64.0 * _KNEE_BASE**63 * (1.0 - _C) / 100.0  # d intensity / d MU at the knee


def mu_to_intensity(mu: np.ndarray) -> np.ndarray:
    """Model units -> signed intensity-like quantity of the feature-domain mixing hooks.

    Up to :data:`MIX_KNEE_MU` (30 MU) in magnitude, the steady-state inverse of the
    adaptation loops: ``a^2 - minlvl^2`` with ``a = (|MU| (1 - c) / 100 + c)^32`` the
    amplitude on the 100-dB scale that gives ``|MU|`` in steady state (``c = minlvl^(1/32)``,
    ``minlvl = 1e-5``; Dau et al. 1996, JASA 99, 3615). Above the knee it continues linearly
    with the slope it has there: larger values are onsets (overshoot) and modulation-band
    excursions, not steady levels, and read as levels (the power 64) a 300-MU onset of a
    65-dB noise would be a 170-dB intensity that no SNR gain could make negligible.

    The mapping is odd: values below 0 MU (the undershoot after offsets, modulation bands
    below their mean) map to negative values of the same size, so adding a small intensity
    changes every value a little (see :class:`_MUMixing`). Lhotse's padding values (-1000,
    -23.03) map to 0 (silence).
    """
    m = _without_padding(mu)
    a = np.abs(m)
    low = (np.minimum(a, MIX_KNEE_MU) * ((1.0 - _C) / 100.0) + _C) ** 64 - _MINLVL**2
    mag = np.where(a <= MIX_KNEE_MU, low, _KNEE_INTENSITY + (a - MIX_KNEE_MU) * _KNEE_SLOPE)
    return np.copysign(np.where(a == 0.0, 0.0, mag), m)  # silence exactly 0


def intensity_to_mu(intensity: np.ndarray) -> np.ndarray:
    """Inverse of :func:`mu_to_intensity` (odd: negative values give negative MU)."""
    i = np.asarray(intensity, dtype=np.float64)
    a = np.abs(i)
    low = ((np.minimum(a, _KNEE_INTENSITY) + _MINLVL**2) ** (1.0 / 64.0) - _C) * (
        100.0 / (1.0 - _C)
    )
    mag = np.where(a <= _KNEE_INTENSITY, low, MIX_KNEE_MU + (a - _KNEE_INTENSITY) / _KNEE_SLOPE)
    return np.copysign(np.where(a == 0.0, 0.0, np.maximum(mag, 0.0)), i)  # silence exactly 0


class _MUMixing:
    """Feature-domain mixing hooks for model-unit features (see the module docstring).

    Each value is mapped to a signed intensity by :func:`mu_to_intensity`, the intensities
    are added with Lhotse's energy factor, and the sum is mapped back. The mapping is odd
    and invertible, so ``mix(a, b, g)`` tends to ``a`` as ``g`` tends to 0 for every value,
    negative ones included (``scale(a, 1) == a`` to rounding).
    """

    @staticmethod
    def compute_energy(features: np.ndarray) -> float:
        # mean intensity magnitude; Lhotse requires a positive energy (silence: the minimum
        # level's intensity)
        return float(np.mean(np.abs(mu_to_intensity(features)))) + _MINLVL**2

    @staticmethod
    def mix(
        features_a: np.ndarray, features_b: np.ndarray, energy_scaling_factor_b: float
    ) -> np.ndarray:
        ia = mu_to_intensity(features_a)
        ib = mu_to_intensity(features_b)
        return intensity_to_mu(ia + energy_scaling_factor_b * ib).astype(np.float32)

    @staticmethod
    def scale(features: np.ndarray, energy_scaling_factor: float) -> np.ndarray:
        return intensity_to_mu(energy_scaling_factor * mu_to_intensity(features)).astype(np.float32)


def _check_grid(c: Any) -> None:
    """``0 < flow < fhigh`` (Hz), both finite (normalised to floats)."""
    c.flow = check_positive_finite("flow", c.flow)
    c.fhigh = check_positive_finite("fhigh", c.fhigh)
    if not c.flow < c.fhigh:
        raise ValueError(f"flow must be below fhigh, got flow={c.flow}, fhigh={c.fhigh}")


def _check_modulation(c: Any, with_preset: bool = True) -> None:
    """The optional modulation-filterbank fields shared by the MU configs."""
    if with_preset:
        check_choice("modulation_preset", c.modulation_preset, (None, *MODULATION_PRESETS))
    c.max_mfc = check_positive_finite("max_mfc", c.max_mfc, allow_none=True)
    c.use_upper_limit = check_bool("use_upper_limit", c.use_upper_limit, allow_none=True)
    c.att_factor = check_positive_finite("att_factor", c.att_factor, allow_none=True)
    c.lp150 = check_bool("lp150", c.lp150, allow_none=True)
    c.adaptation_limit = check_number(
        "adaptation_limit", c.adaptation_limit, min=0.0, allow_none=True
    )


@dataclass
class Dau1997Config(AuditoryConfig):
    """Config of ``amt-dau1997``. Model fields left ``None`` take the model's defaults
    (or the ``preset``'s). See :class:`lhotse_amt.Dau1997`.

    Attributes:
        preset: ``"amt-0.9.10"``, ``"amt-1.4"``, ``"amt-1.4-mfb-dau1997"`` or ``None``.
        flow, fhigh: gammatone grid range (Hz); ``basef``: base frequency of the grid.
        ihc_method: IHC preset; adaptation_limit: overshoot limit.
        modulation_preset, max_mfc, use_upper_limit, att_factor, lp150, filter_type:
            modulation filterbank settings.
        stage: ``"modulation"`` or ``"adaptation"`` output.
        layout: ``"compact"`` or ``"padded"`` modulation columns.

    Checked at construction (see :class:`AuditoryConfig`): frequencies finite and > 0 with
    ``flow < fhigh``; ``adaptation_limit >= 0``; ``max_mfc``, ``att_factor`` > 0; the
    string fields one of their listed values; the ``bool`` fields ``True``/``False``
    (``None`` where the default is ``None``).
    """

    preset: str | None = None
    flow: float = 80.0
    fhigh: float = 8000.0
    basef: float | None = None
    ihc_method: str | None = None
    adaptation_limit: float | None = None
    modulation_preset: str | None = None
    max_mfc: float | None = None
    use_upper_limit: bool | None = None
    att_factor: float | None = None
    lp150: bool | None = None
    filter_type: str = "efilt"
    stage: str = "modulation"
    layout: str = "compact"

    def validate(self) -> None:
        super().validate()
        check_choice("preset", self.preset, (None, *DAU1997_PRESETS))
        _check_grid(self)
        self.basef = check_positive_finite("basef", self.basef, allow_none=True)
        check_choice("ihc_method", self.ihc_method, (None, *IHC_PRESETS))
        _check_modulation(self)
        check_choice("filter_type", self.filter_type, ("efilt", "butterworth"))
        check_choice("stage", self.stage, ("modulation", "adaptation"))
        check_choice("layout", self.layout, ("compact", "padded"))


class _FusedCPU:
    """Fused pooled CPU feature path (inference on the CPU, ``stage="modulation"``).

    A model opts in through :meth:`_fused_supported` and :meth:`_fused_block_sums`, which
    runs its whole chain in one kernel pass over the samples
    (:mod:`lhotse_amt.kernels.casp`, :mod:`lhotse_amt.kernels.king2019`: SIMD across
    channels and modulation bands) and returns per-block sums of the features, so no
    sample-rate tensor is built. The recursions run in float64 with coefficients from a
    float64 twin of the model; in float64 the result equals the stage-wise path to
    rounding, in float32 it is within 1e-5 of it (the kernels' float32 limiter and band
    magnitudes, see :mod:`lhotse_amt.kernels.casp`).
    """

    def _fused_ok(self, model: torch.nn.Module, x: Tensor) -> bool:
        return (
            self.config.stage == "modulation"
            and x.device.type == "cpu"
            and not torch.is_grad_enabled()
            and self._fused_supported(model)
        )

    def _fused_supported(self, model: torch.nn.Module) -> bool:
        return False

    def _fused_block_sums(
        self, model: torch.nn.Module, x: Tensor, state: dict, t0: int, ends: list[int]
    ) -> tuple[Tensor, Any]:  # pragma: no cover - abstract
        """Block sums ``(B, C, M, ceil(Tc / hop))`` of chunk ``x (B, 1, Tc)`` (of squares
        for rms pooling) and the new state."""
        raise NotImplementedError

    def _column_index(self) -> np.ndarray | None:
        return None

    def _fused_plan(self, model: torch.nn.Module, make: Any) -> Any:
        """The kernel layout ``make(model64, precise)`` of ``model``, built once and cached.
        The kernels compute in float64 whatever the config dtype, so their coefficients
        come from a float64 twin of the model (not from float32-rounded buffers)."""
        plans = self.__dict__.setdefault("_fused_plans", {})
        key = id(model)
        if key not in plans:
            precise = self.torch_dtype == torch.float64
            if precise:
                m64 = model
            else:
                twin = type(self)(dataclasses.replace(self.config, dtype="float64"))
                m64 = twin.model("cpu")
            plans[key] = make(m64, precise)
        return plans[key]

    def _chunk_frames(
        self,
        model: torch.nn.Module,
        x: Tensor,
        state: Any,
        t0: int,
        ends: list[int],
        frames: list[list[Tensor]],
    ) -> Any:
        if not self._fused_ok(model, x):
            return super()._chunk_frames(model, x, state, t0, ends, frames)  # type: ignore[misc]
        sums, new = self._fused_block_sums(model, x, state or {}, t0, ends)
        B, C, M, nblk = sums.shape
        # numpy on this thread (a torch copy or gather opens a parallel region)
        sums_np = sums.numpy().reshape(B, C * M, nblk)
        cols = self._column_index()
        if cols is not None:
            sums_np = sums_np[:, cols]
        sums = torch.from_numpy(sums_np)
        self._frames_from_block_sums(sums, t0, ends, frames)  # type: ignore[attr-defined]
        return new


class _CASPExtractor(_MUMixing, _FusedCPU, AuditoryExtractor):
    """Common code of the modulation-filterbank extractors."""

    stages: ClassVar[tuple[str, ...]] = ("modulation", "adaptation")
    #: models whose gammatone-IHC-loops-modulation chain the fused CPU path runs
    _fused_models: ClassVar[tuple[type, ...]] = ()

    def _check_config(self) -> None:
        super()._check_config()
        if self.config.stage not in self.stages:
            raise ValueError(f"stage must be one of {self.stages}, got {self.config.stage!r}")
        if self.config.layout not in ("compact", "padded"):
            raise ValueError(f"layout must be 'compact' or 'padded', got {self.config.layout!r}")

    def _spec(self) -> tuple[np.ndarray, np.ndarray]:
        """(auditory centre frequencies (C,), modulation centre frequencies (C, M) with NaN)."""
        m = self.model("cpu")
        return m.fc.detach().double().numpy(), m.modulation.mfc_padded.detach().double().numpy()

    def _column_index(self) -> np.ndarray | None:
        if self.config.stage != "modulation":
            return None
        fc, mfc = self._spec()
        if self.config.layout == "padded":
            return None
        return np.flatnonzero(~np.isnan(mfc.reshape(-1)))

    def feature_dim(self, sampling_rate: int) -> int:
        self._check_rate(sampling_rate)
        fc, mfc = self._spec()
        if self.config.stage != "modulation":
            return len(fc)
        return int(mfc.size if self.config.layout == "padded" else np.count_nonzero(~np.isnan(mfc)))

    def feature_names(self) -> list[str]:
        fc, mfc = self._spec()
        if self.config.stage != "modulation":
            return [f"fc={f:.1f}Hz" for f in fc]
        names = []
        for c, f in enumerate(fc):
            for m in mfc[c]:
                if np.isnan(m):
                    if self.config.layout == "padded":
                        names.append(f"fc={f:.1f}Hz/mfc=none")
                    continue
                names.append(f"fc={f:.1f}Hz/mfc={m:.2f}Hz")
        return names

    def _fused_supported(self, model: torch.nn.Module) -> bool:
        from ..kernels.casp import fused_supported

        return isinstance(model, self._fused_models) and fused_supported(model)

    def _fused_front(self, model: torch.nn.Module, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        """Stages before the gammatone filterbank: ``x (B, 1, Tc)`` -> ``(B, Tc)``, state."""
        return x[:, 0], state

    def _fused_block_sums(
        self, model: torch.nn.Module, x: Tensor, state: dict, t0: int, ends: list[int]
    ) -> tuple[Tensor, Any]:
        # ear filters (model-specific), then gammatone, IHC, adaptation loops and the
        # modulation filterbank fused with pooling in one kernel pass
        from ..kernels import casp

        u, front = self._fused_front(model, x, state.get("model"))
        plan = self._fused_plan(model, casp.CASPPooledPlan)
        sums, kst = casp.casp_pooled(
            plan,
            u,
            state.get("kernel"),
            self.hop,
            [n - t0 for n in ends],
            self.config.pooling == "rms",
        )
        return sums, {"model": front, "kernel": kst}

    def _sample_features(self, model: torch.nn.Module, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        st = state or {}
        out, new = model.stream(x[:, 0], st.get("model"), upto=self.config.stage)
        y = out[self.config.stage]
        if self.config.stage == "modulation":
            B, C, M, T = y.shape
            y = y.reshape(B, C * M, T)
            idx = st.get("idx")
            if idx is None:
                cols = self._column_index()
                idx = None if cols is None else torch.as_tensor(cols, device=y.device)
            if idx is not None:
                y = y.index_select(1, idx)
            return y, {"model": new, "idx": idx}
        return y, {"model": new}


@register_extractor
class Dau1997Extractor(_CASPExtractor):
    """Lhotse extractor ``amt-dau1997``: frame-level Dau et al. (1997) internal
    representation (see the module docstring for layout, units, padding and mixing)."""

    name = "amt-dau1997"
    config_type = Dau1997Config
    _fused_models: ClassVar[tuple[type, ...]] = (Dau1997,)

    def __init__(self, config: Dau1997Config | None = None) -> None:
        super().__init__(config)

    def _build_model(self) -> Dau1997:
        c = self.config
        fb = {} if c.basef is None else {"basef": c.basef}
        ihc = {} if c.ihc_method is None else {"method": c.ihc_method}
        ad = {} if c.adaptation_limit is None else {"limit": c.adaptation_limit}
        mod: dict[str, Any] = {"filter_type": c.filter_type}
        if c.modulation_preset is not None:
            mod["preset"] = c.modulation_preset
        for k in ("max_mfc", "use_upper_limit", "att_factor", "lp150"):
            if getattr(c, k) is not None:
                mod[k] = getattr(c, k)
        return Dau1997(
            c.sampling_rate,
            flow=c.flow,
            fhigh=c.fhigh,
            dtype=self.torch_dtype,
            filterbank_kwargs=fb,
            ihc_kwargs=ihc,
            adaptation_kwargs=ad,
            modulation_kwargs=mod,
            preset=c.preset,
        )


# ======================================================================================
# amt-osses2021 and amt-king2019
# ======================================================================================


@dataclass
class Osses2021Config(AuditoryConfig):
    """Config of ``amt-osses2021``; model fields left ``None`` take the model's defaults
    (or the ``preset``'s). See :class:`lhotse_amt.models.osses2021.Osses2021`.

    Attributes:
        preset: ``"amt-1.4"`` (AMT 1.4 ``osses2021``: linear/minimum-phase ear filters with
            the 257-sample advance) or ``None`` (minimum-phase, causal ear filters).
        flow, fhigh: gammatone grid range (Hz).
        phase_type: ``"minimum"`` or ``"linear"`` ear filters.
        compensation: ear-filter delay compensation ``"none"`` or ``"amt"`` (``"trim"``
            shortens the signal and is not available for frame features).
        adaptation_limit: overshoot limit (5).
        modulation_preset, max_mfc, use_upper_limit, att_factor, lp150: modulation
            filterbank settings (default AMT ``mfb_jepsen2008``, up to 1000 Hz).
        stage: ``"modulation"`` or ``"adaptation"``; layout: ``"compact"``/``"padded"``.

    Checked at construction as :class:`Dau1997Config`.
    """

    preset: str | None = None
    flow: float = 80.0
    fhigh: float = 8000.0
    phase_type: str | None = None
    compensation: str | None = None
    adaptation_limit: float | None = None
    modulation_preset: str | None = None
    max_mfc: float | None = None
    use_upper_limit: bool | None = None
    att_factor: float | None = None
    lp150: bool | None = None
    stage: str = "modulation"
    layout: str = "compact"

    def validate(self) -> None:
        super().validate()
        check_choice("preset", self.preset, (None, *OSSES2021_PRESETS))
        _check_grid(self)
        check_choice("phase_type", self.phase_type, (None, "minimum", "linear"))
        check_choice("compensation", self.compensation, (None, "none", "amt", "trim"))
        _check_modulation(self)
        check_choice("stage", self.stage, ("modulation", "adaptation"))
        check_choice("layout", self.layout, ("compact", "padded"))


@register_extractor
class Osses2021Extractor(_CASPExtractor):
    """Lhotse extractor ``amt-osses2021``: frame-level Osses & Kohlrausch (2021)
    internal representation. Layout, units (MU), padding (0.0) and feature-domain mixing
    as for ``amt-dau1997`` (module docstring).

    **Look-ahead.** With ``compensation="amt"`` (``preset="amt-1.4"``) the ear filters
    advance the signal by 514 samples (non-causal). The extractor then streams the model
    with that look-ahead: chunk ``k`` reads the input up to ``514`` samples past its end
    (zeros after each item's end, exactly AMT's padding) and the model withholds the first
    514 ear-filter outputs, so every chunk's output is aligned with its own samples and
    chunked extraction equals one-shot extraction equals the pooled one-shot model
    output. The default (minimum-phase, no compensation) is causal.
    """

    name = "amt-osses2021"
    config_type = Osses2021Config

    @property
    def _fused_models(self) -> tuple[type, ...]:  # type: ignore[override]
        from ..models.osses2021 import Osses2021

        return (Osses2021,)

    def __init__(self, config: Osses2021Config | None = None) -> None:
        super().__init__(config)

    @classmethod
    def test_config(cls) -> Osses2021Config:
        """A faster configuration for the generic extractor tests (12 channels)."""
        return Osses2021Config(flow=500.0, fhigh=4000.0)

    def _check_config(self) -> None:
        super()._check_config()
        if self.config.compensation == "trim":
            raise ValueError(
                "compensation='trim' drops 256 samples per ear filter (shorter output) and "
                "cannot give frame features aligned with the audio; use 'none' or 'amt'"
            )

    def _build_model(self) -> torch.nn.Module:
        from ..models.osses2021 import Osses2021

        c = self.config
        ad = {} if c.adaptation_limit is None else {"limit": c.adaptation_limit}
        mod: dict[str, Any] = {}
        if c.modulation_preset is not None:
            mod["preset"] = c.modulation_preset
        for k in ("max_mfc", "use_upper_limit", "att_factor", "lp150"):
            if getattr(c, k) is not None:
                mod[k] = getattr(c, k)
        return Osses2021(
            c.sampling_rate,
            flow=c.flow,
            fhigh=c.fhigh,
            phase_type=c.phase_type,
            compensation=c.compensation,
            dtype=self.torch_dtype,
            adaptation_kwargs=ad,
            modulation_kwargs=mod,
            preset=c.preset,
        )

    def _fused_front(self, model: torch.nn.Module, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        # ear filters (FFT convolution, model dtype) with the model's streaming semantics
        st = state or {}
        end = st.get("end")
        y, hp = model.headphone.stream(x[:, 0], st.get("headphone"), end)
        y, me = model.middleear.stream(y, st.get("middleear"), end)
        return y, {"end": end, "headphone": hp, "middleear": me}

    def _compute(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        model = self.model(x.device)
        D = int(model.lookahead)
        if D == 0:
            return super()._compute(x, lengths)
        hop = self.hop
        sr = self.config.sampling_rate
        chunk = max(hop, int(round(self.config.chunk_duration * sr)) // hop * hop)
        B, _, T = x.shape
        ends = list(lengths)
        frames: list[list[Tensor]] = [[] for _ in range(B)]
        t_needed = min(T, max(min(n, self._num_frames(n) * hop) for n in ends))
        if x.device.type == "cpu":  # numpy on this thread (no torch parallel region)
            xp_np = np.zeros((*x.shape[:-1], T + D), dtype=x.numpy().dtype)
            xp_np[..., :T] = x.numpy()
            xp = torch.from_numpy(xp_np)
        else:
            xp = torch.nn.functional.pad(x, (0, D))
        state: Any = {"model": model.initial_stream_state(ends)}
        for t0 in range(0, t_needed, chunk):
            t1 = min(t0 + chunk, t_needed)
            a = 0 if t0 == 0 else t0 + D
            state = self._chunk_frames(model, xp[..., a : t1 + D], state, t0, ends, frames)
        out = []
        for b in range(B):
            n_frames = self._num_frames(ends[b])
            assert sum(p.shape[1] for p in frames[b]) == n_frames
            out.append(self._assemble(frames[b], n_frames, frames[b][0].dtype))
        return out


#: compression exponent and knee amplitude (30 dB SPL on the 100-dB scale) assumed by the
#: King2019 feature-domain mixing hooks (the default config's broken-stick compression)
_KING_N = 0.3
_KING_KNEE = 10.0 ** ((30.0 - 100.0) / 20.0)


def _king_to_intensity(features: np.ndarray) -> np.ndarray:
    # inverse of the broken-stick compression (linear below the knee, power n above), squared,
    # sign kept (band-pass values are signed); Lhotse's padding values are silence
    f = _without_padding(features)
    a = np.abs(f)
    amp = np.where(
        a <= _KING_KNEE, a, _KING_KNEE * (np.maximum(a, _KING_KNEE) / _KING_KNEE) ** (1.0 / _KING_N)
    )
    return np.copysign(amp * amp, f)


def _king_from_intensity(intensity: np.ndarray) -> np.ndarray:
    amp = np.sqrt(np.abs(intensity))
    comp = np.where(
        amp <= _KING_KNEE, amp, _KING_KNEE * (np.maximum(amp, _KING_KNEE) / _KING_KNEE) ** _KING_N
    )
    return np.copysign(comp, intensity).astype(np.float32)


class _KingMixing:
    """Feature-domain mixing hooks of ``amt-king2019`` (approximations; see
    :class:`King2019Extractor`). Lhotse calls them on a default-config extractor, so they
    treat every column alike: each value is expanded by the inverse of the default
    broken-stick compression (linear below the 30-dB knee, power 1 / 0.3 above) and squared
    with its sign kept; these intensities are added with Lhotse's energy factor and mapped
    back. ``compute_energy`` is their mean magnitude (proportional to the sound's power for
    a stationary sound), so Lhotse's SNR gains act on the sound's power."""

    @staticmethod
    def compute_energy(features: np.ndarray) -> float:
        return float(np.mean(np.abs(_king_to_intensity(features)))) + _KING_KNEE**2 * 1e-6

    @staticmethod
    def mix(
        features_a: np.ndarray, features_b: np.ndarray, energy_scaling_factor_b: float
    ) -> np.ndarray:
        ia = _king_to_intensity(features_a)
        ib = _king_to_intensity(features_b)
        return _king_from_intensity(ia + float(energy_scaling_factor_b) * ib)

    @staticmethod
    def scale(features: np.ndarray, energy_scaling_factor: float) -> np.ndarray:
        return _king_from_intensity(float(energy_scaling_factor) * _king_to_intensity(features))


@dataclass
class King2019Config(AuditoryConfig):
    """Config of ``amt-king2019``. See :class:`lhotse_amt.models.king2019.King2019`.

    Attributes:
        preset: ``"amt-1.4"`` (AMT's direct-form band-passes) or ``None`` (SOS).
        flow, fhigh, basef: gammatone grid.
        compression_type, compression_n, compression_knee_db: compression stage.
        dboffset: the model's level convention (dB SPL of rms 1; the knee is relative to
            it); ``full_scale_db_spl`` scales the audio onto it.
        ihc_cutoff: IHC low-pass (``None``: 1000 Hz as AMT; torch_amt docs: 1500).
        adt_hp_fc: "adaptation" high-pass cut-off (Hz).
        mflow, mfhigh, modbank_qfactor: modulation filterbank (5 bands by default).
        lp_150hz: 150-Hz low-pass before the modulation filterbank.
        modulation_form: ``None`` (preset's / ``"sos"``) or ``"tf"``.
        stage: ``"modulation"`` (channels x bands) or ``"adaptation"`` (channels).
        envelope: causal stand-in for the phase insensitivity on bands above 10 Hz:
            ``"abs"`` (``|band| pi / (2 sqrt 2)``) or ``"none"`` (signed band output).

    Checked at construction (see :class:`AuditoryConfig`): frequencies finite and > 0 with
    ``flow < fhigh`` and ``mflow < mfhigh``; ``compression_n`` in (0, 10];
    ``modbank_qfactor`` in (0, 100];
    ``compression_knee_db`` finite; ``dboffset`` within [-50, 200] dB SPL; choices as
    listed; ``lp_150hz`` ``True``/``False``.
    """

    preset: str | None = None
    flow: float = 80.0
    fhigh: float = 8000.0
    basef: float | None = None
    compression_type: str = "brokenstick"
    compression_n: float = 0.3
    compression_knee_db: float = 30.0
    dboffset: float = 100.0
    ihc_cutoff: float | None = None
    adt_hp_fc: float = 3.0
    mflow: float = 2.0
    mfhigh: float = 150.0
    modbank_qfactor: float = 1.0
    lp_150hz: bool = False
    modulation_form: str | None = None
    stage: str = "modulation"
    envelope: str = "abs"

    def validate(self) -> None:
        super().validate()
        check_choice("preset", self.preset, (None, *KING2019_PRESETS))
        _check_grid(self)
        self.basef = check_positive_finite("basef", self.basef, allow_none=True)
        check_choice("compression_type", self.compression_type, ("brokenstick", "power"))
        self.compression_n = check_number(
            "compression_n", self.compression_n, min=0.0, max=10.0, min_inclusive=False
        )
        self.compression_knee_db = check_number("compression_knee_db", self.compression_knee_db)
        self.dboffset = check_level_db("dboffset", self.dboffset)
        self.ihc_cutoff = check_positive_finite("ihc_cutoff", self.ihc_cutoff, allow_none=True)
        self.adt_hp_fc = check_positive_finite("adt_hp_fc", self.adt_hp_fc)
        self.mflow = check_positive_finite("mflow", self.mflow)
        self.mfhigh = check_positive_finite("mfhigh", self.mfhigh)
        if not self.mflow < self.mfhigh:
            raise ValueError(
                f"mflow must be below mfhigh, got mflow={self.mflow}, mfhigh={self.mfhigh}"
            )
        self.modbank_qfactor = check_number(
            "modbank_qfactor", self.modbank_qfactor, min=0.0, max=100.0, min_inclusive=False
        )
        self.lp_150hz = check_bool("lp_150hz", self.lp_150hz)
        check_choice("modulation_form", self.modulation_form, (None, "sos", "tf"))
        check_choice("stage", self.stage, ("modulation", "adaptation"))
        check_choice("envelope", self.envelope, ("abs", "none"))


@register_extractor
class King2019Extractor(_KingMixing, _FusedCPU, AuditoryExtractor):
    """Lhotse extractor ``amt-king2019``: frame-level King et al. (2019) modulation
    representation.

    **Layout.** ``stage="modulation"``: ``channels x bands`` columns, channel-major
    (``fc=...Hz/mfc=...Hz``), reshaping to ``(frames, channels, bands)`` (31 x 5 by
    default); ``stage="adaptation"``: one column per channel (high-passed IHC output).

    **Phase insensitivity.** The model's Hilbert envelope with whole-signal rms matching
    is non-causal; frames use a causal stand-in: for bands above 10 Hz the magnitude of
    the band output times ``pi / (2 sqrt 2)`` (for a sinusoidal band output of amplitude
    ``A`` its frame mean is ``A / sqrt 2``, the value the rms-matched envelope takes);
    bands at or below 10 Hz are the signed band outputs (mean-pooled, as in the model).
    ``envelope="none"`` keeps every band signed (use ``pooling="rms"`` then).

    **Units, padding.** Compressed-amplitude units of the AMT level scale; silence is 0
    (the 3-Hz high-pass removes DC), so pad stored features with 0.0.

    **Mixing hooks** (approximate: the model compresses and rectifies). Each value is
    expanded by the inverse of the default broken-stick compression (linear below the
    30-dB knee, power ``1 / n`` above, ``n = 0.3``) and squared with its sign kept; ``mix``
    adds these intensities with Lhotse's energy factor and compresses back, ``scale``
    multiplies them, ``compute_energy`` is their mean magnitude. ``mix(a, b, g)`` tends to
    ``a`` as ``g`` tends to 0. Lhotse's padding values (-1000, -23.03) are read as silence.
    Mixing the audio (``mix_eagerly`` / on-the-fly features) is exact.
    """

    name = "amt-king2019"
    config_type = King2019Config
    stages: ClassVar[tuple[str, ...]] = ("modulation", "adaptation")

    def __init__(self, config: King2019Config | None = None) -> None:
        super().__init__(config)

    @classmethod
    def test_config(cls) -> King2019Config:
        """A faster configuration for the generic extractor tests (12 channels)."""
        return King2019Config(flow=500.0, fhigh=4000.0)

    @property
    def model_dboffset(self) -> float:  # type: ignore[override]
        return float(self.config.dboffset)

    def _check_config(self) -> None:
        super()._check_config()
        c = self.config
        if c.stage not in self.stages:
            raise ValueError(f"stage must be one of {self.stages}, got {c.stage!r}")
        if c.envelope not in ("abs", "none"):
            raise ValueError(f"envelope must be 'abs' or 'none', got {c.envelope!r}")
        if c.modulation_form not in (None, "sos", "tf"):
            raise ValueError(f"modulation_form must be 'sos' or 'tf', got {c.modulation_form!r}")

    def _build_model(self) -> torch.nn.Module:
        from ..models.king2019 import King2019

        c = self.config
        ihc = {} if c.ihc_cutoff is None else {"cutoff": c.ihc_cutoff}
        mod = {} if c.modulation_form is None else {"form": c.modulation_form}
        return King2019(
            c.sampling_rate,
            flow=c.flow,
            fhigh=c.fhigh,
            basef=c.basef,
            compression_type=c.compression_type,
            compression_n=c.compression_n,
            compression_knee_db=c.compression_knee_db,
            dboffset=c.dboffset,
            adt_hp_fc=c.adt_hp_fc,
            mflow=c.mflow,
            mfhigh=c.mfhigh,
            modbank_qfactor=c.modbank_qfactor,
            lp_150hz=c.lp_150hz,
            dtype=self.torch_dtype,
            ihc_kwargs=ihc,
            modulation_kwargs=mod,
            preset=c.preset,
        )

    def _spec(self) -> tuple[np.ndarray, np.ndarray]:
        m = self.model("cpu")
        return m.fc.detach().double().numpy(), m.mfc.detach().double().numpy()

    def feature_dim(self, sampling_rate: int) -> int:
        self._check_rate(sampling_rate)
        fc, mfc = self._spec()
        return len(fc) * (len(mfc) if self.config.stage == "modulation" else 1)

    def feature_names(self) -> list[str]:
        fc, mfc = self._spec()
        if self.config.stage != "modulation":
            return [f"fc={f:.1f}Hz" for f in fc]
        return [f"fc={f:.1f}Hz/mfc={m:.2f}Hz" for f in fc for m in mfc]

    def _fused_supported(self, model: torch.nn.Module) -> bool:
        return model.modulation_filterbank.form == "sos" and model.ihc.sos.dim() == 2

    def _fused_block_sums(
        self, model: torch.nn.Module, x: Tensor, state: dict, t0: int, ends: list[int]
    ) -> tuple[Tensor, Any]:
        # gammatone, compression, IHC, high-pass, band-pass bank and the envelope rule fused
        # with pooling in one kernel pass
        from ..kernels import king2019

        def make(m64: torch.nn.Module, precise: bool) -> king2019.KingPooledPlan:
            mfc = m64.mfc.detach().double().cpu().numpy()
            env = (mfc > m64.pi_cutoff) & (self.config.envelope == "abs")
            gain = np.where(env, np.pi / (2.0 * np.sqrt(2.0)), 1.0)
            return king2019.KingPooledPlan(m64, gain, env, precise)

        sums, kst = king2019.king_pooled(
            self._fused_plan(model, make),
            x[:, 0],
            state.get("kernel"),
            self.hop,
            [n - t0 for n in ends],
            self.config.pooling == "rms",
        )
        return sums, {"kernel": kst}

    def _sample_features(self, model: torch.nn.Module, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        out, new = model.stream(x[:, 0], state, upto=self.config.stage)
        y = out[self.config.stage]
        if self.config.stage == "modulation":
            if self.config.envelope == "abs":
                sel = (model.mfc > model.pi_cutoff).to(y.device)[:, None]
                y = torch.where(sel, y.abs() * (np.pi / (2.0 * np.sqrt(2.0))), y)
            B, C, M, T = y.shape
            y = y.reshape(B, C * M, T)
        return y, new


# ======================================================================================
# amt-paulick2024
# ======================================================================================

import math  # noqa: E402

from ..models.paulick2024 import Paulick2024  # noqa: E402


@dataclass
class Paulick2024Config(AuditoryConfig):
    """Config of ``amt-paulick2024`` (:class:`lhotse_amt.models.paulick2024.Paulick2024`).

    Attributes:
        sampling_rate: 44100 by default (the rate of the stored ear filters).
        flow, fhigh, n_channels: DRNL grid (``n_channels`` ERB-spaced channels).
        use_outerear: headphone filter on/off (the middle ear is always applied).
        drnl_preset: ``"jepsen2008"`` or ``"lopezpoveda2001"``.
        adaptation_limit: overshoot limit of the loops (``None``: 5).
        resample_factor: decimation after the adaptation loops (4).
        max_mfc, use_upper_limit, att_factor, lp150, filter_type: modulation filterbank
            settings (``None``: the ``"paulick2024"`` preset's).
        stage: ``"modulation"`` (default), ``"resampled"`` (decimated adaptation output,
            one column per channel) or ``"adaptation"`` (full-rate adaptation output).
        layout: ``"compact"`` or ``"padded"`` modulation columns.

    Checked at construction as :class:`Dau1997Config`; ``n_channels`` and
    ``resample_factor`` are integers >= 1.
    """

    sampling_rate: int = 44100
    flow: float = 125.0
    fhigh: float = 8000.0
    n_channels: int = 50
    use_outerear: bool = True
    drnl_preset: str = "jepsen2008"
    adaptation_limit: float | None = None
    resample_factor: int = 4
    max_mfc: float | None = None
    use_upper_limit: bool | None = None
    att_factor: float | None = None
    lp150: bool | None = None
    filter_type: str = "efilt"
    stage: str = "modulation"
    layout: str = "compact"

    def validate(self) -> None:
        super().validate()
        _check_grid(self)
        self.n_channels = check_int("n_channels", self.n_channels, min=1)
        self.use_outerear = check_bool("use_outerear", self.use_outerear)
        check_choice("drnl_preset", self.drnl_preset, ("jepsen2008", "lopezpoveda2001"))
        self.resample_factor = check_int("resample_factor", self.resample_factor, min=1)
        _check_modulation(self, with_preset=False)
        check_choice("filter_type", self.filter_type, ("efilt", "butterworth"))
        check_choice("stage", self.stage, ("modulation", "resampled", "adaptation"))
        check_choice("layout", self.layout, ("compact", "padded"))


@register_extractor
class Paulick2024Extractor(_CASPExtractor):
    """Lhotse extractor ``amt-paulick2024``: frame-level internal representation of the
    revised CASP model (Paulick et al. 2024).

    Layout as the other CASP extractors (module docstring): ``stage="modulation"`` gives one
    column per (channel, modulation band), channel-major, ``compact`` (the 4-8 bands each
    channel has with the ``fc / 4`` upper limit) or ``padded`` (``max_bands`` per channel,
    zero for missing bands); ``stage="resampled"`` / ``"adaptation"`` one column per channel.
    Values are model units (pad with 0.0).

    **Frames at the input rate.** The model decimates by ``R = resample_factor`` after the
    adaptation loops, so a frame hop of ``hop`` input samples (441 at 44.1 kHz and 10 ms) is
    generally not an integer number of decimated samples. Frames stay defined on the input
    samples: the decimated output is held constant over the ``R`` input samples it stands
    for (``[R m, R m + R)``; it depends only on input samples up to ``R m``, so it is causal)
    and frame ``j`` is the mean (or rms) of that held signal over input samples
    ``[j hop, (j + 1) hop)`` (cut at the end of the signal), i.e. a weighted mean of the
    decimated samples with fractional weights at the frame edges. The frame count is
    exactly Lhotse's ``compute_num_frames_from_samples``. Chunks are multiples of
    ``lcm(hop, R)`` input samples and carry all filter, loop and decimator states, so chunked
    extraction equals one-shot extraction. The pooling is a compiled ``O(D M)`` pass per
    chunk (:func:`lhotse_amt.kernels.paulick.pool_held`), which also picks the ``compact``
    layout's columns; on the CPU without gradient it runs inside the modulation filterbank's
    kernel (:func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled`, the same values
    without the sample-rate modulation output).

    **Mixing hooks** (``mix``/``scale``/``compute_energy``): as for ``amt-dau1997`` they invert
    the adaptation loops' steady state; here the loops' input is the IHC receptor potential
    (V), not the sound amplitude, so adding its "intensities" is a coarser approximation than
    for Dau1997. Extract from mixed audio where accuracy matters.
    """

    name = "amt-paulick2024"
    config_type = Paulick2024Config
    stages: ClassVar[tuple[str, ...]] = ("modulation", "resampled", "adaptation")

    def __init__(self, config: Paulick2024Config | None = None) -> None:
        super().__init__(config)

    @classmethod
    def test_config(cls) -> Paulick2024Config:
        """A fast configuration for tests: 8 DRNL channels (the defaults use 50)."""
        return Paulick2024Config(n_channels=8)

    def _check_config(self) -> None:
        super()._check_config()

    def _build_model(self) -> Paulick2024:
        c = self.config
        ad = {} if c.adaptation_limit is None else {"limit": c.adaptation_limit}
        mod: dict[str, Any] = {}
        for k in ("max_mfc", "use_upper_limit", "att_factor", "lp150"):
            if getattr(c, k) is not None:
                mod[k] = getattr(c, k)
        return Paulick2024(
            c.sampling_rate,
            flow=c.flow,
            fhigh=c.fhigh,
            n_channels=c.n_channels,
            use_outerear=c.use_outerear,
            filter_type=c.filter_type,
            dtype=self.torch_dtype,
            drnl_kwargs={"preset": c.drnl_preset},
            adaptation_kwargs=ad,
            modulation_kwargs=mod,
            resample_factor=c.resample_factor,
        )

    def _decimation(self) -> int:
        return 1 if self.config.stage == "adaptation" else int(self.config.resample_factor)

    def _compute(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        R = self._decimation()
        if R == 1:
            return super()._compute(x, lengths)
        model = self.model(x.device)
        hop = self.hop
        L = hop * R // math.gcd(hop, R)
        chunk = max(L, int(round(self.config.chunk_duration * self.config.sampling_rate)) // L * L)
        B, _, T = x.shape
        ends = list(lengths)
        frames: list[list[Tensor]] = [[] for _ in range(B)]
        state = None
        t_needed = min(T, max(min(n, self._num_frames(n) * hop) for n in ends))
        cols = self._column_index()
        fused = self._fused_modulation_ok(model, x)
        for t0 in range(0, t_needed, chunk):
            t1 = min(t0 + chunk, t_needed)
            if fused:
                state = self._pooled_modulation(model, x[..., t0:t1], state, ends, t0, frames, cols)
                continue
            y, state = self._decimated_features(model, x[..., t0:t1], state)
            self._pool_held(y, ends, t0, t1, R, frames, cols)
        out = []
        for b in range(B):
            n_frames = self._num_frames(ends[b])
            assert sum(p.shape[1] for p in frames[b]) == n_frames
            out.append(self._assemble(frames[b], n_frames, frames[b][0].dtype))
        return out

    def _fused_modulation_ok(self, model: Paulick2024, x: Tensor) -> bool:
        """The modulation filterbank can run fused with the pooling (CPU, no gradient, the
        one-pole ``efilt`` bands of the register kernel)."""
        from ..kernels import modbank_simd

        mod = model.modulation
        return (
            self.config.stage == "modulation"
            and modbank_simd.ENABLED
            and x.device.type == "cpu"
            and not (torch.is_grad_enabled() and x.requires_grad)
            and mod.poles.shape[-1] == 1
            and mod.poles.shape[-2] > 1
        )

    def _pooled_modulation(
        self,
        model: Paulick2024,
        x: Tensor,
        state: Any,
        ends: list[int],
        t0: int,
        frames: list[list[Tensor]],
        cols: np.ndarray | None,
    ) -> Any:
        """One chunk ``x (B, 1, Tc)`` of input samples ``[t0, t0 + Tc)``: the model up to the
        decimated signal, then the modulation filterbank and the frame pooling of
        :meth:`_pool_held` in one compiled pass
        (:func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled`, the same values
        without the sample-rate ``(B, C, M, T)`` output). Returns the new state."""
        from ..kernels import modbank_simd

        out, new = model.stream(x[:, 0], state, upto="resampled")
        y = out["resampled"]
        mst = (state or {}).get("modulation")
        hop, R = self.hop, int(self.config.resample_factor)
        t1 = t0 + x.shape[-1]
        B = len(ends)
        spans = []
        for b in range(B):
            f_lo = -(-t0 // hop)
            f_hi = max(f_lo, min(self._num_frames(ends[b]), -(-t1 // hop)))
            f = np.arange(f_lo, f_hi, dtype=np.int64)
            spans.append((f * hop - t0, np.minimum((f + 1) * hop, ends[b]) - t0))
        counts = np.array([len(s) for s, _ in spans], np.int64)
        F = max(1, int(counts.max(initial=0)))
        starts = np.zeros((B, F), np.int64)
        stops = np.ones((B, F), np.int64)
        for b, (s, e) in enumerate(spans):
            starts[b, : len(s)] = s
            stops[b, : len(e)] = e
        if y.shape[-1] == 0:  # a chunk too short to reach the next decimated sample
            new["modulation"] = mst
            return new
        mod = model.modulation
        sums, new["modulation"] = modbank_simd.modulation_bank_pooled(
            y,
            mod.lp_sos,
            mod.prefilter_sos,
            mod.poles[:, 1:, 0],
            mod.gains[:, 1:, 0],
            mod.use_abs[:, 1:],
            mod.scale,
            mst,
            starts,
            stops,
            counts,
            R,
            self.config.pooling == "rms",
        )
        for b in range(B):
            n = int(counts[b])
            if n == 0:
                continue
            v = torch.from_numpy(np.ascontiguousarray(sums[b, ..., :n]).reshape(-1, n))
            if cols is not None:
                v = v[torch.as_tensor(cols)]
            frames[b].append(v.to(device=x.device, dtype=y.dtype))
        return new

    def _decimated_features(self, model: Paulick2024, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        """Decimated features ``(B, D, M)`` of chunk ``x (B, 1, Tc)``, every column (the
        compact layout's columns are picked after pooling, on frames instead of samples)."""
        out, new = model.stream(x[:, 0], state, upto=self.config.stage)
        y = out[self.config.stage]
        return y.reshape(y.shape[0], -1, y.shape[-1]), new

    def _pool_held(
        self,
        y: Tensor,
        ends: list[int],
        t0: int,
        t1: int,
        R: int,
        frames: list[list[Tensor]],
        cols: np.ndarray | None = None,
    ) -> None:
        """Pool decimated features ``y (B, D, M)`` of input samples ``[t0, t1)`` (``t0`` a
        multiple of ``R`` and of ``hop``) held over ``R`` samples each (class docstring),
        keeping the columns ``cols`` (``None``: all); compiled, ``O(D M)`` per chunk."""
        from ..kernels import paulick

        hop = self.hop
        rms = self.config.pooling == "rms"
        for b in range(len(ends)):
            n = ends[b]
            F = self._num_frames(n)
            f_lo = -(-t0 // hop)
            f_hi = min(F, -(-t1 // hop))
            if f_hi <= f_lo:
                continue
            f = np.arange(f_lo, f_hi, dtype=np.int64)
            s = f * hop - t0
            e = np.minimum((f + 1) * hop, n) - t0
            frames[b].append(paulick.pool_held(y[b], cols, s, e, R, rms))

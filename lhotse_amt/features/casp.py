"""Lhotse extractors of the CASP model family (modulation-filterbank models).

Feature layout (:meth:`feature_names` names every column):

* ``stage="modulation"`` (default): one column per (auditory channel, modulation band),
  channel-major, low-pass band first. ``layout="compact"`` keeps only the bands each
  channel has (with the upper-limit rule low channels have fewer), ``layout="padded"``
  gives every channel ``max_bands`` columns, zero where a band does not exist, so the
  matrix reshapes to ``(frames, channels, max_bands)``. Both are fixed for a config.
* ``stage="adaptation"``: one column per auditory channel (the adaptation-loop output).

Values are in model units (MU, AMT convention): 0 MU is silence (the adaptation loops'
minimum level), so **pad stored features with 0.0** (``cut.pad(..., pad_feat_value=0.0)``;
Lhotse's collators pad with -23.03, mask those frames by length).

**Feature-domain mixing** (``mix``/``compute_energy``/``scale``, used by Lhotse for lazy
``MixedCut`` features) is an approximation: the models are nonlinear. The hooks invert
the adaptation loops' steady-state mapping ``MU = (a^(1/32) - c) 100 / (1 - c)``
(``c = 1e-5^(1/32)``, ``a`` the amplitude on the 100-dB scale), add intensities ``a^2``
with Lhotse's energy factor, and map back. Sentinel and padding values (-1000, -23.03)
are treated as silence. Extracting from the mixed audio (``mix_eagerly=True``, or
``OnTheFlyFeatures`` on mixed cuts) is exact; see the README for the measured error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lhotse.features.base import register_extractor
from torch import Tensor

from ..models.dau1997 import Dau1997
from .base import AuditoryConfig, AuditoryExtractor, config_from_dict

__all__ = ["Dau1997Config", "Dau1997Extractor", "mu_to_intensity", "intensity_to_mu"]

_MINLVL = 1e-5  # 0 dB SPL on the AMT 100-dB scale
_C = _MINLVL ** (1.0 / 32.0)


def mu_to_intensity(mu: np.ndarray) -> np.ndarray:
    """Steady-state inverse of the adaptation loops: model units -> intensity ``a^2``.

    Values <= 0 (silence, and Lhotse's -1000 / -23.03 padding) map to the minimum level.
    """
    m = np.maximum(np.asarray(mu, dtype=np.float64), 0.0)
    return (m * ((1.0 - _C) / 100.0) + _C) ** 64


def intensity_to_mu(intensity: np.ndarray) -> np.ndarray:
    """Inverse of :func:`mu_to_intensity` (exact for intensities >= ``1e-10``)."""
    i = np.maximum(np.asarray(intensity, dtype=np.float64), _MINLVL**2)
    return (i ** (1.0 / 64.0) - _C) * (100.0 / (1.0 - _C))


class _MUMixing:
    """Feature-domain mixing hooks for model-unit features (see the module docstring)."""

    @staticmethod
    def compute_energy(features: np.ndarray) -> float:
        return float(np.mean(mu_to_intensity(features)))

    @staticmethod
    def mix(
        features_a: np.ndarray, features_b: np.ndarray, energy_scaling_factor_b: float
    ) -> np.ndarray:
        ia = mu_to_intensity(features_a)
        ib = mu_to_intensity(features_b)
        return intensity_to_mu(ia + energy_scaling_factor_b * ib).astype(np.float32)

    @staticmethod
    def scale(features: np.ndarray, energy_scaling_factor: float) -> np.ndarray:
        return intensity_to_mu(energy_scaling_factor * mu_to_intensity(features)).astype(
            np.float32
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

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Dau1997Config:
        return config_from_dict(cls, data)


class _CASPExtractor(_MUMixing, AuditoryExtractor):
    """Common code of the modulation-filterbank extractors."""

    stages: ClassVar[tuple[str, ...]] = ("modulation", "adaptation")

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

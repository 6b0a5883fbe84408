"""``amt-king2019``: frame-level modulation representation of King, Varnet & Lorenzi (2019,
JASA 145): gammatone filterbank, compression, IHC, adaptation high-pass and modulation
filterbank (:class:`lhotse_amt.models.king2019.King2019`). Mixing hooks:
:class:`lhotse_amt.features.mixing.KingMixing`; the fused pooled path as in
:mod:`lhotse_amt.features.casp_base`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lhotse.features.base import register_extractor
from torch import Tensor

from .._validation import (
    check_bool,
    check_choice,
    check_level_db,
    check_number,
    check_positive_finite,
)
from ..models.king2019 import KING2019_PRESETS, King2019
from .base import AuditoryConfig, AuditoryExtractor
from .casp_base import ConfigModel, FusedPooling, check_grid, given_kwargs
from .mixing import KingMixing

__all__ = ["King2019Config", "King2019Extractor"]

#: the config fields that are :class:`~lhotse_amt.models.king2019.King2019` arguments
_MODEL_FIELDS = (
    "preset",
    "flow",
    "fhigh",
    "basef",
    "compression_type",
    "compression_n",
    "compression_knee_db",
    "dboffset",
    "adt_hp_fc",
    "mflow",
    "mfhigh",
    "modbank_qfactor",
    "lp_150hz",
)


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
        check_grid(self)
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
class King2019Extractor(KingMixing, ConfigModel, FusedPooling, AuditoryExtractor):
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
    model_type = King2019
    model_fields = _MODEL_FIELDS
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

    def _model_kwargs(self) -> dict[str, Any]:
        c = self.config
        return dict(
            ihc_kwargs=given_kwargs(cutoff=c.ihc_cutoff),
            modulation_kwargs=given_kwargs(form=c.modulation_form),
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

    def _envelope(self) -> bool:
        return self.config.envelope == "abs"

    def _sample_features(self, model: torch.nn.Module, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        out, new = model.stream(x[:, 0], state, upto=self.config.stage)
        y = out[self.config.stage]
        if self.config.stage == "modulation":
            if self._envelope():
                sel = (model.mfc > model.pi_cutoff).to(y.device)[:, None]
                y = torch.where(sel, y.abs() * (np.pi / (2.0 * np.sqrt(2.0))), y)
            B, C, M, T = y.shape
            y = y.reshape(B, C * M, T)
        return y, new

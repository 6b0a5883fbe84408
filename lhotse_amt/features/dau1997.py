"""``amt-dau1997``: frame-level internal representation of Dau, Kollmeier & Kohlrausch
(1997, JASA 102): gammatone filterbank, IHC envelope, adaptation loops and modulation
filterbank (:class:`lhotse_amt.models.Dau1997`). Layout, units (MU), padding (0.0) and the
fused pooled path: :mod:`lhotse_amt.features.casp_base`; mixing hooks:
:class:`lhotse_amt.features.mixing.MUMixing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lhotse.features.base import register_extractor

from .._validation import check_choice, check_positive_finite
from ..functional.ihc import IHC_PRESETS
from ..models.dau1997 import DAU1997_PRESETS, Dau1997
from .casp_base import CASPConfig, CASPExtractor, check_casp_config, given_kwargs

__all__ = ["Dau1997Config", "Dau1997Extractor"]


@dataclass
class DauFamilyConfig(CASPConfig):
    """The fields that :class:`Dau1997Config` and
    :class:`~lhotse_amt.features.osses2021.Osses2021Config` add to
    :class:`~lhotse_amt.features.casp_base.CASPConfig`: the model preset and the
    modulation filterbank preset."""

    preset: str | None = None
    modulation_preset: str | None = None


@dataclass
class Dau1997Config(DauFamilyConfig):
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

    Checked at construction (see :class:`~lhotse_amt.features.base.AuditoryConfig`):
    frequencies finite and > 0 with ``flow < fhigh``; ``adaptation_limit >= 0``;
    ``max_mfc``, ``att_factor`` > 0; the string fields one of their listed values; the
    ``bool`` fields ``True``/``False`` (``None`` where the default is ``None``).
    """

    basef: float | None = None
    ihc_method: str | None = None
    filter_type: str = "efilt"

    def validate(self) -> None:
        super().validate()
        check_choice("preset", self.preset, (None, *DAU1997_PRESETS))
        self.basef = check_positive_finite("basef", self.basef, allow_none=True)
        check_choice("ihc_method", self.ihc_method, (None, *IHC_PRESETS))
        check_casp_config(self)


@register_extractor
class Dau1997Extractor(CASPExtractor):
    """Lhotse extractor ``amt-dau1997``: frame-level Dau et al. (1997) internal
    representation (see :mod:`lhotse_amt.features.casp_base` for layout, units, padding
    and the fused path; mixing: :class:`~lhotse_amt.features.mixing.MUMixing`)."""

    name = "amt-dau1997"
    config_type = Dau1997Config
    model_type = Dau1997
    model_fields = ("flow", "fhigh", "preset")

    def __init__(self, config: Dau1997Config | None = None) -> None:
        super().__init__(config)

    def _model_kwargs(self) -> dict[str, Any]:
        c = self.config
        return dict(
            filterbank_kwargs=given_kwargs(basef=c.basef),
            ihc_kwargs=given_kwargs(method=c.ihc_method),
            **super()._model_kwargs(),
        )

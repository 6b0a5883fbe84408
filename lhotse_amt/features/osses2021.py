"""``amt-osses2021``: frame-level internal representation of Osses & Kohlrausch (2021, JASA
149): outer/middle-ear filters, gammatone filterbank, IHC, adaptation loops and modulation
filterbank (:class:`lhotse_amt.models.osses2021.Osses2021`). Layout, units (MU), padding
(0.0) and the fused pooled path: :mod:`lhotse_amt.features.casp_base`; mixing hooks:
:class:`lhotse_amt.features.mixing.MUMixing`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from lhotse.features.base import register_extractor

from .._validation import check_choice
from ..models.osses2021 import OSSES2021_PRESETS, Osses2021
from .casp_base import CASPExtractor, check_casp_config
from .dau1997 import DauFamilyConfig
from .frames import ChunkPlan, FrameAccumulator

__all__ = ["Osses2021Config", "Osses2021Extractor"]


@dataclass
class Osses2021Config(DauFamilyConfig):
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

    Checked at construction as :class:`~lhotse_amt.features.dau1997.Dau1997Config`.
    """

    phase_type: str | None = None
    compensation: str | None = None

    def validate(self) -> None:
        super().validate()
        check_choice("preset", self.preset, (None, *OSSES2021_PRESETS))
        check_choice("phase_type", self.phase_type, (None, "minimum", "linear"))
        check_choice("compensation", self.compensation, (None, "none", "amt", "trim"))
        check_casp_config(self)


@register_extractor
class Osses2021Extractor(CASPExtractor):
    """Lhotse extractor ``amt-osses2021``: frame-level Osses & Kohlrausch (2021)
    internal representation. Layout, units (MU), padding (0.0) and feature-domain mixing
    as for ``amt-dau1997``.

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
    model_type = Osses2021
    model_fields = ("flow", "fhigh", "phase_type", "compensation", "preset")

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

    def _chunk_plan(
        self, model: torch.nn.Module, T: int, acc: FrameAccumulator, single: bool = False
    ) -> ChunkPlan:
        plan = super()._chunk_plan(model, T, acc, single)
        return ChunkPlan(plan.chunk, plan.end, int(model.lookahead))

    def _initial_state(self, model: torch.nn.Module, lengths: list[int]) -> Any:
        # the items' lengths make the look-ahead flush exact at each item's end
        return model.initial_stream_state(lengths) if model.lookahead else None

"""``amt-glasberg2002``: specific loudness of the time-varying loudness model of Glasberg &
Moore (2002, JAES 50) (:class:`lhotse_amt.models.glasberg2002.Glasberg2002`). Frames, level,
sampling rate, chunking and mixing: :mod:`lhotse_amt.features.loudness_base`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from lhotse.features.base import register_extractor
from torch import Tensor

from ..functional import loudness as L
from ..models.glasberg2002 import Glasberg2002
from .loudness_base import LoudnessConfig, LoudnessExtractor, stream_agc

__all__ = ["Glasberg2002Config", "Glasberg2002Extractor"]


@dataclass
class Glasberg2002Config(LoudnessConfig):
    """Config of ``amt-glasberg2002`` (see :mod:`lhotse_amt.features.loudness_base` for
    every field's meaning).

    Attributes (besides :class:`AuditoryConfig`'s): ``specific`` (``"instantaneous"`` or
    ``"short_term"``), ``include_stl``, ``include_ltl`` (extra columns, sone, diotic).
    """


@register_extractor
class Glasberg2002Extractor(LoudnessExtractor):
    """``amt-glasberg2002``: specific loudness of the Glasberg & Moore (2002) model.

    149 columns ``fc=…Hz`` (one-ear specific loudness, sone/Cam; the model presents the signal
    diotically) plus optional ``stl``/``ltl`` (diotic, sone). See
    :mod:`lhotse_amt.features.loudness_base`.
    """

    name = "amt-glasberg2002"
    config_type = Glasberg2002Config
    input_channels = 1

    def __init__(self, config: Glasberg2002Config | None = None) -> None:
        super().__init__(config or Glasberg2002Config())

    def _build_model(self) -> torch.nn.Module:
        return Glasberg2002(fs=L.FS, dtype=self.torch_dtype)

    def _channel_fc(self) -> np.ndarray:
        cams = np.round(np.arange(1.8, 38.8 + 0.125, 0.25), 10)
        return L.cam_to_hz(cams)

    def feature_names(self) -> list[str]:
        return [f"fc={f:.1f}Hz" for f in self._channel_fc()] + self._extra_names()

    def _first_frame(self, model: torch.nn.Module) -> int:
        return model.first_frame

    def _model_frames(self, model: torch.nn.Module, seg: Tensor) -> tuple[Tensor, Tensor]:
        # (B, T) -> frames j = -64 … of the segment; the features' own AGCs stream stl/ltl,
        # so the model's integration is not run (nor compiled at a first extract)
        st = model.compute(seg[:, 0], integrate=False)
        off = -model.first_frame
        return st["specific_loudness"][:, off:, None, :], st["inst"][:, off:]

    def _stream(self, spec: np.ndarray, inst: np.ndarray | None, state: dict) -> np.ndarray:
        m = self.model()
        c = self.config
        s = spec[:, 0, :]
        if c.specific == "short_term":
            st = state.setdefault("spec", np.zeros(s.shape[1]))
            s = stream_agc(s.T, m.stl_attack, m.stl_release, st).T
        cols = [s]
        if c.include_stl or c.include_ltl:
            st1 = state.setdefault("stl", np.zeros(1))
            stl = stream_agc(inst[None], m.stl_attack, m.stl_release, st1)
            if c.include_stl:
                cols.append(stl.T)
            if c.include_ltl:
                st2 = state.setdefault("ltl", np.zeros(1))
                cols.append(stream_agc(stl, m.ltl_attack, m.ltl_release, st2).T)
        return np.concatenate(cols, 1)

    @classmethod
    def test_config(cls) -> Glasberg2002Config:
        """The default config (fast enough for the contract tests)."""
        return Glasberg2002Config()

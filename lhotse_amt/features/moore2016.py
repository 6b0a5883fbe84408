"""``amt-moore2016``: binaural specific loudness of Moore, Glasberg, Varathanathan &
Schlittenlacher (2016, Trends in Hearing 20) (:class:`lhotse_amt.models.moore2016.Moore2016`).
Frames, level, sampling rate, chunking and mixing: :mod:`lhotse_amt.features.loudness_base`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from lhotse.features.base import register_extractor
from torch import Tensor

from .._validation import check_bool, check_choice
from ..functional import loudness as L
from ..models.moore2016 import MOORE2016_PRESETS, Moore2016
from .loudness_base import LoudnessConfig, LoudnessExtractor, stream_agc

__all__ = ["Moore2016Config", "Moore2016Extractor"]


@dataclass
class Moore2016Config(LoudnessConfig):
    """Config of ``amt-moore2016``.

    Attributes (besides :class:`AuditoryConfig`'s): ``specific``, ``include_stl``,
    ``include_ltl`` as for Glasberg2002 (binaural STL/LTL); ``diotic``: accept mono audio and
    present it to both ears (default False: exactly two channels required); ``preset``:
    ``"amt-1.4"`` (default) or ``"moore2016-original"`` (see ``MOORE2016_PRESETS``).
    """

    diotic: bool = False
    preset: str = "amt-1.4"

    def validate(self) -> None:
        super().validate()
        self.diotic = check_bool("diotic", self.diotic)
        check_choice("preset", self.preset, tuple(MOORE2016_PRESETS))


@register_extractor
class Moore2016Extractor(LoudnessExtractor):
    """``amt-moore2016``: binaural specific loudness of Moore et al. (2016).

    300 columns ``left/fc=…Hz`` then ``right/fc=…Hz`` (sone/Cam) plus optional ``stl``/``ltl``
    (binaural, sone). Needs stereo input (left, right) unless ``diotic=True``. See the module
    docstring.
    """

    name = "amt-moore2016"
    config_type = Moore2016Config
    input_channels = 2
    n_ears = 2
    mix_c = 0.0631  # C of the Moore et al. (2016) specific-loudness law (mixing hooks)

    def __init__(self, config: Moore2016Config | None = None) -> None:
        super().__init__(config or Moore2016Config())

    def _build_model(self) -> torch.nn.Module:
        return Moore2016(fs=L.FS, dtype=self.torch_dtype, preset=self.config.preset)

    def _channel_fc(self) -> np.ndarray:
        return L.cam_to_hz(np.arange(1.75, 39.0 + 0.125, 0.25))

    def feature_names(self) -> list[str]:
        fc = self._channel_fc()
        return (
            [f"left/fc={f:.1f}Hz" for f in fc]
            + [f"right/fc={f:.1f}Hz" for f in fc]
            + self._extra_names()
        )

    def _multichannel(self, x: Tensor) -> Tensor:
        C = x.shape[0]
        if C == 2:
            return x
        if C == 1 and self.config.diotic:
            return x.expand(2, -1)
        hint = (
            "; for mono audio set diotic=True in the config to present it to both ears"
            if C == 1
            else ""
        )
        raise ValueError(
            f"{self.name} is a binaural model and needs exactly 2 channels (left, right), got "
            f"{C} channel(s){hint}"
        )

    def _model_frames(self, model: torch.nn.Module, seg: Tensor) -> tuple[Tensor, None]:
        spec = model.instantaneous_specific_loudness(seg)  # (B, 2, F, C)
        return spec.transpose(1, 2), None

    def _stream(self, spec: np.ndarray, inst: np.ndarray | None, state: dict) -> np.ndarray:
        m = self.model()
        c = self.config
        n_f, _, n_c = spec.shape
        need_st = c.specific == "short_term" or c.include_stl or c.include_ltl
        cols = []
        if need_st:
            st = state.setdefault("spec", np.zeros(2 * n_c))
            flat = spec.reshape(n_f, 2 * n_c).T
            stl_spec = stream_agc(flat, m.stl_attack, m.stl_release, st).T
            stl_spec = stl_spec.reshape(n_f, 2, n_c)
        pattern = stl_spec if c.specific == "short_term" else spec
        cols.append(pattern.reshape(n_f, 2 * n_c))
        if c.include_stl or c.include_ltl:
            smooth = torch.as_tensor(m.binaural_smooth, dtype=torch.float64)
            p = float(m.inhibition_p)
            sl, sr = L.binaural_inhibition(
                torch.from_numpy(stl_spec[:, 0]), torch.from_numpy(stl_spec[:, 1]), smooth, p
            )
            stl_lr = torch.stack([sl.sum(-1), sr.sum(-1)], 0).numpy() / 4.0  # (2, F)
            if c.include_stl:
                cols.append(stl_lr.sum(0)[:, None])
            if c.include_ltl:
                st2 = state.setdefault("ltl", np.zeros(2))
                ltl = stream_agc(stl_lr, m.ltl_attack, m.ltl_release, st2)
                cols.append(ltl.sum(0)[:, None])
        return np.concatenate(cols, 1)

    @classmethod
    def test_config(cls) -> Moore2016Config:
        """The default config (fast enough for the contract tests)."""
        return Moore2016Config()

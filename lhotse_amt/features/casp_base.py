"""Shared parts of the modulation-filterbank (CASP-family) extractors.

Feature layout (:meth:`CASPExtractor.feature_names` names every column):

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
:mod:`lhotse_amt.padding`). Feature-domain mixing: :class:`lhotse_amt.features.mixing.MUMixing`.

**Fused pooled path.** Without gradient, on the CPU or on CUDA (Triton kernels),
``stage="modulation"`` features of a model with a fused chain come from one model call per
chunk,
:meth:`lhotse_amt.models._base.StreamingModel.pooled_block_sums` (the fused operators of
:mod:`lhotse_amt.ops.fused`: the whole chain and the frame pooling in one pass over the
samples, no sample-rate tensor). The recursions run in float64 with coefficients from a
float64 twin of the model; in float64 the result equals the stage-wise path to rounding, in
float32 it is within 1e-5 of it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import Tensor

from .._validation import check_bool, check_choice, check_number, check_positive_finite
from ..functional.modulation import MODULATION_PRESETS
from ..models._base import PooledState
from .base import AuditoryConfig, AuditoryExtractor
from .frames import FrameAccumulator
from .mixing import MUMixing

__all__ = [
    "CASPConfig",
    "CASPExtractor",
    "ConfigModel",
    "FusedPooling",
    "check_casp_config",
    "check_grid",
    "check_modulation",
    "config_kwargs",
    "given_kwargs",
    "stage_kwargs",
]

_MODULATION_FIELDS = ("max_mfc", "use_upper_limit", "att_factor", "lp150")


@dataclass
class CASPConfig(AuditoryConfig):
    """The fields that the CASP-family configs (``amt-dau1997``, ``amt-osses2021``,
    ``amt-paulick2024``) share, with the same meaning and checks
    (:func:`check_casp_config`); a config changes a default by declaring the field again.

    Attributes:
        flow, fhigh: range of the auditory channel grid (Hz), ``0 < flow < fhigh``.
        adaptation_limit: overshoot limit of the adaptation loops (``>= 0``; ``None``:
            the model's).
        max_mfc, use_upper_limit, att_factor, lp150: modulation filterbank settings
            (:class:`~lhotse_amt.functional.modulation.ModulationSettings`; ``None``: the
            model's or its preset's).
        stage: the output stage (``"modulation"``; each config lists the others).
        layout: ``"compact"`` or ``"padded"`` modulation columns.
    """

    flow: float = 80.0
    fhigh: float = 8000.0
    adaptation_limit: float | None = None
    max_mfc: float | None = None
    use_upper_limit: bool | None = None
    att_factor: float | None = None
    lp150: bool | None = None
    stage: str = "modulation"
    layout: str = "compact"


def check_grid(c: CASPConfig) -> None:
    """``0 < flow < fhigh`` (Hz), both finite (normalised to floats)."""
    c.flow = check_positive_finite("flow", c.flow)
    c.fhigh = check_positive_finite("fhigh", c.fhigh)
    if not c.flow < c.fhigh:
        raise ValueError(f"flow must be below fhigh, got flow={c.flow}, fhigh={c.fhigh}")


def check_modulation(c: CASPConfig, with_preset: bool = True) -> None:
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


def check_casp_config(
    c: CASPConfig,
    stages: tuple[str, ...] = ("modulation", "adaptation"),
    with_preset: bool = True,
) -> None:
    """The fields every CASP-family config has: the grid (:func:`check_grid`), the
    modulation filterbank settings (:func:`check_modulation`), ``filter_type`` where the
    config has it, ``stage`` (one of ``stages``) and ``layout``."""
    check_grid(c)
    check_modulation(c, with_preset)
    if hasattr(c, "filter_type"):
        check_choice("filter_type", c.filter_type, ("efilt", "butterworth"))
    check_choice("stage", c.stage, stages)
    check_choice("layout", c.layout, ("compact", "padded"))


def config_kwargs(c: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The config fields ``names`` as keyword arguments of the model (the same names)."""
    return {k: getattr(c, k) for k in names}


def given_kwargs(**kwargs: Any) -> dict[str, Any]:
    """The keyword arguments whose value is not ``None`` (a config field left ``None`` takes
    the model's default)."""
    return {k: v for k, v in kwargs.items() if v is not None}


def stage_kwargs(c: CASPConfig) -> dict[str, dict[str, Any]]:
    """The model's ``adaptation_kwargs`` (``limit``) and ``modulation_kwargs`` (``preset``,
    the modulation-filterbank fields and ``filter_type``) that a config sets; fields left
    ``None`` take the model's defaults."""
    mod: dict[str, Any] = {}
    if hasattr(c, "filter_type"):
        mod["filter_type"] = c.filter_type
    if getattr(c, "modulation_preset", None) is not None:
        mod["preset"] = c.modulation_preset
    for k in _MODULATION_FIELDS:
        if getattr(c, k) is not None:
            mod[k] = getattr(c, k)
    adaptation = {} if c.adaptation_limit is None else {"limit": c.adaptation_limit}
    return {"adaptation_kwargs": adaptation, "modulation_kwargs": mod}


class ConfigModel:
    """The model of an extractor's config: ``model_type(sampling_rate, **fields, dtype=...,
    **extra)``, ``fields`` the config's :attr:`model_fields` (named as the model's
    arguments), ``dtype`` the config's and ``extra`` :meth:`_model_kwargs`."""

    config: Any
    torch_dtype: torch.dtype
    model_type: ClassVar[type[torch.nn.Module]]
    model_fields: ClassVar[tuple[str, ...]] = ()

    def _model_kwargs(self) -> dict[str, Any]:
        """The model's keyword arguments that are not a config field of the same name."""
        return {}

    def _build_model(self) -> torch.nn.Module:
        c = self.config
        return self.model_type(
            c.sampling_rate,
            **config_kwargs(c, self.model_fields),
            dtype=self.torch_dtype,
            **self._model_kwargs(),
        )


class FusedPooling:
    """The fused pooled path of an extractor (``stage="modulation"``, no gradient, a
    model whose :meth:`~lhotse_amt.models._base.StreamingModel.pooled_supported`, eager
    inference on a device with kernels: the CPU, and CUDA with Triton,
    :meth:`~lhotse_amt.models._base.StreamingModel._eager_inference`): per chunk one call
    of the model's ``pooled_block_sums``, whose block sums become frames
    (:meth:`FrameAccumulator.add_block_sums`)."""

    config: Any
    hop: int

    def _column_index(self) -> np.ndarray | None:
        return None

    def _envelope(self) -> bool:
        """King2019: the bands above ``pi_cutoff`` as scaled magnitudes."""
        return False

    def _fused_ok(self, model: torch.nn.Module, x: Tensor) -> bool:
        return (
            self.config.stage == "modulation"
            and model._eager_inference(x)
            and model.pooled_supported()
        )

    def _single_pass(self, model: torch.nn.Module, x: Tensor) -> bool:
        # the fused chain keeps its state in the kernel and writes block sums only
        return self._fused_ok(model, x)

    def _chunk(
        self, model: torch.nn.Module, x: Tensor, state: Any, t0: int, acc: FrameAccumulator
    ) -> Any:
        if not self._fused_ok(model, x):
            return super()._chunk(model, x, state, t0, acc)  # type: ignore[misc]
        if not isinstance(state, PooledState):  # the model's initial stream state
            state = PooledState(front=state)
        sums, state = model.pooled_block_sums(
            x[:, 0],
            state,
            self.hop,
            [n - t0 for n in acc.lengths],
            self.config.pooling == "rms",
            envelope=self._envelope(),
        )
        B, C, M, nblk = sums.shape
        cols = self._column_index()
        if sums.device.type == "cpu":
            # numpy on this thread (a torch copy or gather opens a parallel region)
            sums_np = sums.numpy().reshape(B, C * M, nblk)
            if cols is not None:
                sums_np = sums_np[:, cols]
            sums = torch.from_numpy(sums_np)
        else:
            sums = sums.reshape(B, C * M, nblk)
            if cols is not None:
                sums = sums.index_select(1, torch.as_tensor(cols, device=sums.device))
        acc.add_block_sums(sums, t0)
        return state


class CASPExtractor(MUMixing, ConfigModel, FusedPooling, AuditoryExtractor):
    """Common code of the modulation-filterbank extractors with model-unit output
    (Dau1997, Osses2021, Paulick2024; see the module docstring)."""

    stages: ClassVar[tuple[str, ...]] = ("modulation", "adaptation")

    def _model_kwargs(self) -> dict[str, Any]:
        return stage_kwargs(self.config)

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
        if self.config.stage != "modulation" or self.config.layout == "padded":
            return None
        _, mfc = self._spec()
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
        out, new = model.stream(x[:, 0], state, upto=self.config.stage)
        y = out[self.config.stage]
        if self.config.stage == "modulation":
            B, C, M, T = y.shape
            y = y.reshape(B, C * M, T)
            cols = self._column_index()
            if cols is not None:
                y = y.index_select(1, torch.as_tensor(cols, device=y.device))
        return y, new

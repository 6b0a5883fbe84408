"""``amt-paulick2024``: frame-level internal representation of the revised CASP model of
Paulick, Relaño-Iborra & Dau (2024): outer/middle ear, DRNL filterbank, IHC, adaptation
loops, decimation and modulation filterbank
(:class:`lhotse_amt.models.paulick2024.Paulick2024`). Layout, units (MU) and padding (0.0)
as :mod:`lhotse_amt.features.casp_base`; frames of the decimated output below.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lhotse.features.base import register_extractor
from torch import Tensor

from .._validation import check_bool, check_choice, check_int
from ..models.paulick2024 import Paulick2024
from .casp_base import CASPConfig, CASPExtractor, check_casp_config
from .frames import FrameAccumulator

__all__ = ["Paulick2024Config", "Paulick2024Extractor"]


@dataclass
class Paulick2024Config(CASPConfig):
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
    n_channels: int = 50
    use_outerear: bool = True
    drnl_preset: str = "jepsen2008"
    resample_factor: int = 4
    filter_type: str = "efilt"

    def validate(self) -> None:
        super().validate()
        self.n_channels = check_int("n_channels", self.n_channels, min=1)
        self.use_outerear = check_bool("use_outerear", self.use_outerear)
        check_choice("drnl_preset", self.drnl_preset, ("jepsen2008", "lopezpoveda2001"))
        self.resample_factor = check_int("resample_factor", self.resample_factor, min=1)
        check_casp_config(self, ("modulation", "resampled", "adaptation"), with_preset=False)


@register_extractor
class Paulick2024Extractor(CASPExtractor):
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
    chunk (operator ``lhotse_amt::pool_held``, :func:`lhotse_amt.ops.fused.pool_held`),
    which also picks the ``compact`` layout's columns.

    **Fused pooled path.** Without gradient, on the CPU or on CUDA (Triton), the
    ``stage="modulation"`` features of the ``efilt`` bands come from one model call for
    the whole batch, :meth:`~lhotse_amt.models.paulick2024.Paulick2024.pooled_frames`: the
    ear filter, then DRNL, IHC, adaptation loops, decimator, modulation filterbank and frame
    pooling in one operator (``lhotse_amt::paulick_pooled``; on the CPU one pass over the
    samples with every state in registers and small buffers, no sample-rate or decimated
    signal stored), so the kernel launches do not grow with the length and memory grows
    with the frames. The same values, bit for bit, as the per-chunk path (front end, then
    :meth:`~lhotse_amt.models._base.StreamingModel.pooled_modulation`, which serves
    broken-stick exponents other than 1/4).

    **Mixing hooks** (``mix``/``scale``/``compute_energy``): as for ``amt-dau1997`` they invert
    the adaptation loops' steady state; here the loops' input is the IHC receptor potential
    (V), not the sound amplitude, so adding its "intensities" is a coarser approximation than
    for Dau1997. Extract from mixed audio where accuracy matters.
    """

    name = "amt-paulick2024"
    config_type = Paulick2024Config
    model_type = Paulick2024
    model_fields = ("flow", "fhigh", "n_channels", "use_outerear", "filter_type", "resample_factor")
    stages: ClassVar[tuple[str, ...]] = ("modulation", "resampled", "adaptation")

    def __init__(self, config: Paulick2024Config | None = None) -> None:
        super().__init__(config)

    @classmethod
    def test_config(cls) -> Paulick2024Config:
        """A fast configuration for tests: 8 DRNL channels (the defaults use 50)."""
        return Paulick2024Config(n_channels=8)

    def _model_kwargs(self) -> dict[str, Any]:
        return dict(drnl_kwargs={"preset": self.config.drnl_preset}, **super()._model_kwargs())

    def _decimation(self) -> int:
        return 1 if self.config.stage == "adaptation" else int(self.config.resample_factor)

    def _chunk_alignment(self) -> int:
        # chunks hold whole decimated samples and whole frames
        R = self._decimation()
        return self.hop * R // math.gcd(self.hop, R)

    def _fused_modulation_ok(self, model: Paulick2024, x: Tensor) -> bool:
        """The modulation filterbank can run fused with the pooling (no gradient, a device
        with the pooled operators' kernels: the CPU, CUDA with Triton; the one-pole
        ``efilt`` bands of the register kernel)."""
        return (
            self.config.stage == "modulation"
            and model._eager_inference(x)
            and model.pooled_modulation_supported()
        )

    def _single_pass(self, model: torch.nn.Module, x: Tensor) -> bool:
        # the whole chain pooled in one operator call (Paulick2024.pooled_frames)
        return (
            self._decimation() > 1
            and self._fused_modulation_ok(model, x)
            and model.pooled_frames_supported()
        )

    @staticmethod
    def _frame_table(
        acc: FrameAccumulator, t0: int, t1: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The frames of every item that start within ``[t0, t1)``: their start and stop
        samples relative to ``t0`` ``(B, F)`` (padded) and their counts ``(B,)``."""
        spans = [acc.frame_spans(b, t0, t1) for b in range(acc.batch)]
        counts = np.array([len(s) for s, _ in spans], np.int64)
        F = max(1, int(counts.max(initial=0)))
        starts = np.zeros((acc.batch, F), np.int64)
        stops = np.ones((acc.batch, F), np.int64)
        for b, (s, e) in enumerate(spans):
            starts[b, : len(s)] = s
            stops[b, : len(e)] = e
        return starts, stops, counts

    def _add_frames(
        self, acc: FrameAccumulator, frames: Tensor, counts: np.ndarray, dtype: torch.dtype
    ) -> None:
        """Frames ``(B, C, M + 1, F)`` (the first ``counts[b]`` valid) into ``acc``, the
        layout's columns picked."""
        cols = self._column_index()
        idx = None if cols is None else torch.as_tensor(cols, device=frames.device)
        f_np = frames.numpy() if frames.device.type == "cpu" else None
        for b, n in enumerate(counts.tolist()):
            if n == 0:
                continue
            if f_np is not None:
                v = torch.from_numpy(np.ascontiguousarray(f_np[b, ..., :n]).reshape(-1, n))
            else:
                v = frames[b, ..., :n].reshape(-1, n)
            v = v if idx is None else v[idx]
            acc.add(b, v.to(dtype=dtype))

    def _chunk(
        self, model: torch.nn.Module, x: Tensor, state: Any, t0: int, acc: FrameAccumulator
    ) -> Any:
        R = self._decimation()
        if R == 1:
            return super()._chunk(model, x, state, t0, acc)
        t1 = t0 + x.shape[-1]
        rms = self.config.pooling == "rms"
        if self._single_pass(model, x):
            starts, stops, counts = self._frame_table(acc, t0, t1)
            frames = model.pooled_frames(x[:, 0], starts, stops, counts, rms)
            self._add_frames(acc, frames, counts, model.dtype)
            return state
        if self._fused_modulation_ok(model, x):
            starts, stops, counts = self._frame_table(acc, t0, t1)
            frames, state = model.pooled_modulation(
                x[:, 0], state, "resampled", R, starts, stops, counts, rms
            )
            if frames is not None:
                self._add_frames(acc, frames, counts, model.dtype)
            return state
        from ..ops import fused  # compiled kernels: imported on first use

        # decimated features (every column; the compact layout's are picked after pooling,
        # on frames instead of samples), pooled as the held signal
        out, state = model.stream(x[:, 0], state, upto=self.config.stage)
        y = out[self.config.stage]
        y = y.reshape(y.shape[0], -1, y.shape[-1])
        cols = self._column_index()
        for b in range(acc.batch):
            s, e = acc.frame_spans(b, t0, t1)
            if len(s):
                acc.add(b, fused.pool_held(y[b], cols, s, e, R, rms))
        return state

"""Shared machinery of the auditory-model Lhotse feature extractors.

Every extractor turns a model's sample-rate output into a 2-D float32 matrix
``(num_frames, num_features)`` with exactly
``lhotse.utils.compute_num_frames_from_samples(num_samples, frame_shift, sampling_rate)``
frames. Frame ``j`` is the mean (or rms) of the model output over input samples
``[j * hop, (j + 1) * hop)``, truncated at the end of the signal (``hop = frame_shift *
sampling_rate``). The models are causal, so a frame never depends on later samples: batch
padding and chunking change nothing inside an item's length.

Long recordings are processed in chunks of ``chunk_duration`` seconds whose filter and
adaptation states are carried from chunk to chunk, so peak memory grows with the feature
matrix, not with the sample-rate model output, and the result equals one-shot processing.
A fused pooled path (the whole chain and the pooling in one operator, which keeps its
states in the kernel and writes frames only) runs the whole batch in one call instead: its
memory grows with the frames alone, and its kernel launches do not grow with the length.

**Level calibration.** ``full_scale_db_spl`` states the sound pressure level (dB SPL) of a
digital signal with rms 1. The CASP models use the AMT convention (rms 1 = 100 dB SPL),
which is the default; a recording whose full scale means ``L`` dB SPL is scaled by
``10^((L - 100) / 20)`` before the model. ``target_level_db_spl`` (opt-in) instead
normalises every cut to that rms level, for corpora recorded at arbitrary levels.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from lhotse.features.base import FeatureExtractor
from lhotse.utils import compute_num_frames_from_samples
from torch import Tensor

from .._attributes import forwarded_attribute
from .._serial import all_finite
from .._validation import (
    as_float_tensor,
    check_bool,
    check_choice,
    check_device,
    check_int,
    check_level_db,
    check_positive_finite,
    check_rate,
)
from .frames import ChunkPlan, FrameAccumulator

__all__ = ["AuditoryConfig", "AuditoryExtractor", "config_from_dict"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64}


@dataclass
class AuditoryConfig:
    """Fields common to every auditory-model extractor config (flat, YAML-safe).

    Every field is checked when the config is built (also by :meth:`from_dict` and YAML
    loading) and again when an extractor is built from it: a value of the wrong type raises
    ``TypeError`` (``bool`` is not a number; ints are fine for float fields, numpy scalars
    for any number), a value out of range ``ValueError``; both name the field, the value
    and what is allowed.

    Attributes:
        sampling_rate: expected input rate (Hz), a whole number in ``(0, 1e6]``
            (``16000.0`` is read as 16000); other rates raise an error (resample the cuts
            with ``cuts.resample(sampling_rate)``).
        frame_shift: feature frame shift (s), finite and > 0; ``frame_shift *
            sampling_rate`` must be an integer number of samples.
        device: torch device the model runs on (``"cpu"``, ``"cuda"``, ``"cuda:1"``); a
            CUDA device on a machine without CUDA is an error at construction.
        dtype: ``"float32"`` or ``"float64"`` computation precision (output is float32).
        full_scale_db_spl: dB SPL of a digital signal with rms 1 (AMT: 100); finite, within
            [-50, 200] dB SPL.
        target_level_db_spl: if set, every cut is scaled to this rms level (dB SPL);
            finite, within [-50, 200] dB SPL. A cut that is digital silence, or quieter
            than ``-150`` dB re full scale (rms below ``10^(-150/20)``, under the
            quantisation noise of 24-bit audio), cannot be scaled and raises an error.
        pooling: ``"mean"`` or ``"rms"`` of the model output over each frame.
        chunk_duration: processing chunk (s), finite and > 0; bounds the memory of long
            recordings on the stage-wise paths (the fused pooled paths need no chunks).
        channel: for mono models, the channel (an integer index; negative counts from the
            end) of multi-channel input to use; ``None`` with ``downmix=False`` makes
            multi-channel input an error.
        downmix: ``True``/``False``: for mono models, average multi-channel input to mono.
    """

    sampling_rate: int = 16000
    frame_shift: float = 0.01
    device: str = "cpu"
    dtype: str = "float32"
    full_scale_db_spl: float = 100.0
    target_level_db_spl: float | None = None
    pooling: str = "mean"
    chunk_duration: float = 2.0
    channel: int | None = None
    downmix: bool = False

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Check every field (see the class docstring) and normalise numbers to plain
        Python ``int``/``float`` (YAML-safe). Subclasses extend it for their own fields."""
        self.sampling_rate = check_rate("sampling_rate", self.sampling_rate, integral=True)
        self.frame_shift = check_positive_finite("frame_shift", self.frame_shift)
        hop = self.frame_shift * self.sampling_rate
        # relative tolerance 1e-6: a float32 frame shift (0.0125 -> 0.0125000002) is fine
        if abs(hop - round(hop)) > 1e-6 * max(1.0, hop) or round(hop) < 1:
            raise ValueError(
                f"frame_shift * sampling_rate must be a positive integer number of samples, got "
                f"{self.frame_shift} * {self.sampling_rate} = {hop}"
            )
        check_device("device", self.device)
        if not isinstance(self.device, str):
            self.device = str(self.device)
        check_choice("dtype", self.dtype, tuple(_DTYPES))
        self.full_scale_db_spl = check_level_db("full_scale_db_spl", self.full_scale_db_spl)
        self.target_level_db_spl = check_level_db(
            "target_level_db_spl", self.target_level_db_spl, allow_none=True
        )
        check_choice("pooling", self.pooling, ("mean", "rms"))
        self.chunk_duration = check_positive_finite("chunk_duration", self.chunk_duration)
        self.channel = check_int("channel", self.channel, allow_none=True)
        self.downmix = check_bool("downmix", self.downmix)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> AuditoryConfig:
        """Rebuild a config (of the class it is called on); unknown keys are an error."""
        return config_from_dict(cls, data)


def config_from_dict(cls: type, data: dict[str, Any]) -> Any:
    """Build a config dataclass, rejecting unknown keys with a clear error."""
    names = {f.name for f in dataclasses.fields(cls)}
    data = {k: v for k, v in dict(data).items() if k != "feature_type"}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ValueError(f"unknown {cls.__name__} key(s) {unknown}; valid keys are {sorted(names)}")
    out = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            v = data[f.name]
            out[f.name] = list(v) if isinstance(v, tuple) else v
    return cls(**out)


class AuditoryExtractor(FeatureExtractor):
    """Base class of the ``amt-*`` extractors.

    Subclasses set ``name`` and ``config_type`` and implement :meth:`_build_model`,
    :meth:`feature_dim`, :meth:`feature_names` and :meth:`_sample_features` (one chunk of
    sample-rate features ``(B, D, T)`` with explicit streaming state), which the one
    chunk-and-pool loop (:meth:`_compute`) pools; a model with a fused pooled path
    overrides :meth:`_chunk` (one model call per chunk). Models whose native output is
    already framed (the loudness models) override :meth:`_compute` instead.
    """

    name: ClassVar[str] = "amt-base"
    config_type: ClassVar[type] = AuditoryConfig
    #: number of input channels the model consumes (1 = mono, 2 = binaural)
    input_channels: ClassVar[int] = 1
    #: value to pass as ``pad_feat_value`` when padding stored features (silence)
    padding_value: ClassVar[float] = 0.0

    def __init__(self, config: Any | None = None) -> None:
        super().__init__(config)
        self._check_config()
        self._models: dict[str, torch.nn.Module] = {}
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ pickling
    def __getstate__(self) -> dict:
        d = self.__dict__.copy()
        d["_models"] = {}
        d.pop("_lock", None)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ config
    def _check_config(self) -> None:
        """Check the config again (its fields may have been set after it was built)."""
        if not isinstance(self.config, self.config_type):
            raise TypeError(
                f"{self.name} needs a {self.config_type.__name__}, got {type(self.config).__name__}"
            )
        self.config.validate()

    frame_shift = forwarded_attribute("config.frame_shift", "Frame shift (s) of the config.")
    device = forwarded_attribute("config.device", "Device of the config the model runs on.")

    @property
    def hop(self) -> int:
        return int(round(self.config.frame_shift * self.config.sampling_rate))

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.config.dtype]

    def model(self, device: str | torch.device | None = None) -> torch.nn.Module:
        """The underlying model on ``device`` (built once per device and cached)."""
        dev = str(torch.device(device or self.config.device))
        with self._lock:
            if dev not in self._models:
                m = self._build_model().to(dev)
                m.eval()
                self._models[dev] = m
            return self._models[dev]

    # ------------------------------------------------------------------ to override
    def _build_model(self) -> torch.nn.Module:  # pragma: no cover - abstract
        raise NotImplementedError

    def feature_names(self) -> list[str]:  # pragma: no cover - abstract
        """One human-readable name per feature column."""
        raise NotImplementedError

    def _sample_features(
        self, model: torch.nn.Module, x: Tensor, state: Any
    ) -> tuple[Tensor, Any]:  # pragma: no cover - abstract
        """Sample-rate features ``(B, D, T)`` of chunk ``x (B, C_in, T)`` and new state."""
        raise NotImplementedError

    # ------------------------------------------------------------------ input handling
    def _check_rate(self, sampling_rate: int) -> None:
        sr = check_rate("sampling_rate", sampling_rate, integral=True)
        if sr != int(self.config.sampling_rate):
            raise ValueError(
                f"{self.name} is configured for {self.config.sampling_rate} Hz input but got "
                f"{sampling_rate} Hz audio. Resample the data first, e.g. "
                f"`cuts = cuts.resample({self.config.sampling_rate})`, or set "
                f"sampling_rate={sampling_rate} in the extractor config."
            )

    def _channels(self, x: Tensor) -> Tensor:
        """``(T,)`` or ``(C, T)`` -> ``(C_in, T)`` following the channel policy."""
        if x.dim() == 1:
            x = x.unsqueeze(0)
        if x.dim() != 2:
            raise ValueError(
                f"{self.name} expects audio shaped (T,) or (channels, T), got {tuple(x.shape)}"
            )
        C = x.shape[0]
        want = self.input_channels
        if want == 1:
            if C == 1:
                return x
            if self.config.channel is not None:
                if not -C <= self.config.channel < C:
                    raise ValueError(
                        f"channel={self.config.channel} is out of range for {C}-channel audio"
                    )
                i = self.config.channel % C  # negative indices count from the end
                return x[i : i + 1]
            if self.config.downmix:
                return x.mean(0, keepdim=True)
            raise ValueError(
                f"{self.name} is a mono model but got {C}-channel audio; set `channel=<index>` "
                "or `downmix=True` in its config, or convert the cuts with `cut.to_mono()`"
            )
        return self._multichannel(x)

    def _multichannel(self, x: Tensor) -> Tensor:
        if x.shape[0] != self.input_channels:
            raise ValueError(
                f"{self.name} needs exactly {self.input_channels} channels, got {x.shape[0]}"
            )
        return x

    def _num_frames(self, n: int) -> int:
        return compute_num_frames_from_samples(
            n, self.config.frame_shift, self.config.sampling_rate
        )

    @property
    def min_samples(self) -> int:
        """Fewest samples that give one frame (Lhotse rounds the frame count:
        ``hop - hop // 2``, i.e. ``ceil(hop / 2)``)."""
        return self.hop - self.hop // 2

    def _validate_item(self, x: Tensor) -> None:
        n = x.shape[-1]
        if n == 0:
            raise ValueError(f"{self.name}: empty audio (0 samples)")
        if self._num_frames(n) < 1:
            raise ValueError(
                f"{self.name}: audio of {n} samples is shorter than one frame "
                f"({self.min_samples} samples or more are needed at frame_shift="
                f"{self.config.frame_shift} and sampling_rate={self.config.sampling_rate})"
            )
        if not all_finite(x):
            raise ValueError(f"{self.name}: audio contains NaN or infinite samples")

    #: quietest cut (rms re digital full scale, dB) ``target_level_db_spl`` scales up:
    #: below the quantisation noise of 24-bit audio, i.e. digital silence
    min_rms_db: ClassVar[float] = -150.0
    #: highest peak level (dB SPL) the models accept after level scaling: far above any
    #: physical sound, far below float32 overflow inside the models
    max_peak_db_spl: ClassVar[float] = 240.0

    def _level_gain(self, x: Tensor, n: int) -> float:
        """Gain that brings ``(C_in, T)`` audio to the model's level convention."""
        c = self.config
        if c.target_level_db_spl is not None:
            # rms over the item in float64, in blocks (no float64 copy of a long signal);
            # numpy's pairwise sum on this thread: torch's reduction splits by thread count,
            # and its last bits with it
            step = 1 << 20
            xn = x.detach().cpu().numpy()
            ss = sum(
                float(np.square(xn[..., i : min(i + step, n)], dtype=np.float64).sum())
                for i in range(0, n, step)
            )
            rms = (ss / max(1, n * x.shape[0])) ** 0.5
            if rms <= 0.0:
                raise ValueError(
                    f"{self.name}: the cut is digital silence (all samples 0) and cannot be "
                    f"scaled to target_level_db_spl={c.target_level_db_spl}; drop silent cuts "
                    "or use full_scale_db_spl instead of a target level"
                )
            rms_db = 20.0 * np.log10(rms)
            if rms_db < self.min_rms_db:
                raise ValueError(
                    f"{self.name}: the cut is too quiet to scale to target_level_db_spl="
                    f"{c.target_level_db_spl}: its rms {rms:.3g} ({rms_db:.1f} dB re full "
                    f"scale) is below {self.min_rms_db:g} dB, i.e. digital silence; drop such "
                    "cuts or use full_scale_db_spl instead of a target level"
                )
            return 10.0 ** ((c.target_level_db_spl - self.model_dboffset) / 20.0) / rms
        return 10.0 ** ((c.full_scale_db_spl - self.model_dboffset) / 20.0)

    def _check_scaled(self, x: Tensor, gain: float) -> None:
        """The audio after level scaling must be finite and within
        :attr:`max_peak_db_spl` (else the level settings or the audio's scale are wrong)."""
        # numpy on this thread: torch would open a parallel region per pass (see _serial)
        peak = float(np.abs(x.numpy()).max()) if x.numel() else 0.0
        limit = 10.0 ** ((self.max_peak_db_spl - self.model_dboffset) / 20.0)
        if np.isfinite(peak) and peak <= limit:
            return
        c = self.config
        setting = (
            f"target_level_db_spl={c.target_level_db_spl}"
            if c.target_level_db_spl is not None
            else f"full_scale_db_spl={c.full_scale_db_spl}"
        )
        what = (
            "overflows (non-finite samples)"
            if not np.isfinite(peak)
            else f"reaches a peak of {20 * np.log10(peak) + self.model_dboffset:.1f} dB SPL"
        )
        raise ValueError(
            f"{self.name}: the audio after level scaling (gain {gain:.3g} for {setting}) "
            f"{what}, above the {self.max_peak_db_spl:g} dB SPL the models accept; check "
            "the level settings and that the audio is scaled to [-1, 1]"
        )

    #: dB SPL of rms 1 in the model's own convention
    model_dboffset: ClassVar[float] = 100.0

    # ------------------------------------------------------------------ computation
    def _chunk_alignment(self) -> int:
        """Chunks are multiples of this many input samples (a multiple of ``hop``)."""
        return self.hop

    def _single_pass(self, model: torch.nn.Module, x: Tensor) -> bool:
        """Whether batch ``x`` runs as one chunk: a path whose memory grows with the frames
        alone (a fused pooled operator) gains nothing from chunks but kernel launches, so
        it processes the whole batch in one call whatever its length."""
        return False

    def _chunk_plan(
        self, model: torch.nn.Module, T: int, acc: FrameAccumulator, single: bool = False
    ) -> ChunkPlan:
        """The chunks of a padded batch of ``T`` samples (:class:`ChunkPlan`): of
        ``chunk_duration`` seconds, or one chunk for the whole batch if ``single``."""
        align = self._chunk_alignment()
        end = min(T, max(min(n, f * self.hop) for n, f in zip(acc.lengths, acc.num_frames)))
        if single:
            return ChunkPlan(max(align, -(-end // align) * align), end)
        chunk = int(round(self.config.chunk_duration * self.config.sampling_rate))
        return ChunkPlan(max(align, chunk // align * align), end)

    def _initial_state(self, model: torch.nn.Module, lengths: list[int]) -> Any:
        """Streaming state before the first chunk (``None``: the model's rest state)."""
        return None

    def _chunk(
        self, model: torch.nn.Module, x: Tensor, state: Any, t0: int, acc: FrameAccumulator
    ) -> Any:
        """Pool chunk ``x (B, C_in, Tc)`` (input samples from ``t0``) into ``acc``; return
        the new streaming state. The default pools :meth:`_sample_features`."""
        y, state = self._sample_features(model, x, state)
        acc.add_samples(y, t0)
        return state

    def _compute(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        """Features of a padded batch ``x (B, C_in, T)`` -> list of ``(F_i, D)``: the one
        chunk-and-pool loop (streaming states carried from chunk to chunk)."""
        model = self.model(x.device)
        acc = FrameAccumulator(
            self.hop,
            lengths,
            [self._num_frames(n) for n in lengths],
            self.config.pooling == "rms",
        )
        plan = self._chunk_plan(model, x.shape[-1], acc, self._single_pass(model, x))
        if plan.lookahead:  # zeros after the batch (the items' own ends are zero-padded)
            if x.device.type == "cpu":  # numpy on this thread (no torch parallel region)
                xp = np.zeros((*x.shape[:-1], x.shape[-1] + plan.lookahead), x.numpy().dtype)
                xp[..., : x.shape[-1]] = x.numpy()
                x = torch.from_numpy(xp)
            else:
                x = torch.nn.functional.pad(x, (0, plan.lookahead))
        state = self._initial_state(model, list(lengths))
        for t0, t1 in plan.spans():
            a, b = plan.read_range(t0, t1)
            state = self._chunk(model, x[..., a:b], state, t0, acc)
        return acc.assemble()

    def _run(self, items: list[Tensor], lengths: list[int] | None = None) -> list[Tensor]:
        dev = torch.device(self.config.device)
        dtype = self.torch_dtype
        if lengths is None:
            lengths = [int(t.shape[-1]) for t in items]
        prepared = []
        for t, n in zip(items, lengths):
            t = self._channels(t)
            self._validate_item(t[..., :n])
            prepared.append((t, self._level_gain(t, n)))
        T = max(lengths)
        C = prepared[0][0].shape[0]
        # one copy of the audio, in the model's dtype, scaled (numpy on this thread: torch
        # would open a parallel region per pass, see _serial)
        batch_np = np.zeros((len(prepared), C, T), dtype=torch.empty(0, dtype=dtype).numpy().dtype)
        for b, ((t, gain), n) in enumerate(zip(prepared, lengths)):
            with np.errstate(over="ignore"):  # an overflow is reported by _check_scaled
                np.multiply(t[..., :n].numpy(), gain, out=batch_np[b, :, :n], casting="unsafe")
            self._check_scaled(torch.from_numpy(batch_np[b, :, :n]), gain)
        batch = torch.from_numpy(batch_np)
        del prepared
        with torch.inference_mode():
            feats = self._compute(batch.to(dev), lengths)
        return [f.to(device="cpu", dtype=torch.float32).contiguous() for f in feats]

    # ------------------------------------------------------------------ Lhotse API
    def extract(self, samples: np.ndarray | Tensor, sampling_rate: int) -> np.ndarray | Tensor:
        """Features of one signal ``(T,)`` or ``(C, T)`` -> ``(num_frames, feature_dim)``
        float32 (numpy for numpy input, torch for torch input)."""
        is_torch = isinstance(samples, Tensor)
        self._check_rate(sampling_rate)
        x = as_float_tensor(samples)
        (f,) = self._run([x.detach().cpu()])
        return f if is_torch else f.numpy()

    def extract_batch(
        self,
        samples: np.ndarray | Tensor | Sequence[np.ndarray] | Sequence[Tensor],
        sampling_rate: int,
        lengths: np.ndarray | Tensor | Sequence[int] | None = None,
    ) -> list[np.ndarray] | list[Tensor]:
        """Features of a batch in one forward pass on ``config.device``.

        ``samples`` is a list of ``(T_i,)``/``(C, T_i)`` arrays or tensors, or a padded
        ``(B, T)``/``(B, C, T)`` array or tensor with ``lengths``. Always returns a list with
        one ``(num_frames_i, feature_dim)`` float32 matrix per item (numpy for numpy input,
        CPU tensors for tensor input), equal to :meth:`extract` on each item.
        """
        self._check_rate(sampling_rate)
        if isinstance(samples, (list, tuple)):
            is_torch = len(samples) > 0 and isinstance(samples[0], Tensor)
            items = [as_float_tensor(s).detach().cpu() for s in samples]
        else:
            is_torch = isinstance(samples, Tensor)
            x = as_float_tensor(samples).detach().cpu()
            if x.dim() == 1:
                x = x.unsqueeze(0)
            if x.dim() not in (2, 3):
                raise ValueError(f"padded batch must be (B, T) or (B, C, T), got {tuple(x.shape)}")
            items = list(x)
        if lengths is not None:
            lengths = self._check_lengths(lengths, items)
        if not items:
            return []
        chans = {self._channels(t).shape[0] for t in items}
        if len(chans) > 1:  # pragma: no cover - _channels enforces one count
            raise ValueError("all items of a batch must have the same number of channels")
        feats = self._run(items, lengths)
        return feats if is_torch else [f.numpy() for f in feats]

    @staticmethod
    def _check_lengths(lengths: Any, items: list[Tensor]) -> list[int]:
        """``lengths`` of ``extract_batch``: one integer per item, ``1 <= n <=`` the item's
        (padded) number of samples. ``ValueError`` naming the problem otherwise."""
        if isinstance(lengths, (np.ndarray, Tensor)):
            arr = lengths.detach().cpu().numpy() if isinstance(lengths, Tensor) else lengths
            if arr.ndim != 1:
                raise ValueError(
                    f"lengths must be 1-D (one length per item), got shape {tuple(arr.shape)}"
                )
            if arr.dtype.kind not in "iu":
                raise ValueError(
                    f"lengths must be integer sample counts, got dtype {lengths.dtype}"
                )
            vals = [int(v) for v in arr.tolist()]
        elif isinstance(lengths, (list, tuple)):
            vals = []
            for v in lengths:
                if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
                    raise ValueError(
                        f"lengths must be integer sample counts, got {v!r} ({type(v).__name__})"
                    )
                vals.append(int(v))
        else:
            raise ValueError(
                "lengths must be a sequence, numpy array or tensor of integers, got "
                f"{type(lengths).__name__}"
            )
        if len(vals) != len(items):
            raise ValueError(f"got {len(items)} signals but {len(vals)} lengths")
        for i, (n, t) in enumerate(zip(vals, items)):
            if n < 1:
                raise ValueError(f"lengths[{i}] = {n}: every length must be at least 1 sample")
            if n > t.shape[-1]:
                raise ValueError(
                    f"lengths[{i}] = {n} exceeds the item's {t.shape[-1]} samples (the padded "
                    "length)"
                )
        return vals

    def feature_dim(self, sampling_rate: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

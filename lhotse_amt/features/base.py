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

from .._validation import as_float_tensor

__all__ = ["AuditoryConfig", "AuditoryExtractor", "config_from_dict"]


@dataclass
class AuditoryConfig:
    """Fields common to every auditory-model extractor config (flat, YAML-safe).

    Attributes:
        sampling_rate: expected input rate (Hz); other rates raise an error (resample the
            cuts with ``cuts.resample(sampling_rate)``).
        frame_shift: feature frame shift (s); ``frame_shift * sampling_rate`` must be an
            integer.
        device: torch device the model runs on (``"cpu"``, ``"cuda"``, ``"cuda:1"``).
        dtype: ``"float32"`` or ``"float64"`` computation precision (output is float32).
        full_scale_db_spl: dB SPL of a digital signal with rms 1 (AMT: 100).
        target_level_db_spl: if set, every cut is scaled to this rms level (dB SPL).
        pooling: ``"mean"`` or ``"rms"`` of the model output over each frame.
        chunk_duration: processing chunk (s); bounds the memory of long recordings.
        channel: for mono models, the channel of multi-channel input to use; ``None``
            with ``downmix=False`` makes multi-channel input an error.
        downmix: for mono models, average multi-channel input to mono.
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


_DTYPES = {"float32": torch.float32, "float64": torch.float64}


class AuditoryExtractor(FeatureExtractor):
    """Base class of the ``amt-*`` extractors.

    Subclasses set ``name`` and ``config_type`` and implement :meth:`_build_model`,
    :meth:`feature_dim`, :meth:`feature_names` and :meth:`_sample_features` (one chunk of
    sample-rate features ``(B, D, T)`` with explicit streaming state). Models whose native
    output is already framed override :meth:`_compute` instead.
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
        d.pop("_fused_plans", None)  # per-model kernel layouts (keyed by model id)
        return d

    def __setstate__(self, d: dict) -> None:
        self.__dict__.update(d)
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ config
    def _check_config(self) -> None:
        c = self.config
        hop = c.frame_shift * c.sampling_rate
        if c.frame_shift <= 0 or abs(hop - round(hop)) > 1e-9 * max(1.0, hop):
            raise ValueError(
                f"frame_shift * sampling_rate must be a positive integer number of samples, got "
                f"{c.frame_shift} * {c.sampling_rate} = {hop}"
            )
        if c.dtype not in _DTYPES:
            raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {c.dtype!r}")
        if c.pooling not in ("mean", "rms"):
            raise ValueError(f"pooling must be 'mean' or 'rms', got {c.pooling!r}")
        if c.chunk_duration <= 0:
            raise ValueError("chunk_duration must be positive")

    @property
    def frame_shift(self) -> float:
        return self.config.frame_shift

    @property
    def device(self) -> str:
        return self.config.device

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
        if int(sampling_rate) != int(self.config.sampling_rate):
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
                return x[self.config.channel : self.config.channel + 1]
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

    def _validate_item(self, x: Tensor) -> None:
        n = x.shape[-1]
        if n == 0:
            raise ValueError(f"{self.name}: empty audio (0 samples)")
        if self._num_frames(n) < 1:
            raise ValueError(
                f"{self.name}: audio of {n} samples is shorter than one frame "
                f"({self.hop // 2 + 1} samples or more are needed at frame_shift="
                f"{self.config.frame_shift})"
            )
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{self.name}: audio contains NaN or infinite samples")

    def _level_gain(self, x: Tensor, n: int) -> float:
        """Gain that brings ``(C_in, T)`` audio to the model's level convention."""
        c = self.config
        if c.target_level_db_spl is not None:
            # rms over the item in float64, in blocks (no float64 copy of a long signal)
            step = 1 << 20
            ss = sum(
                float(x[..., i : min(i + step, n)].double().square().sum())
                for i in range(0, n, step)
            )
            rms = (ss / max(1, n * x.shape[0])) ** 0.5
            if rms <= 0.0:
                return 0.0
            return 10.0 ** ((c.target_level_db_spl - self.model_dboffset) / 20.0) / rms
        return 10.0 ** ((c.full_scale_db_spl - self.model_dboffset) / 20.0)

    #: dB SPL of rms 1 in the model's own convention
    model_dboffset: ClassVar[float] = 100.0

    # ------------------------------------------------------------------ computation
    def _pool(self, y: Tensor, ends: list[int], t0: int, frames: list[list[Tensor]]) -> None:
        """Pool a chunk ``y (B, D, Tc)`` that starts at sample ``t0`` (a multiple of hop)."""
        hop = self.hop
        B, D, Tc = y.shape
        rms = self.config.pooling == "rms"
        v = y.square() if rms else y
        nfull = Tc // hop
        if nfull:
            full = v[..., : nfull * hop].reshape(B, D, nfull, hop).mean(-1)
        f0 = t0 // hop
        for b in range(B):
            n = ends[b]
            F = self._num_frames(n)
            n_full = min(F, n // hop)  # frames whose hop lies entirely inside the item
            parts = []
            k = min(n_full, f0 + nfull) - f0
            if k > 0:
                parts.append(full[b, :, :k])
            if F > n_full and t0 <= n_full * hop < t0 + Tc:
                # the item's last frame is cut short by the end of its samples
                s0, s1 = n_full * hop - t0, min(n, t0 + Tc) - t0
                parts.append(v[b, :, s0:s1].mean(-1, keepdim=True))
            if parts:
                p = torch.cat(parts, -1)
                frames[b].append(p.sqrt() if rms else p)

    def _chunk_frames(
        self,
        model: torch.nn.Module,
        x: Tensor,
        state: Any,
        t0: int,
        ends: list[int],
        frames: list[list[Tensor]],
    ) -> Any:
        """Append the frames of chunk ``x (B, C_in, Tc)`` (starting at sample ``t0``) to
        ``frames[b]`` as ``(D, k_b)`` tensors; return the new streaming state. The default
        pools :meth:`_sample_features`; subclasses may fuse model and pooling."""
        y, state = self._sample_features(model, x, state)
        self._pool(y, ends, t0, frames)
        return state

    def _frames_from_block_sums(
        self, sums: Tensor, t0: int, ends: list[int], frames: list[list[Tensor]]
    ) -> None:
        """Turn per-block sums ``(B, D, n_blocks)`` (block ``k`` = samples
        ``[t0 + k hop, t0 + (k + 1) hop)`` of the item, cut at its end) into frames."""
        hop = self.hop
        f0 = t0 // hop
        nblk = sums.shape[-1]
        for b, n in enumerate(ends):
            k = min(nblk, self._num_frames(n) - f0)
            if k <= 0:
                continue
            cnt = (n - t0 - hop * torch.arange(k, dtype=torch.float64)).clamp(1, hop)
            f = sums[b, :, :k] / cnt.to(sums.dtype)
            frames[b].append(f.sqrt() if self.config.pooling == "rms" else f)

    def _compute(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        """Features of a padded batch ``x (B, C_in, T)`` -> list of ``(F_i, D)``."""
        model = self.model(x.device)
        hop = self.hop
        chunk = max(
            hop, int(round(self.config.chunk_duration * self.config.sampling_rate)) // hop * hop
        )
        B, _, T = x.shape
        ends = list(lengths)
        frames: list[list[Tensor]] = [[] for _ in range(B)]
        state = None
        t_needed = min(T, max(min(n, self._num_frames(n) * hop) for n in ends))
        for t0 in range(0, t_needed, chunk):
            xc = x[..., t0 : min(t0 + chunk, t_needed)]
            state = self._chunk_frames(model, xc, state, t0, ends, frames)
        dt = self.torch_dtype
        return [self._assemble(frames[b], self._num_frames(ends[b]), dt) for b in range(B)]

    @staticmethod
    def _assemble(parts: list[Tensor], n_frames: int, dtype: torch.dtype) -> Tensor:
        """``(D, k)`` chunk frames -> one ``(n_frames, D)`` matrix in the model's dtype,
        filled part by part (no full-size concatenation or transposed copy of a long
        recording's features)."""
        D = parts[0].shape[0]
        out = torch.empty(n_frames, D, dtype=dtype, device=parts[0].device)
        f0 = 0
        while parts:
            p = parts.pop(0)
            out[f0 : f0 + p.shape[1]] = p.T
            f0 += p.shape[1]
        assert f0 == n_frames
        return out

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
        # one copy of the audio, in the model's dtype, scaled in place
        batch = torch.zeros(len(prepared), C, T, dtype=dtype)
        for b, ((t, gain), n) in enumerate(zip(prepared, lengths)):
            batch[b, :, :n] = t[..., :n]
            if gain != 1.0:
                batch[b].mul_(gain)
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
            if lengths is not None:
                lengths = [int(n) for n in lengths]
        else:
            is_torch = isinstance(samples, Tensor)
            x = as_float_tensor(samples).detach().cpu()
            if x.dim() == 1:
                x = x.unsqueeze(0)
            if x.dim() not in (2, 3):
                raise ValueError(f"padded batch must be (B, T) or (B, C, T), got {tuple(x.shape)}")
            items = list(x)
            if lengths is None:
                lengths = [x.shape[-1]] * x.shape[0]
            else:
                lengths = [
                    int(n) for n in (lengths.tolist() if hasattr(lengths, "tolist") else lengths)
                ]
        if not items:
            return []
        if lengths is not None and len(lengths) != len(items):
            raise ValueError(f"got {len(items)} signals but {len(lengths)} lengths")
        chans = {self._channels(t).shape[0] for t in items}
        if len(chans) > 1:  # pragma: no cover - _channels enforces one count
            raise ValueError("all items of a batch must have the same number of channels")
        feats = self._run(items, lengths)
        return feats if is_torch else [f.numpy() for f in feats]

    def feature_dim(self, sampling_rate: int) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

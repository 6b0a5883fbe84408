"""Shared parts of the loudness-model extractors ``amt-glasberg2002`` and ``amt-moore2016``.

**Features.** One row per Lhotse frame: the specific-loudness pattern (sone/Cam) on the
models' ERB-number grid, ``C = 149`` channels (1.8 … 38.8 Cam) for Glasberg2002 (one ear,
the signal presented diotically) and ``2 × 150`` channels (1.75 … 39 Cam) laid out
``[left | right]`` for Moore2016; optionally followed by the short-term (``include_stl``) and
long-term (``include_ltl``) loudness in sone (binaural/diotic values, i.e. the models' own
outputs). ``specific="instantaneous"`` (default) gives the instantaneous specific loudness,
``"short_term"`` the specific loudness after the short-term AGC (per channel; Moore2016: before
binaural inhibition). :meth:`feature_names` names every column (``fc=1000.0Hz``,
``left/fc=1000.0Hz``, ``stl``, ``ltl``).

**Frames (pooling).** The models produce one frame per millisecond, model frame ``i`` centred on
input time ``i / 1000`` s (sample ``32 i`` at 32 kHz), ``i = 0 … floor(T32 / 32)`` (``T32``: the
number of samples at 32 kHz). Lhotse frame ``j`` is the **mean of the model frames whose centre
lies in** ``[j * frame_shift, (j + 1) * frame_shift)``, i.e. of the ``i`` with
``floor(i * sampling_rate / (1000 * hop)) == j`` (``hop = frame_shift * sampling_rate``); the
last frame takes only the model frames that exist. The number of rows is exactly
``lhotse.utils.compute_num_frames_from_samples(T, frame_shift, sampling_rate)``; every row has at
least one model frame when ``frame_shift >= 1 ms``. For Glasberg2002 the AGCs start, as in the
model, 64 frames before the signal (``j = -64``); those leading frames are not pooled.

**Level.** The models take pascals. ``full_scale_db_spl`` is the level (dB SPL) of a digital
signal with rms 1 (default 100, as the other ``amt-*`` extractors): ``x_Pa = x * 20e-6 *
10^(full_scale_db_spl / 20)``, i.e. 2 Pa per unit at the default. (The AMT ``moore2016`` code
instead assumes 100 dB SPL for a full-scale *sinusoid*, rms 1/sqrt(2): pass
``full_scale_db_spl=103.01`` for that convention.) ``target_level_db_spl`` normalises every cut
to that rms level instead.

**Sampling rate.** The models run at 32 kHz; the configs default to ``sampling_rate=32000``.
Audio at another rate is rejected unless ``sampling_rate`` is set to it, in which case each
signal is resampled to 32 kHz (:func:`scipy.signal.resample_poly`) before the model; the frame
definition above is in seconds, so it is unchanged.

**Chunking.** Long signals are processed in blocks of about ``chunk_duration`` seconds aligned to
Lhotse frames. A model frame depends on the input within ±3072 samples (at 32 kHz) of its centre
(4097-tap zero-phase ear filter, 64-ms window), so each block is computed from its samples plus
3072 samples of context on each side (zeros outside the signal, as in one-shot processing); the
AGC states (short-term per channel, long-term) are carried from block to block. Memory is
bounded by the block, and the result equals one-shot processing up to float rounding. On
CUDA the blocks are sized by GPU memory instead (:data:`CUDA_BLOCK_FRAMES` model frames of
all items and ears together, or ``chunk_duration`` if that is longer), and each block is
one model call for the whole batch whose kernel launches do not depend on its length.

**Channels.** Glasberg2002 is mono (the usual ``channel``/``downmix`` policy). Moore2016 needs
exactly two channels (left, right); with ``diotic=True`` it also accepts mono audio and presents
it to both ears.

**Padding and mixing.** Silence is 0 sone, so pad stored features with ``0.0``
(:func:`lhotse_amt.pad_cut` does). The feature-domain mixing hooks
(:class:`lhotse_amt.features.mixing.LoudnessMixing`) are an approximation (the models are
nonlinear); extracting from the mixed audio is exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
from torch import Tensor

from .._serial import scaled_copy
from .._validation import check_bool, check_choice
from ..functional import loudness as L
from .base import AuditoryConfig, AuditoryExtractor
from .mixing import LoudnessMixing

__all__ = ["LoudnessConfig", "LoudnessExtractor", "stream_agc"]

#: pascals per digital unit at ``full_scale_db_spl = 100`` (rms 1 = 100 dB SPL)
_PA_PER_UNIT = L.P0 * 10.0 ** (100.0 / 20.0)
#: input context (samples at 32 kHz) on each side of a model frame centre
_CONTEXT = 3072
_CTX_FRAMES = _CONTEXT // L.HOP


def stream_agc(x: np.ndarray, attack: float, release: float, state: np.ndarray) -> np.ndarray:
    """Attack/release AGC of each row of ``x (N, T)`` from ``state (N,)`` (updated in place
    to each row's last output, so consecutive blocks equal one call on the whole signal):
    the operator ``lhotse_amt::agc_stream`` (:func:`lhotse_amt.ops.agc_stream.agc_stream`)."""
    from ..ops.agc_stream import agc_stream  # compiled kernels: imported on first use

    return agc_stream(x, attack, release, state)


@dataclass
class LoudnessConfig(AuditoryConfig):
    """Fields of the loudness extractor configs (checked at construction as
    :class:`AuditoryConfig`; ``frame_shift`` is at least the models' 1-ms frame)."""

    sampling_rate: int = 32000
    frame_shift: float = 0.01
    specific: str = "instantaneous"
    include_stl: bool = False
    include_ltl: bool = False

    def validate(self) -> None:
        super().validate()
        if self.frame_shift < 1e-3 - 1e-12:
            raise ValueError(
                f"frame_shift must be at least 0.001 s (the models' 1-ms frames), got "
                f"{self.frame_shift}"
            )
        check_choice("specific", self.specific, ("instantaneous", "short_term"))
        self.include_stl = check_bool("include_stl", self.include_stl)
        self.include_ltl = check_bool("include_ltl", self.include_ltl)


class LoudnessExtractor(LoudnessMixing, AuditoryExtractor):
    """Shared framing, chunking, calibration and AGC streaming of the loudness extractors."""

    padding_value: ClassVar[float] = 0.0
    model_dboffset: ClassVar[float] = 100.0
    n_ears: ClassVar[int] = 1

    # ------------------------------------------------------------------ layout
    def _channel_fc(self) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _extra_names(self) -> list[str]:
        c = self.config
        return (["stl"] if c.include_stl else []) + (["ltl"] if c.include_ltl else [])

    def feature_dim(self, sampling_rate: int) -> int:
        del sampling_rate
        return self.n_ears * len(self._channel_fc()) + len(self._extra_names())

    # ------------------------------------------------------------------ model frames
    def _model_frames(self, model: torch.nn.Module, seg: Tensor) -> tuple[Tensor, Tensor | None]:
        """Per-frame specific loudness ``(B, F, E, C)`` and instantaneous loudness ``(B, F)``
        (or None) of the model frames ``j = 0 … floor(len / 32)`` of the segments
        ``seg (B, E, len)``."""
        raise NotImplementedError  # pragma: no cover

    def _first_frame(self, model: torch.nn.Module) -> int:
        return 0

    def _stream(self, spec: np.ndarray, inst: np.ndarray | None, state: dict) -> np.ndarray:
        """Feature rows ``(F, D)`` for consecutive model frames, carrying AGC states."""
        raise NotImplementedError  # pragma: no cover

    # ------------------------------------------------------------------ computation
    def _to_32k(self, x: Tensor) -> Tensor:
        sr = self.config.sampling_rate
        if sr == L.FS:
            return x
        return L.resample_to_32k(x, sr)

    def _compute(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        if x.device.type == "cpu":  # the fused CPU kernels run one item at a time
            return [self._compute_items(x[b : b + 1, :, :n], [n])[0] for b, n in enumerate(lengths)]
        return self._compute_items(x, lengths)  # one model call per block for the whole batch

    def _compute_items(self, x: Tensor, lengths: list[int]) -> list[Tensor]:
        """Features of the items ``x[b, :, :lengths[b]]`` of ``x (B, E, T)``: block by block,
        each block's model frames of all items that reach it in one model call."""
        model = self.model(x.device)
        c = self.config
        sr = int(c.sampling_rate)
        # whole-signal passes by numpy on this thread (a torch op would open a parallel
        # region per pass, which costs a scheduler time slice on a busy machine; _serial)
        if sr == L.FS and x.device.type == "cpu":
            x32 = scaled_copy(x, _PA_PER_UNIT, model.dtype)
        else:
            x32 = self._to_32k(x * _PA_PER_UNIT).to(model.dtype)
        # samples at 32 kHz of each item (resample_poly's length); zeros after them, as
        # when the item is resampled alone
        t32 = [n if sr == L.FS else -(-n * L.FS // sr) for n in lengths]
        for k, n in enumerate(t32):
            x32[k, :, n:] = 0.0
        last = [n // L.HOP for n in t32]  # last model frame (centre <= end of signal)
        n_out = [self._num_frames(n) for n in lengths]
        den = 1000 * self.hop  # model frame i -> Lhotse frame (i * sr) // den
        per_block = block_frames(c.chunk_duration, c.frame_shift, x.device, x.shape[0] * x.shape[1])
        j_first = self._first_frame(model)
        states: list[dict] = [{} for _ in lengths]
        rows: list[list[np.ndarray]] = [[] for _ in lengths]
        for a in range(0, max(n_out), per_block):
            items = [k for k, n in enumerate(n_out) if n > a]
            lo = j_first if a == 0 else -(-a * den // sr)  # first model frame of the block
            stop = {k: min(a + per_block, n_out[k]) for k in items}  # Lhotse frames a … stop-1
            ends = {k: min(-(-stop[k] * den // sr), last[k] + 1) for k in items}  # model frames
            if min(ends.values()) <= lo:
                raise AssertionError("empty block")  # pragma: no cover - frame_shift >= 1 ms
            s0 = L.HOP * lo - _CONTEXT
            s1 = L.HOP * (max(ends.values()) - 1) + _CONTEXT
            seg = _segment(x32[items] if len(items) < x32.shape[0] else x32, s0, s1)
            spec, inst = self._model_frames(model, seg)
            # segment frame j' = global frame - lo + _CTX_FRAMES
            sel = slice(_CTX_FRAMES, _CTX_FRAMES + (max(ends.values()) - lo))
            spec_np = spec[:, sel].detach().cpu().numpy().astype(np.float64)
            inst_np = (
                None if inst is None else inst[:, sel].detach().cpu().numpy().astype(np.float64)
            )
            for i, k in enumerate(items):
                m = ends[k] - lo
                ik = None if inst_np is None else inst_np[i, :m]
                feats = self._stream(spec_np[i, :m], ik, states[k])
                rows[k].append(_pool(feats, lo, ends[k], a, stop[k], sr, den))
        out = [np.concatenate(r, 0) for r in rows]
        assert [o.shape[0] for o in out] == n_out
        return [torch.from_numpy(o.astype(np.float32)) for o in out]


#: model frames (1 ms) of all items and ears of one block on CUDA: a batch-64 extract of
#: 2-s items peaked at 2.9 GB (Glasberg2002) and 5.6 GB (Moore2016) on an H200
CUDA_BLOCK_FRAMES = 1 << 17


def block_frames(chunk_duration: float, frame_shift: float, device: torch.device, rows: int) -> int:
    """Lhotse frames per block: ``chunk_duration`` on the CPU; on CUDA at least
    :data:`CUDA_BLOCK_FRAMES` model frames shared by the ``rows`` items × ears."""
    n = max(1, int(round(chunk_duration / frame_shift)))
    if device.type == "cuda":
        n = max(n, int(CUDA_BLOCK_FRAMES // max(rows, 1) * 0.001 / frame_shift))
    return n


def _segment(x32: Tensor, s0: int, s1: int) -> Tensor:
    """Samples ``s0 … s1 - 1`` of every row of ``x32 (B, E, T)``, zeros outside ``0 … T-1``."""
    c0, c1 = max(s0, 0), min(s1, x32.shape[-1])
    if x32.device.type == "cpu":  # numpy on this thread (_serial)
        xn = x32.numpy()
        seg = np.zeros((*xn.shape[:-1], s1 - s0), dtype=xn.dtype)
        if c1 > c0:
            seg[..., c0 - s0 : c1 - s0] = xn[..., c0:c1]
        return torch.from_numpy(seg)
    seg = x32.new_zeros(*x32.shape[:-1], s1 - s0)
    if c1 > c0:
        seg[..., c0 - s0 : c1 - s0] = x32[..., c0:c1]
    return seg


def _pool(feats: np.ndarray, lo: int, hi: int, a: int, b: int, sr: int, den: int) -> np.ndarray:
    """Lhotse frames ``a … b - 1`` as the means of the rows ``feats (hi - lo, D)`` of the
    model frames ``lo … hi - 1`` (frame ``i`` belongs to Lhotse frame ``(i * sr) // den``;
    frames before 0 are not pooled). The groups are runs of consecutive rows, summed by
    one ``reduceat``."""
    idx = np.arange(lo, hi)
    keep = idx >= 0
    grp = (idx[keep] * sr) // den - a
    counts = np.bincount(grp, minlength=b - a)
    sums = np.zeros((b - a, feats.shape[1]))
    present = np.flatnonzero(counts)
    if present.size:
        sums[present] = np.add.reduceat(feats[keep], (np.cumsum(counts) - counts)[present], 0)
    return sums / counts[:, None]

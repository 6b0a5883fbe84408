"""Chunk plan and frame accumulation of the ``amt-*`` extractors' one chunk-and-pool loop
(:meth:`lhotse_amt.features.base.AuditoryExtractor._compute`).

Frames follow the one frame definition, :func:`lhotse_amt.functional.framing.frame_mean`:
frame ``j`` of an item of ``n`` samples is the mean (``pooling="rms"``: the rms) of the
model output over input samples ``[j * hop, min((j + 1) * hop, n))``. Chunks start at
multiples of ``hop``, so a frame never straddles two chunks except where the pooling
itself is carried across (the held signal of Paulick2024, pooled by its kernel).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..functional.framing import frame_mean

__all__ = ["ChunkPlan", "FrameAccumulator"]


@dataclass(frozen=True)
class ChunkPlan:
    """How the samples of a padded batch are cut into chunks.

    Attributes:
        chunk: input samples per chunk, a multiple of the frame hop (and of any other
            alignment the model needs).
        end: input samples that any item's frames need (the loop stops there).
        lookahead: samples each chunk reads past its end (non-causal ear filters); the
            batch is padded with that many zeros.
    """

    chunk: int
    end: int
    lookahead: int = 0

    def spans(self) -> Iterator[tuple[int, int]]:
        """``(t0, t1)`` input-sample ranges of the chunks, in order."""
        for t0 in range(0, self.end, self.chunk):
            yield t0, min(t0 + self.chunk, self.end)

    def read_range(self, t0: int, t1: int) -> tuple[int, int]:
        """Samples of the (look-ahead padded) batch that the chunk ``[t0, t1)`` reads: the
        first chunk also reads the ``lookahead`` samples the model withholds."""
        D = self.lookahead
        return (0 if t0 == 0 else t0 + D), t1 + D


class FrameAccumulator:
    """Frames of a batch, collected chunk by chunk as ``(D, k)`` pieces per item.

    Args:
        hop: input samples per frame.
        lengths: valid samples of each item.
        num_frames: frames of each item (Lhotse's count for its length).
        rms: pool the squares and take the square root (``pooling="rms"``).
    """

    def __init__(self, hop: int, lengths: list[int], num_frames: list[int], rms: bool) -> None:
        self.hop = int(hop)
        self.lengths = [int(n) for n in lengths]
        self.num_frames = [int(f) for f in num_frames]
        self.rms = bool(rms)
        self.parts: list[list[Tensor]] = [[] for _ in lengths]

    @property
    def batch(self) -> int:
        return len(self.lengths)

    def frame_range(self, b: int, t0: int, t1: int) -> tuple[int, int]:
        """Frames ``[f_lo, f_hi)`` of item ``b`` that start within input samples
        ``[t0, t1)``."""
        hop = self.hop
        f_lo = -(-t0 // hop)
        return f_lo, max(f_lo, min(self.num_frames[b], -(-t1 // hop)))

    def frame_spans(self, b: int, t0: int, t1: int) -> tuple[np.ndarray, np.ndarray]:
        """Start and stop samples (relative to ``t0``) of the frames of item ``b`` that
        start within ``[t0, t1)``, each cut at the item's end (int64 arrays)."""
        f = np.arange(*self.frame_range(b, t0, t1), dtype=np.int64)
        return f * self.hop - t0, np.minimum((f + 1) * self.hop, self.lengths[b]) - t0

    def add(self, b: int, frames: Tensor) -> None:
        """Append finished frames ``(D, k)`` of item ``b``."""
        if frames.shape[-1]:
            self.parts[b].append(frames)

    def add_samples(self, y: Tensor, t0: int) -> None:
        """Pool a chunk of sample-rate features ``y (B, D, Tc)`` that starts at input
        sample ``t0`` (a multiple of ``hop``) by :func:`frame_mean`."""
        Tc = y.shape[-1]
        v = y.square() if self.rms else y
        for b in range(self.batch):
            f_lo, f_hi = self.frame_range(b, t0, t0 + Tc)
            if f_hi <= f_lo:
                continue
            valid = min(self.lengths[b], t0 + Tc) - t0
            f = frame_mean(v[b, :, :valid], self.hop, f_hi - f_lo)
            self.add(b, f.sqrt() if self.rms else f)

    def add_block_sums(self, sums: Tensor, t0: int) -> None:
        """Turn per-hop sums ``(B, D, n_blocks)`` (block ``k``: input samples ``[t0 + k hop,
        t0 + (k + 1) hop)`` of the item, cut at its end; of squares for rms) into frames:
        the kernels' pooled form of :func:`frame_mean`."""
        hop = self.hop
        f0 = t0 // hop
        nblk = sums.shape[-1]
        cpu = sums.device.type == "cpu"  # numpy on this thread (no torch parallel region)
        for b, n in enumerate(self.lengths):
            k = min(nblk, self.num_frames[b] - f0)
            if k <= 0:
                continue
            if cpu:
                s_np = sums[b, :, :k].numpy()
                cnt_np = np.clip(n - t0 - hop * np.arange(k, dtype=np.float64), 1, hop)
                f_np = s_np / cnt_np.astype(s_np.dtype)
                if self.rms:
                    np.sqrt(f_np, out=f_np)
                self.add(b, torch.from_numpy(f_np))
                continue
            cnt = n - t0 - hop * torch.arange(k, dtype=torch.float64, device=sums.device)
            cnt = cnt.clamp(1, hop)
            f = sums[b, :, :k] / cnt.to(sums.dtype)
            self.add(b, f.sqrt() if self.rms else f)

    def assemble(self) -> list[Tensor]:
        """One ``(num_frames_b, D)`` matrix per item in its pieces' dtype, filled piece by
        piece (no full-size concatenation or transposed copy of a long recording's
        features)."""
        out = []
        for b in range(self.batch):
            parts, n_frames = self.parts[b], self.num_frames[b]
            first = parts[0]
            m = torch.empty(n_frames, first.shape[0], dtype=first.dtype, device=first.device)
            # CPU: numpy copies on this thread (a torch copy opens a parallel region)
            m_np = m.numpy() if m.device.type == "cpu" else None
            f0 = 0
            while parts:
                p = parts.pop(0)
                if m_np is not None and p.device.type == "cpu":
                    m_np[f0 : f0 + p.shape[1]] = p.numpy().T
                else:
                    m[f0 : f0 + p.shape[1]] = p.T
                f0 += p.shape[1]
            if f0 != n_frames:  # pragma: no cover - the loop covers every frame
                raise AssertionError(f"item {b}: {f0} frames pooled, {n_frames} expected")
            out.append(m)
        return out

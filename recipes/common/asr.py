"""Small character CTC recognizer, text processing, greedy decoding and CER for the ASR
recipe."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor, nn

__all__ = ["CharTokenizer", "CTCRecognizer", "cer", "edit_distance", "greedy_decode"]


class CharTokenizer:
    """Characters ``A-Z``, apostrophe and space; index 0 is the CTC blank."""

    def __init__(self, chars: str = " 'ABCDEFGHIJKLMNOPQRSTUVWXYZ") -> None:
        self.chars = chars
        self.index = {c: i + 1 for i, c in enumerate(chars)}

    @property
    def vocab_size(self) -> int:
        return len(self.chars) + 1

    def normalize(self, text: str) -> str:
        t = "".join(c for c in text.upper() if c in self.index)
        return " ".join(t.split())

    def encode(self, text: str) -> list[int]:
        return [self.index[c] for c in self.normalize(text)]

    def decode(self, ids: list[int]) -> str:
        return "".join(self.chars[i - 1] for i in ids if i > 0)


def edit_distance(ref: str, hyp: str) -> int:
    """Levenshtein distance (substitutions, insertions, deletions all cost 1)."""
    prev = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        cur = [i] + [0] * len(hyp)
        for j, h in enumerate(hyp, 1):
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (r != h))
        prev = cur
    return prev[-1]


def cer(refs: list[str], hyps: list[str]) -> float:
    """Character error rate over a corpus: total edits / total reference characters."""
    errs = sum(edit_distance(r, h) for r, h in zip(refs, hyps))
    return errs / max(1, sum(len(r) for r in refs))


def greedy_decode(log_probs: Tensor, lengths: Tensor) -> list[list[int]]:
    """Best path: argmax per frame, merge repeats, drop blanks. ``(B, T, V)``."""
    best = log_probs.argmax(-1).cpu().numpy()
    out = []
    for b, n in enumerate(lengths.tolist()):
        seq = best[b, :n]
        keep = np.ones(len(seq), bool)
        keep[1:] = seq[1:] != seq[:-1]
        out.append([int(t) for t in seq[keep] if t != 0])
    return out


class CTCRecognizer(nn.Module):
    """Global mean/variance normalisation -> 2 convolutions (time stride ``subsample``) -> BiLSTM ->
    linear CTC output. ``forward(feats (B, T, F), lengths (B,))`` returns log-probs
    ``(B, T', V)`` and output lengths."""

    def __init__(
        self,
        num_features: int,
        vocab_size: int,
        hidden: int = 128,
        conv_channels: int = 128,
        num_layers: int = 2,
        mean: Tensor | None = None,
        std: Tensor | None = None,
        dropout: float = 0.1,
        subsample: int = 2,
    ) -> None:
        super().__init__()
        self.subsample = int(subsample)
        self.register_buffer("mean", torch.zeros(num_features) if mean is None else mean.float())
        self.register_buffer("std", torch.ones(num_features) if std is None else std.float())
        self.conv = nn.Sequential(
            nn.Conv1d(num_features, conv_channels, 5, stride=self.subsample, padding=2),
            nn.GELU(),
            nn.Conv1d(conv_channels, conv_channels, 3, padding=1),
            nn.GELU(),
        )
        self.lstm = nn.LSTM(
            conv_channels,
            hidden,
            num_layers=num_layers,
            batch_first=True,
            bidirectional=True,
            dropout=dropout if num_layers > 1 else 0.0,
        )
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(2 * hidden, vocab_size)

    def output_lengths(self, lengths: Tensor) -> Tensor:
        return (lengths - 1) // self.subsample + 1

    def forward(self, feats: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
        T = feats.shape[1]
        mask = torch.arange(T, device=feats.device)[None, :] < lengths[:, None]
        x = (feats - self.mean) / self.std
        x = torch.where(mask[..., None], x, torch.zeros_like(x))
        x = self.conv(x.transpose(1, 2)).transpose(1, 2)
        olens = self.output_lengths(lengths).clamp(max=x.shape[1])
        packed = nn.utils.rnn.pack_padded_sequence(
            x, olens.cpu(), batch_first=True, enforce_sorted=False
        )
        y, _ = self.lstm(packed)
        y, _ = nn.utils.rnn.pad_packed_sequence(y, batch_first=True, total_length=x.shape[1])
        return self.out(self.drop(y)).log_softmax(-1), olens

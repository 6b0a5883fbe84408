"""The isolated-digit classifier of the recipe (the same for every feature type) and its
training with dev-set model selection."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .features import load_features

__all__ = ["DigitCNN", "accuracy", "train_and_test"]


class DigitCNN(nn.Module):
    """Per-feature mean/variance normalisation (statistics of the training frames) ->
    Conv1d(k=5) + ReLU -> Conv1d(k=5, stride 2) + ReLU -> dropout -> masked mean and max
    over time -> linear, ``num_classes`` logits.

    ``forward(feats (B, T, F), lengths (B,))`` returns logits ``(B, num_classes)``; frames
    at or beyond a sequence's length are ignored."""

    def __init__(
        self,
        num_features: int,
        mean: Tensor,
        std: Tensor,
        channels: int = 64,
        num_classes: int = 10,
        dropout: float = 0.2,
    ) -> None:
        super().__init__()
        if mean.shape != (num_features,) or std.shape != (num_features,):
            raise ValueError(
                f"mean/std must have shape ({num_features},), got {tuple(mean.shape)} and "
                f"{tuple(std.shape)}"
            )
        self.register_buffer("mean", mean.float())
        self.register_buffer("std", std.float())
        self.conv1 = nn.Conv1d(num_features, channels, 5, padding=2)
        self.conv2 = nn.Conv1d(channels, channels, 5, stride=2, padding=2)
        self.drop = nn.Dropout(dropout)
        self.out = nn.Linear(2 * channels, num_classes)

    def forward(self, feats: Tensor, lengths: Tensor) -> Tensor:
        T = feats.shape[1]
        mask = torch.arange(T, device=feats.device)[None, :] < lengths[:, None]
        x = torch.where(mask[..., None], (feats - self.mean) / self.std, 0.0)
        h = torch.relu(self.conv1(x.transpose(1, 2)))
        h = torch.relu(self.conv2(h))  # (B, C, T2)
        T2 = h.shape[-1]
        m2 = torch.arange(T2, device=h.device)[None, :] < ((lengths - 1) // 2 + 1)[:, None]
        m2 = m2[:, None, :]
        mean = (h * m2).sum(-1) / m2.sum(-1).clamp(min=1)
        mx = torch.where(m2, h, torch.finfo(h.dtype).min).amax(-1)
        return self.out(self.drop(torch.cat([mean, mx], -1)))


def _batch(feats: list[np.ndarray], idx: np.ndarray) -> tuple[Tensor, Tensor]:
    lens = torch.tensor([feats[i].shape[0] for i in idx])
    x = torch.zeros(len(idx), int(lens.max()), feats[idx[0]].shape[1])
    for j, i in enumerate(idx):
        x[j, : lens[j]] = torch.from_numpy(feats[i])
    return x, lens


@torch.no_grad()
def predict(model: nn.Module, feats: list[np.ndarray], batch_size: int = 128) -> np.ndarray:
    """Argmax class of every item."""
    model.eval()
    order = np.argsort([f.shape[0] for f in feats])
    pred = np.empty(len(feats), np.int64)
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        x, lens = _batch(feats, idx)
        pred[idx] = model(x, lens).argmax(-1).numpy()
    return pred


def accuracy(model: nn.Module, feats: list[np.ndarray], labels: np.ndarray) -> float:
    """Fraction of items classified correctly."""
    return float(np.mean(predict(model, feats) == labels))


def train_and_test(
    train: str | Path,
    dev: str | Path,
    tests: dict[str, str],
    seed: int,
    epochs: int = 30,
    patience: int = 8,
    batch_size: int = 32,
    lr: float = 2e-3,
    channels: int = 64,
    threads: int = 1,
    cmn: bool = False,
) -> dict[str, Any]:
    """Train a :class:`DigitCNN` on the features in ``train`` (.npz of
    :func:`features.extract_sets`), keep the epoch with the best dev accuracy (ties: lower
    dev loss; stop after ``patience`` epochs without improvement), then test it on every
    ``{name: .npz}`` of ``tests``. Only ``dev`` is used for model selection. ``cmn``:
    subtract each utterance's mean feature vector first (per-utterance mean
    normalisation, applied to train, dev and test alike).

    Returns ``{"test": {name: accuracy}, "dev_accuracy", "best_epoch", "epochs",
    "train_loss" (per epoch), "dev_curve" (per epoch), "seconds", "num_params"}``."""
    torch.set_num_threads(max(1, int(threads)))
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    xtr, ytr = load_features(train, cmn)
    xdv, ydv = load_features(dev, cmn)
    allf = np.concatenate(xtr).astype(np.float64)
    mean = torch.from_numpy(allf.mean(0))
    std = torch.from_numpy(allf.std(0)).clamp(min=1e-5)
    model = DigitCNN(allf.shape[1], mean, std, channels=channels)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-3)
    ytr_t = torch.from_numpy(ytr)
    best: tuple[float, float] = (-1.0, 0.0)
    best_state, best_epoch, since = None, 0, 0
    losses, curve = [], []
    for epoch in range(1, epochs + 1):
        model.train()
        perm = rng.permutation(len(xtr))
        tot = 0.0
        for s in range(0, len(perm), batch_size):
            idx = perm[s : s + batch_size]
            x, lens = _batch(xtr, idx)
            loss = nn.functional.cross_entropy(model(x, lens), ytr_t[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot += float(loss.detach()) * len(idx)
        losses.append(tot / len(perm))
        model.eval()
        with torch.no_grad():
            order = np.argsort([f.shape[0] for f in xdv])
            logits = torch.empty(len(xdv), 10)
            for s in range(0, len(order), 128):
                idx = order[s : s + 128]
                x, lens = _batch(xdv, idx)
                logits[idx] = model(x, lens)
            dloss = float(nn.functional.cross_entropy(logits, torch.from_numpy(ydv)))
            dacc = float((logits.argmax(-1).numpy() == ydv).mean())
        curve.append(dacc)
        if (dacc, -dloss) > best:
            best, best_state, best_epoch, since = (
                (dacc, -dloss),
                copy.deepcopy(model.state_dict()),
                epoch,
                0,
            )
        else:
            since += 1
            if since >= patience:
                break
    model.load_state_dict(best_state)
    out: dict[str, Any] = {"test": {}}
    for name, path in tests.items():
        x, y = load_features(path, cmn)
        out["test"][name] = accuracy(model, x, y)
    out.update(
        dev_accuracy=best[0],
        best_epoch=best_epoch,
        epochs=len(losses),
        train_loss=losses,
        dev_curve=curve,
        seconds=time.time() - t0,
        num_params=sum(p.numel() for p in model.parameters()),
    )
    return out

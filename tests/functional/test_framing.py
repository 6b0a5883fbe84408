"""The frame definition (:func:`lhotse_amt.functional.framing.frame_mean`): against a
direct evaluation of "frame j is the mean of samples [j hop, min((j + 1) hop, n))", the
padded-batch form, bad arguments, gradients; and the kernels that pool inside their sample
loop (the fused operators, the held pooling of Paulick2024) against it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.features.frames import FrameAccumulator
from lhotse_amt.functional.framing import frame_mean
from lhotse_amt.models import Dau1997, King2019
from lhotse_amt.ops import fused

D = torch.float64


def _direct(x: np.ndarray, hop: int, num_frames: int, n: int | None = None) -> np.ndarray:
    n = x.shape[-1] if n is None else n
    out = np.zeros((*x.shape[:-1], num_frames))
    for j in range(num_frames):
        a, b = j * hop, min((j + 1) * hop, n)
        if b > a:
            out[..., j] = x[..., a:b].mean(-1)
    return out


@pytest.mark.parametrize(
    ("T", "hop", "num_frames"),
    [(1600, 160, 10), (1650, 160, 10), (1650, 160, 11), (1650, 160, 13), (7, 3, 3), (5, 8, 1)],
)
def test_frame_mean_is_the_mean_over_each_hop(T, hop, num_frames):
    x = torch.randn(2, 3, T, generator=torch.Generator().manual_seed(T), dtype=D)
    f = frame_mean(x, hop, num_frames)
    assert f.shape == (2, 3, num_frames)
    np.testing.assert_allclose(f.numpy(), _direct(x.numpy(), hop, num_frames), rtol=1e-12)


def test_frame_mean_with_lengths_equals_each_item_alone():
    x = torch.randn(3, 2, 1000, generator=torch.Generator().manual_seed(1), dtype=D)
    lengths = torch.tensor([1000, 655, 161])
    f = frame_mean(x, 160, 7, lengths)
    for b, n in enumerate(lengths.tolist()):
        np.testing.assert_allclose(
            f[b].numpy(), _direct(x[b].numpy(), 160, 7, n), rtol=1e-12, atol=1e-15
        )
        # samples after the item's end do not matter
        x2 = x.clone()
        x2[b, :, n:] = 1e6
        assert torch.allclose(frame_mean(x2, 160, 7, lengths)[b], f[b], rtol=1e-12)


def test_frame_mean_gradient():
    x = torch.randn(2, 50, dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: frame_mean(v, 8, 7), (x,))
    lengths = torch.tensor([50, 21])
    assert torch.autograd.gradcheck(lambda v: frame_mean(v, 8, 7, lengths), (x,))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"hop": 0, "num_frames": 3}, "hop must be an integer >= 1"),
        ({"hop": 2.0, "num_frames": 3}, "hop must be an integer >= 1"),
        ({"hop": 4, "num_frames": -1}, "num_frames must be an integer >= 0"),
        (
            {"hop": 4, "num_frames": 3, "lengths": torch.tensor([5, 5, 5])},
            r"lengths must be \(B,\)",
        ),
    ],
)
def test_frame_mean_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        frame_mean(torch.zeros(2, 12), **kwargs)


def _items(B: int, T: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=D) * 10 ** ((60 - 100) / 20)
    x[:, : T // 4] *= 0.01  # onset: the adaptation loops' overshoot
    return x


def test_casp_pooled_operator_implements_the_frame_definition():
    model = Dau1997(16000, flow=500.0, fhigh=2000.0, dtype=D)
    plan = model._kernel_plan("casp", fused.casp_plan)
    x = _items(2, 3000, 0)
    hop, ends = 160, [3000, 2250]
    with torch.inference_mode():
        sums, _ = fused.casp_pooled(plan, x, None, hop, ends, False)
        out = torch.empty((2, int(plan.n_bands.sum()), 3000), dtype=D)
        fused.casp_samples(plan, x, out)
    acc = FrameAccumulator(hop, ends, [19, 14], rms=False)
    B, C, M, nblk = sums.shape
    rows = np.flatnonzero((np.arange(M)[None] < plan.n_bands[:, None]).reshape(-1))
    acc.add_block_sums(sums.reshape(B, C * M, nblk)[:, rows], 0)
    pooled = acc.assemble()
    for b, n in enumerate(ends):
        ref = frame_mean(out[b, :, :n], hop, acc.num_frames[b]).T
        torch.testing.assert_close(pooled[b], ref, rtol=1e-9, atol=1e-9)


def test_king_pooled_operator_implements_the_frame_definition():
    model = King2019(16000, flow=500.0, fhigh=2000.0, dtype=D)
    M = int(model.mfc.numel())
    plan = fused.king_plan(model, np.ones(M), np.zeros(M, bool), True)
    x = _items(1, 2500, 1)
    hop = 160
    with torch.inference_mode():
        sums, _ = fused.king_pooled(plan, x, None, hop, [2500], True)
        out = torch.empty((1, plan.C, plan.M, 2500), dtype=D)
        fused.king_samples(plan, x, out, [])
    acc = FrameAccumulator(hop, [2500], [16], rms=True)
    acc.add_block_sums(sums.reshape(1, plan.C * plan.M, -1), 0)
    ref = frame_mean(out[0].reshape(plan.C * plan.M, -1).square(), hop, 16).sqrt().T
    torch.testing.assert_close(acc.assemble()[0], ref, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("rms", [False, True])
def test_pool_held_operator_is_the_frame_mean_of_the_held_signal(rms):
    R, hop, n = 4, 441, 9001
    y = torch.randn(5, -(-n // R), generator=torch.Generator().manual_seed(2), dtype=D)
    F = 20
    f = np.arange(F)
    got = fused.pool_held(y, None, f * hop, np.minimum((f + 1) * hop, n), R, rms)
    held = y.repeat_interleave(R, -1)[:, :n]
    ref = frame_mean(held.square(), hop, F).sqrt() if rms else frame_mean(held, hop, F)
    torch.testing.assert_close(got, ref, rtol=1e-12, atol=1e-12)

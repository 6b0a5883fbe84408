"""The fused pooled Paulick et al. (2024) chain on the CPU
(:func:`lhotse_amt.kernels.paulick_pooled.pooled`, one pass: ear filter, front end,
decimator, modulation filterbank, frame pooling) against its stages run one after the
other (the ear filter, :class:`~lhotse_amt.models.paulick2024.CASPEarFilter`; the front
end with the decimator, :func:`lhotse_amt.kernels.paulick_frontend.frontend`, then
the pooled modulation filterbank,
:func:`lhotse_amt.kernels.modbank_simd.modulation_bank_pooled`): bit for bit, in float64
and float32, mean and rms pooling, items of different lengths, channel counts that fill
padding lanes (11) and padding blocks of a group (70: two groups of five blocks, the last
one a repeat)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.kernels import modbank_simd, paulick_frontend, paulick_pooled
from lhotse_amt.models.paulick2024 import Paulick2024
from lhotse_amt.ops import fused


def _frames(lengths: list[int], hop: int) -> tuple[np.ndarray, ...]:
    counts = np.array([-(-n // hop) for n in lengths], np.int64)
    f = np.arange(counts.max())
    starts = np.tile(f * hop, (len(lengths), 1))
    stops = np.minimum((f + 1) * hop, np.array(lengths)[:, None])
    return starts.astype(np.int64), stops.astype(np.int64), counts


@pytest.mark.parametrize(
    "dtype, rms, C, T",
    [
        (torch.float64, False, 11, 9000),
        (torch.float32, True, 11, 9000),
        (torch.float32, False, 70, 2500),
    ],
)
def test_pooled_chain_equals_front_end_then_pooled_bank(dtype, rms, C, T):
    m = Paulick2024(44100, n_channels=C, dtype=dtype)
    g = torch.Generator().manual_seed(C)
    x = torch.randn(2, T, generator=g, dtype=torch.float64) * 0.05
    x[:, T // 3 :] *= 20  # an onset: the overshoot limiter engages
    x = x.to(dtype)
    y = m.outer_middle_ear(x)
    args = m._frontend_args(y, {})
    ear = m.outer_middle_ear.weight.reshape(-1)
    frames = _frames([T, T // 2 + 7], 441)
    w, R = m.resampler.weight.reshape(-1), m.resample_factor
    filters = fused.pooled_filters(m.modulation)
    got = paulick_pooled.pooled(
        x, ear, (args[0], *args[2:]), w, R, filters, [torch.from_numpy(a) for a in frames], rms
    )
    yd = paulick_frontend.frontend(y, *args, w, R, None)[0]
    ref, _ = modbank_simd.modulation_bank_pooled(yd, filters, None, *frames, R, rms)
    assert got.dtype == torch.float64 and got.shape == ref.shape
    assert np.array_equal(got.numpy(), ref)
    assert np.abs(ref).max() > 0

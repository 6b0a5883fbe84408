"""``unpad_bands``: the per-channel views of a padded modulation filterbank output and
their gradients (zeros in the padding), and its argument checks."""

import pytest
import torch

from lhotse_amt.functional.modulation import unpad_bands


@pytest.mark.parametrize("lead", [(), (2,)])
def test_views_and_gradient_equal_per_channel_slices(lead):
    y = torch.randn(*lead, 3, 4, 50, dtype=torch.float64, requires_grad=True)
    counts = (2, 4, 0)
    parts = unpad_bands(y, counts)
    assert [p.shape[-2] for p in parts] == list(counts)
    for c, (p, n) in enumerate(zip(parts, counts, strict=True)):
        assert torch.equal(p, y[..., c, :n, :])
    gs = [torch.randn_like(p) for p in parts]
    (g,) = torch.autograd.grad(parts, y, gs)
    ref = torch.zeros_like(y)
    for c, (gc, n) in enumerate(zip(gs, counts, strict=True)):
        ref[..., c, :n, :] = gc
    assert torch.equal(g, ref)


def test_counts_are_checked():
    y = torch.zeros(3, 4, 10)
    with pytest.raises(ValueError, match="each of the 3 channels"):
        unpad_bands(y, (1, 2))
    with pytest.raises(ValueError, match="0..4 bands"):
        unpad_bands(y, (1, 5, 0))

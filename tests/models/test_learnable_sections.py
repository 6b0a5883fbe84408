"""Learnable second-order sections are filters ``b(z) / a(z)`` with ``a = (a0, a1, a2)``:
a section's six coefficients scaled by one factor (``a0 != 1``, as training can leave a
learnable ``a0``) give the same filter on every path of the models (the stage-wise
``sosfilt``, the fused no-grad chains of :mod:`lhotse_amt.kernels.casp` and
:mod:`lhotse_amt.kernels.king2019`, King2019's modulation bank operator)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.models import Dau1997, King2019

FS = 16000


def _signal(seconds: float = 0.3) -> torch.Tensor:
    rng = np.random.default_rng(5)
    x = rng.standard_normal(int(seconds * FS)) * 10 ** ((60 - 100) / 20)
    return torch.from_numpy(x).reshape(1, -1)


def _stack(y: torch.Tensor | list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([t.flatten() for t in y]) if isinstance(y, list) else y.flatten()


def _scale_sections(model: torch.nn.Module, factor: float) -> list[str]:
    names = [n for n, p in model.named_parameters() if n.endswith("sos")]
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("sos"):
                p.mul_(factor)
    return names


@pytest.mark.parametrize(
    "make",
    [
        lambda: Dau1997(FS, flow=500.0, fhigh=4000.0, learnable=True, dtype=torch.float64),
        lambda: King2019(FS, flow=500.0, fhigh=4000.0, learnable=True, dtype=torch.float64),
    ],
    ids=["dau1997", "king2019"],
)
def test_scaled_sections_are_the_same_filters(make):
    model = make()
    x = _signal()
    with torch.no_grad():
        ref = _stack(model(x))  # fused no-grad chain
    names = _scale_sections(model, 2.0)
    assert names, "the learnable model has no sections"
    assert all(
        float(p.detach()[..., 3].min()) == 2.0 for n, p in model.named_parameters() if n in names
    )
    with torch.no_grad():
        fused = _stack(model(x))
    torch.testing.assert_close(fused, ref, rtol=1e-12, atol=1e-12 * float(ref.abs().max()))
    # the differentiable path (stage-wise, sosfilt), with gradients reaching a0
    xg = x.clone().requires_grad_(True)
    y = model(xg)
    staged = _stack(y)
    torch.testing.assert_close(staged.detach(), ref, rtol=1e-9, atol=1e-9 * float(ref.abs().max()))
    staged.square().sum().backward()
    a0_grads = [p.grad[..., 3] for n, p in model.named_parameters() if n in names]
    assert any(bool((g != 0).any()) for g in a0_grads)
    # a zero a0 is no filter: the fused path names it as sosfilt does
    with torch.no_grad():
        dict(model.named_parameters())[names[0]][..., 0, 3] = 0.0
        with pytest.raises(ValueError, match="a0"):
            model(x)

"""King2019's float64 gradients (input and every parameter) with one of its operators
replaced by a plain-torch reference: the operator tests check their analytic backward
inside the whole model with it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch

import lhotse_amt
from lhotse_amt import ops


def assert_king2019_gradients_match(
    monkeypatch: pytest.MonkeyPatch, name: str, reference: Callable, rtol: float = 1e-9
) -> None:
    """The gradients with ``lhotse_amt.ops.<name>`` equal those with ``reference`` in its
    place (torch's autograd through plain-torch code) to ``rtol`` of their largest value."""
    torch.manual_seed(0)
    D = torch.float64
    model = lhotse_amt.King2019(fs=16000, dtype=D, flow=500.0, fhigh=2000.0, learnable=True)
    x = (0.05 * torch.randn(1, 1200, dtype=D)).requires_grad_(True)
    params = list(model.parameters())
    grads = torch.autograd.grad(model(x).square().mean(), [x, *params])
    monkeypatch.setattr(ops, name, reference)
    ref = torch.autograd.grad(model(x).square().mean(), [x, *params])
    for g, r in zip(grads, ref, strict=True):
        assert float((g - r).abs().max()) <= rtol * float(r.abs().max()) + 1e-300

"""The one decision between the no-grad operators and the differentiable ones
(:mod:`lhotse_amt._dispatch`)."""

from __future__ import annotations

import pytest
import torch

from lhotse_amt._dispatch import grad_recorded, kernel_device, no_grad_kernels
from lhotse_amt.kernels import triton_module


def test_eager_cpu_inference_takes_the_no_grad_operators():
    x = torch.randn(4)
    assert no_grad_kernels(x, None, torch.zeros(2))
    assert no_grad_kernels()  # nothing to look at: no gradient, no device against it


def test_recorded_gradients_take_the_differentiable_operators():
    p = torch.zeros(2, requires_grad=True)
    assert grad_recorded(torch.zeros(1), p)
    assert not no_grad_kernels(torch.zeros(1), p)
    with torch.no_grad():
        assert not grad_recorded(p)
        assert no_grad_kernels(torch.zeros(1), p)


def test_tracing_takes_the_differentiable_operators(monkeypatch):
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert not no_grad_kernels(torch.zeros(3))


def test_devices_without_kernels_or_mixed_devices_are_refused():
    assert not kernel_device(torch.device("meta"))
    assert not no_grad_kernels(torch.zeros(3, device="meta"))
    assert not no_grad_kernels(torch.zeros(3), torch.zeros(3, device="meta"))


def test_cuda_has_kernels_where_triton_imports():
    assert kernel_device(torch.device("cuda")) == (triton_module() is not None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
def test_eager_cuda_inference_takes_the_no_grad_operators():
    assert no_grad_kernels(torch.zeros(3, device="cuda"))

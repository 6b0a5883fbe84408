"""Every operator of the package (``torch.ops.lhotse_amt.*``) has a kernel for the CPU, one
for CUDA and a fake implementation (``Meta``: shapes only, for ``torch.compile`` and
``torch.export``); the differentiable ones (those with a ``_backward`` operator) have an
autograd formula. The kernels themselves are compared elsewhere: the CPU ones with the
plain-torch references, the CUDA ones with the CPU ones (in Triton's interpreter)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
import torch

import lhotse_amt.ops


def _operators() -> list[str]:
    for mod in pkgutil.iter_modules(lhotse_amt.ops.__path__):
        importlib.import_module(f"lhotse_amt.ops.{mod.name}")
    names = torch._C._dispatch_get_all_op_names()
    return sorted(n for n in names if n.startswith("lhotse_amt::"))


OPERATORS = _operators()


def _has(name: str, key: str) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(name, key)


def test_the_package_registers_its_operators():
    assert len(OPERATORS) >= 30
    assert "lhotse_amt::paulick_frontend" in OPERATORS


@pytest.mark.parametrize("name", OPERATORS)
def test_every_operator_has_cpu_cuda_and_fake_kernels(name):
    composite = _has(name, "CompositeExplicitAutograd")  # one kernel for every device
    assert composite or _has(name, "CPU"), f"{name}: no CPU kernel"
    assert composite or _has(name, "CUDA"), f"{name}: no CUDA kernel"
    assert _has(name, "Meta"), f"{name}: no fake implementation"


@pytest.mark.parametrize("name", [n for n in OPERATORS if f"{n}_backward" in OPERATORS])
def test_differentiable_operators_have_autograd_formulas(name):
    assert _has(name, "Autograd"), f"{name}: no autograd formula"

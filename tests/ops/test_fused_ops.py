"""The fused no-grad inference chains as registered operators (:mod:`lhotse_amt.ops.fused`):
registration and fake implementations (``torch.library.opcheck``), chunked streaming
through the operators' state equal to one pass, and that extractors and models reach the
kernels only through them."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest
import torch

import lhotse_amt
from lhotse_amt.models import Dau1997, King2019
from lhotse_amt.ops import fused

D = torch.float64
PKG = Path(lhotse_amt.__file__).parent


def _x(B: int, T: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, generator=g, dtype=D) * 1e-2


@pytest.fixture(scope="module")
def casp_plan():
    model = Dau1997(16000, flow=500.0, fhigh=2000.0, dtype=D)
    return model._kernel_plan("casp", fused.casp_plan)


@pytest.fixture(scope="module")
def king_plan():
    model = King2019(16000, flow=500.0, fhigh=2000.0, dtype=D)
    M = int(model.mfc.numel())
    return fused.king_plan(model, np.ones(M), np.zeros(M, bool), True)


@pytest.mark.parametrize(
    "name",
    [
        "casp_pooled",
        "casp_samples_",
        "king_pooled",
        "king_samples_",
        "modulation_pooled",
        "pool_held",
    ],
)
def test_operators_are_registered(name):
    assert hasattr(torch.ops.lhotse_amt, name)


def test_casp_pooled_opcheck_and_fake_shapes(casp_plan):
    x = _x(2, 800)
    _, st = fused.casp_pooled(casp_plan, x[:, :160], None, 160, [160, 160], False)
    args = (x, fused.plan_handle(casp_plan), list(st.arrays), 160, [800, 500], False)
    torch.library.opcheck(torch.ops.lhotse_amt.casp_pooled.default, args)
    sums, new = torch.ops.lhotse_amt.casp_pooled(*args)
    assert sums.shape == (2, casp_plan.C, casp_plan.M1, 5) and sums.dtype == D
    assert [s.shape for s in new] == [s.shape for s in st.arrays]


def test_king_pooled_opcheck(king_plan):
    x = _x(1, 480, 1)
    _, st = fused.king_pooled(king_plan, x[:, :0], None, 160, [0], True)
    args = (x, fused.plan_handle(king_plan), list(st.arrays), 160, [480], True)
    torch.library.opcheck(torch.ops.lhotse_amt.king_pooled.default, args)


def test_samples_operators_opcheck(casp_plan, king_plan):
    x = _x(1, 400, 2)
    out = torch.empty((1, int(casp_plan.n_bands.sum()), 400), dtype=D)
    torch.library.opcheck(
        torch.ops.lhotse_amt.casp_samples_.default, (x, out, fused.plan_handle(casp_plan))
    )
    out = torch.empty((1, king_plan.C, king_plan.M, 400), dtype=D)
    torch.library.opcheck(
        torch.ops.lhotse_amt.king_samples_.default, (x, out, fused.plan_handle(king_plan), [])
    )


@pytest.mark.parametrize("which", ["casp", "king"])
def test_chunked_streaming_equals_one_pass(which, casp_plan, king_plan):
    plan, run = (
        (casp_plan, fused.casp_pooled) if which == "casp" else (king_plan, fused.king_pooled)
    )
    x = _x(2, 1600, 3)
    ends = [1600, 1130]
    with torch.inference_mode():
        whole, _ = run(plan, x, None, 160, ends, False)
        a, st = run(plan, x[:, :800], None, 160, ends, False)
        b, _ = run(plan, x[:, 800:], st, 160, [n - 800 for n in ends], False)
    torch.testing.assert_close(torch.cat([a, b], -1), whole, rtol=1e-12, atol=1e-15)


def test_a_dead_plan_handle_is_an_error():
    with pytest.raises(ValueError, match="no live fused-kernel plan"):
        torch.ops.lhotse_amt.casp_pooled(_x(1, 10), -1, [], 5, [10], False)


def _imports_kernels(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and "kernels" in node.module:
            return True
        if isinstance(node, ast.ImportFrom) and any(a.name == "kernels" for a in node.names):
            return True
    return False


@pytest.mark.parametrize(
    "path",
    sorted((PKG / "features").glob("*.py")) + [PKG / "models" / "_base.py"],
    ids=lambda p: f"{p.parent.name}/{p.name}",
)
def test_extractors_and_the_fused_dispatch_reach_kernels_only_through_operators(path):
    assert not _imports_kernels(path)


def test_calling_an_operator_does_not_load_the_compiler():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, torch\n"
        "import lhotse_amt\n"
        "ex = lhotse_amt.Dau1997Extractor()\n"
        "ex.extract(np.full(1600, 1e-3, np.float32), 16000)\n"
        "assert 'torch._dynamo' not in sys.modules\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr[-2000:]

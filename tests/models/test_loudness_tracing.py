"""The loudness models under ``torch.compile``: one graph without breaks, equal to eager (the
eager no-gradient call runs the CPU fast path, the compiled one the torch stages), and a
compiled float64 training gradient equal to the plain-torch reference's autograd (the
``backend="torch"`` model: torch stages and the AGC reference instead of the operator)."""

import pytest
import torch
import torch._dynamo as dynamo

from lhotse_amt.models.glasberg2002 import Glasberg2002
from lhotse_amt.models.moore2016 import Moore2016

D = torch.float64
MODELS = {"Glasberg2002": (Glasberg2002, (1, 1600)), "Moore2016": (Moore2016, (1, 2, 1600))}


def _signal(shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = 0.05 * torch.randn(*shape, dtype=D, generator=g)
    if len(shape) == 3:  # different ears: the inhibition's general case
        x[:, 1] *= 0.3
    return x


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _loss(out):
    return sum(o.square().mean() for o in _outputs(out))


@pytest.mark.parametrize("name", MODELS)
def test_compiles_to_one_graph(name):
    cls, shape = MODELS[name]
    explained = dynamo.explain(cls(dtype=D, learnable=True))(_signal(shape))
    assert explained.graph_break_count == 0, explained.break_reasons
    assert explained.graph_count == 1


@pytest.mark.parametrize("name", MODELS)
def test_compile_fullgraph_equals_eager(name):
    cls, shape = MODELS[name]
    model = cls(dtype=D)
    x = _signal(shape, seed=1)
    with torch.no_grad():
        eager = _outputs(model(x))
        compiled = _outputs(torch.compile(model, fullgraph=True, backend="aot_eager")(x))
    for a, b in zip(compiled, eager):
        assert a.shape == b.shape
        assert float((a - b).abs().max()) <= 1e-10 * float(b.abs().max())


@pytest.mark.parametrize("name", MODELS)
def test_compiled_gradient_equals_reference_autograd(name):
    cls, shape = MODELS[name]
    model = cls(dtype=D, learnable=True)
    reference = cls(dtype=D, learnable=True, backend="torch")
    params = list(model.parameters())
    assert params, "learnable=True must give parameters"
    x = _signal(shape, seed=2).requires_grad_(True)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    grads = torch.autograd.grad(_loss(compiled(x)), [x, *params])
    ref = torch.autograd.grad(_loss(reference(x)), [x, *reference.parameters()])
    for g, r in zip(grads, ref):
        assert torch.isfinite(g).all() and float(r.abs().max()) > 0
        assert float((g - r).abs().max()) <= 1e-9 * float(r.abs().max())

"""The sample-rate models under autograd, ``torch.compile``, ``torch.export`` and
``torch.jit.trace``: the operators' compiled gradients equal the plain-torch references'
autograd, a tiny float64 model passes gradcheck, compiled and exported models equal eager,
and tracing is refused with a pointer to the tools that work."""

import pytest
import torch

import lhotse_amt
from lhotse_amt import ops
from lhotse_amt.functional.adaptation import adaptation_loops_reference
from lhotse_amt.functional.iir import one_pole_cascade as ref_cascade
from lhotse_amt.functional.iir import sosfilt as ref_sosfilt

D = torch.float64
MODELS = ["Dau1997", "Osses2021", "King2019", "Paulick2024"]


def _model(name, **kw):
    if name == "Paulick2024":
        return lhotse_amt.Paulick2024(fs=44100, dtype=D, n_channels=4, **kw)
    return getattr(lhotse_amt, name)(fs=16000, dtype=D, flow=500.0, fhigh=2000.0, **kw)


def _loss(out):
    out = out if isinstance(out, list) else [out]
    return sum(o.square().mean() for o in out)


def _reference_ops(monkeypatch):
    """Route the operators through the plain-torch references (torch's autograd)."""

    def sosfilt(x, sos, zi=None):
        return ref_sosfilt(x, sos, zi, return_state=True, backend="reference")

    def one_pole_cascade(x, pole, gain, order, zi=None, output="real", use_abs=None, select=None):
        if output == "real2":
            gain, output = 2 * gain, "real"
        assert select is None or zi is None
        y, zf = ref_cascade(
            x, pole, gain, order, zi, output="complex", return_state=True, backend="reference"
        )
        if output == "mixed":
            y = torch.where(use_abs[..., None], y.abs(), y.real)
        else:
            y = {"real": y.real, "abs": y.abs(), "complex": y}[output]
        if select is not None:  # the selected filters of the flattened coefficient shape
            nd = pole.dim()
            y = y.flatten(-nd - 1, -2)[..., select, :]
            zf = zf.flatten(-nd - 1, -2)[..., select, :]
        return y, zf

    def adaptation(x, a, m, minlvl, use_limit, state):
        return adaptation_loops_reference(x, a, m, minlvl, 10.0 if use_limit else 0.0, state)

    monkeypatch.setattr(ops, "sosfilt", sosfilt)
    monkeypatch.setattr(ops, "one_pole_cascade", one_pole_cascade)
    monkeypatch.setattr(ops, "adaptation_loops_raw", adaptation)


@pytest.mark.parametrize("name", ["Dau1997", "Osses2021"])
def test_operator_gradients_equal_reference_autograd(name, monkeypatch):
    torch.manual_seed(0)
    x = (0.05 * torch.randn(1, 700, dtype=D)).requires_grad_(True)
    model = _model(name, learnable=True)
    params = [p for p in model.parameters()]
    grads = torch.autograd.grad(_loss(model(x)), [x, *params])
    _reference_ops(monkeypatch)
    ref = torch.autograd.grad(_loss(model(x)), [x, *params])
    for g, r in zip(grads, ref):
        assert float((g - r).abs().max()) <= 1e-9 * float(r.abs().max()) + 1e-300


def test_tiny_model_passes_gradcheck():
    model = lhotse_amt.Dau1997(fs=8000, dtype=D, flow=600.0, fhigh=1200.0)
    x = (0.05 * torch.randn(1, 120, dtype=D)).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: torch.cat(model(v), 1), (x,), fast_mode=True)


@pytest.mark.parametrize("name", MODELS)
def test_compile_fullgraph_equals_eager(name):
    model = _model(name)
    x = 0.02 * torch.randn(1, 2500, dtype=D)
    with torch.no_grad():
        eager = model(x)
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
    eager = eager if isinstance(eager, list) else [eager]
    compiled = compiled if isinstance(compiled, list) else [compiled]
    for a, b in zip(compiled, eager):
        assert float((a - b).abs().max()) <= 1e-11 * float(b.abs().max())


def test_models_of_one_class_with_other_constants_compile_in_one_process():
    # the second compile of the same forward code sees other float constants (limit,
    # minspl): torch.compile may pass them as symbolic floats, which the argument checks
    # must take
    x = 0.02 * torch.randn(1, 1200, dtype=D)
    for limit in (10.0, 5.0, 0.0):
        model = lhotse_amt.Dau1997(
            16000, flow=500.0, fhigh=1000.0, dtype=D, adaptation_kwargs={"limit": limit}
        )
        with torch.no_grad():
            eager = model(x)
            compiled = torch.compile(model, fullgraph=True, backend="aot_eager")(x)
        for a, b in zip(compiled, eager):
            assert float((a - b).abs().max()) <= 1e-11 * float(b.abs().max())


@pytest.mark.parametrize("name", MODELS)
def test_compiled_training_gradient_equals_eager(name):
    model = _model(name, learnable=True)
    x = 0.02 * torch.randn(1, 1500, dtype=D)
    params = list(model.parameters())
    eager = torch.autograd.grad(_loss(model(x)), params)
    compiled_model = torch.compile(model, fullgraph=True, backend="aot_eager")
    compiled = torch.autograd.grad(_loss(compiled_model(x)), params)
    for a, b in zip(compiled, eager):
        assert torch.allclose(a, b, rtol=1e-12, atol=0)


@pytest.mark.parametrize("name", MODELS)
def test_export_runs_and_equals_eager_on_new_input(name):
    model = _model(name)
    ep = torch.export.export(model, (0.02 * torch.randn(1, 2000, dtype=D),))
    x = 0.02 * torch.randn(1, 2000, dtype=D)
    with torch.no_grad():
        eager = model(x)
    out = ep.module()(x)
    eager = eager if isinstance(eager, list) else [eager]
    out = out if isinstance(out, (list, tuple)) else [out]
    for a, b in zip(out, eager):
        assert float((a - b).abs().max()) <= 1e-11 * float(b.abs().max())


@pytest.mark.parametrize("name", MODELS)
def test_jit_trace_is_refused_with_a_pointer(name):
    fs = 44100 if name == "Paulick2024" else 16000
    model = getattr(lhotse_amt, name)(fs=fs)
    with pytest.raises(RuntimeError, match="torch.compile"):
        torch.jit.trace(model, (0.02 * torch.randn(1, 1000),))

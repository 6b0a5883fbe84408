"""The attack/release AGC operator ``lhotse_amt::agc`` of the loudness models: forward
against the plain-torch reference and the no-grad numba kernel, registration
(``torch.library.opcheck``), gradients (``gradcheck`` and the reference's autograd over a
long sequence), the dispatch of :func:`lhotse_amt.functional.loudness.agc`, and the
gradients of Glasberg2002 and Moore2016 against their ``backend="torch"`` reference."""

import pytest
import torch

import lhotse_amt.functional.loudness as L
from lhotse_amt import Glasberg2002, Moore2016, ops
from lhotse_amt.ops.loudness import agc_rows

D = torch.float64


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _signal(shape, seed, dtype=D):
    # positive "loudness" with rises and falls, so both branches are taken often
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(shape, generator=g, dtype=D) ** 3 * 4.0
    return x.to(dtype)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("dim", [-1, 1, 0])
def test_forward_equals_reference_and_numba_kernel_bitwise(dtype, dim):
    x = _signal((4, 300, 5), 0, dtype)
    y = ops.agc(x, 0.045, 0.02, dim=dim)
    assert y.dtype == dtype and y.shape == x.shape
    ref = L.agc_reference(x.movedim(dim, -1), 0.045, 0.02).movedim(-1, dim)
    assert torch.equal(y, ref)
    # the no-grad path of the models (numba kernel of lhotse_amt.kernels.agc)
    assert torch.equal(y, L.agc(x, 0.045, 0.02, dim=dim, backend="numba"))


def test_forward_with_tensor_coefficients_and_state_equals_reference():
    x = _signal((3, 400, 6), 1)
    attack = torch.linspace(0.01, 0.5, 6, dtype=D)
    release = torch.linspace(0.002, 0.1, 6, dtype=D).expand(3, 6)
    state = _signal((3, 6), 2)
    y = ops.agc(x, attack, release, dim=1, state=state)
    ref = L.agc_reference(x.movedim(1, -1), attack, release, state).movedim(-1, 1)
    assert torch.equal(y, ref)
    # per-channel coefficients act per channel: channel 2 alone gives the same values
    y2 = ops.agc(x[..., 2], float(attack[2]), float(release[0, 2]), state=state[:, 2])
    assert torch.equal(y[..., 2], y2)


def test_state_continues_a_split_signal():
    x = _signal((2, 3, 700), 3)
    y = ops.agc(x, 0.045, 0.02)
    y1 = ops.agc(x[..., :250], 0.045, 0.02)
    y2 = ops.agc(x[..., 250:], 0.045, 0.02, state=y1[..., -1])
    assert torch.equal(torch.cat([y1, y2], -1), y)


def _op_args(seed=4):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(2, 30, 3, generator=g, dtype=D) * 2.0
    attack = torch.rand(2, 3, generator=g, dtype=D) * 0.5 + 0.1
    release = torch.rand(2, 3, generator=g, dtype=D) * 0.1 + 0.01
    zi = torch.rand(2, 3, generator=g, dtype=D)
    return x, attack, release, zi


def test_opcheck_schema_fake_and_autograd_registration():
    args = tuple(a.clone().requires_grad_(True) for a in _op_args())
    torch.library.opcheck(agc_rows, args)
    torch.library.opcheck(agc_rows, tuple(a.float() for a in _op_args(5)))


def test_gradcheck_input_state_and_coefficients():
    args = tuple(a.clone().requires_grad_(True) for a in _op_args())
    assert torch.autograd.gradcheck(agc_rows, args)
    # the wrapper: a scalar attack tensor and per-channel releases shared by the batch
    x = _signal((2, 40), 6).requires_grad_(True)
    a = torch.tensor(0.3, dtype=D, requires_grad=True)
    r = torch.tensor([0.05, 0.1], dtype=D, requires_grad=True)
    s0 = torch.tensor([0.2, 1.5], dtype=D, requires_grad=True)
    assert torch.autograd.gradcheck(lambda *v: ops.agc(*v[:3], state=v[3]), (x, a, r, s0))


def test_gradients_on_a_long_sequence_equal_reference_autograd():
    T = 6000  # 6 s of frames
    x = _signal((2, T, 4), 7).requires_grad_(True)
    attack = torch.tensor([0.045, 0.01, 0.3, 0.1], dtype=D, requires_grad=True)
    release = torch.tensor(0.02, dtype=D, requires_grad=True)
    state = torch.full((2, 4), 0.5, dtype=D, requires_grad=True)
    gy = torch.randn(2, T, 4, generator=torch.Generator().manual_seed(8), dtype=D)
    grads = []
    for backend in ("operator", "reference"):
        y = L.agc(x, attack, release, dim=1, backend=backend, state=state)
        grads.append(torch.autograd.grad((y * gy).sum(), (x, attack, release, state)))
    for got, ref in zip(*grads):
        assert _rel(got, ref) < 1e-9
    # both branches contribute: the attack and release gradients are nonzero
    assert (grads[0][1] != 0).all() and grads[0][2] != 0


def test_float32_gradients_follow_float32_forward():
    x = _signal((3, 500), 9, torch.float32).requires_grad_(True)
    gx = torch.autograd.grad(ops.agc(x, 0.045, 0.02).sum(), x)[0]
    x64 = x.detach().double().requires_grad_(True)
    gr = torch.autograd.grad(L.agc_reference(x64, 0.045, 0.02).sum(), x64)[0]
    assert gx.dtype == torch.float32 and _rel(gx.double(), gr) < 1e-5


def _op_node(y):
    # autograd node under the wrapper's reshape
    node = y.grad_fn
    while node.name() == "ViewBackward0":
        node = node.next_functions[0][0]
    return node.name()


def test_auto_backend_runs_operator_under_autograd_and_numba_without():
    x = _signal((2, 100, 3), 10).requires_grad_(True)
    y = L.agc(x, 0.045, 0.02, dim=1)
    assert "lhotse_amt_agc" in _op_node(y)
    assert torch.equal(y, L.agc(x.detach(), 0.045, 0.02, dim=1))
    yr = L.agc(x, 0.045, 0.02, dim=1, backend="reference")
    assert "lhotse_amt_agc" not in _op_node(yr) and torch.equal(y, yr)
    for name in ("torch", "operator", "numba"):
        assert torch.equal(L.agc(x.detach(), 0.045, 0.02, dim=1, backend=name), y.detach())


def test_torch_compile_fullgraph_forward_and_backward():
    x = _signal((2, 80, 3), 11).requires_grad_(True)
    a = torch.tensor([0.3, 0.2, 0.1], dtype=D, requires_grad=True)
    f = torch.compile(lambda x, a: L.agc(x, a, 0.05, dim=1), fullgraph=True, backend="aot_eager")
    y = f(x, a)
    yr = L.agc(x, a, 0.05, dim=1, backend="reference")
    assert torch.equal(y, yr)
    g = torch.autograd.grad(y.square().sum(), (x, a))
    gr = torch.autograd.grad(yr.square().sum(), (x, a))
    assert all(_rel(p, q) < 1e-12 for p, q in zip(g, gr))


def test_bad_arguments_raise():
    x = _signal((2, 50, 3), 12)
    with pytest.raises(ValueError, match="attack of shape"):
        L.agc(x, torch.full((4,), 0.1, dtype=D), 0.1, dim=1)
    with pytest.raises(ValueError, match=r"release must lie in \(0, 1\]"):
        L.agc(x, 0.1, torch.tensor([0.1, 0.0, 0.2], dtype=D), dim=1)
    with pytest.raises(ValueError, match="backend='numba' takes number attack"):
        L.agc(x, 0.1, 0.1, dim=1, backend="numba", state=torch.zeros(2, 3, dtype=D))
    with pytest.raises(TypeError, match="state must be a floating-point tensor"):
        L.agc(x, 0.1, 0.1, dim=1, state=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="backend"):
        L.agc(x, 0.1, 0.1, backend="cuda")
    with pytest.raises(ValueError, match="x must be"):
        agc_rows(x[0], *_op_args()[1:])


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((torch.full((4,), 0.1, dtype=D), 0.1), ValueError, "attack of shape"),
        ((0.1, 1.5), ValueError, "release must be"),
        ((0.1, torch.tensor([0.1, 0.0, 0.2], dtype=D)), ValueError, r"release must lie in"),
        ((0.1, torch.tensor([1, 1, 1])), TypeError, "release must be a number or a floating"),
    ],
)
def test_operator_checks_its_arguments(args, error, match):
    # the operator's own entry point checks as the functional one does
    x = _signal((2, 50, 3), 12)
    with pytest.raises(error, match=match):
        ops.agc(x, *args, dim=1)
    with pytest.raises(TypeError, match="state must be a floating-point tensor"):
        ops.agc(x, 0.1, 0.1, dim=1, state=torch.zeros(2, 3, dtype=torch.long))


def _model_grads(model, x):
    x = x.clone().requires_grad_(True)
    out = model(x)
    out = out if isinstance(out, tuple) else (out,)
    loss = sum((o * torch.linspace(0.5, 1.5, o.shape[-1], dtype=D)).sum() for o in out[:2])
    return torch.autograd.grad(loss, (x, model.c))


@pytest.mark.parametrize("cls", [Glasberg2002, Moore2016])
def test_model_gradients_equal_torch_backend(cls):
    g = torch.Generator().manual_seed(13)
    n = 2400  # 75 ms at 32 kHz
    x = torch.randn(1, n, generator=g, dtype=D) * 0.05 * torch.hann_window(n, dtype=D)
    if cls is Moore2016:
        x = torch.cat([x, 0.5 * x.roll(40, -1)], 0)  # dichotic: inhibition at work
    got = _model_grads(cls(dtype=D, learnable=True), x)
    ref = _model_grads(cls(dtype=D, learnable=True, backend="torch"), x)
    for a, b in zip(got, ref):
        assert _rel(a, b) < 1e-9
    assert got[0].abs().max() > 0

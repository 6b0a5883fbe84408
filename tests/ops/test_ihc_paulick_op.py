"""The IHC operator ``lhotse_amt::ihc_paulick`` (Paulick et al. 2024): forward against the
plain-torch reference (one call and streamed), registration via ``torch.library.opcheck``,
gradients by ``gradcheck`` (input, step constants, state) and the compiled backward over
several recomputation blocks against the reference's autograd, and the dispatch of
:func:`lhotse_amt.functional.ihc_paulick.ihc_paulick`."""

import pytest
import torch

from lhotse_amt import ops
from lhotse_amt.functional.ihc_paulick import (
    IHC_PAULICK_CONSTANTS,
    ihc_paulick,
    ihc_paulick_reference,
    ihc_step_constants,
)
from lhotse_amt.kernels.ihc_paulick_grad import CHECKPOINT_BLOCK
from lhotse_amt.ops.ihc_paulick import IHC_STEP_KEYS, ihc_paulick_rows

D = torch.float64
FS = 44100.0


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _params(requires_grad=False):
    return {
        k: torch.tensor(v, dtype=D, requires_grad=requires_grad)
        for k, v in IHC_PAULICK_CONSTANTS.items()
    }


def _velocity(shape, seed):
    # DRNL-scale velocities (displacements of tens of nm) with a stretch so negative that
    # the MET exponent is capped (u > zmax)
    g = torch.Generator().manual_seed(seed)
    x = 5e-3 * torch.randn(*shape, generator=g, dtype=D)
    x[..., 40:70] = -0.3
    return x


def test_forward_matches_reference_and_streams():
    c = ihc_step_constants(_params(), FS)
    x = _velocity((2, 3, 1300), 0)
    st = 1e-3 * torch.randn(2, 3, generator=torch.Generator().manual_seed(1), dtype=D)
    y, w = ops.ihc_paulick_recursion(x, c, st)
    yr, wr = ihc_paulick_reference(x, c, st)
    assert y.dtype == D and y.shape == x.shape and w.shape == (2, 3)
    assert _rel(y, yr) < 1e-12 and _rel(w, wr) < 1e-12
    y1, w1 = ops.ihc_paulick_recursion(x[..., :700], c, st)
    y2, w2 = ops.ihc_paulick_recursion(x[..., 700:], c, w1)
    assert torch.equal(torch.cat([y1, y2], -1), y) and torch.equal(w2, w)


def test_constants_broadcast_per_channel():
    # constants (C, 12) for a batch (B, C, T): each channel uses its own row
    p = _params()
    base = torch.stack([ihc_step_constants(p, FS)[k] for k in IHC_STEP_KEYS])
    scales = torch.tensor([0.5, 1.0, 2.0], dtype=D)
    c = base.expand(3, 12).clone()
    c[:, 0] = c[:, 0] * scales
    x = _velocity((2, 3, 600), 2)
    y, w = ops.ihc_paulick_recursion(x, c)
    for ch in range(3):
        cd = {k: c[ch, j] for j, k in enumerate(IHC_STEP_KEYS)}
        yr, wr = ihc_paulick_reference(x[:, ch], cd)
        assert _rel(y[:, ch], yr) < 1e-12 and _rel(w[:, ch], wr) < 1e-12


def test_float32_input_runs_the_float64_recursion():
    c = ihc_step_constants(_params(), FS)
    x = _velocity((2, 800), 3)
    y32, _ = ops.ihc_paulick_recursion(x.float(), c)
    y64, _ = ops.ihc_paulick_recursion(x.float().double(), c)
    assert y32.dtype == torch.float32
    assert torch.equal(y32, y64.float())


def test_bad_constant_shape_is_rejected():
    with pytest.raises(ValueError, match="12 entries"):
        ops.ihc_paulick_recursion(torch.zeros(2, 10, dtype=D), torch.zeros(2, 11, dtype=D))
    with pytest.raises(ValueError, match="miss"):
        ops.ihc_paulick_recursion(torch.zeros(2, 10, dtype=D), {"scale": 1.0})


def _row_args(T, seed, rows=3):
    c = ihc_step_constants(_params(), FS)
    cr = torch.stack([c[k] for k in IHC_STEP_KEYS]).expand(2, 12).clone()
    cr[1, 6] *= 0.8  # a second constant row (k = dt / Cm)
    x = _velocity((2, T), seed)
    xrow = torch.tensor([0, 1, 1][:rows])
    crow = torch.tensor([1, 0, 1][:rows])
    zi = 1e-3 * torch.randn(rows, generator=torch.Generator().manual_seed(seed + 1), dtype=D)
    return x, xrow, cr, crow, zi


def test_opcheck():
    x, xrow, c, crow, zi = _row_args(600, 4)
    torch.library.opcheck(
        ihc_paulick_rows, (x.requires_grad_(), xrow, c.requires_grad_(), crow, zi.requires_grad_())
    )


def test_gradcheck_input_constants_and_state():
    x, xrow, c, crow, zi = _row_args(24, 5)
    x[..., 5:8] = -0.3
    # rescale the constants to order one so that finite differences resolve all of them
    unit = c.abs().amax(0).clamp_min(1e-300)
    cu = (c / unit).requires_grad_()
    xs = (x / 5e-3).requires_grad_()
    zs = (zi / 1e-3).requires_grad_()

    def f(xs, cu, zs):
        y, zf, _ = ihc_paulick_rows(xs * 5e-3, xrow, cu * unit, crow, zs * 1e-3)
        return y * 1e3, zf * 1e3

    assert torch.autograd.gradcheck(f, (xs, cu, zs), eps=1e-7, atol=1e-6, rtol=1e-5)


def test_gradients_over_blocks_match_reference_autograd():
    T = 1300  # three recomputation blocks
    assert T > 2 * CHECKPOINT_BLOCK
    x = _velocity((2, 3, T), 6)
    st = 1e-3 * torch.randn(2, 3, generator=torch.Generator().manual_seed(7), dtype=D)
    gw = torch.randn(2, 3, T, generator=torch.Generator().manual_seed(8), dtype=D)

    def grads(fn):
        p = _params(requires_grad=True)
        xx = x.clone().requires_grad_()
        ss = st.clone().requires_grad_()
        y, w = fn(xx, ihc_step_constants(p, FS), ss)
        loss = (y * gw).sum() + 3.0 * w.sum()
        return torch.autograd.grad(loss, [xx, ss, *p.values()])

    got = grads(ops.ihc_paulick_recursion)
    ref = grads(ihc_paulick_reference)
    names = ["x", "state", *IHC_PAULICK_CONSTANTS]
    for name, a, b in zip(names, got, ref, strict=True):
        if name == "V_rest":  # its influence decays as (1 - r)^N ~ exp(-170): ~1e-76
            assert float(b.abs()) < 1e-60 and float(a.abs()) < 1e-60
            continue
        assert float(b.abs().max()) > 0, name
        assert _rel(a, b) < 1e-9, name


def test_functional_dispatch():
    x = _velocity((2, 3, 700), 9)
    ref = ihc_paulick(x, FS, backend="reference")
    # eager CPU inference: the fused numba kernel
    assert _rel(ihc_paulick(x, FS), ref) < 1e-12
    # autograd recording: the operator, gradients w.r.t. the 13 constants
    p = _params(requires_grad=True)
    y = ihc_paulick(x, FS, p)
    node = y.grad_fn
    while type(node).__name__.startswith("View"):
        node = node.next_functions[0][0]
    assert "ihc_paulick" in type(node).__name__
    assert _rel(y.detach(), ref) < 1e-12
    y.square().sum().backward()
    assert all(v.grad is not None and torch.isfinite(v.grad).all() for v in p.values())


def test_functional_under_torch_compile_matches_eager():
    x = _velocity((2, 600), 10)
    p = _params()
    ref = ihc_paulick(x, FS, p, backend="reference")
    f = torch.compile(lambda x: ihc_paulick(x, FS, p), backend="aot_eager", fullgraph=True)
    assert _rel(f(x), ref) < 1e-12


def test_paulick2024_gradients_equal_reference_autograd(monkeypatch):
    # the model's IHC through the operator vs through the reference (torch's autograd):
    # gradients of the input and of the 13 learnable IHC constants
    import lhotse_amt

    model = lhotse_amt.Paulick2024(fs=16000, learnable=True, dtype=D, flow=500.0, fhigh=2000.0)
    x = 0.05 * torch.randn(1, 1300, generator=torch.Generator().manual_seed(11), dtype=D)
    x.requires_grad_(True)
    params = [x, *(p for n, p in model.named_parameters() if n.startswith("ihc."))]
    assert len(params) == 1 + len(IHC_PAULICK_CONSTANTS)

    def grads():
        return torch.autograd.grad(sum(o.square().mean() for o in model(x)), params)

    got = grads()

    calls = []

    def reference(x, c, state=None):
        calls.append(x.shape)
        return ihc_paulick_reference(x, {k: v.to(x.dtype) for k, v in c.items()}, state)

    monkeypatch.setattr(ops, "ihc_paulick_recursion", reference)
    ref = grads()
    assert calls, "the model's IHC did not run through lhotse_amt.ops"
    for a, b in zip(got, ref, strict=True):
        assert float((a - b).abs().max()) <= 1e-9 * float(b.abs().max()) + 1e-300

"""The recursion operators (``torch.ops.lhotse_amt``): forward against the plain-torch
references, registration (schema, fake and autograd via ``torch.library.opcheck``),
gradients by ``gradcheck`` (float64, w.r.t. every input, coefficient and state) and the
compiled backward against the references' autograd over several recomputation blocks."""

import numpy as np
import pytest
import scipy.signal as ss
import torch

from lhotse_amt import ops
from lhotse_amt.functional.adaptation import adaptation_coefficients, adaptation_loops_reference
from lhotse_amt.functional.iir import one_pole_cascade as ref_cascade
from lhotse_amt.functional.iir import sosfilt as ref_sosfilt
from lhotse_amt.ops.recursions import adaptation_rows, resonator_rows, sosfilt_rows

D = torch.float64
TAU = (0.005, 0.050, 0.129, 0.253, 0.500)


def _rel(a, b):
    return float((a - b).abs().max() / b.abs().max())


def _sos(n=3):
    return torch.tensor(
        np.stack(
            [ss.butter(2, [0.02 + 0.05 * i, 0.2 + 0.1 * i], "band", output="sos") for i in range(n)]
        ),
        dtype=D,
    )


def _poles(n=3):
    pole = torch.polar(torch.linspace(0.9, 0.99, n, dtype=D), torch.linspace(0.1, 1.0, n, dtype=D))
    gain = torch.complex(
        torch.linspace(0.1, 0.3, n, dtype=D), torch.linspace(-0.1, 0.05, n, dtype=D)
    )
    return pole, gain


def _adapt(limit, n=3):
    tau = torch.tensor(TAU, dtype=D)
    a, m, s0 = adaptation_coefficients(tau, 16000, limit, 1e-5)
    return a.expand(n, 5).clone(), m.expand(n, 5).clone(), s0.expand(n, 5).clone()


def test_sosfilt_forward_matches_reference_and_streams():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 1500, generator=g, dtype=D)
    sos = _sos()
    zi = 0.1 * torch.randn(2, 3, 2, 2, generator=g, dtype=D)
    y, zf = ops.sosfilt(x, sos, zi)
    yr, zr = ref_sosfilt(x, sos, zi, return_state=True, backend="reference")
    assert _rel(y, yr) < 1e-12 and _rel(zf, zr) < 1e-12
    y1, z1 = ops.sosfilt(x[..., :700], sos, zi)
    y2, z2 = ops.sosfilt(x[..., 700:], sos, z1)
    assert _rel(torch.cat([y1, y2], -1), y) < 1e-13 and _rel(z2, zf) < 1e-13


@pytest.mark.parametrize("output", ["real", "real2", "abs", "complex"])
@pytest.mark.parametrize("order", [1, 4])
def test_one_pole_cascade_forward_matches_reference(output, order):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 1200, generator=g, dtype=D)
    pole, gain = _poles()
    zi = 0.1 * torch.complex(torch.randn(2, 3, order, dtype=D), torch.randn(2, 3, order, dtype=D))
    y, zf = ops.one_pole_cascade(x, pole, gain, order, zi, output=output)
    yc, zr = ref_cascade(
        x, pole, gain, order, zi, output="complex", return_state=True, backend="reference"
    )
    ref = {"real": yc.real, "real2": 2 * yc.real, "abs": yc.abs(), "complex": yc}[output]
    assert _rel(y, ref) < 1e-10 and _rel(zf, zr) < 1e-10


def test_one_pole_cascade_mixed_output_selects_per_row():
    x = torch.randn(1, 3, 600, dtype=D)
    pole, gain = _poles()
    use_abs = torch.tensor([True, False, True])
    y, _ = ops.one_pole_cascade(x, pole, gain, 1, output="mixed", use_abs=use_abs)
    ya, _ = ops.one_pole_cascade(x, pole, gain, 1, output="abs")
    yr, _ = ops.one_pole_cascade(x, pole, gain, 1, output="real")
    assert torch.equal(y[:, 0], ya[:, 0]) and torch.equal(y[:, 1], yr[:, 1])
    with pytest.raises(ValueError, match="output must be"):
        ops.one_pole_cascade(x, pole, gain, 1, output="mixed")


@pytest.mark.parametrize("limit", [10.0, 0.0])
def test_adaptation_forward_matches_reference(limit):
    x = torch.rand(3, 1300, dtype=D) * torch.linspace(0, 2, 1300, dtype=D)
    a, m, s0 = _adapt(limit)
    y, zf = ops.adaptation_loops_raw(x, a, m, 1e-5, limit > 1, s0)
    yr, zr = adaptation_loops_reference(x, a, m, 1e-5, limit, s0)
    assert _rel(y, yr) < 1e-13 and _rel(zf, zr) < 1e-13


def _op_samples():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 40, generator=g, dtype=D)
    rows = torch.tensor([0, 0, 1, 1])
    crow = torch.tensor([0, 1, 0, 1])
    sos = _sos(2)
    pole, gain = _poles(2)
    a, m, s0 = _adapt(10.0, 2)
    xa = torch.rand(2, 40, generator=g, dtype=D) * 3
    xa[:, 10:15] = 0.0  # below the minimum level: no input gradient, loops still run

    def resonator(order):
        zi = 0.1 * torch.randn(4, order, 2, generator=g, dtype=D)
        mode = torch.tensor([1, 0], dtype=torch.int8)
        ri = (torch.view_as_real(pole), torch.view_as_real(gain))
        return resonator_rows, (x, rows, *ri, mode, crow, zi)

    return [
        (sosfilt_rows, (x, rows, sos, crow, 0.1 * torch.randn(4, 2, 2, generator=g, dtype=D))),
        resonator(4),
        (adaptation_rows, (xa, rows, a, m, crow, 1e-5, True, s0[crow] * 1.2)),
        resonator(1),  # one section (the modulation filterbanks' own kernel loops)
    ]


_IDS = ["sosfilt", "resonator", "adaptation", "resonator-1"]


@pytest.mark.parametrize("index", range(4), ids=_IDS)
def test_opcheck_schema_fake_and_autograd_registration(index):
    op, args = _op_samples()[index]
    args = tuple(
        a.clone().requires_grad_(a.is_floating_point()) if torch.is_tensor(a) else a for a in args
    )
    torch.library.opcheck(op, args)


@pytest.mark.parametrize("index", range(4), ids=_IDS)
def test_gradcheck_every_differentiable_input(index):
    op, args = _op_samples()[index]
    args = [
        a.clone().requires_grad_(a.is_floating_point()) if torch.is_tensor(a) else a for a in args
    ]
    pos = [i for i, a in enumerate(args) if torch.is_tensor(a) and a.requires_grad]

    def f(*diff):
        full = list(args)
        for i, d in zip(pos, diff):
            full[i] = d
        out = op(*full)
        return out[0], out[1]  # signal and final state (the checkpoints carry no gradient)

    assert torch.autograd.gradcheck(f, [args[i] for i in pos])


def test_gradients_match_reference_autograd_over_several_blocks():
    # T = 1300 spans three recomputation blocks of the backward kernels
    g = torch.Generator().manual_seed(3)
    T = 1300
    gy = torch.randn(2, 3, T, generator=g, dtype=D)
    x = torch.randn(2, 3, T, generator=g, dtype=D, requires_grad=True)
    sos = _sos().requires_grad_(True)
    grads = []
    for impl in ("op", "reference"):
        if impl == "op":
            y, _ = ops.sosfilt(x, sos)
        else:
            y = ref_sosfilt(x, sos, backend="reference")
        grads.append(torch.autograd.grad((y * gy).sum(), (x, sos)))
    assert all(_rel(a, b) < 1e-9 for a, b in zip(*grads))

    pole, gain = _poles()
    pole.requires_grad_(True)
    gain.requires_grad_(True)
    xb = torch.randn(2, 1, T, generator=g, dtype=D, requires_grad=True)
    grads = []
    for impl in ("op", "reference"):
        if impl == "op":
            y, _ = ops.one_pole_cascade(xb, pole, gain, 4, output="abs")
        else:
            y = ref_cascade(xb, pole, gain, 4, output="complex", backend="reference").abs()
        grads.append(torch.autograd.grad((y * gy).sum(), (xb, pole, gain)))
    assert all(_rel(a, b) < 1e-9 for a, b in zip(*grads))

    # one section, |.| and Re rows, from a state and with a final-state gradient
    use_abs = torch.tensor([True, False, True])
    zi = 0.1 * torch.complex(torch.randn(2, 3, 1, dtype=D), torch.randn(2, 3, 1, dtype=D))
    zi.requires_grad_(True)
    gz = torch.complex(torch.randn(2, 3, 1, generator=g, dtype=D), torch.randn(2, 3, 1, dtype=D))
    grads = []
    for impl in ("op", "reference"):
        if impl == "op":
            y, zf = ops.one_pole_cascade(xb, pole, gain, 1, zi, output="mixed", use_abs=use_abs)
        else:
            yc, zf = ref_cascade(
                xb, pole, gain, 1, zi, output="complex", return_state=True, backend="reference"
            )
            y = torch.where(use_abs[..., None], yc.abs(), yc.real)
        loss = (y * gy).sum() + (zf * gz.conj()).real.sum()
        grads.append(torch.autograd.grad(loss, (xb, pole, gain, zi)))
    assert all(_rel(a, b) < 1e-9 for a, b in zip(*grads))

    tau = torch.tensor(TAU, dtype=D, requires_grad=True)
    xa = torch.rand(2, 3, T, generator=g, dtype=D) * 2
    xa[..., 600:700] = 0.0  # silence (clamped at the minimum level) inside a block
    xa.requires_grad_(True)
    grads = []
    for impl in ("op", "reference"):
        a, m, s0 = adaptation_coefficients(tau, 16000, 10.0, 1e-5)
        if impl == "op":
            y, _ = ops.adaptation_loops_raw(xa, a, m, 1e-5, True, s0.expand(2, 3, 5))
        else:
            y, _ = adaptation_loops_reference(xa, a, m, 1e-5, 10.0, s0.expand(2, 3, 5))
        grads.append(torch.autograd.grad((y * gy).sum(), (xa, tau)))
    assert all(_rel(a, b) < 1e-9 for a, b in zip(*grads))


def test_float32_inputs_run_float64_recursions():
    x = torch.randn(2, 800)
    sos = _sos(1)[0]
    y32, _ = ops.sosfilt(x, sos.float())
    y64, _ = ops.sosfilt(x.double(), sos)
    assert y32.dtype == torch.float32
    assert _rel(y32.double(), y64) < 1e-6

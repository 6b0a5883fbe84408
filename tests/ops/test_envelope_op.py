"""The rms-matched Hilbert envelope operator ``lhotse_amt::rms_envelope`` (King et al.
2019's phase insensitivity): values and gradients against the plain-torch reference's
autograd, registration (``torch.library.opcheck``), float64 ``gradcheck``, all-zero bands,
argument checks, and King2019's model gradients against the reference chain."""

import pytest
import torch
from king2019_chain import assert_king2019_gradients_match

from lhotse_amt import ops
from lhotse_amt.functional import king2019_modulation as K
from lhotse_amt.ops.envelope import _KERNELS, _backward_rows, _forward, rms_envelope_rows

D = torch.float64


def _bands(shape, seed, dtype=D):
    g = torch.Generator().manual_seed(seed)
    t = torch.arange(shape[-1], dtype=D)
    x = torch.randn(shape, generator=g, dtype=D)
    # modulated bands: envelopes far from flat, so the rms matching matters
    return (x * (1.5 + torch.sin(0.07 * t))).to(dtype)


def _reference(x, sel):
    mfc = [20.0 if m in sel else 1.0 for m in range(x.shape[-2])]
    return K.phase_insensitivity(x, mfc, 10.0, backend="reference")


@pytest.mark.parametrize("T", [257, 256])
def test_values_and_gradients_equal_reference_autograd(T):
    x = _bands((2, 3, 5, T), 0).requires_grad_(True)
    sel = [1, 3, 4]
    y = ops.rms_envelope(x, sel)
    ref = _reference(x, sel)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert float((y - ref).abs().max().detach()) <= 1e-12 * float(ref.abs().max().detach())
    # bands outside the selection pass unchanged
    assert torch.equal(y[..., [0, 2], :], x[..., [0, 2], :])
    g = _bands(x.shape, 1)
    (gx,) = torch.autograd.grad(y, x, g)
    (gr,) = torch.autograd.grad(ref, x, g)
    assert float((gx - gr).abs().max()) <= 1e-10 * float(gr.abs().max())


@pytest.mark.parametrize("layout", ["time-major", "strided"])
def test_gradient_of_any_layout_equals_the_contiguous_gradient(layout):
    # a model output permuted to (B, T, F, M) sends back a time-major gradient, which the
    # CPU kernels transpose block by block; other layouts are made contiguous
    x = _bands((2, 3, 5, 700), 4, torch.float32).requires_grad_(True)
    sel = [2, 3, 4]
    y = ops.rms_envelope(x, sel)
    g = _bands((2, 3, 5, 700), 5, torch.float32)
    if layout == "time-major":
        gl = g.permute(0, 3, 1, 2).contiguous().permute(0, 2, 3, 1)
        assert gl.permute(0, 3, 1, 2).is_contiguous()
    else:
        gl = torch.zeros(2, 3, 5, 1400).narrow(-1, 0, 700).copy_(g)
    assert torch.equal(gl, g) and not gl.is_contiguous()
    (gx,) = torch.autograd.grad(y, x, g, retain_graph=True)
    (gxl,) = torch.autograd.grad(y, x, gl)
    assert torch.equal(gx, gxl)


def test_float32_is_close_to_float64():
    x = _bands((1, 4, 6, 800), 2)
    y32 = ops.rms_envelope(x.float(), [2, 5])
    y64 = ops.rms_envelope(x, [2, 5])
    assert y32.dtype == torch.float32
    assert float((y32.double() - y64).abs().max()) <= 1e-5 * float(y64.abs().max())


def test_phase_insensitivity_dispatches_to_the_operator():
    x = _bands((1, 2, 4, 300), 3)
    mfc = [0.0, 5.0, 20.0, 50.0]
    y = K.phase_insensitivity(x, mfc, 10.0)
    assert torch.equal(y, ops.rms_envelope(x, [2, 3]))
    ref = K.phase_insensitivity(x, mfc, 10.0, backend="reference")
    assert float((y - ref).abs().max()) <= 1e-12 * float(ref.abs().max())
    with pytest.raises(ValueError, match="backend"):
        K.phase_insensitivity(x, mfc, 10.0, backend="fft")


def test_opcheck():
    x = _bands((3, 4, 64), 4).requires_grad_(True)
    torch.library.opcheck(rms_envelope_rows, (x, [0, 2]))
    torch.library.opcheck(rms_envelope_rows, (x.detach().float(), [1, 2, 3]))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_plain_torch_functions_of_other_devices_equal_the_cpu_kernels(dtype):
    # what the operator runs on a device without compiled kernels, on CPU tensors
    other, cpu = _KERNELS.for_device("mps"), _KERNELS.for_device("cpu")
    assert other is not cpu
    x = _bands((4, 5, 203), 8, dtype)
    x[1, 3] = 0.0  # an all-zero selected band
    sel = [0, 3, 4]
    got, ref = _forward(other, x, sel), _forward(cpu, x, sel)
    tol = 1e-12 if dtype == D else 1e-5
    for a, b in zip(got, ref, strict=True):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert float((a - b).abs().max()) <= tol * float(b.abs().max())
    g = _bands(x.shape, 9, dtype)
    gx = _backward_rows(other, g, x, *ref[1:], sel)
    gr = _backward_rows(cpu, g, x, *ref[1:], sel)
    assert gx.dtype == gr.dtype and float((gx - gr).abs().max()) <= tol * float(gr.abs().max())


def test_gradcheck_float64():
    x = _bands((2, 3, 40), 5).requires_grad_(True)
    assert torch.autograd.gradcheck(lambda v: ops.rms_envelope(v, [0, 2]), (x,))


def test_all_zero_band_gives_zero_output_and_finite_gradient():
    x = _bands((1, 3, 3, 100), 6)
    x[0, 1, 2] = 0.0
    x.requires_grad_(True)
    y = ops.rms_envelope(x, [1, 2])
    assert torch.equal(y[0, 1, 2], torch.zeros(100, dtype=D))
    (gx,) = torch.autograd.grad(y.square().sum(), x)
    assert bool(torch.isfinite(gx).all())
    assert torch.equal(gx[0, 1, 2], torch.zeros(100, dtype=D))
    # the other rows still get the reference's gradient
    ref = _reference(x, [1, 2])
    (gr,) = torch.autograd.grad(ref.square().sum(), x)
    keep = torch.ones(3, dtype=torch.bool)
    keep[1] = False
    assert torch.allclose(gx[0, keep], gr[0, keep], rtol=1e-10, atol=1e-12)


def test_argument_errors():
    x = _bands((2, 3, 50), 7)
    with pytest.raises(ValueError, match=r"bands must lie in \[0, 3\)"):
        ops.rms_envelope(x, [1, 3])
    with pytest.raises(TypeError, match="real floating tensor"):
        ops.rms_envelope(x.long(), [1])
    with pytest.raises(TypeError, match="real floating tensor"):
        ops.rms_envelope(x[0, 0], [0])
    # no band selected: a copy
    y = ops.rms_envelope(x, [])
    assert torch.equal(y, x) and y.data_ptr() != x.data_ptr()


def test_king2019_gradients_equal_reference_chain(monkeypatch):
    def reference(v, bands):
        return _reference(v, list(bands))

    assert_king2019_gradients_match(monkeypatch, "rms_envelope", reference)

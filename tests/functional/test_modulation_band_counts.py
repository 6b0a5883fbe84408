"""The modulation filterbank with the per-channel band counts of its design: only the bands
each channel has are computed (``counts=``, ``channels=True``, and
``select=`` of the resonator operator's wrapper). Outputs equal the padded computation
bit for bit and gradients to float64 rounding (the compiled backward may round a row
differently in another lane of its vector), the padded coefficients get exactly zero
gradients, the per-channel outputs equal the plain-torch reference and pass gradcheck, and
streaming with the band-count path equals one-shot processing."""

import pytest
import torch

from lhotse_amt import ops
from lhotse_amt.functional.iir import one_pole_cascade as ref_cascade
from lhotse_amt.functional.modulation import modulation_filterbank, unpad_bands
from lhotse_amt.modules import ModulationFilterbank

D = torch.float64


def _bank(dtype=D, fs=8000.0, fc=(300.0, 900.0, 2500.0), **kw):
    kw.setdefault("preset", "amt-1.4-jepsen2008")
    return ModulationFilterbank(fs, torch.tensor(fc), learnable=True, dtype=dtype, **kw)


def _args(bank):
    return (bank.lp_sos, bank.poles, bank.gains, bank.direct, bank.use_abs, bank.scale)


def _input(bank, T=900, lead=(2,), seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(*lead, bank.num_channels, T, generator=g, dtype=bank.scale.dtype)
    return x * torch.linspace(0.01, 1.0, T, dtype=x.dtype)


def _assert_rounding(a, b):
    """Equal to the rounding of float64 recursions (a few ulp of the float32 result)."""
    tol = 1e-12 if a.dtype in (D, torch.complex128) else 1e-6
    torch.testing.assert_close(a, b, rtol=tol, atol=tol * float(a.abs().max()))


def _grads(bank, x, fn, seed=1):
    """The output of ``fn(x)`` and the gradients of a random projection of it w.r.t. the
    input, the poles and the gains."""
    xx = x.clone().requires_grad_(True)
    out = fn(xx)
    outs = out if isinstance(out, list) else [out]
    g = torch.Generator().manual_seed(seed)
    loss = sum((o * torch.randn(o.shape, generator=g, dtype=o.dtype)).sum() for o in outs)
    gx, gp, gg = torch.autograd.grad(loss, [xx, bank.poles, bank.gains])
    return outs, gx, gp, gg


@pytest.mark.parametrize("dtype", [torch.float32, D])
def test_counts_give_the_padded_outputs_and_gradients(dtype):
    bank = _bank(dtype)
    counts = bank.band_counts
    assert len(set(counts)) > 1  # channels with different band counts: padding exists
    x = _input(bank)
    args = (*_args(bank), bank.prefilter_sos)
    full = _grads(bank, x, lambda v: modulation_filterbank(v, *args))
    sel = _grads(bank, x, lambda v: modulation_filterbank(v, *args, counts=counts))
    assert torch.equal(full[0][0], sel[0][0])
    for a, b in zip(full[1:], sel[1:], strict=True):
        _assert_rounding(a, b)
    pad = ~torch.isfinite(bank.mfc_padded)
    assert bool(pad.any())
    assert bool((sel[2][pad] == 0).all()) and bool((sel[3][pad] == 0).all())
    assert bool((sel[0][0][..., pad, :] == 0).all())


@pytest.mark.parametrize("dtype", [torch.float32, D])
def test_channel_outputs_and_gradients_equal_the_padded_computation(dtype):
    bank = _bank(dtype)
    x = _input(bank)
    args = (*_args(bank), bank.prefilter_sos)
    ref = _grads(bank, x, lambda v: unpad_bands(modulation_filterbank(v, *args), bank.band_counts))
    got = _grads(bank, x, bank)
    assert [o.shape[-2] for o in got[0]] == list(bank.band_counts)
    for a, b in zip(ref[0], got[0], strict=True):
        assert torch.equal(a, b)
    for a, b in zip(ref[1:], got[1:], strict=True):
        _assert_rounding(a, b)


def test_channel_outputs_and_gradients_match_the_plain_torch_reference():
    bank = _bank()
    x = _input(bank, T=700)
    args = _args(bank)
    counts = bank.band_counts
    got = _grads(bank, x, bank)

    def reference(v):
        y = modulation_filterbank(v, *args, bank.prefilter_sos, backend="torch")
        return unpad_bands(y, counts)

    ref = _grads(bank, x, reference)
    for a, b in zip(ref[0], got[0], strict=True):
        a, b = a.detach(), b.detach()
        assert float((a - b).abs().max()) <= 1e-10 * float(a.abs().max())
    for a, b in zip(ref[1:], got[1:], strict=True):
        assert float((a - b).abs().max()) <= 1e-9 * float(a.abs().max())


def test_channel_outputs_pass_gradcheck():
    bank = _bank(fs=2000.0, fc=(200.0, 500.0), preset="jepsen2008")
    counts = bank.band_counts
    assert counts[0] != counts[1]
    x = _input(bank, T=60, lead=(1,)).requires_grad_(True)
    args = _args(bank)

    def fn(v, poles, gains):
        parts = modulation_filterbank(
            v, args[0], poles, gains, *args[3:], bank.prefilter_sos, counts=counts, channels=True
        )
        return torch.cat(parts, dim=-2)

    poles = bank.poles.detach().clone().requires_grad_(True)
    gains = bank.gains.detach().clone().requires_grad_(True)
    assert torch.autograd.gradcheck(fn, (x, poles, gains), fast_mode=True)


def test_streaming_with_counts_equals_one_shot():
    bank = _bank()
    x = _input(bank, T=1000)
    args = (*_args(bank), bank.prefilter_sos)
    counts = bank.band_counts
    y = modulation_filterbank(x, *args, counts=counts)
    y1, s1 = modulation_filterbank(x[..., :430], *args, return_state=True, counts=counts)
    y2 = modulation_filterbank(x[..., 430:], *args, s1, counts=counts)
    torch.testing.assert_close(torch.cat([y1, y2], -1), y, rtol=1e-12, atol=1e-15)
    assert s1["bp"].shape == (*x.shape[:-1], bank.max_bands - 1, 1)


def test_counts_are_checked():
    bank = _bank()
    x = _input(bank)
    with pytest.raises(ValueError, match="each of the 3 channels"):
        modulation_filterbank(x, *_args(bank), counts=(2, 3))
    with pytest.raises(ValueError, match="bands for each"):
        modulation_filterbank(x, *_args(bank), counts=(0, 3, 3), channels=True)
    with pytest.raises(ValueError, match="needs the band counts"):
        modulation_filterbank(x, *_args(bank), channels=True)


def test_one_pole_cascade_select_equals_the_selected_filters_of_the_full_bank():
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, 1, 800, generator=g, dtype=D)
    pole = torch.polar(torch.rand(3, 4, generator=g, dtype=D) * 0.2 + 0.75,
                       torch.rand(3, 4, generator=g, dtype=D) * 3)  # fmt: skip
    gain = torch.complex(torch.randn(3, 4, generator=g, dtype=D), torch.randn(3, 4, dtype=D))
    use_abs = torch.rand(3, 4, generator=g) > 0.5
    select = torch.tensor([0, 1, 5, 6, 7, 11])
    pole.requires_grad_(True)
    y, zf = ops.one_pole_cascade(x, pole, gain, 1, output="mixed", use_abs=use_abs, select=select)
    yc, zr = ref_cascade(x, pole, gain, 1, output="complex", return_state=True, backend="reference")
    ref = torch.where(use_abs[..., None], yc.abs(), yc.real).flatten(-3, -2)[..., select, :]
    assert y.shape == (2, 6, 800) and zf.shape == (2, 6, 1)
    torch.testing.assert_close(y, ref, rtol=1e-10, atol=0.0)
    torch.testing.assert_close(zf, zr.flatten(-3, -2)[..., select, :], rtol=1e-10, atol=0.0)
    (gp,) = torch.autograd.grad(y.sum(), pole)
    (gr,) = torch.autograd.grad(ref.sum(), pole)
    torch.testing.assert_close(gp, gr, rtol=1e-9, atol=1e-12)
    assert bool((gp.flatten()[[2, 3, 4, 8, 9, 10]] == 0).all())
    with pytest.raises(ValueError, match="select needs"):
        ops.one_pole_cascade(x, pole, gain, 1, output="complex", select=select)

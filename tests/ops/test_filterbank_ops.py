"""The no-grad CPU filterbank operators (:mod:`lhotse_amt.ops.filterbanks`): registration
and fake implementations (``torch.library.opcheck``), values against the functionals'
plain-torch reference, and streaming through their states."""

from __future__ import annotations

import pytest
import torch

from lhotse_amt.functional.king2019_modulation import (
    king2019_modulation_filterbank,
    phase_insensitivity,
    tf_filter,
)
from lhotse_amt.functional.modulation import modulation_filterbank
from lhotse_amt.models import Dau1997, Osses2021
from lhotse_amt.ops import filterbanks

D = torch.float64
OPS = torch.ops.lhotse_amt


def _signal(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=D)


def _bank(model):
    mod = model(16000, flow=300.0, fhigh=2000.0, dtype=D).modulation
    return mod, (
        mod.lp_sos,
        mod.prefilter_sos,
        mod.poles[:, 1:, 0],
        mod.gains[:, 1:, 0],
        mod.use_abs[:, 1:],
        mod.scale,
    )


def _functional(mod, x, backend, state=None):
    return modulation_filterbank(
        x, mod.lp_sos, mod.poles, mod.gains, mod.direct, mod.use_abs, mod.scale,
        mod.prefilter_sos, state, return_state=True, backend=backend,
    )  # fmt: skip


@pytest.mark.parametrize("model", [Dau1997, Osses2021], ids=["no-prefilter", "prefilter"])
def test_modulation_bank_equals_reference_and_streams(model):
    mod, filters = _bank(model)
    x = _signal(2, mod.poles.shape[0], 900) * 50
    ref, _ = _functional(mod, x, "torch")
    y, st = filterbanks.modulation_bank(x, filters, None)
    assert y.shape == ref.shape
    assert float((y - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    assert ("pre" in st) == (mod.prefilter_sos is not None)
    a, sa = filterbanks.modulation_bank(x[..., :400], filters, None)
    # an empty chunk mid-stream: no samples, the state passed on unchanged
    e, se = filterbanks.modulation_bank(x[..., :0], filters, sa)
    assert e.shape == (*x.shape[:-1], ref.shape[-2], 0)
    assert all(torch.equal(se[k], sa[k]) for k in sa)
    b, _ = filterbanks.modulation_bank(x[..., 400:], filters, se)
    torch.testing.assert_close(torch.cat([a, b], -1), y, rtol=0, atol=0)
    # the functional's "numba" backend is this operator
    got, _ = _functional(mod, x, "numba")
    torch.testing.assert_close(got, y, rtol=0, atol=0)
    state = [st.get(k) for k in ("pre", "lp", "bp")]
    torch.library.opcheck(OPS.modulation_bank.default, (x, *filters, state))


def test_lfilter_and_sos_bank_equal_reference():
    x = _signal(3, 700)
    b = torch.tensor([[0.2, 0.1, -0.05], [0.3, 0.0, 0.1], [0.5, -0.2, 0.0]], dtype=D)
    a = torch.tensor([[1.0, -0.5, 0.2], [1.0, 0.1, -0.3], [1.0, -0.9, 0.4]], dtype=D)
    y, zf = tf_filter(x, b, a, return_state=True, backend="numba")
    ref, zref = tf_filter(x, b, a, return_state=True, backend="torch")
    assert float((y - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    torch.testing.assert_close(zf, zref, rtol=1e-9, atol=1e-12)
    torch.library.opcheck(OPS.lfilter.default, (x, b, a, None))
    sos = torch.stack([torch.cat([b, a], -1)[:2], torch.cat([b, a], -1)[1:]])  # (2, 2, 6)
    y, st = king2019_modulation_filterbank(x[None], sos, return_state=True, backend="numba")
    ref, _ = king2019_modulation_filterbank(x[None], sos, return_state=True, backend="torch")
    assert float((y - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    torch.library.opcheck(OPS.sos_bank.default, (x, sos, st.reshape(3, 2, 2, 2)))


def test_phase_insensitivity_in_place_equals_reference():
    x = _signal(2, 3, 4, 500)
    mfc = [2.0, 20.0, 40.0, 80.0]
    ref = phase_insensitivity(x.clone(), mfc, 10.0, backend="reference")
    y = x.clone()
    assert phase_insensitivity(y, mfc, 10.0, inplace=True) is y
    assert float((y - ref).abs().max()) <= 1e-10 * float(ref.abs().max())
    torch.library.opcheck(OPS.phase_insensitivity_.default, (x.clone(), [1, 2, 3]))

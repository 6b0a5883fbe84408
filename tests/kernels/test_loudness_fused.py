"""Fused excitation-tail kernels (numba) against the plain numpy/torch references."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.functional import loudness as L
from lhotse_amt.kernels.loudness_fused import specific_loudness_tail
from lhotse_amt.kernels.loudness_plans import KeepRule, TailConstants
from lhotse_amt.ops import loudness_fast as F


@pytest.mark.parametrize("high_level", ["moore2016", "mgb1997"])
@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-12), (torch.float32, 2e-6)])
def test_specific_loudness_tail_matches_torch(high_level, dtype, tol):
    fc = L.cam_to_hz(np.arange(1.75, 39.01, 0.25))
    prm = L.specific_loudness_params(fc)
    rng = np.random.default_rng(0)
    n, c = 7, len(fc)
    upper = 10.0 ** rng.uniform(-14, 12, (n, c))  # below threshold ... above 1e10
    lower = 10.0 ** rng.uniform(-14, 11, (n, c))
    anyk = np.array([True, True, False, True, True, True, True])
    mask = np.ones(c)
    mask[:3] = 0.0
    sl = {k: torch.tensor(getattr(prm, k), dtype=dtype) for k in ("e_thrq", "g", "alpha", "a")}
    sl_np = TailConstants(
        a_alpha=(sl["a"] ** sl["alpha"]).numpy(),
        mask=mask.astype(sl["g"].numpy().dtype),
        **{k: v.numpy() for k, v in sl.items()},
    )
    up = upper.astype(sl_np.g.dtype)
    lo = lower.astype(sl_np.g.dtype)
    e_out, n_out = np.empty_like(up), np.empty_like(up)
    specific_loudness_tail(up, lo, anyk, sl_np, 0.0631, high_level, e_out, n_out)
    e_ref = (torch.tensor(up) + torch.tensor(lo)).clamp_min(1e-10)
    n_ref = L.specific_loudness(e_ref, L.SpecificLoudnessParams(**sl), 0.0631, high_level)
    n_ref = n_ref * torch.tensor(mask, dtype=dtype) * torch.tensor(anyk)[:, None].to(dtype)
    assert np.allclose(e_out, e_ref.numpy(), rtol=tol, atol=0)
    # atol: N' of excitations far below threshold is a difference of nearly equal powers
    assert np.allclose(n_out, n_ref.numpy(), rtol=tol, atol=1e-9 * float(n_ref.abs().max()))
    assert np.all(n_out[2] == 0) and np.all(n_out[:, :3] == 0)
    # far below threshold N' is tiny but never negative (the reference's powers are monotone)
    assert np.all(n_out >= 0)
    # the level output (dB) instead of E: 10 log10(E), and the given value in empty rows
    e_db, n_db = np.empty_like(up), np.empty_like(up)
    specific_loudness_tail(up, lo, anyk, sl_np, 0.0631, high_level, e_db, n_db, -300.0)
    assert np.array_equal(n_db, n_out)
    db_ref = 10.0 * torch.log10(e_ref)
    assert np.allclose(e_db[anyk], db_ref[torch.tensor(anyk)].numpy(), rtol=0, atol=1e-4)
    assert np.all(e_db[~anyk] == -300.0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_kept_components_matches_torch_rules(dtype):
    from lhotse_amt.kernels.loudness_fused import kept_components

    rng = np.random.default_rng(2)
    rows = torch.tensor(10.0 ** rng.uniform(-8, 6, (9, 960)), dtype=dtype)
    rows[3] = 0.0  # empty frame
    rows[4, ::3] = 0.0
    rows[5] = 1e-5  # everything below the pruning floor's 1e-6 * 1000
    for rule in (KeepRule(True, 1000.0), KeepRule(False, 1e-4), KeepRule(False, 0.0)):
        ik, anyk, col_kept, col_pruned = kept_components(rows.numpy(), rule)
        if rule.prune:
            keep = L.prune_components(rows, floor=rule.threshold)
        else:
            keep = rows > rule.threshold
        ref = torch.where(keep, rows, torch.zeros_like(rows))
        assert np.array_equal(ik, ref.numpy())
        assert np.array_equal(anyk, keep.any(-1).numpy())
        assert np.array_equal(col_kept, keep.any(0).numpy())
        assert np.array_equal(col_pruned, ((~keep) & (rows != 0)).sum(0).numpy())


def test_moore2016_diotic_shortcut_matches_reference_path():
    from lhotse_amt.models.moore2016 import Moore2016

    t = np.arange(3200) / 32000
    sig = np.sqrt(2) * 20e-6 * 10**3 * np.sin(2 * np.pi * 1000 * t)
    sig = sig + 1e-3 * np.random.default_rng(0).standard_normal(t.size)
    x = torch.tensor(np.stack([sig, sig]), dtype=torch.float64)
    with torch.no_grad():
        fast = Moore2016(dtype=torch.float64, backend="fast").compute(x)
        ref = Moore2016(dtype=torch.float64, backend="torch").compute(x)
    for k in ("inst_spec_loud_left", "inst_spec_loud_right", "stl", "ltl"):
        err = float((fast[k] - ref[k]).abs().max() / ref[k].abs().max())
        assert err < 1e-11, (k, err)
    assert torch.equal(fast["inst_spec_loud_left"], fast["inst_spec_loud_right"])


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-14), (torch.float32, 1e-6)])
def test_binaural_inhibition_equal_ears_shortcut(dtype, tol):
    s = torch.rand(30, 150, dtype=dtype) + 1e-3
    m = torch.tensor(L.binaural_smoothing_matrix(150), dtype=dtype)
    p = torch.tensor(1.5978, dtype=dtype)
    fast_l, fast_r = L.binaural_inhibition(s, s, m, p)  # shortcut (no grad, equal ears)
    with torch.enable_grad():
        s2 = s.clone().requires_grad_(True)
        ref_l, ref_r = L.binaural_inhibition(s2, s2, m, p)  # general path
    assert torch.allclose(fast_l, ref_l.detach(), rtol=tol, atol=0)
    assert torch.allclose(fast_r, ref_r.detach(), rtol=tol, atol=0)


@pytest.mark.parametrize("dtype,tol", [(torch.float64, 1e-13), (torch.float32, 1e-6)])
def test_binaural_inhibition_compiled_matches_torch(dtype, tol):
    # unequal ears, from balanced to one ear silent (ratios 0 ... 1e13 after the 1e-13 offset)
    g = torch.Generator().manual_seed(3)
    s_l = torch.rand(40, 150, generator=g, dtype=dtype)
    s_r = s_l * torch.logspace(-6, 3, 40, dtype=dtype)[:, None]
    s_r[:5] = 0.0
    s_l[-3:, :70] = 0.0
    m = torch.tensor(L.binaural_smoothing_matrix(150), dtype=dtype)
    fast_l, fast_r = L.binaural_inhibition(s_l, s_r, m, 1.5978)  # compiled (CPU, no grad)
    with torch.enable_grad():
        a, b = s_l.clone().requires_grad_(True), s_r.clone().requires_grad_(True)
        ref_l, ref_r = L.binaural_inhibition(a, b, m, 1.5978)  # torch expression
    for fast, ref in ((fast_l, ref_l.detach()), (fast_r, ref_r.detach())):
        assert fast.dtype == dtype
        err = (fast - ref).abs() / ref.abs().amax(-1, keepdim=True).clamp_min(1e-30)
        assert float(err.max()) < tol


@pytest.mark.parametrize("variant", ["moore2016", "gm2002"])
def test_multires_compiled_matches_torch_path(variant):
    from lhotse_amt.kernels.loudness_fused import power_into, windowed_autocorr

    rng = np.random.default_rng(4)
    z = torch.tensor(rng.standard_normal((2, 6000)) * 0.02)
    bases = [(ln, b, torch.tensor(m)) for ln, b, m in L.dft_bases(variant)]
    window = torch.tensor(L.autocorr_basis(variant)[0])
    i_fast, r_fast = F.multires_intensity_fast(z, -100, -3, 150, bases, return_autocorr=window)
    i_ref, r_ref = L.multires_intensity(z, -100, -3, 150, bases, return_autocorr=window)
    assert torch.allclose(i_fast, i_ref, rtol=1e-12, atol=1e-12 * float(i_ref.max()))
    assert torch.allclose(r_fast, r_ref, rtol=1e-10, atol=1e-12 * float(r_ref.max()))
    # sliding DFT for every window (the models use it for the long ones), over more frames
    # than its restart period, float64 and float32 input
    plans = F.sliding_plans(variant, min_length=64)
    assert sorted(plans) == sorted(L.WINDOW_LENGTHS)
    z2 = torch.tensor(rng.standard_normal((2, 12000)) * 0.02)
    with torch.no_grad():
        i_sl = F.multires_intensity_fast(z2, -100, -3, 330, bases, sliding=plans)
        i_mm = F.multires_intensity_fast(z2, -100, -3, 330, bases)
        assert torch.allclose(i_sl, i_mm, rtol=1e-10, atol=1e-13 * float(i_mm.max()))
        b32 = [(ln, b, m.float()) for ln, b, m in bases]
        i_sl32 = F.multires_intensity_fast(z2.float(), -100, -3, 330, b32, sliding=plans)
    assert i_sl32.dtype == torch.float32
    assert torch.allclose(i_sl32.double(), i_mm, rtol=1e-5, atol=1e-7 * float(i_mm.max()))
    # the helpers directly
    y = rng.standard_normal((3, 10))
    expected = y[:, :5] ** 2 + y[:, 5:] ** 2
    out = np.zeros((3, 12))
    power_into(y, 2, out)  # y is scratch
    assert np.allclose(out[:, 2:7], expected) and np.all(out[:, 7:] == 0)
    zz = rng.standard_normal((1, 200))
    w = np.hanning(8)
    r = windowed_autocorr(zz, 3, 5, 4, w)
    seg = np.stack([zz[0, 3 + 5 * f : 3 + 5 * f + 8] * w for f in range(4)])
    ref = np.stack([np.correlate(s_, s_, "full")[7:] for s_ in seg])
    assert np.allclose(r[0], ref, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_fast_excitation_call_matches_torch_excitation(dtype):
    fc = L.cam_to_hz(np.arange(1.75, 39.01, 0.25))
    fast = F.FastExcitation(fc, "moore2016", "moore2016", dtype)
    rng = np.random.default_rng(5)
    z = torch.tensor(rng.standard_normal((1, 5000)) * 0.05)
    z[0, 2500:] *= 1e-4  # quiet part: partly pruned high band
    bases = [(ln, b, torch.tensor(m)) for ln, b, m in L.dft_bases("moore2016")]
    with torch.no_grad():
        inten, acf = F.multires_intensity_fast(
            z, 0, 20, 120, bases, return_autocorr=torch.from_numpy(fast.window)
        )
        keep = L.prune_components(inten)
        got = fast(inten, keep, acf, chunk=50)
        m = L.excitation_matrices(fc, "moore2016")
        ref, _ = L.excitation_moore2016(inten, keep, m)
    got = got.double().clamp_min(1e-10)
    # float32: the low band and the lower skirt in float32, the high band (autocorrelation
    # route, pruned components removed) in float64 and added in float32
    tol_max, tol_rel = (1e-11, 1e-9) if dtype == torch.float64 else (2e-6, 2e-5)
    assert float((got - ref).abs().max() / ref.abs().max()) < tol_max
    assert float(((got - ref).abs() / ref).max()) < tol_rel


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_specific_loudness_tail_of_no_rows_touches_no_memory(dtype):
    # empty row views into larger arrays: nothing outside the views is read or written
    fc = L.cam_to_hz(np.arange(1.75, 39.01, 0.25))
    prm = L.specific_loudness_params(fc)
    c = len(fc)
    sl = TailConstants(
        a_alpha=(prm.a**prm.alpha).astype(dtype),
        mask=np.ones(c, dtype),
        **{k: np.asarray(getattr(prm, k), dtype) for k in ("e_thrq", "g", "alpha", "a")},
    )
    up, lo = np.full((4, c), 1e3, dtype), np.full((4, c), 1e3, dtype)
    e_big, n_big = np.full((4, c), -7.0, dtype), np.full((4, c), -7.0, dtype)
    anyk = np.ones(4, bool)
    specific_loudness_tail(
        up[2:2], lo[2:2], anyk[2:2], sl, 0.0631, "moore2016", e_big[2:2], n_big[2:2], -300.0
    )
    assert np.all(e_big == -7.0) and np.all(n_big == -7.0)

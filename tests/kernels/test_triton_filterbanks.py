"""The CUDA implementations of the filterbank operators (:mod:`lhotse_amt.ops.filterbanks`,
host code :mod:`lhotse_amt.kernels.triton_filterbanks`) against their CPU kernels, float64
and float32: on the CPU the Triton kernels run in Triton's interpreter
(``TRITON_INTERPRET=1``, in a subprocess) on CPU tensors, the FFT-based phase insensitivity
on CPU tensors in this process; on CUDA the operators against their CPU kernels.

Several rows and channels (more rows than a program holds: masked last programs), initial
states, streaming in two chunks from the returned states (also across the
implementations: the state layouts are the same), empty signals, zero-order transfer
functions, the modulation bank with and without its pre-filter, and the phase
insensitivity over runs of bands in several blocks of rows.
"""

from __future__ import annotations

import pytest
import torch
from triton_interpret import run_interpreted

from lhotse_amt.kernels import triton_filterbanks as tri
from lhotse_amt.ops import filterbanks

OPS = ("modulation_bank", "lfilter", "sos_bank", "phase_insensitivity_")

_COMMON = """
import numpy as np
import torch
from lhotse_amt.functional.king2019_modulation import (
    king2019_modulation_sos,
    king2019_modulation_tf,
)
from lhotse_amt.models import Dau1997, Osses2021
from lhotse_amt.ops import filterbanks as fb

tri = fb._KERNELS.for_device("cuda")  # the operators' kernels on CUDA, here on CPU tensors
torch.manual_seed(0)
MFC = np.array([2.0, 4.0, 8.0, 16.0, 32.0])


def close(name, a, b, dt):
    tol = 1e-12 if dt == torch.float64 else 1e-5
    assert a.shape == b.shape and a.dtype == b.dtype, (name, a.shape, b.shape, a.dtype, b.dtype)
    if b.numel() == 0:
        return
    if b.is_complex():  # resonator states
        a, b = torch.view_as_real(a), torch.view_as_real(b)
    scale = b.double().abs().max().item()
    assert scale > 0, name
    err = (a.double() - b.double()).abs().max().item() / scale
    assert err <= tol, (name, str(dt), err)
"""

_TF = """
for dt in (torch.float64, torch.float32):
    b, a = (torch.from_numpy(c) for c in king2019_modulation_tf(1000.0, MFC))  # (5, 5)
    b = torch.cat([b, b[:2] * 0.5])  # 7 rows: two programs of 4
    a = torch.cat([a, a[:2]])
    N, K = b.shape[0], b.shape[1] - 1
    x = torch.randn(N, 300, dtype=dt)
    for zi in (None, torch.randn(N, K, dtype=dt) * 0.1):
        y, zf = fb.lfilter(x, b, a, zi)
        close("lfilter y", *(tri.lfilter(x, b, a, zi, block=4)[0], y), dt)
        ya, za = tri.lfilter(x[:, :170], b, a, zi, block=4)
        yb, zb = tri.lfilter(x[:, 170:], b, a, za, block=4)
        close("lfilter chunks", torch.cat([ya, yb], -1), y, dt)
        close("lfilter zf", zb, zf, dt)
        # a stream started by the CPU kernel goes on here
        yc, zc = fb.lfilter(x[:, :170], b, a, zi)
        close("lfilter from cpu state", tri.lfilter(x[:, 170:], b, a, zc)[0], y[:, 170:], dt)
    y0, z0 = tri.lfilter(x[:, :0], b, a, zi)
    assert y0.shape == (N, 0) and torch.equal(z0, zi)
    a1 = torch.stack([torch.ones(N), torch.linspace(-0.9, 0.5, N)], -1).double()  # stable
    for args in ((x, b[:, :1], a[:, :1], None), (x, b[:, :2], a1, zi[:, :1])):
        ref = fb.lfilter(*args)
        for name, g, r in zip(("y", "zf"), tri.lfilter(*args), ref):
            close("lfilter order %d %s" % (args[1].shape[1] - 1, name), g, r, dt)

    sos = torch.from_numpy(king2019_modulation_sos(1000.0, MFC))  # (5, 2, 6)
    M, S = sos.shape[:2]
    x = torch.randn(3, 300, dtype=dt)
    for zi in (None, torch.randn(3, M, S, 2, dtype=torch.float64) * 0.1):
        y, zf = fb.sos_bank(x, sos, zi)
        got = tri.sos_bank(x, sos, zi, block=4)
        close("sos_bank y", got[0], y, dt)
        close("sos_bank zf", got[1], zf, torch.float64)
        ya, za = tri.sos_bank(x[:, :130], sos, zi)
        yb, zb = tri.sos_bank(x[:, 130:], sos, za)
        close("sos_bank chunks", torch.cat([ya, yb], -1), y, dt)
        close("sos_bank chunks zf", zb, zf, torch.float64)
    y0, z0 = tri.sos_bank(x[:, :0], sos, zi)
    assert y0.shape == (3, M, 0) and torch.equal(z0, zi)
print("ok")
"""

_BANK = """
for model in (Dau1997, Osses2021):
    mod = model(16000, flow=300.0, fhigh=2000.0, dtype=torch.float64).modulation
    filters = (
        mod.lp_sos, mod.prefilter_sos, mod.poles[:, 1:, 0], mod.gains[:, 1:, 0],
        mod.use_abs[:, 1:], mod.scale,
    )  # fmt: skip
    C = mod.poles.shape[0]
    for dt in (torch.float64, torch.float32):
        x = torch.randn(2, C, 240, dtype=dt) * 50
        y, st = fb.modulation_bank(x, filters, None)
        ya, sa = tri.modulation_bank(x[..., :100], filters, None)
        yb, sb = tri.modulation_bank(x[..., 100:], filters, sa)
        assert sorted(sb) == sorted(st), (sorted(sb), sorted(st))
        close("bank chunks", torch.cat([ya, yb], -1), y, dt)
        for k in st:
            close("bank state " + k, sb[k], st[k], torch.float64)
        # streams cross between the implementations (same state layouts)
        yc, sc = fb.modulation_bank(x[..., :100], filters, None)
        close("bank from cpu state", tri.modulation_bank(x[..., 100:], filters, sc)[0], yb, dt)
        close("cpu from bank state", fb.modulation_bank(x[..., 100:], filters, sa)[0], yb, dt)
        y0, s0 = tri.modulation_bank(x[..., :0], filters, st)
        assert y0.shape == (2, C, mod.poles.shape[1], 0)
        assert all(torch.equal(s0[k], st[k]) for k in st)
print("ok")
"""


@pytest.mark.parametrize("part", ["tf", "bank"])
def test_filterbank_triton_kernels_match_cpu_in_interpreter(part):
    pytest.importorskip("triton")
    run_interpreted(_COMMON + {"tf": _TF, "bank": _BANK}[part])


def test_operators_have_cpu_and_cuda_kernels():
    assert filterbanks._KERNELS.for_device("cpu").lfilter is not tri.lfilter
    for name in OPS:
        for key in ("CPU", "CUDA"):
            assert torch._C._dispatch_has_kernel_for_dispatch_key(f"lhotse_amt::{name}", key)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("block_samples", [1 << 23, 1000])
def test_phase_insensitivity_device_code_matches_cpu(dtype, block_samples, monkeypatch):
    # block_samples 1000: a block of 3 rows per batched FFT for the widest run of bands
    monkeypatch.setattr(tri, "BLOCK_SAMPLES", block_samples)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 5, 6, 101, generator=g, dtype=torch.float64).to(dtype)
    x[1, 2, 4] = 0  # a zero band: a zero envelope
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    for bands in ([1, 2, 4], [0, 1, 2, 3, 4, 5], [5]):
        ref = x.clone()
        filterbanks.phase_insensitivity_(ref, bands)
        got = x.clone()
        tri.phase_insensitivity_(got, bands)
        assert not torch.equal(ref, x)
        rest = [m for m in range(6) if m not in bands]
        assert torch.equal(got[:, :, rest], x[:, :, rest])
        assert float((got - ref).abs().max()) <= tol * float(ref.abs().max())
        assert (got[1, 2, 4] == 0).all()
    empty = x[:0].clone()
    tri.phase_insensitivity_(empty, [1])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_filterbank_operators_cuda_match_cpu(dtype):
    from lhotse_amt.functional.king2019_modulation import (
        king2019_modulation_sos,
        king2019_modulation_tf,
    )
    from lhotse_amt.models import Osses2021

    tol = 1e-12 if dtype == torch.float64 else 1e-5

    def check(name, got, ref):
        got = got.cpu()
        assert got.dtype == ref.dtype and got.shape == ref.shape, name
        if ref.is_complex():  # resonator states
            got, ref = torch.view_as_real(got), torch.view_as_real(ref)
        err = (got.double() - ref.double()).abs().max() / ref.double().abs().max()
        assert err <= tol, (name, float(err))

    g = torch.Generator().manual_seed(0)
    mfc = [2.0, 4.0, 8.0, 16.0, 32.0, 64.0]
    b, a = (torch.from_numpy(c).repeat(12, 1) for c in king2019_modulation_tf(1000.0, mfc))
    x = torch.randn(72, 4001, generator=g, dtype=torch.float64).to(dtype)  # 72 rows
    zi = torch.randn(72, b.shape[1] - 1, generator=g, dtype=torch.float64).to(dtype) * 0.1
    y, z = filterbanks.lfilter(x, b, a, zi)
    bc, ac = b.cuda(), a.cuda()
    ya, za = filterbanks.lfilter(x[:, :2000].cuda(), bc, ac, zi.cuda())
    yb, zb = filterbanks.lfilter(x[:, 2000:].cuda(), bc, ac, za)
    check("lfilter y", torch.cat([ya, yb], -1), y)
    check("lfilter zf", zb, z)

    sos = torch.from_numpy(king2019_modulation_sos(1000.0, mfc))
    zi = torch.randn(72, len(mfc), 2, 2, generator=g, dtype=torch.float64) * 0.1
    y, z = filterbanks.sos_bank(x, sos, zi)
    yc, zc = filterbanks.sos_bank(x.cuda(), sos.cuda(), zi.cuda())
    check("sos_bank y", yc, y)
    check("sos_bank zf", zc, z)

    mod = Osses2021(16000, flow=300.0, fhigh=4000.0, dtype=torch.float64).modulation
    filters = (
        mod.lp_sos, mod.prefilter_sos, mod.poles[:, 1:, 0], mod.gains[:, 1:, 0],
        mod.use_abs[:, 1:], mod.scale,
    )  # fmt: skip
    fc = tuple(f.cuda() if f is not None else None for f in filters)
    xb = torch.randn(2, mod.poles.shape[0], 8001, generator=g, dtype=torch.float64).to(dtype)
    y, st = filterbanks.modulation_bank(xb[..., :3000], filters, None)
    y, st = filterbanks.modulation_bank(xb[..., 3000:], filters, st)
    _, sc = filterbanks.modulation_bank(xb[..., :3000].cuda(), fc, None)
    yc, sc = filterbanks.modulation_bank(xb[..., 3000:].cuda(), fc, sc)
    check("bank y", yc, y)
    for k in st:
        check("bank " + k, sc[k], st[k])

    xp = torch.randn(2, 5, 6, 4001, generator=g, dtype=torch.float64).to(dtype)
    ref, got = xp.clone(), xp.cuda()
    filterbanks.phase_insensitivity_(ref, [1, 2, 4])
    filterbanks.phase_insensitivity_(got, [1, 2, 4])
    check("phase insensitivity", got, ref)

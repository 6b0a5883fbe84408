"""The Triton kernel of Paulick et al. (2024)'s fused front end
(:mod:`lhotse_amt.kernels.triton_paulick_frontend`: DRNL -> IHC -> adaptation loops ->
FIR decimator) against its CPU kernel (:mod:`lhotse_amt.kernels.paulick_frontend`), in
Triton's CPU interpreter (on CUDA the operator ``lhotse_amt::paulick_frontend`` is compared
with the CPU by ``tests/kernels/test_triton_paulick.py``).

The coefficients are a real model's (float64 design); a short decimator (9 taps) keeps
the interpreter fast. Float64 and float32 signals, with and without the decimator, one
pass and in two chunks (states carried, the decimator's phase not at 0), 3 channels in
one program and 11 in two (masked lanes), an onset that drives the limiter.
"""

from __future__ import annotations

import pytest
from triton_interpret import run_interpreted

_SETUP = """
import torch
import lhotse_amt
from lhotse_amt.kernels import paulick_frontend as cpu
from lhotse_amt.kernels import triton_paulick_frontend as tri


def case(C, dtype, taps, B=2, T=170, seed=0):
    m = lhotse_amt.Paulick2024(44100, n_channels=C, dtype=torch.float64)
    d = m.drnl
    a, mm, s0, minlvl, c0 = m._adapt_constants(torch.float64)
    J = a.shape[-1]
    coefs = (d.lin_gain, torch.cat([d.lin_gt, d.lin_lp], -2), d.nl_gt,
             torch.cat([d.nl_gt, d.nl_lp], -2), d.a, d.b, float(d.c))
    ihc = {k: float(v) for k, v in m._ihc_step_constants(torch.float64).items()}
    w = torch.linspace(0.1, 1.0, taps, dtype=torch.float64) if taps else None
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=torch.float64) * 1e-3
    x[:, T // 3 :] *= 30  # an onset: the limiter engages
    x = x.to(dtype)

    def run(fn, x, st):
        w0 = st.get("ihc", torch.zeros(B, C, dtype=torch.float64))
        s = st.get("ad", s0.expand(B, C, J))
        return fn(x, coefs, st.get("drnl"), ihc, w0, a.expand(C, J), mm.expand(C, J), s,
                  minlvl, True, c0, 100.0 / (1.0 - c0), w, m.resample_factor, st.get("dec"))

    return x, run


def err(a, b):
    assert a.shape == b.shape and a.dtype == b.dtype, (a.shape, b.shape, a.dtype, b.dtype)
    scale = b.double().abs().max().item()
    assert scale > 0
    return (a.double() - b.double()).abs().max().item() / scale


def compare(got, ref, tol_y, tol_state):
    assert err(got[0], ref[0]) <= tol_y, ("y", err(got[0], ref[0]))
    for k in ("lin", "nl1", "nl2"):
        assert err(got[1][k], ref[1][k]) <= 1e-12, (k, err(got[1][k], ref[1][k]))
    assert err(got[2], ref[2]) <= 1e-12, ("ihc", err(got[2], ref[2]))
    assert err(got[3], ref[3]) <= tol_state, ("adaptation", err(got[3], ref[3]))
    assert (got[4] is None) == (ref[4] is None)
    if ref[4] is not None:
        assert got[4]["t"] == ref[4]["t"]
        e = err(got[4]["hist"], ref[4]["hist"])
        assert e <= tol_y, ("hist", e)
"""

_SCRIPT = (
    _SETUP
    + """
for C, dtype, taps, tol_y, tol_s in (
    (3, torch.float64, 9, 1e-12, 1e-12),
    (11, torch.float32, 9, 1e-6, 1e-7),  # CPU: the float32 limiter correction in float32
    (3, torch.float64, 0, 1e-12, 1e-12),
):
    x, run = case(C, dtype, taps)
    ref = run(cpu.frontend, x, {})
    compare(run(tri.frontend, x, {}), ref, tol_y, tol_s)
    cut = 71  # the decimator's phase is not at 0 in the second chunk
    a = run(tri.frontend, x[:, :cut], {})
    b = run(tri.frontend, x[:, cut:], dict(drnl=a[1], ihc=a[2], ad=a[3], dec=a[4]))
    assert err(torch.cat([a[0], b[0]], -1), ref[0]) <= tol_y
    assert err(b[3], ref[3]) <= tol_s
print("ok")
"""
)


def test_frontend_triton_kernel_matches_cpu_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)

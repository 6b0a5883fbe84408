"""Paulick2024's no-grad operators (:mod:`lhotse_amt.ops.paulick`: the fused front end, the
FIR correlation, the DRNL and the IHC alone): registration and fake implementations
(``torch.library.opcheck``), the operators' results equal to their kernels' bit for bit
(one pass and streamed through the operators' state), the model's output equal to the
kernels' path, and that the model and its DRNL and IHC stages reach the kernels only
through the operators."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import lhotse_amt
from lhotse_amt.kernels import paulick as k_paulick
from lhotse_amt.kernels import paulick_frontend as k_frontend
from lhotse_amt.models.paulick2024 import Paulick2024
from lhotse_amt.ops import paulick as ops_paulick

D = torch.float64
PKG = Path(lhotse_amt.__file__).parent


def _noise(B: int, T: int, dtype: torch.dtype = D, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, generator=g, dtype=D) * 0.02
    x[:, : T // 3] *= 0.01  # quiet start, then an onset (overshoot limiter active)
    return x.to(dtype)


def _frontend_args(m: Paulick2024, x: torch.Tensor, decimate: bool) -> dict:
    """The model's arguments of the front end (as its fused path passes them), from rest."""
    B, C = x.shape[0], m.num_channels
    a, mm, s0, minlvl, c0 = m._adapt_constants(x.dtype)
    J = a.shape[-1]
    d = m.drnl
    return dict(
        drnl_coefs=(
            d.lin_gain, torch.cat([d.lin_gt, d.lin_lp], -2), d.nl_gt,
            torch.cat([d.nl_gt, d.nl_lp], -2), d.a, d.b, float(d.c),
        ),
        drnl_state=None,
        ihc_consts={k: float(v) for k, v in m._ihc_step_constants(D).items()},
        ihc_state=x.new_zeros(B, C, dtype=D),
        adapt_a=a.expand(C, J),
        adapt_m=mm.expand(C, J),
        adapt_state=s0.expand(B, C, J),
        minlvl=minlvl,
        use_limit=m.adaptation.limit > 1.0,
        out_offset=c0,
        out_scale=100.0 / (1.0 - c0),
        dec_weight=m.resampler.weight.reshape(-1) if decimate else None,
        dec_factor=m.resample_factor,
        dec_state=None,
    )  # fmt: skip


def _equal(a, b) -> None:
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _equal(a[k], b[k])
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b)
        for u, v in zip(a, b, strict=True):
            _equal(u, v)
    else:
        assert a == b


@pytest.mark.parametrize("decimate", [True, False])
@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_frontend_operator_equals_the_kernel_and_streams(dtype, decimate):
    m = Paulick2024(n_channels=5, dtype=dtype)
    x = _noise(2, 3001, dtype)
    args = _frontend_args(m, x, decimate)
    with torch.inference_mode():
        ref = k_frontend.frontend(x, **args)
        got = ops_paulick.frontend(x, **args)
        for a, b in zip(got, ref, strict=True):
            _equal(a, b)
        # streamed through the operator's states (an empty chunk too): the one-pass
        # result, every state
        parts, st = [], dict(args)
        for a0, b0 in ((0, 3), (3, 1002), (1002, 1002), (1002, 3001)):
            y, drnl, w, s, dec = ops_paulick.frontend(x[:, a0:b0], **st)
            st.update(drnl_state=drnl, ihc_state=w, adapt_state=s, dec_state=dec)
            parts.append(y)
    _equal(torch.cat(parts, -1), ref[0])
    for key, r in zip(("drnl_state", "ihc_state", "adapt_state", "dec_state"), ref[1:]):
        _equal(st[key], r)


def test_frontend_opcheck():
    m = Paulick2024(n_channels=3, dtype=D)
    x = _noise(2, 301)
    with torch.inference_mode():
        args = _frontend_args(m, x, True)
        _, drnl, w, s, dec = ops_paulick.frontend(x[:, :101], **args)
    op = torch.ops.lhotse_amt.paulick_frontend.default
    g, lin, nl1, nl2, a, b, c = args["drnl_coefs"]
    consts = [args["ihc_consts"][k] for k in ops_paulick.IHC_STEP_KEYS]
    tail = (args["minlvl"], args["use_limit"], args["out_offset"], args["out_scale"])
    wd = args["dec_weight"].detach()
    am = (args["adapt_a"].contiguous(), args["adapt_m"].contiguous())
    coefs = [t.detach() for t in (g, lin, nl1, nl2, a, b)]
    # from rest with the decimator, from a state with it (an offset phase), without it
    for st, dec_args in (
        (([], args["ihc_state"], args["adapt_state"].contiguous()), (wd, 4, None, 0)),
        (([drnl[k] for k in ops_paulick.DRNL_STATE_KEYS], w, s), (wd, 4, dec["hist"], 101)),
        (([], args["ihc_state"], args["adapt_state"].contiguous()), (None, 4, None, 0)),
    ):
        torch.library.opcheck(
            op, (x[:, 101:], *coefs, c, st[0], consts, st[1], *am, st[2], *tail, *dec_args)
        )


def test_fir_operator_equals_the_kernel_and_opcheck():
    g = torch.Generator().manual_seed(1)
    for dtype, K, stride, start in ((D, 97, 4, 3), (torch.float32, 513, 1, 0)):
        buf = torch.randn(3, 2000, generator=g, dtype=D).to(dtype)
        w = torch.randn(K, generator=g, dtype=D).to(dtype)
        n_out = (2000 - start - K) // stride + 1
        got = ops_paulick.fir(buf, w, start, stride, n_out)
        _equal(got, k_paulick.fir(buf, w, start, stride, n_out))
        torch.library.opcheck(
            torch.ops.lhotse_amt.paulick_fir.default, (buf, w, start, stride, n_out)
        )


def _drnl_args(m: Paulick2024) -> tuple:
    d = m.drnl
    return (
        d.lin_gain, torch.cat([d.lin_gt, d.lin_lp], -2), d.nl_gt,
        torch.cat([d.nl_gt, d.nl_lp], -2), d.a, d.b, float(d.c),
    )  # fmt: skip


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_drnl_operator_equals_the_kernel_streams_and_opcheck(dtype):
    m = Paulick2024(n_channels=4, dtype=dtype)
    coefs = _drnl_args(m)
    x = _noise(2, 1501, dtype).reshape(2, 1, 1501)  # leading shape (2, 1)
    with torch.inference_mode():
        ref = k_paulick.drnl(x, *coefs, None)
        _equal(ops_paulick.drnl(x, *coefs, None), ref)
        # streamed through the operator's states; a state with a key missing (rest)
        a, st = ops_paulick.drnl(x[..., :700], *coefs, None)
        b, st = ops_paulick.drnl(x[..., 700:], *coefs, st)
        _equal((torch.cat([a, b], -1), st), ref)
        part = {"nl1": st["nl1"]}
        _equal(ops_paulick.drnl(x, *coefs, part), k_paulick.drnl(x, *coefs, part))
    op = torch.ops.lhotse_amt.paulick_drnl.default
    t = [v.detach() for v in coefs[:-1]]
    for state in (
        [None] * 3,
        [st[k] for k in ops_paulick.DRNL_STATE_KEYS],
        [None, st["nl1"], None],
    ):
        torch.library.opcheck(op, (x[..., :301], *t, coefs[-1], state))


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_ihc_operator_equals_the_kernel_and_opcheck(dtype):
    m = Paulick2024(n_channels=3, dtype=dtype)
    c = {k: float(v.to(dtype)) for k, v in m._ihc_step_constants(D).items()}
    consts = [c[k] for k in ops_paulick.IHC_STEP_KEYS]
    x = (_noise(6, 801, dtype) * 30).reshape(2, 3, 801)
    w0 = (1e-3 * torch.randn(2, 3, dtype=D)).to(dtype)
    with torch.inference_mode():
        ref = k_paulick.ihc(x, c, w0)
        _equal(ops_paulick.ihc(x, c, w0), ref)
        # one signal (T,) with a 0-d state: the kernel's one row
        y, w = ops_paulick.ihc(x[1, 2], c, w0[1, 2])
        _equal((y, w), tuple(v[0] for v in k_paulick.ihc(x[1, 2][None], c, w0[1, 2][None])))
        # a broadcast state: rest for every row
        _equal(ops_paulick.ihc(x, c, x.new_zeros(())), k_paulick.ihc(x, c, x.new_zeros(())))
    op = torch.ops.lhotse_amt.paulick_ihc.default
    for args in ((x, consts, w0), (x[0, 0], consts, w0[0, 0]), (x[0], consts, w0[0])):
        torch.library.opcheck(op, args)


@pytest.mark.parametrize("dtype", [D, torch.float32])
def test_model_output_equals_the_kernels_path(dtype, monkeypatch):
    m = Paulick2024(n_channels=4, dtype=dtype)
    x = _noise(2, 4001, dtype)
    with torch.inference_mode():
        got = m(x)
        stream, _ = m.stream(x, None, "resampled")
        monkeypatch.setattr(ops_paulick, "frontend", k_frontend.frontend)
        monkeypatch.setattr(ops_paulick, "fir", k_paulick.fir)
        ref = m(x)
        ref_stream, _ = m.stream(x, None, "resampled")
    for a, b in zip(got, ref, strict=True):
        _equal(a, b)
    _equal(stream, ref_stream)


@pytest.mark.parametrize(
    "path", ["models/paulick2024.py", "functional/drnl.py", "functional/ihc_paulick.py"]
)
def test_model_and_stages_reach_the_kernels_only_through_operators(path):
    tree = ast.parse((PKG / path).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            assert not (node.module and "kernels" in node.module), node.module
            assert not any(a.name == "kernels" for a in node.names)
        if isinstance(node, ast.Import):
            assert not any("kernels" in a.name for a in node.names)

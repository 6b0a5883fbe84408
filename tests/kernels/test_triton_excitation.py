"""The excitation pattern's lower branch as an operator (``lhotse_amt::excitation_lower``):
its Triton kernel (:mod:`lhotse_amt.kernels.triton_excitation`) against the plain-torch
reference in Triton's interpreter (per-channel and per-component slopes, channel groups
of 16 and one group for few components, channels that do not fill a tile, rows that do
not fill one), the operator's registration (``opcheck``) and, on CUDA, the operator and
the dispatch of the excitation stage against the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from triton_interpret import run_interpreted

from lhotse_amt.functional.loudness import excitation as X
from lhotse_amt.ops.loudness import excitation_lower

_SETUP = """
import numpy as np
import torch
from lhotse_amt.functional.loudness import excitation as X


def case(C, K, per_channel, dtype, R=45, seed=0):
    fc = np.geomspace(60.0, 14000.0, C)
    m = X.excitation_matrices(fc, "gm2002")
    keep = np.sort(np.random.default_rng(seed).choice(960, K, replace=False))
    h = torch.from_numpy(np.ascontiguousarray(m.lower_h[keep])).to(dtype)
    nb = np.searchsorted(keep, m.n_below)
    g = torch.Generator().manual_seed(seed)
    i = torch.rand(R, K, generator=g, dtype=torch.float64).to(dtype) * 1e4
    level = 30.0 + 80.0 * torch.rand(R, C if per_channel else K, generator=g, dtype=torch.float64)
    s = (1.0 - X.SLOPE_BETA * (level - 51.0)).to(dtype)
    return i, s, h, nb
"""

_SCRIPT = (
    _SETUP
    + """
from lhotse_amt.kernels.triton_excitation import lower_branch

for C, K, per_channel, dtype, tol in (
    (40, 960, True, torch.float64, 1e-12),   # groups of 16, the last one partial
    (40, 960, False, torch.float64, 1e-12),
    (21, 200, True, torch.float64, 1e-12),   # few components: one group
    (40, 960, True, torch.float32, 2e-5),
    (33, 960, False, torch.float32, 2e-5),
):
    i, s, h, nb = case(C, K, per_channel, dtype)
    ref = X.lower_branch_reference(i, s, h, nb, per_channel)
    got = lower_branch(i, s, h, torch.as_tensor(nb, dtype=torch.int64),
                       X.lower_branch_group(h), per_channel)
    err = ((got - ref).abs().max() / ref.abs().max()).item()
    assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, got.dtype)
    assert err <= tol, (C, K, per_channel, dtype, err)
    assert torch.isfinite(got).all()
print("ok")
"""
)


def test_lower_branch_triton_kernel_matches_reference_in_interpreter():
    pytest.importorskip("triton")
    run_interpreted(_SCRIPT)


def _case(per_channel: bool, device: str = "cpu") -> tuple:
    scope: dict = {}
    exec(_SETUP, scope)
    i, s, h, nb = scope["case"](24, 960, per_channel, torch.float64, R=6)
    return i.to(device), s.to(device), h.to(device), nb


@pytest.mark.parametrize("per_channel", [True, False])
def test_operator_equals_reference_for_any_leading_shape(per_channel):
    i, s, h, nb = _case(per_channel)
    i3, s3 = i.reshape(2, 3, -1), s.reshape(2, 3, -1)
    got = excitation_lower(i3, s3, h, nb, per_channel)
    ref = X.lower_branch_reference(i3, s3, h, nb, per_channel)
    assert got.shape == (2, 3, h.shape[1])
    torch.testing.assert_close(got, ref, rtol=0, atol=0)


def test_opcheck():
    i, s, h, nb = _case(True)
    op = torch.ops.lhotse_amt.excitation_lower.default
    nbt = torch.as_tensor(np.asarray(nb), dtype=torch.int64)
    torch.library.opcheck(op, (i, s, h, nbt, True), test_utils=("test_schema", "test_faketensor"))


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@CUDA
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("per_channel", [True, False])
def test_operator_on_cuda_equals_cpu(per_channel, dtype):
    i, s, h, nb = (t.to(dtype) if isinstance(t, torch.Tensor) else t for t in _case(per_channel))
    ref = excitation_lower(i, s, h, nb, per_channel)
    got = excitation_lower(i.cuda(), s.cuda(), h.cuda(), nb, per_channel).cpu()
    tol = 1e-12 if dtype == torch.float64 else 2e-5
    assert float((got - ref).abs().max()) <= tol * float(ref.abs().max())


def _bad_arguments():
    i, s, h, nb = _case(True)
    nbl = list(nb)
    yield "intensity", TypeError, (i.long(), s, h, nb, True)
    yield "float32 or all float64", TypeError, (i.float(), s, h, nb, True)
    yield "float32 or all float64", TypeError, (i.half(), s.half(), h.half(), nb, True)
    yield "lower_h", ValueError, (i, s, h[0], nb, True)
    yield "a row per component", ValueError, (i[:, :-1], s, h, nb, True)
    yield "s must have shape", ValueError, (i, s[0, 0], h, nb, False)
    yield "broadcast", ValueError, (i, s[:, :-1], h, nb, True)
    yield "per_channel", TypeError, (i, s, h, nb, "yes")
    yield "n_below", ValueError, (i, s, h, nbl[:-1], True)
    yield "n_below", ValueError, (i, s, h, [n + 0.5 for n in nbl], True)
    yield "n_below", ValueError, (i, s, h, nbl[::-1], True)
    yield "n_below", ValueError, (i, s, h, [n + 10**4 for n in nbl], True)
    yield "n_below", ValueError, (i, s, h, [-1] + nbl[1:], True)
    yield "n_below", TypeError, (i, s, h, "abc", True)


@pytest.mark.parametrize("match, error, args", list(_bad_arguments()))
def test_operator_rejects_bad_arguments(match, error, args):
    with pytest.raises(error, match=match):
        excitation_lower(*args)

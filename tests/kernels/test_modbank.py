"""The register kernel of the modulation filterbank (:mod:`lhotse_amt.kernels.modbank_simd`,
8 channels per vector) against the channel-by-channel kernel (:mod:`lhotse_amt.kernels.modbank`):
the same recursions in the same operation order, so outputs and states must be equal bit for
bit, also streamed, for channel counts that leave padding lanes and chunk tails."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lhotse_amt.kernels import modbank, modbank_simd
from lhotse_amt.kernels.simd import transpose8


def _bank(model: str) -> torch.nn.Module:
    if model == "paulick2024":  # 150-Hz pre-filter, 5 to 8 bands per channel
        from lhotse_amt.models.paulick2024 import Paulick2024

        return Paulick2024(44100).modulation
    from lhotse_amt.models.dau1997 import Dau1997  # no pre-filter, 8 bands everywhere

    return Dau1997(16000).modulation


def _args(bank: torch.nn.Module, idx: torch.Tensor) -> tuple:
    return (
        bank.lp_sos,
        bank.prefilter_sos,
        bank.poles[idx, 1:, 0],
        bank.gains[idx, 1:, 0],
        bank.use_abs[idx, 1:],
        bank.scale[idx],
    )


@pytest.mark.parametrize("model", ["paulick2024", "dau1997"])
@pytest.mark.parametrize("channels", [1, 9, 31])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_register_kernel_equals_channel_kernel(model: str, channels: int, dtype) -> None:
    bank = _bank(model)
    # the first channels of Paulick2024 have fewer bands (zero columns in the output)
    idx = torch.arange(channels)
    args = _args(bank, idx)
    rng = np.random.default_rng(channels)
    x = torch.tensor(np.abs(rng.standard_normal((2, channels, 700))), dtype=dtype)
    # two chunks: 333 samples (one full chunk of the kernel and a tail of 77, not a multiple
    # of 8), then 367 from the returned states
    st_a = st_b = None
    for part in (x[..., :333], x[..., 333:]):
        ya, st_a = modbank.modulation_bank(part, args, st_a)
        yb, st_b = modbank_simd.modulation_bank(part, args, st_b)
        assert yb.dtype == dtype and yb.shape == ya.shape
        assert torch.equal(ya, yb)
        assert st_a.keys() == st_b.keys()
        for k in st_a:
            assert torch.equal(st_a[k], st_b[k]), k
    if model == "paulick2024":
        n_bands = bank.n_bands[idx]
        for c in range(channels):  # bands a channel lacks are exactly zero
            assert torch.all(yb[:, c, int(n_bands[c]) :] == 0)


def test_register_kernel_short_inputs() -> None:
    bank = _bank("paulick2024")
    args = _args(bank, torch.arange(50))
    for n in (1, 7, 8, 9):  # shorter than one 8 x 8 tile, one tile, one and a tail
        x = torch.rand(1, 50, n)
        ya, sa = modbank.modulation_bank(x, args, None)
        yb, sb = modbank_simd.modulation_bank(x, args, None)
        assert torch.equal(ya, yb)
        for k in sa:
            assert torch.equal(sa[k], sb[k])


def test_transpose8_transposes() -> None:
    from numba import njit, types
    from numba.extending import intrinsic

    from lhotse_amt.kernels.simd import VecBuilder, array_ptr

    @intrinsic
    def _t(typingctx, src, dst):  # noqa: ANN001, ANN202
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            vb = VecBuilder(builder)
            sp = array_ptr(context, builder, signature.args[0], args[0])
            dp = array_ptr(context, builder, signature.args[1], args[1])
            cols = transpose8(builder, [vb.load(sp, i) for i in range(8)])
            for j, v in enumerate(cols):
                vb.store(v, dp, j)
            return context.get_dummy_value()

        return types.none(src, dst), codegen

    @njit
    def run(src, dst):  # pragma: no cover - compiled
        _t(src, dst)

    a = np.arange(64, dtype=np.float64).reshape(8, 8)
    out = np.empty_like(a)
    run(a, out)
    assert np.array_equal(out, a.T)


@pytest.mark.parametrize("rms", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pooled_register_kernel_equals_pooling_the_output(rms: bool, dtype) -> None:
    from lhotse_amt.kernels.paulick import pool_held

    bank = _bank("paulick2024")
    args = _args(bank, torch.arange(50))
    R, hop = 4, 441
    rng = np.random.default_rng(3)
    x = torch.tensor(np.abs(rng.standard_normal((3, 50, 700))), dtype=dtype)
    # input samples of each row: the second ends mid-frame, the third 2 samples into its
    # last frame (a frame within one held sample)
    lengths = [4 * 700, 1999, 1766]
    counts = np.array([-(-n // hop) for n in lengths])
    F = counts.max()
    f = np.arange(F)
    starts = np.stack([f * hop] * 3)
    ends = np.stack([np.minimum((f + 1) * hop, n) for n in lengths])
    got, st_got = modbank_simd.modulation_bank_pooled(x, args, None, starts, ends, counts, R, rms)
    y, st_ref = modbank.modulation_bank(x, args, None)
    for b in range(3):
        nb = counts[b]
        ref = pool_held(y[b].reshape(-1, 700), None, starts[b, :nb], ends[b, :nb], R, rms)
        pooled = torch.from_numpy(got[b, :, :, :nb].reshape(-1, nb)).to(dtype)
        assert torch.equal(pooled, ref)
        assert np.all(got[b, :, :, nb:] == 0)
    for k in st_ref:
        assert torch.equal(st_ref[k], st_got[k])

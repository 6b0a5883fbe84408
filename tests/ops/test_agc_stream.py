"""The loudness extractors' streamed AGC operator (:mod:`lhotse_amt.ops.agc_stream`)."""

from __future__ import annotations

import numpy as np
import torch

from lhotse_amt import ops
from lhotse_amt.ops.agc_stream import agc_stream

D = torch.float64


def test_agc_stream_operator_streams_and_updates_its_state():
    g = torch.Generator().manual_seed(4)
    x = (torch.rand(3, 400, generator=g, dtype=D) ** 3).numpy()
    whole_state = np.zeros(3)
    whole = agc_stream(x, 0.045, 0.02, whole_state)
    st = np.zeros(3)
    parts = [agc_stream(x[:, a : a + 150], 0.045, 0.02, st) for a in (0, 150, 300)]
    np.testing.assert_array_equal(np.concatenate(parts, 1), whole)
    np.testing.assert_array_equal(st, whole[:, -1])
    # against the differentiable operator
    ref = ops.agc(torch.from_numpy(x), 0.045, 0.02, dim=-1).numpy()
    np.testing.assert_allclose(whole, ref, rtol=1e-12, atol=0)
    torch.library.opcheck(
        torch.ops.lhotse_amt.agc_stream.default,
        (torch.from_numpy(x), torch.zeros(3, dtype=D), 0.045, 0.02),
    )

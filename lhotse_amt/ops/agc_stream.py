"""The loudness extractors' attack/release AGC, streamed block by block, as the registered
operator ``lhotse_amt::agc_stream`` (no gradient).

``S[t] = S[t-1] + a (x[t] - S[t-1])`` with ``a = attack`` if ``x[t] > S[t-1]`` else
``release`` (Glasberg & Moore 2002, Sec. 2.6), on each row, from a state that the call
updates in place, so consecutive blocks equal one call on the whole signal. Its CPU
kernel is :func:`lhotse_amt.kernels.agc.agc_numba_state`; its CUDA kernel is the Triton
kernel of the differentiable operator ``lhotse_amt::agc`` (:mod:`lhotse_amt.ops.loudness`)
with the state carried between calls. Registered like the fused chains of
:mod:`lhotse_amt.ops.fused` (dispatcher level, a fake implementation, no gradient).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..kernels import agc as _agc
from .fused import _fake, _operator
from .rowop import DeviceKernels

__all__ = ["agc_stream", "agc_stream_device"]


@_operator("agc_stream(Tensor x, Tensor(a!) state, float attack, float release) -> Tensor")
def _agc_stream(x: Tensor, state: Tensor, attack: float, release: float) -> Tensor:
    return _AGC_STREAM.on(x)(x, state, attack, release)


def _agc_stream_cpu(x: Tensor, state: Tensor, attack: float, release: float) -> Tensor:
    return torch.from_numpy(_agc.agc_numba_state(x.numpy(), attack, release, state.numpy()))


def agc_stream_device(x: Tensor, state: Tensor, attack: float, release: float) -> Tensor:
    """``agc_stream``'s CUDA kernel: the Triton kernel of the operator ``lhotse_amt::agc``
    (:mod:`lhotse_amt.kernels.triton_agc`) on ``x (N, T)`` read as ``(N, T, 1)``, from
    ``state``, which then takes each row's last output. As the CPU kernel, the recursion
    runs in the wider of the two dtypes, with the coefficients rounded to ``x``'s first.
    Runs on CPU tensors in Triton's interpreter (``TRITON_INTERPRET=1``)."""
    from ..kernels.triton_agc import KERNELS

    dt = torch.promote_types(x.dtype, state.dtype)
    N, T = x.shape
    coef = [torch.full((N, 1), v, dtype=x.dtype, device=x.device).to(dt) for v in (attack, release)]
    y = KERNELS.forward(x.to(dt).reshape(N, T, 1), *coef, state.to(dt).reshape(N, 1))
    if T:
        state.copy_(y[:, -1, 0])
    return y.reshape(N, T).to(x.dtype)


@_fake("agc_stream")
def _(x: Tensor, state: Tensor, attack: float, release: float) -> Tensor:
    return torch.empty_like(x)


def agc_stream(x: np.ndarray, attack: float, release: float, state: np.ndarray) -> np.ndarray:
    """Operator ``lhotse_amt::agc_stream``: the attack/release AGC of the loudness models
    (``S[t] = S[t-1] + a (x[t] - S[t-1])``, ``a = attack`` if ``x[t] > S[t-1]`` else
    ``release``; Glasberg & Moore 2002, Sec. 2.6) on each row of ``x (N, T)`` from
    ``state (N,)``, which is updated in place to each row's last output, so consecutive
    blocks equal one call on the whole signal. Inference (no gradient; the differentiable
    operator is ``lhotse_amt::agc``)."""
    xt = torch.from_numpy(np.ascontiguousarray(x))
    return _agc_stream(xt, torch.from_numpy(state), float(attack), float(release)).numpy()


_AGC_STREAM = DeviceKernels(_agc_stream_cpu, agc_stream_device)

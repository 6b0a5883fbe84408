"""All-pole complex gammatone filterbank (Hohmann 2002; AMT ``gammatone(fc, fs, 'complex')``).

Each channel is ``H(z) = (1 - e^{-2 pi b / fs})^n / (1 - p z^-1)^n`` with
``p = exp(-2 pi b / fs - i 2 pi fc / fs)`` and bandwidth ``b = beta_n ERB(fc)``,
``beta_n = ((n-1)!)^2 / (pi (2n-2)! 2^-(2n-2))`` (1.0186 for ``n = 4``), normalised to 0 dB
at ``fc`` ("0dBforall", causal phase); the real output is ``2 Re{H x}``. The denominator runs
as ``n`` complex one-pole sections (:func:`lhotse_amt.functional.iir.one_pole_cascade`),
which is far better conditioned than AMT's expanded polynomial at low ``fc / fs``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from .._validation import (
    check_bool,
    check_broadcast,
    check_int,
    check_positive_finite,
    check_rate,
    check_signal,
    check_tensor,
    require,
)
from .iir import one_pole_cascade

__all__ = ["gammatone_bandwidth_factor", "gammatone_poles", "gammatone"]


def gammatone_bandwidth_factor(n: int) -> float:
    """``beta_n`` such that the ``n``-th order gammatone has an ERB of ``beta_n b``."""
    n = check_int("n", n, min=1)
    return math.factorial(n - 1) ** 2 / (
        math.pi * math.factorial(2 * n - 2) * 2.0 ** (-(2 * n - 2))
    )


def gammatone_poles(
    fc: Tensor, fs: float, n: int = 4, erb_scale: float | Tensor = 1.0
) -> tuple[Tensor, Tensor]:
    """Poles and gains of the all-pole gammatone.

    Args:
        fc: centre frequencies in Hz ``(C,)``.
        fs: sampling rate in Hz.
        n: filter order.
        erb_scale: bandwidth in ERB (1 = one ERB, the AMT default).

    Returns:
        complex poles ``(C,)`` and real gains ``(C,)`` (0 dB at ``fc``).
    """
    check_tensor("fc", fc)
    check_rate("fs", fs)
    if isinstance(erb_scale, Tensor):
        check_tensor("erb_scale", erb_scale)
        check_broadcast(("fc", fc.shape), ("erb_scale", erb_scale.shape))
    else:
        check_positive_finite("erb_scale", erb_scale)
    b = gammatone_bandwidth_factor(n) * erb_scale * (24.7 + fc / 9.265)
    decay = torch.exp(-2.0 * math.pi * b / fs)
    theta = -2.0 * math.pi * fc / fs
    pole = torch.polar(decay, theta)
    gain = (1.0 - decay) ** n
    return pole, gain


def gammatone(
    x: Tensor,
    fc: Tensor,
    fs: float,
    n: int = 4,
    erb_scale: float | Tensor = 1.0,
    state: Tensor | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Gammatone filterbank (real output ``2 Re{H x}``).

    Args:
        x: ``(..., T)`` signal (the filterbank is linear; the models use the AMT level
            convention, rms 1 = 100 dB SPL).
        fc: ``(C,)`` centre frequencies in Hz (each must be below ``fs / 2``).
        state: complex section states ``(..., C, n)`` from a previous call (streaming).

    Returns:
        ``(..., C, T)`` (and the final states if ``return_state``).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, max_dim=None, allow_empty=True, name="x")
    check_tensor("fc", fc)
    check_rate("fs", fs)
    nyq = fs / 2.0
    require(
        ((fc > 0) & (fc < nyq)).all(),
        f"gammatone centre frequencies must lie in (0, fs/2 = {nyq:g} Hz); lower fhigh or raise fs",
    )
    pole, gain = gammatone_poles(fc, fs, n, erb_scale)
    return one_pole_cascade(
        x.unsqueeze(-2),
        pole,
        gain,
        order=n,
        zi=state,
        output="real2",
        return_state=return_state,
        backend=backend,
    )

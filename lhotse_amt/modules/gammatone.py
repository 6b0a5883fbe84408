"""Gammatone filterbank module."""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import (
    check_bool,
    check_dtype,
    check_frequencies,
    check_int,
    check_positive_finite,
    check_rate,
)
from ..functional.erb import erbspacebw
from ..functional.gammatone import gammatone
from ._common import ChannelBank, register_coefficients


class GammatoneFilterbank(ChannelBank):
    """4th-order all-pole complex gammatone filterbank with ERB spacing (AMT
    ``auditoryfilterbank``; Hohmann 2002), run as one-pole cascades.

    Args:
        fs: sampling rate (Hz).
        fc: explicit centre frequencies (Hz); if ``None`` the ERB grid
            ``erbspacebw(flow, fhigh, bwmul, basef)`` is used.
        flow, fhigh: grid limits (Hz); ``fhigh`` must leave every channel below ``fs/2``.
        basef: base frequency contained in the grid (AMT Dau1997: 1000 Hz), or ``None``
            for a grid centred in ``[flow, fhigh]``.
        bwmul: channel spacing in ERB.
        n: filter order.
        erb_scale: filter bandwidth in ERB.
        learnable: centre frequencies and bandwidth scales become parameters.

    Shapes: ``(..., T)`` -> ``(..., C, T)``.
    """

    def __init__(
        self,
        fs: float,
        fc: Tensor | list[float] | None = None,
        flow: float = 80.0,
        fhigh: float = 8000.0,
        basef: float | None = None,
        bwmul: float = 1.0,
        n: int = 4,
        erb_scale: float = 1.0,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.fs = check_rate("fs", fs)
        self.n = check_int("n", n, min=1)
        check_positive_finite("erb_scale", erb_scale)
        check_bool("learnable", learnable)
        check_dtype("dtype", dtype)
        if fc is None:
            fcs = erbspacebw(flow, fhigh, bwmul, basef)
        else:
            fcs = check_frequencies("fc", fc.detach().cpu() if torch.is_tensor(fc) else fc)
        if (fcs >= fs / 2).any():
            raise ValueError(
                f"filterbank channels reach {fcs.max():.1f} Hz, above the Nyquist frequency "
                f"fs/2 = {fs / 2:g} Hz: lower fhigh (now {fhigh:g} Hz) or raise the sampling rate"
            )
        fc_t = torch.as_tensor(fcs, dtype=dtype)
        scale = torch.full_like(fc_t, float(erb_scale))
        register_coefficients(self, learnable, fc=fc_t, erb_scale=scale)

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        return gammatone(
            x, self.fc, self.fs, self.n, self.erb_scale, state, return_state=return_state
        )

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, num_channels={self.num_channels}, n={self.n}"

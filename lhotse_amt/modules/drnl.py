"""DRNL filterbank module (Lopez-Poveda & Meddis 2001; Jepsen et al. 2008)."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .._validation import (
    check_band,
    check_dtype,
    check_int,
    check_kwargs,
    check_preset,
    check_rate,
)
from ..functional.drnl import DRNL_PRESETS, design_drnl, drnl
from ..functional.erb import erb_to_freq, erbspacebw, freq_to_erb
from ._common import ChannelBank, register_coefficients

__all__ = ["DRNLFilterbank"]

#: the coefficients of a :class:`~lhotse_amt.functional.drnl.DRNLDesign` that the module
#: registers (buffers, or parameters with ``learnable``), in the argument order of
#: :func:`~lhotse_amt.functional.drnl.drnl`
_COEFFICIENTS = ("lin_gain", "lin_gt", "lin_lp", "nl_gt", "nl_lp", "a", "b", "c")


class DRNLFilterbank(ChannelBank):
    """Dual-resonance non-linear filterbank (see :mod:`lhotse_amt.functional.drnl`).

    Args:
        fs: sampling rate (Hz).
        fc: explicit characteristic frequencies (Hz). If ``None``: with ``n_channels`` the
            ``n_channels`` points equally spaced on the ERB-number scale from ``flow`` to
            ``fhigh`` inclusive (Paulick 2024: 50 channels, 125-8000 Hz); without it the
            1-ERB grid centred in ``[flow, fhigh]`` (AMT ``lopezpoveda2001``: 31 channels,
            86.9-7819.2 Hz for 80-8000 Hz).
        flow, fhigh: grid limits (Hz).
        n_channels: number of channels of the ERB-spaced grid (see ``fc``).
        bwmul: spacing (ERB) of the grid without ``n_channels``.
        preset: ``"jepsen2008"`` (CASP; order-2 non-linear gammatones, compression
            parameters frozen above 1.5 kHz) or ``"lopezpoveda2001"`` (AMT defaults).
        params: overrides of single :data:`~lhotse_amt.functional.drnl.DRNL_PRESETS`
            entries, e.g. ``{"compresslimit": None}``.
        learnable: gains, compression parameters and all second-order sections become
            parameters (gradients run through the plain-torch path).
        dtype: dtype of learnable coefficients (fixed coefficients are float64; the output
            has the input's dtype).

    Input: stapes signal ``(..., T)`` (middle-ear output on the AMT level scale). Output:
    basilar-membrane velocity ``(..., C, T)``. ``forward(x, state, return_state=True)``
    streams: pass the returned state with the next chunk.

    Raises:
        ValueError: when a channel's non-linear or linear path reaches ``fs / 2`` (the
            non-linear path's centre sits about 2 % above ``fc``, its low-pass likewise).
    """

    def __init__(
        self,
        fs: float,
        fc: Tensor | np.ndarray | list[float] | None = None,
        flow: float = 80.0,
        fhigh: float = 8000.0,
        n_channels: int | None = None,
        bwmul: float = 1.0,
        preset: str = "jepsen2008",
        params: dict | None = None,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        check_dtype("dtype", dtype)
        self.fs = check_rate("fs", fs)
        self.preset = check_preset("DRNL preset", preset, DRNL_PRESETS)
        params = check_kwargs("params", params)
        if fc is None:
            check_band(flow, fhigh)
            if n_channels is not None:
                check_int("n_channels", n_channels, min=1)
                e = np.linspace(freq_to_erb(flow), freq_to_erb(fhigh), int(n_channels))
                fcs = erb_to_freq(e) if n_channels > 1 else np.array([float(flow)])
            else:
                fcs = erbspacebw(flow, fhigh, bwmul)
        else:
            fcs = np.atleast_1d(torch.as_tensor(fc, dtype=torch.float64).numpy())
        if (fcs >= fs / 2).any():
            raise ValueError(
                f"DRNL channels reach {fcs.max():.1f} Hz, above the Nyquist frequency "
                f"fs/2 = {fs / 2:g} Hz: lower fhigh or raise the sampling rate"
            )
        d = design_drnl(fs, fcs, preset, **params)
        self.c_exponent = d.c
        self.register_buffer("fc", torch.as_tensor(fcs, dtype=dtype))
        # fixed coefficients stay float64 (float32 rounding moves the low-frequency poles by
        # ~1e-5 relative to the AMT design); learnable ones take ``dtype``
        cdt = dtype if learnable else torch.float64
        tensors = {k: torch.as_tensor(np.asarray(getattr(d, k)), dtype=cdt) for k in _COEFFICIENTS}
        register_coefficients(self, learnable, **tensors)
        #: per-channel parameter values (Hz / dimensionless), for inspection
        self.parameters_per_channel = {k: v for k, v in d.params.items()}

    def forward(
        self,
        x: Tensor,
        state: dict | None = None,
        return_state: bool = False,
        backend: str = "auto",
    ) -> Tensor | tuple[Tensor, dict]:
        coefficients = [getattr(self, k) for k in _COEFFICIENTS]
        return drnl(x, *coefficients, state, return_state=return_state, backend=backend)

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, num_channels={self.num_channels}, preset={self.preset!r}"

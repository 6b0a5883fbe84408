"""Modulation filterbank module."""

from __future__ import annotations

from dataclasses import fields, replace
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._validation import check_dtype, check_preset
from ..functional.modulation import (
    MODULATION_PRESETS,
    ModulationSettings,
    design_modulation_bank,
    modulation_filterbank,
)
from ._common import ChannelBank, extends_parent_signature, register_coefficients


class ModulationFilterbank(ChannelBank):
    """Modulation filterbank of the CASP models (Dau et al. 1997b; Jepsen et al. 2008).

    See :mod:`lhotse_amt.functional.modulation` for the equations. Arguments left at
    ``None`` take the preset's value (or the torch_amt defaults without a preset:
    ``Q=2, max_mfc=150, lp_cutoff=2.5, att_factor=1, use_upper_limit=False``, no 150-Hz
    pre-filter); explicit arguments override the preset.

    Args:
        fs: sampling rate (Hz).
        fc: centre frequencies of the auditory channels (Hz), ``(C,)``.
        preset: ``"dau1997"``, ``"jepsen2008"``, ``"paulick2024"`` (torch_amt presets,
            150-Hz maximum) or the AMT reproductions ``"amt-0.9.10"``,
            ``"amt-1.4-jepsen2008"``, ``"amt-1.4-dau1997"`` (1000-Hz maximum).
        lp150: apply the 150-Hz first-order low-pass before the bank (Jepsen 2008).
        filter_type: ``"efilt"`` (AMT) or ``"butterworth"`` (extension).
        max_bands: keep at most this many bands per channel.
        learnable: band poles and gains become (complex) parameters.

    Shapes: ``forward``: ``(..., C, T)`` -> list of ``C`` tensors ``(..., M_c, T)``
    (torch_amt layout); :meth:`forward_padded`: ``(..., C, M, T)`` with zeros in the
    bands a channel does not have (see :attr:`mfc`, NaN there).
    """

    def __init__(
        self,
        fs: float,
        fc: Tensor | np.ndarray | list[float],
        Q: float | None = None,
        max_mfc: float | None = None,
        lp_cutoff: float | None = None,
        att_factor: float | None = None,
        use_upper_limit: bool | None = None,
        preset: str | None = None,
        filter_type: str = "efilt",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
        *,
        lp150: bool | None = None,
        max_bands: int | None = None,
    ) -> None:
        super().__init__()
        check_dtype("dtype", dtype)
        if preset is not None:
            check_preset("modulation preset", preset, MODULATION_PRESETS)
        given = locals()  # the arguments named as the settings' fields
        changes = {f.name: given[f.name] for f in fields(ModulationSettings)}
        settings = replace(
            MODULATION_PRESETS[preset or "dau1997"],
            **{k: v for k, v in changes.items() if v is not None},
        )
        self.settings = settings
        self.fs = float(fs)
        self.preset = preset
        self.filter_type = filter_type
        self.learnable = bool(learnable)
        self.Q = settings.Q
        self.max_mfc = settings.max_mfc
        self.lp_cutoff = settings.lp_cutoff
        self.att_factor = settings.att_factor
        self.use_upper_limit = settings.use_upper_limit
        self.use_lp150_prefilter = settings.lp150
        fc_np = torch.as_tensor(fc, dtype=torch.float64).numpy()
        d = design_modulation_bank(
            fs, fc_np, settings, filter_type=filter_type, max_bands=max_bands
        )
        cdtype = torch.complex128 if dtype == torch.float64 else torch.complex64
        self.register_buffer("fc", torch.as_tensor(fc_np, dtype=dtype))
        self.register_buffer("mfc_padded", torch.as_tensor(d.mfc, dtype=dtype))
        self.register_buffer("n_bands", torch.as_tensor(d.n_bands))
        # the same counts as Python ints: constants of the design for traced calls
        self.band_counts: tuple[int, ...] = tuple(int(n) for n in d.n_bands)
        # The low-pass sections have poles within ~1e-3 of z = 1: float32 coefficients would
        # move them (even out of the unit circle), so they always run in float64.
        self.register_buffer("lp_sos", torch.as_tensor(d.lp_sos, dtype=torch.float64))
        if d.prefilter_sos is not None:
            self.register_buffer(
                "prefilter_sos", torch.as_tensor(d.prefilter_sos, dtype=torch.float64)
            )
        else:
            self.prefilter_sos = None
        poles = torch.as_tensor(d.poles).to(cdtype)
        gains = torch.as_tensor(d.gains).to(cdtype)
        register_coefficients(self, learnable, poles=poles, gains=gains)
        self.register_buffer("direct", torch.as_tensor(d.direct).to(cdtype))
        self.register_buffer("use_abs", torch.as_tensor(d.use_abs))
        self.register_buffer("scale", torch.as_tensor(d.scale, dtype=dtype))

    @property
    def max_bands(self) -> int:
        return int(self.mfc_padded.shape[1])

    @property
    def b_lowpass(self) -> Tensor:
        """Numerator of the band-0 (2.5-Hz) low-pass, ``(3,)`` (float64)."""
        return self.lp_sos[0, :3]

    @property
    def a_lowpass(self) -> Tensor:
        """Denominator of the band-0 (2.5-Hz) low-pass, ``(3,)`` (float64)."""
        return self.lp_sos[0, 3:]

    @property
    def b_lp150(self) -> Tensor | None:
        """Numerator of the 150-Hz pre-filter (``None`` without it)."""
        return None if self.prefilter_sos is None else self.prefilter_sos[0, :3]

    @property
    def a_lp150(self) -> Tensor | None:
        """Denominator of the 150-Hz pre-filter (``None`` without it)."""
        return None if self.prefilter_sos is None else self.prefilter_sos[0, 3:]

    @property
    def mfc(self) -> list[Tensor]:
        """Modulation centre frequencies per channel (Hz), band 0 = low-pass (0 Hz)."""
        return [self.mfc_padded[c, : int(n)] for c, n in enumerate(self.n_bands)]

    def forward_padded(
        self, x: Tensor, state: dict | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, dict]:
        """``(..., C, T)`` -> ``(..., C, M, T)`` (zeros where a channel has no band)."""
        return self._bank(x, state, return_state, channels=False)

    def forward(self, x: Tensor) -> list[Tensor]:
        """``(..., C, T)`` -> list of ``C`` tensors ``(..., M_c, T)``; under autograd only
        the bands each channel has are computed (no padded tensor)."""
        return self._bank(x, None, False, channels=True)

    def _bank(self, x: Tensor, state: dict | None, return_state: bool, channels: bool) -> Any:
        if x.dim() >= 2 and x.shape[-2] != self.num_channels:  # x's rank: the functional
            raise ValueError(
                f"expected {self.num_channels} auditory channels on dim -2, got {x.shape[-2]}"
            )
        return modulation_filterbank(
            x,
            self.lp_sos,
            self.poles,
            self.gains,
            self.direct,
            self.use_abs,
            self.scale,
            self.prefilter_sos,
            state,
            return_state=return_state,
            counts=self.band_counts,
            channels=channels,
        )

    def extra_repr(self) -> str:
        return (
            f"fs={self.fs:g}, num_channels={self.num_channels}, max_bands={self.max_bands}, "
            f"att_factor={self.att_factor:.4g}, lp150={self.use_lp150_prefilter}, "
            f"filter_type={self.filter_type!r}"
        )


@extends_parent_signature
class FastModulationFilterbank(ModulationFilterbank):
    """:class:`ModulationFilterbank` under the torch_amt name of its fast variant.

    :class:`ModulationFilterbank` already runs every (channel, band) pair in one pass of
    a compiled recursion (CPU) or kernel (GPU) with the exact coefficients, so this class
    is the same computation: identical numbers, same speed. It accepts the torch_amt
    constructor of ``FastModulationFilterbank`` (the :class:`ModulationFilterbank`
    arguments plus ``tolerance``).

    Args:
        tolerance: torch_amt's number of decimals to which it rounds coefficients to group
            filters (1, 2 or 3). No filter is grouped or rounded here, so it does not
            change the output; it is checked and kept as :attr:`tolerance`.
        other arguments: as :class:`ModulationFilterbank`.

    Shapes: as :class:`ModulationFilterbank`.
    """

    def __init__(self, *args: Any, tolerance: int = 2, **kwargs: Any) -> None:
        if isinstance(tolerance, bool) or not isinstance(tolerance, int) or tolerance < 0:
            raise ValueError(
                f"tolerance must be a non-negative int (decimal places), got {tolerance!r}"
            )
        super().__init__(*args, **kwargs)
        self.tolerance = tolerance

    @property
    def megabatch_map(self) -> list[dict[str, float | int]]:
        """One entry per (channel, band) pair the bank computes: ``channel`` and ``filter``
        indices and the band's ``mfc`` (Hz)."""
        return [
            {"channel": c, "filter": m, "mfc": float(f)}
            for c, freqs in enumerate(self.mfc)
            for m, f in enumerate(freqs.tolist())
        ]

    @property
    def total_filters(self) -> int:
        """Number of (channel, band) pairs the bank computes."""
        return int(self.n_bands.sum())

    def distribute_gradients(self) -> None:
        """No-op kept for torch_amt compatibility: every filter has its own coefficients
        here, so ``backward()`` already gives each one its exact gradient."""

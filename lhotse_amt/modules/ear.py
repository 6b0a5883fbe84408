"""Outer/middle-ear FIR modules (Osses et al. 2021 front end); see
:mod:`lhotse_amt.functional.ear` for the designs and the delay-compensation modes."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import check_dtype
from ..functional.ear import (
    COMPENSATIONS,
    fir_block_length,
    fir_filter,
    fir_filter_compensated,
    fir_spectrum,
    headphone_fir,
    middle_ear_fir,
)
from ._common import register_coefficients

__all__ = ["EarFIRFilter", "HeadphoneFilter", "MiddleEarFilter"]


class EarFIRFilter(nn.Module):
    """A fixed (or learnable) FIR with a delay-compensation mode.

    Args:
        taps: ``(N,)`` coefficients.
        compensation: ``"none"`` (causal), ``"amt"`` (advance by ``(N + 1) // 2`` samples,
            same length: AMT 1.4) or ``"trim"`` (drop ``(N - 1) // 2`` leading samples:
            torch_amt).
        learnable: the taps become a parameter.

    Shapes: ``(..., T)`` -> ``(..., T)`` (``"trim"``: ``T - (N - 1) // 2``).

    Streaming (:meth:`stream`): causal FIR with the previous ``N - 1`` inputs as state.
    With ``"amt"`` the first :attr:`lookahead` outputs are withheld, so chunk outputs lag
    the inputs by ``lookahead`` samples; feed ``lookahead`` zeros after the signal to
    flush (these are AMT's appended zeros). ``end`` (per-item signal length) zeroes the
    input at and after that position, as AMT's zero padding does for a one-shot run.
    """

    def __init__(
        self,
        taps: np.ndarray | Tensor,
        compensation: str = "none",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        check_dtype("dtype", dtype)
        if compensation not in COMPENSATIONS:
            raise ValueError(f"compensation must be one of {COMPENSATIONS}, got {compensation!r}")
        self.compensation = compensation
        h = torch.as_tensor(np.asarray(taps, dtype=np.float64)).to(dtype)
        register_coefficients(self, learnable, h=h)

    @property
    def numtaps(self) -> int:
        return int(self.h.shape[-1])

    @property
    def lookahead(self) -> int:
        """Samples of look-ahead (non-causal advance) of the one-shot filter."""
        return (self.numtaps + 1) // 2 if self.compensation == "amt" else 0

    @property
    def trimmed(self) -> int:
        """Leading output samples removed (``"amt"``: the withheld look-ahead)."""
        if self.compensation == "trim":
            return (self.numtaps - 1) // 2
        return self.lookahead

    def forward(self, x: Tensor) -> Tensor:
        return fir_filter_compensated(x, self.h, self.compensation)

    def initial_state(self) -> dict[str, Any]:
        return {"hist": None, "pos": 0, "drop": self.trimmed}

    def stream(
        self, x: Tensor, state: dict[str, Any] | None = None, end: Tensor | None = None
    ) -> tuple[Tensor, dict[str, Any]]:
        """One chunk ``x (B, T)`` -> ``(y (B, T - withheld), new state)``."""
        st = state or self.initial_state()
        pos = int(st["pos"])
        T = x.shape[-1]
        if end is not None:
            idx = torch.arange(pos, pos + T, device=x.device)
            x = x * (idx[None, :] < end.to(x.device)[:, None]).to(x.dtype)
        y, hist = fir_filter(x, self.h, st["hist"], return_state=True, spectrum=self._spectrum(x))
        d = min(int(st["drop"]), T)
        return y[..., d:], {"hist": hist, "pos": pos + T, "drop": int(st["drop"]) - d}

    def _spectrum(self, x: Tensor) -> Tensor | None:
        """The taps' overlap-save spectrum in ``x``'s dtype and device, computed once per
        taps version (``None`` for learnable taps and while traced by ``torch.compile``:
        computed in the graph each call)."""
        if (self.h.requires_grad and torch.is_grad_enabled()) or torch.compiler.is_compiling():
            return None
        version = -1 if self.h.is_inference() else self.h._version
        key = (x.dtype, x.device, self.h.data_ptr(), version)
        cache = self.__dict__.setdefault("_spectra", {})
        if key not in cache:
            cache.clear()
            h = self.h.detach().to(dtype=x.dtype, device=x.device)
            cache[key] = fir_spectrum(h, fir_block_length(self.numtaps))
        return cache[key]

    def extra_repr(self) -> str:
        return f"numtaps={self.numtaps}, compensation={self.compensation!r}"


class _DesignedEarFilter(EarFIRFilter):
    """An :class:`EarFIRFilter` designed for the sampling rate ``fs`` (Hz) with the phase
    ``phase`` (``"minimum"`` or ``"linear"``), both kept as attributes and shown in its
    repr."""

    def __init__(
        self,
        taps: np.ndarray,
        fs: float,
        phase: str,
        compensation: str,
        learnable: bool,
        dtype: torch.dtype,
    ) -> None:
        super().__init__(taps, compensation, learnable, dtype)
        self.fs = float(fs)
        self.phase = phase

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, phase={self.phase!r}, " + super().extra_repr()


class HeadphoneFilter(_DesignedEarFilter):
    """Headphone + outer-ear filter, Pralong & Carlile (1996) Fig. 1(e) (AMT
    ``headphonefilter``; 513-tap ``fir2`` design).

    Args:
        fs: sampling rate (Hz).
        numtaps: filter length (odd).
        phase: ``"minimum"`` (causal, short delay) or ``"linear"`` (AMT; delay 256).
        compensation, learnable, dtype: see :class:`EarFIRFilter`.
    """

    def __init__(
        self,
        fs: float,
        numtaps: int = 513,
        phase: str = "minimum",
        compensation: str = "none",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        taps = headphone_fir(fs, numtaps, phase)
        super().__init__(taps, fs, phase, compensation, learnable, dtype)


class MiddleEarFilter(_DesignedEarFilter):
    """Middle-ear filter from the Lopez-Poveda & Meddis (2001) stapes data (Goode et al.
    1994), normalised to a 0-dB maximum (AMT ``middleearfilter(fs, 'lopezpoveda2001')``
    with the ``osses2021`` gain).

    Args:
        fs: sampling rate (Hz).
        numtaps: filter length (odd).
        phase: ``"minimum"`` (AMT) or ``"linear"``.
        normalize: scale to a 0-dB maximum (else m/s per Pa).
        compensation, learnable, dtype: as for :class:`HeadphoneFilter`.
    """

    def __init__(
        self,
        fs: float,
        numtaps: int = 513,
        phase: str = "minimum",
        normalize: bool = True,
        compensation: str = "none",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        taps = middle_ear_fir(fs, numtaps, phase, normalize)
        super().__init__(taps, fs, phase, compensation, learnable, dtype)
        self.normalize = normalize

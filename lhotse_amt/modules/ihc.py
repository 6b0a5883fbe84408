"""Inner-hair-cell envelope module."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from .._validation import check_bool, check_dtype, check_int, check_preset
from ..functional.ihc import IHC_PRESETS, ihc_envelope, ihc_lowpass_sos
from ._common import register_coefficients


class IHCEnvelope(nn.Module):
    """Half-wave rectification + Butterworth low-pass (AMT ``ihcenvelope``).

    Args:
        fs: sampling rate (Hz).
        cutoff: low-pass cut-off (Hz); ``None`` takes the method's value.
        order: Butterworth order of one low-pass.
        method: ``"dau1996"`` (1000 Hz), ``"breebaart2001"`` (2000 Hz, 5 times),
            ``"king2019"`` (1000 Hz as in the AMT code; the torch_amt docs and the AMT help
            text say 1500 Hz: pass ``cutoff=1500`` for that), ``"lindemann"`` (800 Hz).
        iterations: number of low-passes in series (``None``: the method's value).
        learnable: the SOS coefficients become parameters.

    Shapes: ``(..., T)`` -> ``(..., T)``.
    """

    def __init__(
        self,
        fs: float,
        cutoff: float | None = None,
        order: int = 1,
        method: str = "dau1996",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
        *,
        iterations: int | None = None,
    ) -> None:
        super().__init__()
        pc, pit = IHC_PRESETS[check_preset("IHC method", method, IHC_PRESETS)]
        self.order = check_int("order", order, min=1)
        self.learnable = check_bool("learnable", learnable)
        self.dtype = check_dtype("dtype", dtype)
        # the design checks fs, cutoff and iterations
        sos = torch.as_tensor(
            ihc_lowpass_sos(
                fs,
                pc if cutoff is None else cutoff,
                order,
                pit if iterations is None else iterations,
            ),
            dtype=dtype,
        )
        self.fs = float(fs)
        self.method = method
        self.cutoff = float(pc if cutoff is None else cutoff)
        self.iterations = int(pit if iterations is None else iterations)
        register_coefficients(self, learnable, sos=sos)

    def _one_lowpass(self, part: slice) -> Tensor:
        sections = self.sos[: self.sos.shape[0] // self.iterations, part]
        poly = sections[0]
        for sec in sections[1:]:
            prod = poly.new_zeros(poly.shape[0] + sec.shape[0] - 1)
            for i in range(poly.shape[0]):
                prod = prod + nn.functional.pad(poly[i] * sec, (i, poly.shape[0] - 1 - i))
            poly = prod
        return poly[: self.order + 1]

    @property
    def b(self) -> Tensor:
        """Numerator of one Butterworth low-pass (``order + 1`` coefficients), from the
        second-order sections that run (applied ``iterations`` times in series)."""
        return self._one_lowpass(slice(0, 3))

    @property
    def a(self) -> Tensor:
        """Denominator of one Butterworth low-pass (``order + 1`` coefficients, ``a[0] = 1``)."""
        return self._one_lowpass(slice(3, 6))

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        return ihc_envelope(x, self.sos, state, return_state=return_state)

    def extra_repr(self) -> str:
        return f"method={self.method!r}, cutoff={self.cutoff:g}, iterations={self.iterations}"

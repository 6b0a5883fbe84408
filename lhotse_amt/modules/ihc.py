"""Inner-hair-cell envelope module."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..functional.ihc import IHC_PRESETS, ihc_envelope, ihc_lowpass_sos


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
        if method not in IHC_PRESETS:
            raise ValueError(f"unknown IHC method {method!r}; choose from {sorted(IHC_PRESETS)}")
        pc, pit = IHC_PRESETS[method]
        self.fs = float(fs)
        self.method = method
        self.cutoff = float(pc if cutoff is None else cutoff)
        self.order = int(order)
        self.iterations = int(pit if iterations is None else iterations)
        sos = torch.as_tensor(
            ihc_lowpass_sos(fs, self.cutoff, self.order, self.iterations), dtype=dtype
        )
        if learnable:
            self.sos = nn.Parameter(sos)
        else:
            self.register_buffer("sos", sos)

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        return ihc_envelope(x, self.sos, state, return_state=return_state)

    def extra_repr(self) -> str:
        return f"method={self.method!r}, cutoff={self.cutoff:g}, iterations={self.iterations}"

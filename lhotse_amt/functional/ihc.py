"""Inner-hair-cell envelope extraction (AMT ``ihcenvelope``).

Half-wave rectification followed by a first-order Butterworth low-pass (bilinear
transform, ``scipy.signal.butter(1, fc / (fs / 2))``) applied ``iterations`` times.

=================  ==========  ==========  ======================================
method             cut-off Hz  iterations  source
=================  ==========  ==========  ======================================
``dau1996``        1000        1           Dau et al. (1996a); AMT ``ihc_dau1996``
``breebaart2001``  2000        5           Breebaart et al. (2001); effective ~770 Hz
``king2019``       1000        1           AMT 1.4 ``ihc_king2019`` code (its help
                                           text and the torch_amt docs say 1500 Hz;
                                           pass ``cutoff=1500`` for that)
``lindemann``      800         1           Lindemann (1986)
=================  ==========  ==========  ======================================
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .._validation import check_bool, check_int, check_number, check_rate, check_signal
from .butter import butter
from .iir import sosfilt

__all__ = ["IHC_PRESETS", "ihc_lowpass_sos", "ihc_envelope"]

IHC_PRESETS: dict[str, tuple[float, int]] = {
    "dau1996": (1000.0, 1),
    "breebaart2001": (2000.0, 5),
    "king2019": (1000.0, 1),
    "lindemann": (800.0, 1),
}


def ihc_lowpass_sos(fs: float, cutoff: float, order: int = 1, iterations: int = 1) -> np.ndarray:
    """SOS ``(n_sections, 6)`` of the IHC low-pass: ``iterations`` Butterworth filters in series."""
    fs = check_rate("fs", fs)
    cutoff = check_number("cutoff", cutoff, unit="Hz")
    iterations = check_int("iterations", iterations, min=1)
    if not 0 < cutoff < fs / 2:
        raise ValueError(f"IHC cut-off {cutoff} Hz must lie in (0, fs/2 = {fs / 2:g} Hz)")
    sos = butter(order, cutoff / (fs / 2.0), output="sos")
    return np.concatenate([sos] * iterations, axis=0)


def ihc_envelope(
    x: Tensor,
    sos: Tensor,
    state: Tensor | None = None,
    *,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """``lowpass(max(x, 0))`` along the last axis.

    Args:
        x: ``(..., T)`` basilar-membrane signal.
        sos: low-pass sections from :func:`ihc_lowpass_sos` (``(S, 6)`` or per channel).
        state: sosfilt states ``(..., S, 2)`` for streaming.
        return_state: also return the final states.

    The low-pass is :func:`~lhotse_amt.functional.iir.sosfilt`, which chooses its kernel.
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, max_dim=None, allow_empty=True, name="x")
    return sosfilt(torch.relu(x), sos, state, return_state=return_state)

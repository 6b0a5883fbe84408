"""King et al. (2019) modulation filterbank module; see
:mod:`lhotse_amt.functional.king2019_modulation`."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import check_bool, check_choice, check_dtype, check_int, check_number, check_rate
from ..functional.king2019_modulation import (
    king2019_modulation_filterbank,
    king2019_modulation_frequencies,
    king2019_modulation_sos,
    king2019_modulation_tf,
)
from ._common import register_coefficients

__all__ = ["King2019ModulationFilterbank", "FastKing2019ModulationFilterbank", "ButterworthFilter"]


@lru_cache(maxsize=1)
def _amt14_coefficients() -> dict:
    text = resources.files("lhotse_amt").joinpath("data/king2019_amt14_mfb.json").read_text()
    return json.loads(text)


class King2019ModulationFilterbank(nn.Module):
    """Constant-Q Butterworth band-pass modulation filterbank (King et al. 2019).

    Args:
        fs: sampling rate (Hz).
        mflow, mfhigh: lowest centre frequency and upper limit (Hz).
        qfactor: Q of every band (bandwidth ``mfc / Q``).
        nmod: number of log-spaced bands instead of the constant-Q spacing.
        form: ``"sos"`` (second-order sections: accurate, the default) or ``"tf"`` (the
            expanded 4th-order transfer functions run in direct form, as AMT).
        amt_coefficients: with ``form="tf"`` at 16 or 44.1 kHz and the default bands,
            use AMT 1.4's exact float64 coefficient bits (``lhotse_amt/data/
            king2019_amt14_mfb.json``) so that the ill-conditioned 2- and 5.2-Hz bands
            reproduce AMT; otherwise the coefficients are designed here.
        learnable: the coefficients become parameters.

    The coefficients are always kept in float64 (poles within ~2e-4 of ``z = 1``).

    Shapes: ``(..., C, T)`` -> ``(..., C, M, T)``.
    """

    def __init__(
        self,
        fs: float,
        mflow: float = 2.0,
        mfhigh: float = 150.0,
        qfactor: float = 1.0,
        nmod: int | None = None,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
        *,
        form: str = "sos",
        amt_coefficients: bool = False,
    ) -> None:
        super().__init__()
        check_choice("form", form, ("sos", "tf"))
        check_dtype("dtype", dtype)
        check_bool("amt_coefficients", amt_coefficients)
        self.fs = check_rate("fs", fs)
        self.form = form
        self.qfactor = float(qfactor)
        mfc = king2019_modulation_frequencies(mflow, mfhigh, qfactor, nmod)
        self.register_buffer("mfc", torch.as_tensor(mfc, dtype=dtype))
        self.uses_amt_coefficients = False
        if form == "sos":
            coef = {"sos": king2019_modulation_sos(fs, mfc, qfactor)}
        else:
            b, a = king2019_modulation_tf(fs, mfc, qfactor)
            key = str(int(fs)) if float(fs).is_integer() else ""
            table = _amt14_coefficients()
            default_bands = nmod is None and mflow == 2.0 and mfhigh == 150.0 and qfactor == 1.0
            if amt_coefficients and default_bands and key in table:
                b = np.asarray(table[key]["b"], dtype=np.float64)
                a = np.asarray(table[key]["a"], dtype=np.float64)
                self.uses_amt_coefficients = True
            coef = {"b": b, "a": a}
        tensors = {k: torch.as_tensor(v, dtype=torch.float64) for k, v in coef.items()}
        register_coefficients(self, learnable, **tensors)

    @property
    def num_filters(self) -> int:
        return int(self.mfc.numel())

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        if self.form == "sos":
            return king2019_modulation_filterbank(
                x, sos=self.sos, state=state, return_state=return_state
            )
        return king2019_modulation_filterbank(
            x, b=self.b, a=self.a, state=state, return_state=return_state
        )

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, num_filters={self.num_filters}, form={self.form!r}"


class ButterworthFilter(nn.Module):
    """Butterworth low-/high-pass as second-order sections (float64 coefficients), e.g.
    the King et al. (2019) 3-Hz "adaptation" high-pass (``butter(1, 3 / (fs/2),
    'high')``) and the optional 150-Hz low-pass.

    Shapes: ``(..., T)`` -> ``(..., T)`` (output in the input dtype).
    """

    def __init__(
        self,
        fs: float,
        fc: float,
        order: int = 1,
        btype: str = "high",
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        from ..functional.butter import butter

        fs = check_rate("fs", fs)
        if not 0 < check_number("fc", fc, unit="Hz") < fs / 2:
            raise ValueError(f"cut-off {fc} Hz must lie in (0, fs/2 = {fs / 2:g} Hz)")
        order = check_int("order", order, min=1)
        check_choice("btype", btype, ("low", "lowpass", "high", "highpass"))
        check_dtype("dtype", dtype)
        self.fs, self.fc, self.order, self.btype = float(fs), float(fc), order, btype
        sos = torch.as_tensor(
            butter(order, fc / (fs / 2), btype, output="sos"), dtype=torch.float64
        )
        register_coefficients(self, learnable, sos=sos)

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        from ..functional.iir import sosfilt

        y, st = sosfilt(x, self.sos, state, return_state=True, out_dtype=x.dtype)
        y = y.to(x.dtype)
        return (y, st) if return_state else y

    def extra_repr(self) -> str:
        return f"fs={self.fs:g}, fc={self.fc:g}, order={self.order}, btype={self.btype!r}"


class FastKing2019ModulationFilterbank(King2019ModulationFilterbank):
    """:class:`King2019ModulationFilterbank` under the torch_amt name of its fast variant.

    torch_amt's ``FastKing2019ModulationFilterbank`` replaces the recursive filters by an
    FFT convolution with truncated impulse responses (documented there as ~15 % output
    error). Here the recursion itself is the fast path (second-order sections in one
    compiled pass over all channels and bands), so this class runs exactly the same
    filters as :class:`King2019ModulationFilterbank`: identical numbers, same speed.

    Args:
        ir_length_ratio: torch_amt's impulse-response length as a fraction of the signal
            length, in ``(0, 1]``. No impulse response is truncated here, so it does not
            change the output; it is checked and kept as :attr:`ir_length_ratio`.
        other arguments: as :class:`King2019ModulationFilterbank`.

    Shapes: ``(..., C, T)`` -> ``(..., C, M, T)``.
    """

    def __init__(
        self,
        fs: float,
        mflow: float = 2.0,
        mfhigh: float = 150.0,
        qfactor: float = 1.0,
        nmod: int | None = None,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
        ir_length_ratio: float = 1.0,
        *,
        form: str = "sos",
        amt_coefficients: bool = False,
    ) -> None:
        r = check_number("ir_length_ratio", ir_length_ratio, min=0.0, max=1.0, min_inclusive=False)
        super().__init__(
            fs,
            mflow,
            mfhigh,
            qfactor,
            nmod,
            learnable,
            dtype,
            form=form,
            amt_coefficients=amt_coefficients,
        )
        self.ir_length_ratio = r

    @property
    def sos_stack(self) -> Tensor:
        """Second-order sections of every band, ``(M, n_sections, 6)`` (float64)."""
        if self.form != "sos":
            raise AttributeError("sos_stack exists only with form='sos'")
        return self.sos

"""Revised CASP model of Paulick, Relaño-Iborra & Dau (2024).

Outer ear (headphone filter) and middle ear -> DRNL filterbank -> physiological inner hair
cell -> adaptation loops -> decimation to ``fs / 4`` -> modulation filterbank.

* **Ear filters** (:class:`CASPEarFilter`): the Pralong & Carlile (1996) headphone
  response (``use_outerear``) and the Jepsen et al. (2008) middle ear (stapes velocity
  for the DRNL), both order-512 linear-phase FIRs applied causally, as in the CASP front
  end (Jepsen et al. 2008; the AMT reference outputs of ``lopezpoveda2001``). The middle
  ear is always applied (it sets the level scale of the DRNL input); ``use_outerear=False``
  drops only the headphone filter.
* **DRNL** (:class:`~lhotse_amt.modules.drnl.DRNLFilterbank`): Jepsen et al. (2008)
  parameters by default (``drnl_kwargs={"preset": "lopezpoveda2001"}`` for the Lopez-Poveda
  & Meddis 2001 set), ``n_channels`` channels equally spaced on the ERB-number scale from
  ``flow`` to ``fhigh``.
* **IHC** (:class:`~lhotse_amt.modules.ihc_paulick.IHCPaulick2024`): receptor potential
  re the resting level (V).
* **Adaptation loops** (preset ``"paulick2024"``: 5/50/129/253/500 ms, limit 5, minimum
  level 1e-5, i.e. 0.01 mV of depolarisation), output in model units.
* **Decimation** by ``resample_factor`` (4): a linear-phase Kaiser-window FIR low-pass
  (``24 R + 1`` taps, beta 8, cut-off ``0.39 fs / R``: flat to 3 kHz, -2.3 dB at 4 kHz and
  at least 80 dB attenuation from ``fs / (2 R)`` up for ``fs`` = 44.1 kHz; group delay
  ``12 R`` input samples) evaluated only at the kept samples ``n = R m``; causal and
  streaming, so chunked processing equals one-shot processing. For CPU inference the
  DRNL, IHC, adaptation loops and decimator run as one compiled pass (the operator
  ``lhotse_amt::paulick_frontend``, :func:`lhotse_amt.ops.paulick.frontend`) that stores
  only the decimated signal; :meth:`stream` then returns the stages it materialises
  (``outerear``, ``resampled``, ``modulation``), with states interchangeable with the
  stage-wise path's.
* **Modulation filterbank** (preset ``"paulick2024"``: 150-Hz pre-filter, 2.5-Hz low-pass,
  5 and 10 Hz, then Q = 2 bands up to ``min(fc / 4, 150 Hz)``, ``1/sqrt(2)`` above 10 Hz)
  at ``fs / R``.

**Level convention** (AMT): the input is sound pressure on the scale where rms 1 is
100 dB SPL, i.e. a sinusoid of peak amplitude ``sqrt(2) 10^((L - 100) / 20)`` has level ``L``
dB SPL.

Deviations from the torch_amt documentation, where it disagrees with the papers or the
reference data: the DRNL gammatones are the order-2 (Jepsen) / order-3 (Lopez-Poveda &
Meddis) pole-zero gammatones and the compression is the broken stick with exponent 0.25
(not "4th-order gammatones, exponent 0.2"); the IHC stage is the physiological circuit
(not "rectify -> compress -> 1500-Hz low-pass"); the resting potential of that circuit is
-61.66 mV (the documented -57.03 mV is only the start of the pre-charge, see
:mod:`lhotse_amt.functional.ihc_paulick`); the decimator is a FIR low-pass instead of a
sinc interpolator; the decision back end (ROI, template correlation, ...) is not part of
this model.

References: L. Paulick, H. Relaño-Iborra, T. Dau (2024), "The Computational Auditory
Signal Processing and Perception Model (CASP): A Revised Version", bioRxiv; M. L. Jepsen,
S. D. Ewert, T. Dau (2008), JASA 124, 422-438; E. A. Lopez-Poveda, R. Meddis (2001), JASA
110, 3107-3118.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import (
    as_float_tensor,
    check_bool,
    check_choice,
    check_dtype,
    check_int,
    check_number,
    check_rate,
    check_signal,
)
from ..functional.adaptation import adaptation_coefficients
from ..functional.iir import resolve_backend
from ..functional.resample import kaiser_lowpass
from ..modules._common import register_coefficients
from ..modules.adaptation import AdaptationLoops
from ..modules.drnl import DRNLFilterbank
from ..modules.ihc_paulick import IHCPaulick2024
from ..modules.modulation import ModulationFilterbank
from ._base import StreamingModel
from ._decision import DecisionMixin

__all__ = ["Paulick2024", "CASPEarFilter", "FIRDecimator", "casp_ear_fir"]


def casp_ear_fir(fs: float, outer: bool = True, middle: bool = True) -> np.ndarray:
    """Combined causal FIR of the headphone (``outer``) and middle-ear (``middle``) filters.

    Exact stored designs at 16 and 44.1 kHz (``lhotse_amt/data/README_paulick2024.md``);
    other rates are redesigned with ``firwin2`` on the 44.1-kHz magnitude responses.
    """
    with resources.files("lhotse_amt.data").joinpath("paulick2024_ear_fir.npz").open("rb") as f:
        with np.load(f, allow_pickle=False) as z:
            tab = {k: z[k].copy() for k in z.files}
    fs_i = int(round(fs))
    h = np.ones(1)
    for use, key in ((outer, "hp_fir"), (middle, "me_fir")):
        if not use:
            continue
        if abs(fs - fs_i) < 1e-9 and f"{key}_fs{fs_i}" in tab:
            g = tab[f"{key}_fs{fs_i}"]
        else:
            import scipy.signal  # deferred: its import costs ~0.5 CPU-s

            ref = tab[f"{key}_fs44100"]
            w, H = scipy.signal.freqz(ref, worN=4097, fs=44100.0)
            mag = np.abs(H)
            f_grid = np.linspace(0.0, fs / 2.0, 2049)
            m = np.interp(f_grid, w, mag)  # held constant above 22.05 kHz
            ntaps = 2 * int(round(256 * fs / 44100.0)) + 1
            g = scipy.signal.firwin2(ntaps, f_grid, m, fs=fs)
        h = np.convolve(h, g)
    return h


def _fir(buf: Tensor, weight: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    """``y[r, i] = sum_k weight[k] buf[r, start + i stride + k]`` (``weight (1, 1, K)`` holds
    flipped taps). CPU inference: the operator ``lhotse_amt::paulick_fir`` (a numba kernel:
    float64 accumulation, fixed order, so chunked and one-shot processing agree bit for
    bit); otherwise ``conv1d`` (autograd), or for the decimation (``stride > 1``) the
    operator ``lhotse_amt::strided_fir``."""
    if resolve_backend("auto", buf, weight) == "numba":
        from ..ops import paulick

        return paulick.fir(buf, weight.reshape(-1), start, stride, n_out)
    if n_out == 0:
        return buf.new_zeros(buf.shape[0], 0)
    K = weight.shape[-1]
    if stride == 1 and K > 64:
        # long taps (the ear filter): FFT correlation, O(T log T) forward and backward
        x = buf[:, start : start + n_out + K - 1]
        L = 1 << (x.shape[-1] + K - 2).bit_length()  # a power of two >= the full length
        h = weight.reshape(-1).to(buf.dtype).flip(-1)
        c = torch.fft.irfft(torch.fft.rfft(x, L) * torch.fft.rfft(h, L), L)
        return c[:, K - 1 : K - 1 + n_out]
    if stride > 1:
        # the decimator: a registered operator (a strided conv1d's backward is slow)
        from .. import ops

        return ops.strided_fir(buf, weight.reshape(-1), start, stride, n_out)
    y = torch.nn.functional.conv1d(buf[:, None, start:], weight.to(buf.dtype), stride=stride)
    return y[:, 0, :n_out]


class _StreamingFIR(nn.Module):
    """Causal FIR with the flipped taps ``weight (1, 1, K)`` whose streaming state is the
    last ``K - 1`` inputs."""

    weight: Tensor

    @property
    def num_taps(self) -> int:
        return int(self.weight.shape[-1])

    def _with_history(self, x: Tensor, hist: Tensor | None) -> tuple[Tensor, Tensor]:
        """``x (R, T)`` preceded by the previous ``K - 1`` inputs ``hist`` (zeros at rest):
        the buffer ``(R, K - 1 + T)`` and the new history, its last ``K - 1`` samples."""
        K = self.num_taps
        if hist is None:
            hist = x.new_zeros(x.shape[0], K - 1)
        else:
            hist = hist.to(x.dtype).reshape(-1, K - 1)
        buf = torch.cat([hist, x], -1)
        return buf, buf[:, buf.shape[-1] - (K - 1) :]


class CASPEarFilter(_StreamingFIR):
    """Causal FIR ``(B, T) -> (B, T)`` with streaming state (the last ``K - 1`` inputs).

    Args:
        fs: sampling rate (Hz); use_outerear: include the headphone filter.
        fir: explicit taps instead of :func:`casp_ear_fir`.
        learnable: the taps become a parameter.
    """

    def __init__(
        self,
        fs: float,
        use_outerear: bool = True,
        fir: np.ndarray | Tensor | None = None,
        learnable: bool = False,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        h = casp_ear_fir(fs, outer=use_outerear) if fir is None else np.asarray(fir, np.float64)
        # conv1d correlates: store the flipped taps
        w = torch.as_tensor(h[::-1].copy(), dtype=dtype)[None, None, :]
        register_coefficients(self, learnable, weight=w)

    def forward(
        self, x: Tensor, state: Tensor | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        buf, new = self._with_history(x, state)
        y = _fir(buf, self.weight, 0, 1, x.shape[-1])
        return (y, new) if return_state else y


class FIRDecimator(_StreamingFIR):
    """Anti-aliased decimation by ``factor`` along the last axis, causal and streaming.

    Output sample ``m`` is ``sum_k h[k] x[R m - k]`` (``R = factor``), ``h`` a Kaiser-window
    low-pass (``taps_per_phase R + 1`` taps, cut-off ``cutoff fs / (2 R)``, Kaiser ``beta``;
    the defaults give >= 80 dB attenuation above ``fs / (2 R)``). The state holds
    the last ``K - 1`` input samples and the count of samples seen, so chunks of any length
    give the one-shot result. ``fs`` must be a sampling rate, ``factor`` and
    ``taps_per_phase`` integers >= 1, ``cutoff`` in (0, 1], ``beta`` >= 0.
    """

    def __init__(
        self,
        fs: float,
        factor: int = 4,
        taps_per_phase: int = 24,
        cutoff: float = 0.78,
        beta: float = 8.0,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.fs = check_rate("fs", fs)
        self.factor = check_int("factor", factor, min=1)
        taps_per_phase = check_int("taps_per_phase", taps_per_phase, min=1)
        cutoff = check_number("cutoff", cutoff, min=0.0, max=1.0, min_inclusive=False)
        beta = check_number("beta", beta, min=0.0)
        check_dtype("dtype", dtype)
        if self.factor == 1:
            h = np.ones(1)
        else:
            h = kaiser_lowpass(
                taps_per_phase * self.factor + 1, cutoff * fs / (2.0 * self.factor), beta, fs
            )
        self.register_buffer("weight", torch.as_tensor(h[::-1].copy(), dtype=dtype)[None, None, :])

    def forward(
        self, x: Tensor, state: dict | None = None, return_state: bool = False
    ) -> Tensor | tuple[Tensor, dict]:
        """``x (..., T)`` -> ``(..., M)`` with ``M`` the number of ``n = R m`` in the chunk."""
        R, K = self.factor, self.num_taps
        lead, T = x.shape[:-1], x.shape[-1]
        st = state or {}
        buf, hist = self._with_history(x.reshape(-1, T), st.get("hist"))
        t0 = int(st.get("t", 0))
        j0 = (-t0) % R  # first local index with (t0 + j) % R == 0
        n_out = max(0, -(-(T - j0) // R))
        y = _fir(buf, self.weight, j0, R, n_out)
        y = y.reshape(*lead, n_out)
        new = {"hist": hist.reshape(*lead, K - 1), "t": t0 + T}
        return (y, new) if return_state else y


class Paulick2024(DecisionMixin, StreamingModel):
    """Paulick et al. (2024) revised CASP model (torch_amt-compatible constructor).

    Args:
        fs: sampling rate (Hz); 44.1 kHz reproduces the stored ear filters exactly.
        flow, fhigh, n_channels: ``n_channels`` DRNL channels equally spaced on the
            ERB-number scale from ``flow`` to ``fhigh`` (Hz), both included.
        use_outerear: apply the headphone filter (the middle ear is always applied).
        learnable: every stage's coefficients become parameters.
        return_stages: ``forward`` also returns ``{'outerear', 'drnl', 'ihc', 'adaptation',
            'resampled'}`` (``(B, T)``, then ``(B, C, T)``, ``resampled`` ``(B, C, T_R)``).
        filter_type: modulation filters, ``"efilt"`` (AMT) or ``"butterworth"``.
        dtype: computation dtype (float32 or float64).
        outerear_kwargs: for :class:`CASPEarFilter` (``fir``).
        drnl_kwargs: for :class:`~lhotse_amt.modules.drnl.DRNLFilterbank` (``preset``,
            ``params``, ``fc``).
        ihc_kwargs: for :class:`~lhotse_amt.modules.ihc_paulick.IHCPaulick2024`
            (``constants``, ``precharge_duration``).
        adaptation_kwargs: for :class:`~lhotse_amt.modules.adaptation.AdaptationLoops`
            (default ``preset="paulick2024"``).
        modulation_kwargs: for :class:`~lhotse_amt.modules.modulation.ModulationFilterbank`
            (default ``preset="paulick2024"``).
        resample_factor: decimation factor ``R`` after the adaptation loops (4).

    Input ``(T,)`` or ``(B, T)`` (level convention: module docstring). Output: list of
    ``num_channels`` tensors ``(B, M_c, ceil(T / R))`` (``(M_c, ...)`` for 1-D input), and
    with ``return_stages`` the stage dict. The decision methods on that output
    (``roi_selection``, ``compute_decision_variable``, ``detection_task``, …) are
    :class:`~lhotse_amt.models._decision.DecisionMixin`'s.
    """

    stage_names = ("outerear", "drnl", "ihc", "adaptation", "resampled", "modulation")
    channel_stage = "drnl"

    def __init__(
        self,
        fs: float = 44100,
        flow: float = 125.0,
        fhigh: float = 8000.0,
        n_channels: int = 50,
        use_outerear: bool = True,
        learnable: bool = False,
        return_stages: bool = False,
        filter_type: str = "efilt",
        dtype: torch.dtype = torch.float32,
        outerear_kwargs: dict | None = None,
        drnl_kwargs: dict | None = None,
        ihc_kwargs: dict | None = None,
        adaptation_kwargs: dict | None = None,
        modulation_kwargs: dict | None = None,
        *,
        resample_factor: int = 4,
    ) -> None:
        super().__init__()
        self._init_common(locals())
        check_int("n_channels", n_channels, min=1)
        check_bool("use_outerear", use_outerear)
        check_choice("filter_type", filter_type, ("efilt", "butterworth"))
        check_int("resample_factor", resample_factor, min=1)
        if fhigh >= fs / 2:
            raise ValueError(
                f"fhigh={fhigh:g} Hz must lie below the Nyquist frequency fs/2 = {fs / 2:g} Hz"
            )
        self.n_channels = int(n_channels)
        self.use_outerear = bool(use_outerear)
        self.filter_type = filter_type
        common = dict(learnable=learnable, dtype=dtype)
        self.outer_middle_ear = CASPEarFilter(
            fs, use_outerear=use_outerear, **(outerear_kwargs or {}), **common
        )
        dk = dict(drnl_kwargs or {})
        dk.setdefault("flow", flow)
        dk.setdefault("fhigh", fhigh)
        if dk.get("fc") is None:
            dk.setdefault("n_channels", n_channels)
        self.drnl = DRNLFilterbank(fs, **dk, **common)
        self.ihc = IHCPaulick2024(fs, **(ihc_kwargs or {}), **common)
        ak = dict(adaptation_kwargs or {})
        ak.setdefault("preset", "paulick2024")
        self.adaptation = AdaptationLoops(fs, **ak, **common)
        self.resampler = FIRDecimator(fs, resample_factor, dtype=dtype)
        self.resample_factor = int(resample_factor)
        self.fs_resampled = self.fs / self.resample_factor
        mk = dict(modulation_kwargs or {})
        mk.setdefault("preset", "paulick2024")
        mk.setdefault("filter_type", filter_type)
        self.modulation = ModulationFilterbank(
            self.fs_resampled, self.drnl.fc.detach(), **mk, **common
        )

        # ------------------------------------------------------------------ properties
        self._band_counts()  # constants of the design, for traced calls

    # ------------------------------------------------------------------ processing
    def _fused_ok(self, x: Tensor) -> bool:
        """The compiled DRNL -> IHC -> adaptation pass (``lhotse_amt::paulick_frontend``)
        applies: eager inference on the CPU (on CUDA the stages run as the operators)."""
        return self._eager_inference(x)

    def _adapt_constants(self, dtype: torch.dtype) -> tuple[Tensor, Tensor, Tensor, float, float]:
        ad = self.adaptation
        minlvl = 10.0 ** ((ad.minspl - ad.dboffset) / 20.0)
        tau = ad.tau.detach().to(torch.float64)
        a, m, s0 = adaptation_coefficients(tau, self.fs, ad.limit, minlvl)
        J = tau.shape[-1]
        c = minlvl ** (1.0 / 2.0**J)
        return a, m, s0, minlvl, c

    def _run_stages(self, x: Tensor, state: dict, last: int, out: dict, new: dict) -> None:
        names = self.stage_names
        y, new["outerear"] = self.outer_middle_ear(x, state.get("outerear"), return_state=True)
        out["outerear"] = y
        if last < 1:
            return
        fused = last >= names.index("adaptation") and not self.return_stages and self._fused_ok(y)
        if fused:
            from ..ops import paulick

            # with the decimated stages requested the decimator runs inside the kernel too
            # (no sample-rate output is stored; the "adaptation" stage is then not returned)
            dec = last >= names.index("resampled")
            ya, new["drnl"], new["ihc"], new["adaptation"], dst = paulick.frontend(
                y,
                *self._frontend_args(y, state),
                self.resampler.weight.reshape(-1) if dec else None,
                self.resample_factor,
                state.get("resampled"),
            )
            y = ya
            if dec:
                new["resampled"] = dst
                out["resampled"] = y
        else:
            y, new["drnl"] = self.drnl(y, state.get("drnl"), return_state=True)
            out["drnl"] = y
            if last >= names.index("ihc"):
                y, new["ihc"] = self.ihc(y, state.get("ihc"), return_state=True)
                out["ihc"] = y
            if last >= names.index("adaptation"):
                y, new["adaptation"] = self.adaptation(
                    y, state.get("adaptation"), return_state=True
                )
        if last >= names.index("adaptation") and "resampled" not in out:
            out["adaptation"] = y
        if last >= names.index("resampled") and "resampled" not in out:
            y, new["resampled"] = self.resampler(y, state.get("resampled"), return_state=True)
            out["resampled"] = y
        if last >= names.index("modulation"):
            if y.shape[-1] == 0:  # a chunk too short to reach the next decimated sample
                M = self.modulation.max_bands
                y = y.new_zeros(*y.shape[:-1], M, 0)
                new["modulation"] = state.get("modulation")
            else:
                y, new["modulation"] = self.modulation.forward_padded(
                    y, state.get("modulation"), return_state=True
                )
            out["modulation"] = y

    def _frontend_args(self, y: Tensor, state: dict[str, Any]) -> tuple:
        """The arguments of :func:`lhotse_amt.ops.paulick.frontend` from ``drnl_coefs`` to
        ``out_scale`` for the stapes velocity ``y (B, T)`` and the stream ``state`` (IHC and
        adaptation states at rest where missing)."""
        B, C = y.shape[0], self.num_channels
        a, m, s0, minlvl, c0 = self._adapt_constants(y.dtype)
        J = a.shape[-1]
        ihc_c = {k: float(v) for k, v in self._ihc_step_constants(torch.float64).items()}
        ist = state.get("ihc")
        ist = y.new_zeros(B, C, dtype=torch.float64) if ist is None else ist
        ast = state.get("adaptation")
        ast = s0.expand(B, C, J) if ast is None else ast
        d = self.drnl
        coefs = (
            d.lin_gain, torch.cat([d.lin_gt, d.lin_lp], -2), d.nl_gt,
            torch.cat([d.nl_gt, d.nl_lp], -2), d.a, d.b, float(d.c),
        )  # fmt: skip
        return (coefs, state.get("drnl"), ihc_c, ist, a.expand(C, J), m.expand(C, J), ast,
                minlvl, self.adaptation.limit > 1.0, c0, 100.0 / (1.0 - c0))  # fmt: skip

    def pooled_frames_supported(self) -> bool:
        """Whether :meth:`pooled_frames` runs this model (the register kernels: the
        one-pole ``efilt`` modulation bands, broken-stick exponent 1/4, a decimator)."""
        from ..ops import paulick

        return self.pooled_modulation_supported() and paulick.pooled_supported(
            float(self.drnl.c), self.resample_factor
        )

    def pooled_frames(
        self, x: Tensor, starts: Any, stops: Any, counts: Any, square: bool
    ) -> Tensor:
        """No-grad inference of the whole model on ``x (B, T)`` from rest, pooled into
        frames in one pass (operator ``lhotse_amt::paulick_pooled``, the ear filter included:
        one launch and memory for the frames, whatever the length; needs
        :meth:`pooled_frames_supported`). Frame ``f`` of item
        ``b`` is the mean (the rms if ``square``) of the modulation filterbank's output held
        over ``R`` input samples per decimated sample, over input samples
        ``[starts[b, f], stops[b, f])``, ``counts[b]`` frames (int64 arrays ``(B, F)``,
        ``(B,)``). Returns ``(B, C, M + 1, F)`` float64: the frames of :meth:`stream` up to
        ``"resampled"`` followed by :func:`lhotse_amt.ops.fused.modulation_pooled`."""
        from ..ops import fused, paulick

        x = self._to_model(as_float_tensor(x))
        check_signal(x, min_samples=1, min_dim=2, max_dim=2, name="Paulick2024 input")
        args = self._frontend_args(x, {})
        frames = [
            torch.from_numpy(np.ascontiguousarray(a, np.int64)) for a in (starts, stops, counts)
        ]
        return paulick.pooled(
            x, self.outer_middle_ear.weight.reshape(-1), (args[0], *args[2:]),
            self.resampler.weight.reshape(-1), self.resample_factor,
            fused.pooled_filters(self.modulation), frames, bool(square),
        )  # fmt: skip

    def _ihc_step_constants(self, dtype: torch.dtype) -> dict[str, Tensor]:
        from ..functional.ihc_paulick import ihc_step_constants

        p = {k: v.detach().to(torch.float64) for k, v in self.ihc.constants().items()}
        c = ihc_step_constants(p, self.fs, self.ihc.precharge_duration)
        return {k: v.to(dtype) for k, v in c.items()}

    def forward(self, x: Tensor) -> list[Tensor] | tuple[list[Tensor], dict[str, Tensor]]:
        xb, squeeze = self._prepare(x)
        out, _ = self._stages(xb, None, None)
        mod = out["modulation"]
        if squeeze:
            mod = mod[0]
            out = {k: v[0] for k, v in out.items()}
        # unbind: one backward node for all channels (per-channel selects would each
        # scatter into a zero tensor of the whole output)
        chans = [
            band[..., : int(n), :]
            for band, n in zip(mod.unbind(-3), self._band_counts(), strict=True)
        ]
        if self.return_stages:
            keys = ("outerear", "drnl", "ihc", "adaptation", "resampled")
            return chans, {k: out[k] for k in keys}
        return chans

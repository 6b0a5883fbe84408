"""King, Varnet & Lorenzi (2019) model (AMT ``king2019``).

Gammatone filterbank (31 channels, 80-8000 Hz, grid centred in the range) ->
sign-preserving broken-stick compression (knee 30 dB SPL, exponent 0.3) -> IHC
(half-wave rectification, 1st-order Butterworth low-pass at 1000 Hz) -> "adaptation":
1st-order Butterworth high-pass at 3 Hz -> modulation filterbank (2nd-order Butterworth
band-passes, Q = 1, at 2, 5.236, 13.708, 35.889, 93.957 Hz) -> phase insensitivity
(rms-matched Hilbert envelope above 10 Hz) -> optional resampling to ``subfs``.

**Level convention**: rms 1 = ``dboffset`` dB SPL (default 100, as the AMT help text
describes and the reference data use; AMT 1.4's own default ``dbspl(1) = 93.98`` moves
the knee by 6 dB). The knee amplitude is ``10^((knee_db - dboffset) / 20)``.

**Where this differs from the torch_amt documentation** (AMT and the paper win; the
documented value is an option): IHC cut-off 1000 Hz (AMT code) vs 1500 Hz (``ihc_kwargs=
{"cutoff": 1500}``); compression keeps the sign (AMT). **Numerics**: the band-passes run
as second-order sections by default; ``preset="amt-1.4"`` runs AMT's expanded transfer
functions in direct form (float64) with AMT's coefficient bits at 16/44.1 kHz, which
reproduces AMT's ill-conditioned 2- and 5.2-Hz bands (reference README section 6).

**Causality**: every stage up to the modulation filterbank is causal and streamable
(:meth:`stream`); the phase insensitivity (whole-signal FFT and rms) and the resampling
are not and run only in :meth:`forward`.

**Inference** (no autograd, CPU, no ``return_stages``, second-order-section band-passes):
one fused kernel runs every stage up to the modulation filterbank and writes the band
outputs straight into the output (:mod:`lhotse_amt.kernels.king2019`: float64 recursions
whatever the model dtype; for float32 models with the states of 8 channels in vector
registers, :mod:`lhotse_amt.kernels.king2019_simd`). The phase insensitivity then needs
one Hilbert transform per channel (of the band-pass input) instead of one per band
output: ``H{F(u)}`` is ``F`` run periodically over ``H{u}`` minus a wrap-around term, the
same numbers as the FFT of each band output to ~1e-11 (float64).

Reference: A. King, L. Varnet, C. Lorenzi (2019), "Accounting for masking of frequency
modulation by amplitude modulation with the modulation filter-bank concept", JASA 145,
2277-2293.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from .. import _alloc
from .._validation import (
    check_band,
    check_bool,
    check_int,
    check_level_db,
    check_number,
    check_positive_finite,
    check_str,
)
from ..functional.erb import erb_to_freq, freq_to_erb
from ..functional.king2019_modulation import phase_insensitive_bands, phase_insensitivity
from ..functional.resample import rational_factors, resample_poly
from ..modules import GammatoneFilterbank, IHCEnvelope
from ..modules.compression import BrokenStickCompression, PowerCompression
from ..modules.king2019_modulation import ButterworthFilter, King2019ModulationFilterbank
from ._base import StreamingModel, merge_preset

__all__ = ["King2019", "KING2019_PRESETS"]

#: ``amt-1.4`` = AMT 1.4 ``king2019(x, fs, 'flow', 80, 'fhigh', 8000, 'subfs', [],
#: 'dboffset', 100)`` (reference README section 5.3).
KING2019_PRESETS: dict[str, dict[str, dict]] = {
    "amt-1.4": dict(modulation=dict(form="tf", amt_coefficients=True)),
}


class King2019(StreamingModel):
    """King et al. (2019) auditory model (torch_amt-compatible constructor).

    Args:
        fs: sampling rate (Hz).
        flow, fhigh: gammatone grid range (Hz; every channel must lie below ``fs/2``).
        basef: if given, the grid is the 5 channels ``E(basef) + k`` ERB, ``k = -2 ... 2``
            (``flow``/``fhigh`` = ``basef`` -/+ 2 ERB).
        compression_type: ``"brokenstick"`` (AMT) or ``"power"``.
        compression_n: exponent (0.3). compression_knee_db: knee (dB SPL, 30).
        dboffset: dB SPL of rms 1 (100).
        adt_hp_fc, adt_hp_order: the "adaptation" high-pass (3 Hz, 1st order).
        mflow, mfhigh, modbank_nmod, modbank_qfactor: modulation filterbank layout.
        lp_150hz: 150-Hz 1st-order low-pass before the modulation filterbank (off).
        subfs: resample the output to this rate (anti-aliased polyphase FIR, as
            ``scipy.signal.resample_poly``); ``None`` keeps ``fs``. (AMT 1.4's default is
            16000; the reference data use none.)
        phase_insensitive: apply the Hilbert-envelope stage (non-causal; default on).
        pi_cutoff: bands above this modulation frequency become envelopes (10 Hz).
        learnable, return_stages, dtype: as for the other models.
        filterbank_kwargs, compression_kwargs, ihc_kwargs, adaptation_kwargs,
            modulation_kwargs: passed to the stage modules (``ihc_kwargs={"cutoff": 1500}``
            for the torch_amt documentation's IHC; ``modulation_kwargs={"form": "tf"}``
            for direct-form band-passes).
        preset: ``"amt-1.4"`` (see the module docstring); explicit kwargs override it.

    Input ``(T,)`` or ``(B, T)``. Output ``(B, T', F, M)`` (``(T', F, M)`` for 1-D input);
    with ``return_stages`` also ``{'gtone_response', 'compressed_response', 'ihc',
    'adapted_response'}`` ``(B, F, T)`` and ``'modulation_response'`` ``(B, F, M, T)``
    (band outputs before the phase insensitivity).
    """

    stage_names = ("filterbank", "compression", "ihc", "adaptation", "modulation")
    fused_chain = "king2019"

    def __init__(
        self,
        fs: float,
        flow: float = 80.0,
        fhigh: float = 8000.0,
        basef: float | None = None,
        compression_type: str = "brokenstick",
        compression_n: float = 0.3,
        compression_knee_db: float = 30.0,
        dboffset: float = 100.0,
        adt_hp_fc: float = 3.0,
        adt_hp_order: int = 1,
        mflow: float = 2.0,
        mfhigh: float = 150.0,
        modbank_nmod: int | None = None,
        modbank_qfactor: float = 1.0,
        lp_150hz: bool = False,
        subfs: float | None = None,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        filterbank_kwargs: dict | None = None,
        compression_kwargs: dict | None = None,
        ihc_kwargs: dict | None = None,
        adaptation_kwargs: dict | None = None,
        modulation_kwargs: dict | None = None,
        *,
        preset: str | None = None,
        phase_insensitive: bool = True,
        pi_cutoff: float = 10.0,
    ) -> None:
        super().__init__()
        p = self._init_common(locals(), KING2019_PRESETS)
        check_positive_finite("basef", basef, allow_none=True)
        check_str("compression_type", compression_type)
        check_number("compression_n", compression_n, min=0.0, max=10.0, min_inclusive=False)
        check_number("compression_knee_db", compression_knee_db)
        check_level_db("dboffset", dboffset)
        check_positive_finite("adt_hp_fc", adt_hp_fc)
        check_int("adt_hp_order", adt_hp_order, min=1)
        check_band(mflow, mfhigh, names=("mflow", "mfhigh"))
        check_int("modbank_nmod", modbank_nmod, min=1, allow_none=True)
        check_number("modbank_qfactor", modbank_qfactor, min=0.0, max=100.0, min_inclusive=False)
        check_bool("lp_150hz", lp_150hz)
        check_positive_finite("subfs", subfs, allow_none=True)
        check_bool("phase_insensitive", phase_insensitive)
        check_number("pi_cutoff", pi_cutoff, min=0.0)
        if compression_type not in ("brokenstick", "power"):
            raise ValueError(
                f"compression_type must be 'brokenstick' or 'power', got {compression_type!r}"
            )
        if subfs is not None and not subfs > 0:
            raise ValueError(f"subfs must be positive or None, got {subfs!r}")
        self.dboffset = float(dboffset)
        self.compression_type = compression_type
        self.subfs = None if subfs is None else float(subfs)
        self.phase_insensitive = bool(phase_insensitive)
        self.pi_cutoff = float(pi_cutoff)
        common = dict(learnable=learnable, dtype=dtype)
        fb = merge_preset(p.get("filterbank"), filterbank_kwargs)
        if basef is not None:
            eb = float(freq_to_erb(basef))
            flow, fhigh = float(erb_to_freq(eb - 2.0)), float(erb_to_freq(eb + 2.0))
            fb.setdefault("basef", basef)
        self.flow, self.fhigh, self.basef = float(flow), float(fhigh), basef
        fb.setdefault("flow", flow)
        fb.setdefault("fhigh", fhigh)
        self.filterbank = GammatoneFilterbank(fs, **fb, **common)
        ck = merge_preset(p.get("compression"), compression_kwargs)
        if compression_type == "brokenstick":
            ck.setdefault("knee_db", compression_knee_db)
            ck.setdefault("exponent", compression_n)
            ck.setdefault("dboffset", dboffset)
            self.compression = BrokenStickCompression(**ck, **common)
        else:
            ck.setdefault("exponent", compression_n)
            self.compression = PowerCompression(**ck, **common)
        ik = merge_preset(p.get("ihc"), ihc_kwargs)
        ik.setdefault("method", "king2019")
        self.ihc = IHCEnvelope(fs, **ik, **common)
        ak = merge_preset(p.get("adaptation"), adaptation_kwargs)
        ak.setdefault("fc", adt_hp_fc)
        ak.setdefault("order", adt_hp_order)
        ak.setdefault("btype", "high")
        self.adaptation_filter = ButterworthFilter(fs, **ak, **common)
        self.lp150_filter = ButterworthFilter(fs, 150.0, 1, "low", **common) if lp_150hz else None
        mk = merge_preset(p.get("modulation"), modulation_kwargs)
        for k, v in dict(
            mflow=mflow, mfhigh=mfhigh, nmod=modbank_nmod, qfactor=modbank_qfactor
        ).items():
            mk.setdefault(k, v)
        self.modulation_filterbank = King2019ModulationFilterbank(fs, **mk, **common)
        # the bands of the phase insensitivity (constants of the design, for traced calls)
        self.__dict__["_pi_sel"] = tuple(self._pi_bands())

    @property
    def mfc(self) -> Tensor:  # type: ignore[override]
        """Modulation centre frequencies (Hz), ``(M,)``."""
        return self.modulation_filterbank.mfc

    def _run_stages(self, x: Tensor, state: dict, last: int, out: dict, new: dict) -> None:
        y, new["filterbank"] = self.filterbank(x, state.get("filterbank"), return_state=True)
        out["filterbank"] = y
        if last >= 1:
            y = self.compression(y)
            out["compression"] = y
        if last >= 2:
            y, new["ihc"] = self.ihc(y, state.get("ihc"), return_state=True)
            out["ihc"] = y
        if last >= 3:
            y, new["adaptation"] = self.adaptation_filter(
                y, state.get("adaptation"), return_state=True
            )
            out["adaptation"] = y
        if last >= 4:
            if self.lp150_filter is not None:
                y, new["lp150"] = self.lp150_filter(y, state.get("lp150"), return_state=True)
            y, new["modulation"] = self.modulation_filterbank(
                y, state.get("modulation"), return_state=True
            )
            out["modulation"] = y

    def _mfc_np(self) -> np.ndarray:
        """The modulation centre frequencies as numbers (they select the bands of the
        phase insensitivity). Read from the buffer in eager mode; while traced by
        ``torch.compile``/``torch.export`` the values of the last eager read (or of the
        design) are used, since they are constants of the configuration."""
        cache = self.__dict__.get("_mfc_values")
        if torch.compiler.is_compiling() and cache is not None:
            return cache
        values = self.mfc.detach().cpu().double().numpy().copy()
        self.__dict__["_mfc_values"] = values
        return values

    def _stages_modulation(self, x: Tensor) -> Tensor:
        """Modulation filterbank output ``(B, F, M, T)`` of ``x (B, T)`` by the stages."""
        return self._stages(x, None, None)[0]["modulation"]

    def _pi_bands(self) -> list[int]:
        """Bands that the phase insensitivity turns into envelopes (``mfc > pi_cutoff``)."""
        if not self.phase_insensitive:
            return []
        return phase_insensitive_bands(self._mfc_np(), self.pi_cutoff)

    def _fused_modulation(self, x: Tensor) -> Tensor | None:
        """Phase-insensitive modulation filterbank output ``(B, F, M, T)`` of ``x (B, T)``
        by the fused operator (:func:`lhotse_amt.ops.fused.king_samples`:
        float64 recursions, no sample-rate intermediate but the band-pass inputs; on CUDA
        the Triton kernel of ``king_pooled``); ``None`` where it does not apply (the
        direct-form ``"tf"`` band-passes)."""
        from ..ops import fused

        if not fused.chain_supported(self, "king2019"):
            return None

        def make(m64: torch.nn.Module, precise: bool) -> object:
            M = int(m64.mfc.numel())
            return fused.king_plan(m64, np.ones(M), np.zeros(M, bool), precise)

        plan = self._kernel_plan("king2019", make)
        y = _alloc.empty_tensor((x.shape[0], plan.C, plan.M, x.shape[-1]), self.dtype, x.device)
        fused.king_samples(plan, x, y, self._pi_bands())
        return y

    def forward(self, x: Tensor) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        xb, squeeze = self._prepare(x)
        if self._fused_inference(xb):
            # inference: the fused kernel writes the band outputs straight into the output
            # (CPU, CUDA), else item by item into one output tensor (peak memory: the
            # output plus one item's stages); the phase insensitivity runs in place
            y = self._fused_modulation(xb)
            if y is None:
                y = self._itemwise(xb, self._stages_modulation)
                if self.phase_insensitive:
                    y = phase_insensitivity(y, self._mfc_np(), self.pi_cutoff, inplace=True)
            out = {}
        else:
            out, _ = self._stages(xb, None, None)
            y = out["modulation"]  # (B, F, M, T)
            if self.phase_insensitive:
                y = phase_insensitivity(
                    y, self._mfc_np(), self.pi_cutoff, bands=self.__dict__["_pi_sel"]
                )
        if self.subfs is not None and self.subfs != self.fs:
            up, down = rational_factors(self.fs, self.subfs)
            y = resample_poly(y, up, down)
        y = y.permute(0, 3, 1, 2)
        if squeeze:
            y = y[0]
            out = {k: v[0] for k, v in out.items()}
        if self.return_stages:
            names = dict(
                filterbank="gtone_response",
                compression="compressed_response",
                ihc="ihc",
                adaptation="adapted_response",
                modulation="modulation_response",
            )
            return y, {names[k]: v for k, v in out.items()}
        return y

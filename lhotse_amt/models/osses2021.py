"""Osses Vecchi & Kohlrausch (2021) model (AMT ``osses2021``).

Headphone + outer-ear FIR (Pralong & Carlile 1996) -> middle-ear FIR (Lopez-Poveda &
Meddis 2001) -> gammatone filterbank (31 channels, 80-8000 Hz, grid centred in the range)
-> IHC envelope (Breebaart et al. 2001: half-wave rectification, five 1st-order 2-kHz
low-passes) -> adaptation loops (overshoot limit 5) -> modulation filterbank (Jepsen et
al. 2008: 150-Hz pre-filter, filters up to a quarter of the channel frequency and at most
1000 Hz, ``1/sqrt(2)`` on the envelope bands).

**Level convention** (AMT, ``dboffset = 100``): rms 1 = 100 dB SPL. Outputs after the
adaptation loops are model units (MU).

**Ear filters and time alignment.** AMT 1.4 uses a linear-phase headphone filter and a
minimum-phase middle-ear filter and applies each with a 257-sample *advance* (append 257
zeros, filter, drop the first 257 samples), which keeps the length but makes the chain
non-causal (output sample ``n`` depends on inputs up to ``n + 514``). ``preset="amt-1.4"``
reproduces that exactly. The default (no preset) is minimum phase for both filters
without compensation: causal, a few samples of delay. ``compensation="trim"`` is the
torch_amt convention (drop 256 leading samples per filter: the output is shorter).

**Streaming.** :meth:`stream` is exact for every mode: with ``"amt"`` compensation the
ear stages withhold their first :attr:`lookahead` output samples, so stream outputs lag
the input by ``lookahead`` samples; append ``lookahead`` zeros after the signal (AMT's
padding) and give the per-item signal lengths in the initial state
(:meth:`initial_stream_state`) so that the middle-ear input is cut at the signal end as
in AMT. :meth:`forward` does exactly this in one call.

**Inference** (no autograd, CPU, no ``return_stages``): after the ear filters one fused
kernel runs gammatone, IHC, adaptation loops and modulation filterbank and writes each
channel's bands straight into the output (:mod:`lhotse_amt.kernels.casp`: float64
recursions whatever the model dtype; for float32 models with the states of 8 channels
in vector registers, :mod:`lhotse_amt.kernels.casp_simd`); otherwise the stages run one
by one.

References: A. Osses Vecchi, A. Kohlrausch (2021), JASA 149, 3534-3552; M. L. Jepsen,
S. D. Ewert, T. Dau (2008), JASA 124, 422-438; J. Breebaart, S. van de Par, A. Kohlrausch
(2001), JASA 110, 1074-1088; D. Pralong, S. Carlile (1996), JASA 100, 3785-3793;
E. A. Lopez-Poveda, R. Meddis (2001), JASA 110, 3107-3118.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .._validation import check_choice
from ..modules import AdaptationLoops, GammatoneFilterbank, IHCEnvelope, ModulationFilterbank
from ..modules.ear import HeadphoneFilter, MiddleEarFilter
from ._base import merge_preset
from ._casp import CASPModel

__all__ = ["Osses2021", "OSSES2021_PRESETS"]

#: ``amt-1.4`` = AMT 1.4 ``osses2021(x, fs)`` (reference README section 5.4).
OSSES2021_PRESETS: dict[str, dict[str, dict]] = {
    "amt-1.4": dict(
        headphone=dict(phase="linear", compensation="amt"),
        middleear=dict(phase="minimum", compensation="amt"),
        modulation=dict(preset="amt-1.4-jepsen2008"),
    ),
}

_DEFAULTS: dict[str, dict] = dict(
    headphone=dict(phase="minimum", compensation="none"),
    middleear=dict(phase="minimum", compensation="none"),
    filterbank=dict(),
    ihc=dict(method="breebaart2001"),
    adaptation=dict(preset="osses2021"),
    modulation=dict(preset="amt-1.4-jepsen2008"),
)


class Osses2021(CASPModel):
    """Osses & Kohlrausch (2021) auditory model (torch_amt-compatible constructor).

    Args:
        fs: sampling rate (Hz).
        flow, fhigh: range of the ERB-spaced gammatone grid (Hz; ``fhigh < fs/2``).
        phase_type: ``"minimum"`` (default) or ``"linear"`` for both ear filters
            (``None``: the preset's, else minimum). AMT 1.4 = linear headphone filter +
            minimum-phase middle-ear filter (``preset="amt-1.4"``).
        learnable: every stage's coefficients become parameters.
        return_stages: also return the ``{'headphone', 'middleear', 'filterbank', 'ihc',
            'adaptation'}`` outputs (``(B, T)`` for the ear stages, ``(B, C, T)`` after).
        dtype: computation dtype.
        compensation: ear-filter delay compensation for both filters: ``"none"``
            (causal; default), ``"amt"`` (257-sample advance, same length: AMT 1.4) or
            ``"trim"`` (drop 256 leading samples per filter: torch_amt; shorter output).
        headphone_kwargs: for :class:`~lhotse_amt.modules.ear.HeadphoneFilter`
            (``numtaps``, ``phase``, ``compensation``).
        middleear_kwargs: for :class:`~lhotse_amt.modules.ear.MiddleEarFilter`
            (``numtaps``, ``phase``, ``normalize``, ``compensation``).
        filterbank_kwargs, ihc_kwargs, adaptation_kwargs, modulation_kwargs: as for
            :class:`~lhotse_amt.models.dau1997.Dau1997`. The modulation default is AMT's
            ``mfb_jepsen2008`` (``preset="amt-1.4-jepsen2008"``: filters up to 1000 Hz);
            the torch_amt documentation's 150-Hz maximum is
            ``modulation_kwargs={"preset": "jepsen2008"}``.
        preset: ``"amt-1.4"`` reproduces AMT 1.4 ``osses2021`` exactly. Explicit keyword
            arguments override the preset.

    Input: ``(T,)`` or ``(B, T)``. Output: list of ``num_channels`` tensors ``(B, M_c, T)``
    (``(M_c, T)`` for 1-D input); band 0 is the 2.5-Hz low-pass.
    """

    stage_names = ("headphone", "middleear", "filterbank", "ihc", "adaptation", "modulation")

    def __init__(
        self,
        fs: float,
        flow: float = 80.0,
        fhigh: float = 8000.0,
        phase_type: str | None = None,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        headphone_kwargs: dict | None = None,
        middleear_kwargs: dict | None = None,
        filterbank_kwargs: dict | None = None,
        ihc_kwargs: dict | None = None,
        adaptation_kwargs: dict | None = None,
        modulation_kwargs: dict | None = None,
        *,
        preset: str | None = None,
        compensation: str | None = None,
    ) -> None:
        super().__init__()
        p = self._init_common(locals(), OSSES2021_PRESETS)
        check_choice("compensation", compensation, (None, "none", "amt", "trim"))
        if phase_type is not None and phase_type not in ("minimum", "linear"):
            raise ValueError(
                f"phase_type must be 'minimum' or 'linear', got {phase_type!r} (for a "
                "zero-phase-like alignment use phase_type='linear', compensation='amt')"
            )
        cfg = {k: merge_preset(v, p.get(k)) for k, v in _DEFAULTS.items()}
        for k in ("headphone", "middleear"):
            if phase_type is not None:
                cfg[k]["phase"] = phase_type
            if compensation is not None:
                cfg[k]["compensation"] = compensation
        cfg = {k: merge_preset(v, self._init_kwargs[f"{k}_kwargs"]) for k, v in cfg.items()}
        self.phase_type = cfg["headphone"]["phase"]
        common = dict(learnable=learnable, dtype=dtype)
        fb = cfg["filterbank"]
        fb.setdefault("flow", flow)
        fb.setdefault("fhigh", fhigh)
        # the filterbank checks fhigh against fs/2 first: the clearest error message
        self.filterbank = GammatoneFilterbank(fs, **fb, **common)
        self.headphone = HeadphoneFilter(fs, **cfg["headphone"], **common)
        self.middleear = MiddleEarFilter(fs, **cfg["middleear"], **common)
        self.ihc = IHCEnvelope(fs, **cfg["ihc"], **common)
        self.adaptation = AdaptationLoops(fs, **cfg["adaptation"], **common)
        self.modulation = ModulationFilterbank(
            fs, self.filterbank.fc.detach(), **cfg["modulation"], **common
        )
        self._band_counts()  # constants of the design, for traced calls

    @property
    def lookahead(self) -> int:
        """Total non-causal advance of the ear filters (samples; 514 for ``amt-1.4``)."""
        return self.headphone.lookahead + self.middleear.lookahead

    def initial_stream_state(self, lengths: Tensor | list[int] | None = None) -> dict[str, Any]:
        """Initial :meth:`stream` state; ``lengths`` (per-item signal lengths) make the
        look-ahead flush exact at each item's end (see the module docstring)."""
        if lengths is None:
            return {}
        return {"end": torch.as_tensor(lengths, dtype=torch.long)}

    def _fused_front(self, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        """The ear filters before the fused chain, with :meth:`stream`'s semantics."""
        st = state or {}
        end = st.get("end")
        y, hp = self.headphone.stream(x, st.get("headphone"), end)
        y, me = self.middleear.stream(y, st.get("middleear"), end)
        return y, {"end": end, "headphone": hp, "middleear": me}

    def _carried_state(self, state: dict[str, Any]) -> dict[str, Any]:
        return {"end": state.get("end")}

    def _stage(self, name: str, y: Tensor, state: dict[str, Any]) -> tuple[Tensor, Any]:
        if name in ("headphone", "middleear"):
            return getattr(self, name).stream(y, state.get(name), state.get("end"))
        return super()._stage(name, y, state)

    def run(self, x: Tensor, upto: str | None = None) -> dict[str, Tensor]:
        """One-shot run of the stages on ``x (B, T)`` with AMT's end-of-signal handling:
        returns the stage outputs (``(B, T)`` / ``(B, C, T)`` / ``(B, C, M, T)``)."""
        D = self.lookahead
        state = None
        if D:
            B, T = x.shape
            x = torch.nn.functional.pad(x, (0, D))
            state = self.initial_stream_state([T] * B)
        out, _ = self.stream(x, state, upto)
        return out

    _run = run  # the one-shot run of :meth:`CASPModel.forward`

    def _casp_front(self, x: Tensor) -> Tensor:
        return self.run(x, upto="middleear")["middleear"]

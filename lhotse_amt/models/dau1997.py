"""Dau, Kollmeier & Kohlrausch (1997) modulation-filterbank model.

Gammatone filterbank -> IHC envelope -> adaptation loops -> modulation filterbank.

**Level convention** (AMT): the input is sound pressure on the scale where a signal of
rms 1 has 100 dB SPL (``dboffset = 100``), i.e. a sinusoid of peak amplitude
``sqrt(2) 10^((L - 100) / 20)`` has level ``L`` dB SPL. The adaptation loops' minimum
level of 0 dB SPL is ``1e-5`` on that scale. Outputs after the adaptation loops are in
model units (MU).

**Inference** (no autograd, CPU, no ``return_stages``, ``efilt`` bands): one fused
kernel runs the whole chain and writes each channel's bands straight into the output
(:mod:`lhotse_amt.kernels.casp`: float64 recursions whatever the model dtype; for
float32 models with the states of 8 channels in vector registers,
:mod:`lhotse_amt.kernels.casp_simd`); otherwise the stages run one by one.

References: T. Dau, B. Kollmeier, A. Kohlrausch (1997), JASA 102, 2892-2905;
T. Dau, D. Püschel, A. Kohlrausch (1996), JASA 99, 3615-3622; AMT ``dau1997``.
"""

from __future__ import annotations

import torch

from ..modules import AdaptationLoops, GammatoneFilterbank, IHCEnvelope, ModulationFilterbank
from ._base import merge_preset
from ._casp import CASPModel

__all__ = ["Dau1997", "DAU1997_PRESETS"]

#: Reference configurations (``../shared/reference``): ``amt-0.9.10`` = AMT 0.9.10
#: ``dau1997_preproc``; ``amt-1.4`` = AMT 1.4 ``dau1997`` (``mfb_jepsen2008``);
#: ``amt-1.4-mfb-dau1997`` = AMT 1.4 ``dau1997(..., 'mfb_dau1997')``.
DAU1997_PRESETS: dict[str, dict[str, dict]] = {
    name: dict(
        filterbank=dict(basef=1000.0),
        ihc=dict(method="dau1996"),
        adaptation=dict(preset="dau1997"),
        modulation=dict(preset=modulation),
    )
    for name, modulation in (
        ("amt-0.9.10", "amt-0.9.10"),
        ("amt-1.4", "amt-1.4-jepsen2008"),
        ("amt-1.4-mfb-dau1997", "amt-1.4-dau1997"),
    )
}


class Dau1997(CASPModel):
    """Dau et al. (1997) auditory model (torch_amt-compatible constructor).

    Args:
        fs: sampling rate (Hz).
        flow, fhigh: range of the ERB-spaced gammatone grid (Hz).
        learnable: every stage's coefficients become parameters.
        return_stages: also return ``{'filterbank', 'ihc', 'adaptation'}`` outputs.
        dtype: computation dtype (float32 or float64).
        filterbank_kwargs: for :class:`~lhotse_amt.modules.GammatoneFilterbank`
            (``n``, ``erb_scale``, ``basef``, ``bwmul``, ``fc``).
        ihc_kwargs: for :class:`~lhotse_amt.modules.IHCEnvelope` (``method``, ``cutoff``).
        adaptation_kwargs: for :class:`~lhotse_amt.modules.AdaptationLoops`
            (``tau``, ``limit``, ``minspl``, ``preset``).
        modulation_kwargs: for :class:`~lhotse_amt.modules.ModulationFilterbank`
            (``Q``, ``max_mfc``, ``filter_type``, ``att_factor``, ``use_upper_limit``,
            ``lp150``, ``preset``).
        preset: reproduce a reference configuration exactly: ``"amt-0.9.10"``,
            ``"amt-1.4"`` or ``"amt-1.4-mfb-dau1997"`` (30 channels on the grid through
            1 kHz, IHC ``dau1996``, loops with limit 10, and the respective modulation
            filterbank). Explicit keyword arguments override the preset.

    Defaults (no preset) follow the torch_amt documentation: 31 channels 80-8000 Hz
    (grid centred in the range), IHC ``dau1996``, loops ``dau1997`` (limit 10), modulation
    bank ``Q = 2`` up to 150 Hz without upper limit (8 bands in every channel), no 150-Hz
    pre-filter, ``att_factor = 1``.

    Input: ``(T,)`` or ``(B, T)`` (see the level convention in the module docstring).
    Output: list of ``num_channels`` tensors ``(B, M_c, T)`` (``(M_c, T)`` for 1-D input);
    with ``return_stages`` also a dict of ``(B, C, T)`` stage outputs.
    """

    stage_names = ("filterbank", "ihc", "adaptation", "modulation")

    def __init__(
        self,
        fs: float,
        flow: float = 80.0,
        fhigh: float = 8000.0,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        filterbank_kwargs: dict | None = None,
        ihc_kwargs: dict | None = None,
        adaptation_kwargs: dict | None = None,
        modulation_kwargs: dict | None = None,
        *,
        preset: str | None = None,
    ) -> None:
        super().__init__()
        p = self._init_common(locals(), DAU1997_PRESETS)
        common = dict(learnable=learnable, dtype=dtype)
        fb = merge_preset(p.get("filterbank"), filterbank_kwargs)
        fb.setdefault("flow", flow)
        fb.setdefault("fhigh", fhigh)
        self.filterbank = GammatoneFilterbank(fs, **fb, **common)
        self.ihc = IHCEnvelope(fs, **merge_preset(p.get("ihc"), ihc_kwargs), **common)
        self.adaptation = AdaptationLoops(
            fs, **merge_preset(p.get("adaptation"), adaptation_kwargs), **common
        )
        self.modulation = ModulationFilterbank(
            fs,
            self.filterbank.fc.detach(),
            **merge_preset(p.get("modulation"), modulation_kwargs),
            **common,
        )
        self._band_counts()  # constants of the design, for traced calls

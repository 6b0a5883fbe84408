"""Moore, Glasberg, Varathanathan & Schlittenlacher (2016): binaural time-varying loudness."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._attributes import forwarded_attribute
from .._validation import (
    check_band,
    check_bool,
    check_choice,
    check_positive_finite,
)
from ..functional import loudness as L
from ..modules.loudness import (
    BinauralInhibition,
    ExcitationPattern,
    LoudnessAGC,
    MultiResolutionSpectrum,
    OuterMiddleEarFilter,
    SpecificLoudness,
)
from ._loudness import GM2002_AGC, LoudnessModelBase, agc_coefficient, unused_keys

__all__ = ["Moore2016", "MOORE2016_PRESETS"]

#: Reference variants. ``"amt-1.4"``: the AMT 1.4 ``moore2016`` model (Cambridge code of
#: J. Schlittenlacher, 2018), i.e. the 2016 model with the AGC constants of Moore, Jervis,
#: Harries & Schlittenlacher (2018), run in GNU Octave (the lowest channel, 47.5 Hz, gets A = NaN
#: outside the A(G) table and its specific loudness is set to 0). ``"moore2016-original"``: the
#: AGC constants of the 2016 paper (STL release 0.02, LTL release 0.0005) and MATLAB
#: interpolation semantics (A extrapolated for the lowest channel).
MOORE2016_PRESETS: dict[str, dict[str, Any]] = {
    "amt-1.4": {
        **GM2002_AGC,
        "stl_release": 0.033,
        "ltl_release": 0.00133,
        "lowest_channel": "zero",
    },
    "moore2016-original": {**GM2002_AGC, "lowest_channel": "extrapolate"},
}


class Moore2016(LoudnessModelBase):
    """Binaural loudness model for time-varying sounds (Moore et al. 2016).

    Pipeline per ear (1-ms frames, frame ``j`` centred on input sample ``32 j``, ``j = 0 …
    floor(T / 32)``), one stage submodule each (:mod:`lhotse_amt.modules.loudness`):

    * ``outer_middle_ear``: free-field outer + middle-ear FIR (``ff_32000``, 4097 taps, linear
      phase, applied by FFT convolution with its delay removed);
    * ``spectrum``: six-window spectrum (Hann 64 … 2 ms, 2048-point grid); components more than
      60 dB below the strongest or below -30 dB SPL discarded;
    * ``excitation``: excitation pattern on 150 channels (1.75 … 39 Cam, 0.25-Cam steps; roex
      filters with level-dependent lower slope; its level stage is ``excitation.erb_integration``);
    * ``specific_loudness``: instantaneous specific loudness (C = 0.0631);
    * ``temporal_integration``: short-term AGC per channel;
    * ``binaural_loudness``: binaural inhibition (Gaussian smoothing across channels,
      ``p = 1.5978``), per-ear short-term loudness = Σ / 4;
    * ``ltl_agc_left``, ``ltl_agc_right``: long-term AGC per ear; binaural loudness = left +
      right.

    Args:
        fs: input sampling rate (Hz). Other rates than 32 kHz are resampled to 32 kHz with
            :func:`scipy.signal.resample_poly` (not differentiable).
        learnable: make the loudness constant ``C`` and the inhibition exponent ``p``
            trainable ``nn.Parameter`` s.
        return_stages: ``forward`` also returns a dict of intermediate stages (with the
            spectrum).
        dtype: computation dtype (``torch.float32`` or ``torch.float64``).
        outer_middle_ear_kwargs: ``{"taps": array}`` to replace the ear FIR (odd length,
            symmetric; the delay ``(len - 1) / 2`` is removed).
        spectrum_kwargs: ``{"prune": bool}`` (default True: the 60-dB/-30-dB component rule).
        excitation_kwargs: ``{"erb_lower": 1.75, "erb_upper": 39.0, "erb_step": 0.25}``.
        specific_loudness_kwargs: ``{"c": 0.0631, "lowest_channel": "zero" | "extrapolate"}``.
        temporal_integration_kwargs: STL AGC ``{"attack_alpha", "release_alpha"}`` per frame.
        binaural_loudness_kwargs: ``{"sigma": 0.08, "p": 1.5978}``.
        ltl_agc_kwargs: LTL AGC ``{"attack_alpha", "release_alpha"}`` per frame (both ears).
        preset: ``"amt-1.4"`` (default) or ``"moore2016-original"``, see ``MOORE2016_PRESETS``
            (keyword only).
        chunk_frames: frames processed together in the excitation stage (keyword only; on
            CUDA without gradient, all frames in one pass).
        backend: ``"auto"`` (default): the compiled CPU path
            (:class:`lhotse_amt.ops.loudness_fast.FastExcitation`, numba) for eager CPU input
            without gradient, the differentiable torch stages otherwise; ``"torch"``: always
            the torch stages; ``"fast"``: always the compiled path (CPU, no gradient). Both
            give the same result up to float rounding (keyword only).

    Input:
        sound pressure in **pascals**, channels first: ``(2, T)`` or ``(B, 2, T)`` with channel 0
        = left ear, 1 = right ear (a diotic sound is the same signal in both rows). Use
        :func:`lhotse_amt.functional.loudness.pa_from_full_scale` to convert digital signals.

    Output of ``forward``:
        ``(stl, ltl, max_ltl)``: binaural short-/long-term loudness ``(B, F)`` (sone) and the
        maximum of ``ltl`` ``(B,)``; the batch axis is dropped for ``(2, T)`` input. With
        ``return_stages=True``: ``((stl, ltl, max_ltl), stages)`` with the keys of
        :meth:`compute`.
    """

    n_ears = 2
    first_frame = 0

    def __init__(
        self,
        fs: float = 32000,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        outer_middle_ear_kwargs: dict[str, Any] | None = None,
        spectrum_kwargs: dict[str, Any] | None = None,
        excitation_kwargs: dict[str, Any] | None = None,
        specific_loudness_kwargs: dict[str, Any] | None = None,
        temporal_integration_kwargs: dict[str, Any] | None = None,
        binaural_loudness_kwargs: dict[str, Any] | None = None,
        ltl_agc_kwargs: dict[str, Any] | None = None,
        *,
        preset: str = "amt-1.4",
        chunk_frames: int = 16,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        cfg = self._init_common(locals(), MOORE2016_PRESETS)

        ome = dict(outer_middle_ear_kwargs or {})
        taps = ome.pop("taps", None)
        unused_keys("outer_middle_ear_kwargs", ome)

        spk = dict(spectrum_kwargs or {})
        prune = check_bool("spectrum_kwargs['prune']", spk.pop("prune", True))
        unused_keys("spectrum_kwargs", spk)

        exk = dict(excitation_kwargs or {})
        lo, hi = check_band(
            exk.pop("erb_lower", 1.75), exk.pop("erb_upper", 39.0), names=("erb_lower", "erb_upper")
        )
        step = check_positive_finite("erb_step", exk.pop("erb_step", 0.25))
        unused_keys("excitation_kwargs", exk)
        cams = np.arange(lo, hi + step / 2, step)
        self._set_channels(cams)

        slk = dict(specific_loudness_kwargs or {})
        c = check_positive_finite("specific_loudness_kwargs['c']", slk.pop("c", 0.0631))
        lowest = slk.pop("lowest_channel", cfg["lowest_channel"])
        unused_keys("specific_loudness_kwargs", slk)
        check_choice("specific_loudness_kwargs['lowest_channel']", lowest, ("zero", "extrapolate"))

        group = "temporal_integration_kwargs"
        tik = dict(temporal_integration_kwargs or {})
        stl_a = agc_coefficient(group, tik, "attack_alpha", cfg["stl_attack"])
        stl_r = agc_coefficient(group, tik, "release_alpha", cfg["stl_release"])
        unused_keys(group, tik)
        ltk = dict(ltl_agc_kwargs or {})
        ltl_a = agc_coefficient("ltl_agc_kwargs", ltk, "attack_alpha", cfg["ltl_attack"])
        ltl_r = agc_coefficient("ltl_agc_kwargs", ltk, "release_alpha", cfg["ltl_release"])
        unused_keys("ltl_agc_kwargs", ltk)

        bik = dict(binaural_loudness_kwargs or {})
        sigma = check_positive_finite("binaural_loudness_kwargs['sigma']", bik.pop("sigma", 0.08))
        p = check_positive_finite("binaural_loudness_kwargs['p']", bik.pop("p", 1.5978))
        unused_keys("binaural_loudness_kwargs", bik)

        agc_backend = self._agc_backend
        self.outer_middle_ear = OuterMiddleEarFilter(taps, dtype)
        self.spectrum = MultiResolutionSpectrum("moore2016", prune=prune, dtype=dtype)
        self.excitation = ExcitationPattern(self.erb_fc_hz, "moore2016", True, dtype)
        self.specific_loudness = SpecificLoudness(
            self.erb_fc_hz, c, "moore2016", lowest, learnable, dtype
        )
        self.temporal_integration = LoudnessAGC(stl_a, stl_r, agc_backend)
        self.binaural_loudness = BinauralInhibition(
            self.n_channels, sigma, p, step, learnable, dtype
        )
        self.ltl_agc_left = LoudnessAGC(ltl_a, ltl_r, agc_backend)
        self.ltl_agc_right = LoudnessAGC(ltl_a, ltl_r, agc_backend)

    def _stages(self) -> tuple:
        return self.outer_middle_ear, self.spectrum, None, self.excitation, self.specific_loudness

    def _agc_stage(self, term: str) -> nn.Module:
        # the long-term AGCs of both ears have the same coefficients
        return self.temporal_integration if term == "stl" else self.ltl_agc_left

    # ------------------------------------------------------------------------------------------
    inhibition_p = forwarded_attribute(
        "binaural_loudness.p",
        "The binaural inhibition exponent ``p`` (parameter with ``learnable=True``).",
    )
    binaural_smooth = forwarded_attribute(
        "binaural_loudness.smooth",
        "The cross-channel smoothing matrix ``(C, C)`` of the binaural inhibition.",
    )
    prune = forwarded_attribute(
        "spectrum.prune", "Whether the 60-dB/-30-dB component rule is applied."
    )
    lowest_channel = forwarded_attribute(
        "specific_loudness.lowest_channel",
        '``"zero"`` or ``"extrapolate"`` (see ``MOORE2016_PRESETS``).',
    )

    @property
    def n_features(self) -> int:
        """Channels of :meth:`specific_loudness_frames` (``2 * n_channels`` = 300)."""
        return self.n_ears * self.n_channels

    def n_frames(self, n_samples: int) -> int:
        """Number of output frames for ``n_samples`` input samples at 32 kHz."""
        return n_samples // L.HOP + 1

    def _check_shape(self, x: Tensor) -> bool:
        if x.dim() not in (2, 3):
            raise ValueError(
                "Moore2016 expects (2, T) or (B, 2, T) pressure in Pa (channels first: left, "
                f"right), got shape {tuple(x.shape)}"
            )
        if x.shape[-2] != 2:
            raise ValueError(
                f"Moore2016 expects 2 ear channels on axis -2 (left, right), got {x.shape[-2]} "
                f"(shape {tuple(x.shape)}); for a diotic sound stack the signal twice"
            )
        return x.dim() == 2

    def _instantaneous(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, bool]:
        """Instantaneous specific loudness ``(B, 2, F, C)``, excitation level ``(B, 2, F, C)``
        (dB), the ear-filtered signal ``(B, 2, M)`` and whether the fast path ran."""
        f_total = self.n_frames(x.shape[-1])
        fast = self._use_fast(x)
        # diotic input (both ears bit-identical) on the fast path: the monaural stages are the
        # same for both ears, so they are computed once (exact)
        diotic = fast and bool(torch.equal(x[:, 0], x[:, 1]))
        z = self._filtered(x[:, :1] if diotic else x, fast)
        fr = self._frames(z, 0, f_total, fast)
        nsp, e_db = fr.specific_loudness, fr.excitation_db
        if diotic:
            z = z.expand(-1, 2, -1)
            nsp, e_db = nsp.repeat(1, 2, 1, 1), e_db.repeat(1, 2, 1, 1)
        return nsp, e_db, z, fast

    def instantaneous_specific_loudness(self, x: Tensor) -> Tensor:
        """Instantaneous specific loudness ``(B, 2, F, C)`` (sone/Cam) of ``(B, 2, T)`` pressure
        (Pa), frame ``j`` centred on sample ``32 j`` (no AGC, no inhibition)."""
        x, _ = self._prepare(x)
        return self._instantaneous(x)[0]

    def compute(self, x: Tensor, with_spectrum: bool = False) -> dict[str, Tensor]:
        """Run the model and return every stage.

        Keys (shapes for ``(B, 2, T)`` input; ``F = floor(T / 32) + 1`` frames at 1 kHz,
        ``C = 150`` channels): ``stl``, ``ltl`` ``(B, F)`` binaural (sone); ``max_ltl`` ``(B,)``;
        ``stl_loud_left``, ``stl_loud_right``, ``ltl_loud_left``, ``ltl_loud_right`` ``(B, F)``
        per ear after inhibition; ``inst_left``, ``inst_right`` ``(B, F)`` = Σ instantaneous
        specific loudness / 4 (no inhibition); ``excitation_left/right`` ``(B, F, C)`` (dB);
        ``inst_spec_loud_left/right``, ``stl_spec_loud_left/right`` ``(B, F, C)`` (sone/Cam);
        ``filtered_left/right`` ``(B, T)`` the ear-filtered pressure (Pa, delay removed);
        ``frame_times_s`` ``(F,)``; ``erb_fc_hz`` ``(C,)``. With ``with_spectrum=True`` also
        ``freqs_left/right`` ``(B, F, 960)`` (Hz) and ``levels_left/right`` ``(B, F, 960)``
        (dB SPL) of the spectral components on the full 960-bin grid, ``-inf`` for components
        the pruning rule discards. The batch axis is dropped for 2-D input.
        """
        x, squeeze = self._prepare(x)
        inst, exc, z, fast = self._instantaneous(x)
        stl_spec = self.temporal_integration(inst, -2)
        sl, sr = self.binaural_loudness(stl_spec[:, 0], stl_spec[:, 1])
        stl_l = sl.sum(-1) / 4.0
        stl_r = sr.sum(-1) / 4.0
        ltl_l = self.ltl_agc_left(stl_l)
        ltl_r = self.ltl_agc_right(stl_r)
        ltl = ltl_l + ltl_r
        delay = self.outer_middle_ear.delay
        filtered = z[..., delay : delay + x.shape[-1]]
        out = {
            "stl": stl_l + stl_r,
            "ltl": ltl,
            "max_ltl": ltl.amax(-1),
            "stl_loud_left": stl_l,
            "stl_loud_right": stl_r,
            "ltl_loud_left": ltl_l,
            "ltl_loud_right": ltl_r,
            "inst_left": inst[:, 0].sum(-1) / 4.0,
            "inst_right": inst[:, 1].sum(-1) / 4.0,
            "excitation_left": exc[:, 0],
            "excitation_right": exc[:, 1],
            "inst_spec_loud_left": inst[:, 0],
            "inst_spec_loud_right": inst[:, 1],
            "stl_spec_loud_left": stl_spec[:, 0],
            "stl_spec_loud_right": stl_spec[:, 1],
            "filtered_left": filtered[:, 0],
            "filtered_right": filtered[:, 1],
        }
        if with_spectrum:
            inten = self._spectrum(z, 0, inst.shape[-2], fast)
            keep = self.spectrum.kept(inten)
            levels = torch.where(
                keep,
                10.0 * torch.log10(torch.where(keep, inten, torch.ones_like(inten))),
                torch.full_like(inten, -torch.inf),
            )
            freqs = self.spectrum.freqs.to(inten.dtype).expand_as(inten)
            for i, side in enumerate(("left", "right")):
                out[f"freqs_{side}"] = freqs[:, i]
                out[f"levels_{side}"] = levels[:, i]
        if squeeze:
            out = {k: v.squeeze(0) for k, v in out.items()}
        out["frame_times_s"] = torch.arange(inst.shape[-2], dtype=torch.float64) / self.frame_rate
        out["erb_fc_hz"] = self.get_erb_frequencies()
        return out

    def specific_loudness_frames(
        self, x: Tensor, which: str = "instantaneous"
    ) -> dict[str, Tensor]:
        """Frame-level specific-loudness pattern for feature extraction.

        Returns ``{"specific_loudness": (B, F, 2 C), "stl": (B, F), "ltl": (B, F)}`` with the
        two ears concatenated ``[left | right]`` (``2 C = 300``), 1000 frames/s (frame ``j``
        centred on sample ``32 j`` at 32 kHz). ``which``: ``"instantaneous"`` (before the AGC)
        or ``"short_term"`` (after the STL AGC, before inhibition).
        """
        check_choice("which", which, ("instantaneous", "short_term"))
        st = self.compute(x)
        key = "inst_spec_loud" if which == "instantaneous" else "stl_spec_loud"
        spec = torch.cat([st[f"{key}_left"], st[f"{key}_right"]], dim=-1)
        return {"specific_loudness": spec, "stl": st["stl"], "ltl": st["ltl"]}

    def forward(
        self, audio: Tensor
    ) -> tuple[Tensor, Tensor, Tensor] | tuple[tuple[Tensor, Tensor, Tensor], dict[str, Tensor]]:
        """``(stl, ltl, max_ltl)`` of pressure ``(B, 2, T)`` or ``(2, T)`` (Pa); with
        ``return_stages=True`` ``((stl, ltl, max_ltl), stages)`` (:meth:`compute` with the
        spectrum)."""
        st = self.compute(audio, with_spectrum=self.return_stages)
        res = (st["stl"], st["ltl"], st["max_ltl"])
        if self.return_stages:
            return res, st
        return res

"""Glasberg & Moore (2002): loudness of time-varying sounds (monaural, presented diotically)."""

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
    check_number,
    check_positive_finite,
)
from ..functional import loudness as L
from ..modules.loudness import (
    ERBIntegration,
    ExcitationPattern,
    LoudnessIntegration,
    MultiResolutionSpectrum,
    OuterMiddleEarFilter,
    SpecificLoudness,
)
from ._loudness import GM2002_AGC, LoudnessModelBase, agc_coefficient, unused_keys

__all__ = ["Glasberg2002", "GLASBERG2002_PRESETS"]

#: ``"gm2002"``: the parameters of Glasberg & Moore (2002) as chosen by the primary reference
#: implementation (deeuu/loudness ``DynamicLoudnessGM2002``, parameter set "GM2002"): six
#: periodic Hann windows, bands [10, 80) … [4050, 15001) Hz, 149 channels 1.8 … 38.8 Cam,
#: ANSI S3.4-2007 specific loudness with C = 0.046871 and the 1997 high-level branch,
#: STL attack/release 0.045/0.02, LTL 0.01/0.0005 per 1-ms frame.
GLASBERG2002_PRESETS: dict[str, dict[str, Any]] = {
    "gm2002": {
        "erb_lower": 1.8,
        "erb_upper": 38.8,
        "erb_step": 0.25,
        "lower_slope_level": "component",
        "c": 0.046871,
        "high_level": "mgb1997",
        **GM2002_AGC,
    },
}


class Glasberg2002(LoudnessModelBase):
    """Time-varying loudness model of Glasberg & Moore (2002).

    Pipeline (1-ms frames; frame ``j`` centred on input sample ``32 j``, ``j = -64 …
    floor(T / 32)``: the 64 leading frames cover the ear filter's pre-ringing and the long
    window's look-ahead, as in the reference implementations), one stage submodule each
    (:mod:`lhotse_amt.modules.loudness`):

    * ``outer_middle_ear``: outer + middle-ear FIR (the 4097-tap free-field ``ff_32000``
      filter, zero-phase by FFT convolution);
    * ``multi_fft``: six-window spectrum (periodic Hann 64, 32, 16, 8, 4, 2 ms on a 2048-point
      grid, energy normalised, bands [10, 80), [80, 500), [500, 1250), [1250, 2540),
      [2540, 4050), [4050, 15001) Hz); components at or below ``floor`` are ignored;
    * ``erb_integration``: input level per ERB that sets the lower roex slopes;
    * ``excitation_pattern``: roex filters of ANSI S3.4-2007 with level-dependent lower slope;
    * ``specific_loudness``: ANSI S3.4-2007 / MGB 1997;
    * ``loudness_integration``: instantaneous loudness = 2 × Σ N' / 4 (diotic presentation,
      i.e. twice the monaural value) → short-term loudness (AGC, attack 0.045, release 0.02
      per frame, i.e. T_a = 22 ms, T_r = 50 ms) → long-term loudness (attack 0.01, release
      0.0005: 99.5 ms / 2 s).

    Args:
        fs: input rate; other rates are resampled to 32 kHz with
            :func:`scipy.signal.resample_poly` (not differentiable).
        learnable: make ``C`` (``specific_loudness.c``) a trainable parameter.
        return_stages: ``forward`` also returns the stage dict of :meth:`compute` (with the
            spectrum).
        multi_fft_kwargs: ``{"floor": 1e-4}``: spectral components weaker than this intensity
            (re (20 µPa)², i.e. -40 dB SPL, far below the excitation at threshold, 3.6 dB) are
            ignored (speed; changes STL/LTL of the reference stimuli by < 1e-4 relative).
        erb_kwargs / excitation_kwargs: ``{"erb_lower", "erb_upper", "erb_step"}`` (Cam; or the
            band edges in Hz as ``"f_min"``/``"f_max"``, converted to Cam) and
            ``"lower_slope_level"``: ``"component"`` (default: level per ERB at each component,
            the reference implementation), ``"channel"`` (at the channel centres) or
            ``"cambridge"`` (the Cambridge 2016 rule).
        specific_loudness_kwargs: ``{"c", "high_level": "mgb1997" | "moore2016"}``.
        loudness_integration_kwargs: ``{"stl_attack", "stl_release", "ltl_attack",
            "ltl_release"}`` (per-frame smoothing coefficients) or ``{"tau_attack",
            "tau_release"}`` in seconds for the short-term AGC (``alpha = 1 - exp(-1 ms / tau)``;
            e.g. 0.05/0.2 s gives the parameterisation of some other ports, which is *not* the
            2002 model), plus ``{"diotic": True}`` (False: monaural values, half).
        dtype: ``torch.float32`` or ``torch.float64`` (keyword only).
        preset: ``"gm2002"`` (the only preset; see ``GLASBERG2002_PRESETS``; keyword only).
        chunk_frames: frames processed together in the excitation stage (keyword only; on
            CUDA without gradient, all frames in one pass).
        backend: ``"auto"`` (default): the compiled CPU path
            (:class:`lhotse_amt.ops.loudness_fast.FastExcitation`, numba) for eager CPU input
            without gradient (lower-slope levels ``"component"`` and ``"cambridge"``), the
            differentiable torch stages otherwise; ``"torch"``: always the torch stages;
            ``"fast"``: always the compiled path. Same results up to float rounding (keyword
            only).

    Input: sound pressure in **pascals**, ``(T,)`` or ``(B, T)`` (one signal, presented to both
    ears).

    Output of ``forward``: long-term loudness ``(B, F)`` (sone; ``(F,)`` for 1-D input); with
    ``return_stages=True`` ``(ltl, stages)``.
    """

    first_frame = -64
    _empty_db = -300.0
    _empty_excitation = 0.0
    _zero_empty_frames = False

    def __init__(
        self,
        fs: float = 32000,
        learnable: bool = False,
        return_stages: bool = False,
        multi_fft_kwargs: dict[str, Any] | None = None,
        erb_kwargs: dict[str, Any] | None = None,
        excitation_kwargs: dict[str, Any] | None = None,
        specific_loudness_kwargs: dict[str, Any] | None = None,
        loudness_integration_kwargs: dict[str, Any] | None = None,
        *,
        dtype: torch.dtype = torch.float32,
        preset: str = "gm2002",
        chunk_frames: int = 16,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        cfg = self._init_common(locals(), GLASBERG2002_PRESETS)

        mfk = dict(multi_fft_kwargs or {})
        floor = check_number("multi_fft_kwargs['floor']", mfk.pop("floor", 1e-4), min=0.0)
        unused_keys("multi_fft_kwargs", mfk)

        ek = dict(erb_kwargs or {})
        ek.update(excitation_kwargs or {})
        for cam_key, hz_key in (("erb_lower", "f_min"), ("erb_upper", "f_max")):
            if hz_key in ek:  # the band edge in Hz instead of Cam
                if cam_key in ek:
                    raise ValueError(f"give {cam_key!r} (Cam) or {hz_key!r} (Hz), not both")
                hz = check_positive_finite(f"erb_kwargs[{hz_key!r}]", ek.pop(hz_key))
                ek[cam_key] = float(L.hz_to_cam(hz))
        lo, hi = check_band(
            ek.pop("erb_lower", cfg["erb_lower"]),
            ek.pop("erb_upper", cfg["erb_upper"]),
            names=("erb_lower", "erb_upper"),
        )
        step = check_positive_finite("erb_step", ek.pop("erb_step", cfg["erb_step"]))
        self.lower_slope_level = ek.pop("lower_slope_level", cfg["lower_slope_level"])
        unused_keys("erb_kwargs/excitation_kwargs", ek)
        check_choice(
            "lower_slope_level", self.lower_slope_level, ("channel", "component", "cambridge")
        )
        if backend == "fast" and self.lower_slope_level == "channel":
            raise ValueError("backend='fast' is not available for lower_slope_level='channel'")
        cams = np.round(np.arange(lo, hi + step / 2, step), 10)
        self._set_channels(cams)
        variant = {"channel": "gm2002", "component": "component", "cambridge": "moore2016"}[
            self.lower_slope_level
        ]

        sk = dict(specific_loudness_kwargs or {})
        c = check_positive_finite("specific_loudness_kwargs['c']", sk.pop("c", cfg["c"]))
        high_level = sk.pop("high_level", cfg["high_level"])
        unused_keys("specific_loudness_kwargs", sk)

        lk = dict(loudness_integration_kwargs or {})
        if "tau_attack" in lk or "tau_release" in lk:
            dt = L.HOP / L.FS
            for k in ("tau_attack", "tau_release"):
                if k in lk:
                    check_positive_finite(f"loudness_integration_kwargs[{k!r}]", lk[k])
            lk.setdefault("stl_attack", 1.0 - np.exp(-dt / float(lk.pop("tau_attack", 0.022))))
            lk.setdefault("stl_release", 1.0 - np.exp(-dt / float(lk.pop("tau_release", 0.05))))
        agc = {
            k: agc_coefficient("loudness_integration_kwargs", lk, k, cfg[k])
            for k in ("stl_attack", "stl_release", "ltl_attack", "ltl_release")
        }
        diotic = check_bool("loudness_integration_kwargs['diotic']", lk.pop("diotic", True))
        unused_keys("loudness_integration_kwargs", lk)

        self.outer_middle_ear = OuterMiddleEarFilter(dtype=dtype)
        self.multi_fft = MultiResolutionSpectrum("gm2002", floor=floor, dtype=dtype)
        self.erb_integration = ERBIntegration(self.erb_fc_hz, variant, dtype)
        self.excitation_pattern = ExcitationPattern(self.erb_fc_hz, variant, dtype=dtype)
        self.specific_loudness = SpecificLoudness(
            self.erb_fc_hz, c, high_level, "extrapolate", learnable, dtype
        )
        self.loudness_integration = LoudnessIntegration(
            **agc, diotic=diotic, backend=self._agc_backend
        )

    def _stages(self) -> tuple:
        return (
            self.outer_middle_ear,
            self.multi_fft,
            self.erb_integration,
            self.excitation_pattern,
            self.specific_loudness,
        )

    def _agc_stage(self, term: str) -> nn.Module:
        return getattr(self.loudness_integration, f"{term}_agc")

    def _use_fast(self, x: Tensor) -> bool:
        if self.lower_slope_level == "channel":
            return False
        return super()._use_fast(x)

    # ------------------------------------------------------------------------------------------
    floor = forwarded_attribute(
        "multi_fft.floor", "Intensity at or below which spectral components are ignored."
    )
    high_level = forwarded_attribute(
        "specific_loudness.high_level", "High-level branch of the specific-loudness law."
    )
    diotic = forwarded_attribute(
        "loudness_integration.diotic",
        "Whether the loudness is that of diotic presentation (twice the monaural value).",
    )

    @property
    def n_features(self) -> int:
        """Channels of :meth:`specific_loudness_frames` (149)."""
        return self.n_channels

    def n_frames(self, n_samples: int) -> int:
        """Number of frames (``j = -64 … floor(T / 32)``) for ``n_samples`` at 32 kHz."""
        return n_samples // L.HOP + 1 - self.first_frame

    def _check_shape(self, x: Tensor) -> bool:
        if x.dim() not in (1, 2):
            raise ValueError(
                f"Glasberg2002 expects (T,) or (B, T) pressure in Pa, got shape {tuple(x.shape)}"
            )
        return x.dim() == 1

    def compute(
        self, x: Tensor, with_spectrum: bool = False, integrate: bool = True
    ) -> dict[str, Tensor]:
        """Run the model and return every stage.

        Keys (``(B, T)`` input, ``F = floor(T / 32) + 65`` frames, ``C = 149``): ``inst``,
        ``stl``, ``ltl`` ``(B, F)`` (sone; diotic unless ``diotic=False``); ``max_ltl`` ``(B,)``;
        ``specific_loudness`` ``(B, F, C)`` one-ear instantaneous specific loudness (sone/Cam);
        ``excitation`` ``(B, F, C)`` (dB); ``erb_excitation`` ``(B, F, C)`` input level per ERB
        at the channel centres (dB; the excitation level for the per-component lower-slope
        rules); ``frame_times_s`` ``(F,)`` (frame centre re the first sample, starting at
        -0.064 s); ``freqs`` ``(960,)`` frequencies of the spectral components (Hz);
        ``erb_fc_hz`` ``(C,)`` channel centres (Hz). With ``with_spectrum=True`` also ``psd``
        ``(B, F, 960)``: component intensities re (20 µPa)² (power per 15.625-Hz bin). The batch
        axis is dropped for 1-D input. ``integrate=False``: without ``stl``, ``ltl`` and
        ``max_ltl`` (the temporal integration is not run).
        """
        x, squeeze = self._prepare(x)
        f_total = self.n_frames(x.shape[-1])
        fast = self._use_fast(x)
        z = self._filtered(x, fast)
        fr = self._frames(z, self.first_frame, f_total, fast)
        nsp = fr.specific_loudness
        if fast:
            # numpy on this thread (a torch pass would open a parallel region; lhotse_amt._serial)
            ears = self.loudness_integration.ears
            inst = torch.from_numpy(nsp.numpy().sum(-1) * (ears / 4.0))
            if integrate:
                stl = self.loudness_integration.stl_agc(inst)
                ltl = self.loudness_integration.ltl_agc(stl)
            exc_db = torch.from_numpy(fr.excitation_db.numpy().copy())
        else:
            inst, stl, ltl = self.loudness_integration(nsp)
            exc_db = fr.excitation_db
        out = {"inst": inst}
        if integrate:
            out.update(stl=stl, ltl=ltl, max_ltl=ltl.amax(-1))
        out.update(specific_loudness=nsp, excitation=exc_db, erb_excitation=fr.level_db)
        if with_spectrum:
            out["psd"] = self._spectrum(z, self.first_frame, f_total, fast)
        if squeeze:
            out = {k: v.squeeze(0) for k, v in out.items()}
        out["frame_times_s"] = (
            torch.arange(f_total, dtype=torch.float64) + self.first_frame
        ) / self.frame_rate
        out["freqs"] = self.multi_fft.freqs
        out["erb_fc_hz"] = self.get_erb_frequencies()
        return out

    def specific_loudness_frames(
        self, x: Tensor, which: str = "instantaneous"
    ) -> dict[str, Tensor]:
        """Frame-level specific-loudness pattern for feature extraction.

        Returns ``{"specific_loudness": (B, F, C), "stl": (B, F), "ltl": (B, F)}``, C = 149,
        1000 frames/s, frame ``i`` centred on input sample ``32 (i - 64)`` (``frame_times_s``
        of :meth:`compute`). ``which="instantaneous"`` is the one-ear instantaneous specific
        loudness; ``"short_term"`` applies the STL AGC per channel (an extension: the 2002 model
        smooths only the summed loudness).
        """
        check_choice("which", which, ("instantaneous", "short_term"))
        st = self.compute(x)
        spec = st["specific_loudness"]
        if which == "short_term":
            spec = self.loudness_integration.stl_agc(spec, -2)
        return {"specific_loudness": spec, "stl": st["stl"], "ltl": st["ltl"]}

    def forward(self, audio: Tensor) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        """Long-term loudness ``(B, F)`` (sone) of pressure ``(B, T)`` or ``(T,)`` (Pa); with
        ``return_stages=True`` ``(ltl, stages)`` (:meth:`compute` with the spectrum)."""
        st = self.compute(audio, with_spectrum=self.return_stages)
        if self.return_stages:
            return st["ltl"], st
        return st["ltl"]

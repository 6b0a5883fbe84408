"""Glasberg & Moore (2002): loudness of time-varying sounds (monaural, presented diotically)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._validation import (
    check_band,
    check_bool,
    check_choice,
    check_dtype,
    check_int,
    check_kwargs,
    check_number,
    check_positive_finite,
    check_rate,
    check_str,
)
from ..functional import loudness as L
from ..functional.iir import grad_recorded

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
        "stl_attack": 0.045,
        "stl_release": 0.02,
        "ltl_attack": 0.01,
        "ltl_release": 0.0005,
    },
}


class Glasberg2002(nn.Module):
    """Time-varying loudness model of Glasberg & Moore (2002).

    Pipeline (1-ms frames; frame ``j`` centred on input sample ``32 j``, ``j = -64 …
    floor(T / 32)``: the 64 leading frames cover the ear filter's pre-ringing and the long
    window's look-ahead, as in the reference implementations): outer + middle-ear FIR (the
    4097-tap free-field ``ff_32000`` filter, zero-phase by FFT convolution) → six-window
    spectrum (periodic Hann 64, 32, 16, 8, 4, 2 ms on a 2048-point grid, energy normalised,
    bands [10, 80), [80, 500), [500, 1250), [1250, 2540), [2540, 4050), [4050, 15001) Hz) →
    excitation pattern (roex filters of ANSI S3.4-2007 with the lower slope set by the input
    level per ERB at each channel centre) → specific loudness (ANSI S3.4-2007 / MGB 1997) →
    instantaneous loudness = 2 × Σ N' / 4 (diotic presentation, i.e. twice the monaural value) →
    short-term loudness (AGC, attack 0.045, release 0.02 per frame, i.e. T_a = 22 ms,
    T_r = 50 ms) → long-term loudness (attack 0.01, release 0.0005: 99.5 ms / 2 s).

    Args:
        fs: input rate; other rates are resampled to 32 kHz with
            :func:`scipy.signal.resample_poly` (not differentiable).
        learnable: make ``C`` a trainable parameter.
        return_stages: ``forward`` also returns the stage dict of :meth:`compute`.
        dtype: ``torch.float32`` or ``torch.float64``.
        preset: ``"gm2002"`` (the only preset; see ``GLASBERG2002_PRESETS``).
        multi_fft_kwargs: ``{"floor": 1e-4}``: spectral components weaker than this intensity
            (re (20 µPa)², i.e. -40 dB SPL, far below the excitation at threshold, 3.6 dB) are
            ignored (speed; changes STL/LTL of the reference stimuli by < 1e-4 relative).
        erb_kwargs / excitation_kwargs: ``{"erb_lower", "erb_upper", "erb_step"}`` (Cam).
        specific_loudness_kwargs: ``{"c", "high_level": "mgb1997" | "moore2016"}``.
        loudness_integration_kwargs: ``{"stl_attack", "stl_release", "ltl_attack",
            "ltl_release"}`` (per-frame smoothing coefficients) or ``{"tau_attack",
            "tau_release"}`` in seconds for the short-term AGC (``alpha = 1 - exp(-1 ms / tau)``;
            e.g. 0.05/0.2 s gives the parameterisation of some other ports, which is *not* the
            2002 model), plus ``{"diotic": True}`` (False: monaural values, half).
        chunk_frames: frames processed together in the excitation stage.
        backend: ``"auto"`` (default): the compiled CPU path
            (:class:`lhotse_amt.functional.loudness.FastExcitation`, numba) when the input is on
            the CPU and no gradient is needed (lower-slope levels ``"component"`` and
            ``"cambridge"``), the differentiable torch reference otherwise; ``"torch"``: always
            the reference; ``"fast"``: always the compiled path. Same results up to float
            rounding.

    Input: sound pressure in **pascals**, ``(T,)`` or ``(B, T)`` (one signal, presented to both
    ears).

    Output of ``forward``: long-term loudness ``(B, F)`` (sone; ``(F,)`` for 1-D input); with
    ``return_stages=True`` ``(ltl, stages)``.
    """

    def __init__(
        self,
        fs: float = 32000,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        preset: str = "gm2002",
        multi_fft_kwargs: dict[str, Any] | None = None,
        erb_kwargs: dict[str, Any] | None = None,
        excitation_kwargs: dict[str, Any] | None = None,
        specific_loudness_kwargs: dict[str, Any] | None = None,
        loudness_integration_kwargs: dict[str, Any] | None = None,
        chunk_frames: int = 16,
        backend: str = "auto",
    ) -> None:
        super().__init__()
        check_rate("fs", fs, integral=True)
        check_bool("learnable", learnable)
        check_bool("return_stages", return_stages)
        check_dtype("dtype", dtype)
        check_str("preset", preset)
        for k, v in dict(
            multi_fft_kwargs=multi_fft_kwargs,
            erb_kwargs=erb_kwargs,
            excitation_kwargs=excitation_kwargs,
            specific_loudness_kwargs=specific_loudness_kwargs,
            loudness_integration_kwargs=loudness_integration_kwargs,
        ).items():
            check_kwargs(k, v)
        check_int("chunk_frames", chunk_frames, min=1)
        check_choice("backend", backend, ("auto", "torch", "fast"))
        if preset not in GLASBERG2002_PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose from {list(GLASBERG2002_PRESETS)}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError("dtype must be torch.float32 or torch.float64")
        cfg = dict(GLASBERG2002_PRESETS[preset])
        self.fs = float(fs)
        self.learnable = learnable
        self.return_stages = return_stages
        self.dtype = dtype
        self.preset = preset
        self.chunk_frames = int(chunk_frames)
        if backend not in ("auto", "torch", "fast"):
            raise ValueError("backend must be 'auto', 'torch' or 'fast'")
        self.backend = backend
        self._fast: L.FastExcitation | None = None
        self._sl: dict[str, np.ndarray] | None = None

        mfk = dict(multi_fft_kwargs or {})
        self.floor = check_number("multi_fft_kwargs['floor']", mfk.pop("floor", 1e-4), min=0.0)
        _unused("multi_fft_kwargs", mfk)
        taps = L.loudness_tables()["ff_32000"]
        self.register_buffer("ear_fir", torch.tensor(taps, dtype=dtype), persistent=False)
        self._bases = L.dft_bases("gm2002")
        for i, (_, _, basis) in enumerate(self._bases):
            self.register_buffer(
                f"dft_basis_{i}", torch.tensor(basis, dtype=dtype), persistent=False
            )

        ek = dict(erb_kwargs or {})
        ek.update(excitation_kwargs or {})
        lo, hi = check_band(
            ek.pop("erb_lower", cfg["erb_lower"]),
            ek.pop("erb_upper", cfg["erb_upper"]),
            names=("erb_lower", "erb_upper"),
        )
        step = check_positive_finite("erb_step", ek.pop("erb_step", cfg["erb_step"]))
        self.lower_slope_level = ek.pop("lower_slope_level", cfg["lower_slope_level"])
        _unused("erb_kwargs/excitation_kwargs", ek)
        if self.lower_slope_level not in ("channel", "component", "cambridge"):
            raise ValueError("lower_slope_level must be 'channel', 'component' or 'cambridge'")
        cams = np.round(np.arange(lo, hi + step / 2, step), 10)
        self.erb_numbers = cams
        self.erb_fc_hz = L.cam_to_hz(cams)
        self.n_channels = len(cams)
        variant = {"channel": "gm2002", "component": "component", "cambridge": "moore2016"}
        mats = L.excitation_matrices(self.erb_fc_hz, variant[self.lower_slope_level])
        self._n_below = mats["n_below"]
        for k in ("level", "upper", "lower_h"):
            self.register_buffer(f"exc_{k}", torch.tensor(mats[k], dtype=dtype), persistent=False)

        sk = dict(specific_loudness_kwargs or {})
        c = check_positive_finite("specific_loudness_kwargs['c']", sk.pop("c", cfg["c"]))
        self.high_level = sk.pop("high_level", cfg["high_level"])
        _unused("specific_loudness_kwargs", sk)
        for k, v in L.specific_loudness_params(self.erb_fc_hz, "extrapolate").items():
            self.register_buffer(f"sl_{k}", torch.tensor(v, dtype=dtype), persistent=False)
        if learnable:
            self.c = nn.Parameter(torch.tensor(c, dtype=dtype))
        else:
            self.register_buffer("c", torch.tensor(c, dtype=dtype), persistent=False)

        lk = dict(loudness_integration_kwargs or {})
        if "tau_attack" in lk or "tau_release" in lk:
            dt = L.HOP / L.FS
            for k in ("tau_attack", "tau_release"):
                if k in lk:
                    check_positive_finite(f"loudness_integration_kwargs[{k!r}]", lk[k])
            lk.setdefault("stl_attack", 1.0 - np.exp(-dt / float(lk.pop("tau_attack", 0.022))))
            lk.setdefault("stl_release", 1.0 - np.exp(-dt / float(lk.pop("tau_release", 0.05))))
        for k in ("stl_attack", "stl_release", "ltl_attack", "ltl_release"):
            v = check_number(
                f"loudness_integration_kwargs[{k!r}]",
                lk.pop(k, cfg[k]),
                min=0.0,
                max=1.0,
                min_inclusive=False,
            )
            setattr(self, k, v)
        self.diotic = check_bool("loudness_integration_kwargs['diotic']", lk.pop("diotic", True))
        _unused("loudness_integration_kwargs", lk)

    # ------------------------------------------------------------------------------------------
    first_frame = -64

    @property
    def frame_rate(self) -> float:
        """Frames per second (1000)."""
        return L.FS / L.HOP

    @property
    def n_features(self) -> int:
        """Channels of :meth:`specific_loudness_frames` (149)."""
        return self.n_channels

    def n_frames(self, n_samples: int) -> int:
        """Number of frames (``j = -64 … floor(T / 32)``) for ``n_samples`` at 32 kHz."""
        return n_samples // L.HOP + 1 - self.first_frame

    def get_erb_frequencies(self) -> Tensor:
        """Channel centre frequencies (Hz), ``(C,)``."""
        return torch.tensor(self.erb_fc_hz)

    @staticmethod
    def compute_loudness_level(sone: Tensor) -> Tensor:
        """Approximate loudness level (phon) ``40 + 10 log2(N)`` (valid above ~40 phon)."""
        return 40.0 + 10.0 * torch.log2(sone.clamp_min(1e-12))

    def _prepare(self, x: Tensor) -> tuple[Tensor, bool]:
        if not isinstance(x, Tensor):
            x = torch.as_tensor(np.asarray(x))
        if x.dim() == 1:
            squeeze, x = True, x.unsqueeze(0)
        elif x.dim() == 2:
            squeeze = False
        else:
            raise ValueError(
                f"Glasberg2002 expects (T,) or (B, T) pressure in Pa, got shape {tuple(x.shape)}"
            )
        L.check_pressure_signal(x, "Glasberg2002 input", min_samples=1)
        x = x.to(self.dtype)
        if self.fs != L.FS:
            x = L.resample_to_32k(x, self.fs)
        if x.shape[-1] < L.HOP:
            raise ValueError(f"Glasberg2002 input too short: {x.shape[-1]} samples at 32 kHz")
        return x, squeeze

    def _sl_numpy(self) -> dict[str, np.ndarray]:
        # per-channel specific-loudness constants for the compiled path (built once)
        if self._sl is None:
            sl = {k: getattr(self, f"sl_{k}").numpy() for k in ("g", "a", "alpha", "e_thrq")}
            sl["a_alpha"] = (self.sl_a**self.sl_alpha).numpy()
            sl["mask"] = np.ones(self.n_channels, dtype=sl["g"].dtype)
            self._sl = sl
        return self._sl

    @property
    def _agc_backend(self) -> str:
        # backend="torch" runs the AGC reference too; otherwise lhotse_amt.functional.loudness.agc
        # chooses (no-grad numba kernel or the differentiable operator lhotse_amt::agc)
        return "torch" if self.backend == "torch" else "auto"

    def _use_fast(self, x: Tensor) -> bool:
        if self.backend == "torch" or self.lower_slope_level == "channel":
            if self.backend == "fast":
                raise RuntimeError(
                    "backend='fast' is not available for lower_slope_level='channel'"
                )
            return False
        ok = L.fast_path_ok(x, self)
        if self.backend == "fast" and not ok:
            raise RuntimeError("backend='fast' needs CPU input and no gradient")
        return ok

    def compute(self, x: Tensor) -> dict[str, Tensor]:
        """Run the model and return every stage.

        Keys (``(B, T)`` input, ``F = floor(T / 32) + 65`` frames, ``C = 149``): ``inst``,
        ``stl``, ``ltl`` ``(B, F)`` (sone; diotic unless ``diotic=False``); ``max_ltl`` ``(B,)``;
        ``specific_loudness`` ``(B, F, C)`` one-ear instantaneous specific loudness (sone/Cam);
        ``excitation`` ``(B, F, C)`` (dB); ``erb_excitation`` ``(B, F, C)`` input level per ERB
        at the channel centres (dB); ``frame_times_s`` ``(F,)`` (frame centre re the first
        sample, starting at -0.064 s); ``freqs`` ``(C,)`` channel centres (Hz).
        """
        x, squeeze = self._prepare(x)
        n = x.shape[-1]
        f_total = self.n_frames(n)
        half = (self.ear_fir.shape[0] - 1) // 2
        z = L.fir_filter_full(x, self.ear_fir)
        bases = [
            (ln, b, getattr(self, f"dft_basis_{i}")) for i, (ln, b, _) in enumerate(self._bases)
        ]
        params = {"g": self.sl_g, "a": self.sl_a, "alpha": self.sl_alpha, "e_thrq": self.sl_e_thrq}
        spec, exc, lev = [], [], []
        exc_db = None
        if self._use_fast(x):
            if self._fast is None:
                variant = {"component": "component", "cambridge": "moore2016"}
                self._fast = L.FastExcitation(
                    self.erb_fc_hz, variant[self.lower_slope_level], "gm2002", self.dtype
                )
            # frames without kept components: E = 0, i.e. -300 dB after the 1e-30 floor of
            # the torch path (there E >= 1e-10); "erb_excitation" holds the same values
            nsp, exc_db, _ = self._fast.specific_loudness_frames(
                z,
                -half,
                self.first_frame,
                f_total,
                bases,
                ("floor", self.floor),
                self._sl_numpy(),
                float(self.c),
                self.high_level,
                excitation_db=-300.0,
            )
            spec.append(nsp)
            lev.append(exc_db)
            f_chunks = range(0)
        else:
            inten = L.multires_intensity(z, -half, self.first_frame, f_total, bases)
            f_chunks = range(0, f_total, self.chunk_frames)
        for f0 in f_chunks:
            f1 = min(f0 + self.chunk_frames, f_total)
            ic = inten[..., f0:f1, :]
            ic = torch.where(ic > self.floor, ic, torch.zeros_like(ic))
            cols = torch.nonzero((ic > 0).reshape(-1, L.N_BINS).any(0)).flatten()
            if cols.numel() == 0:
                shape = (*ic.shape[:-1], self.n_channels)
                spec.append(ic.new_zeros(shape))
                exc.append(ic.new_zeros(shape))
                lev.append(ic.new_full(shape, -300.0))
                continue
            dense = cols.numel() == L.N_BINS
            if dense:
                n_below = self._n_below
                mats = {
                    "upper": self.exc_upper,
                    "lower_h": self.exc_lower_h,
                    "level": self.exc_level,
                }
            else:
                n_below = np.searchsorted(cols.cpu().numpy(), self._n_below)
                ic = ic[..., cols]
                mats = {"upper": self.exc_upper[cols], "lower_h": self.exc_lower_h[cols]}
                if self.lower_slope_level == "channel":
                    mats["level"] = self.exc_level[cols]
                else:
                    mats["level"] = self.exc_level[cols][:, cols]
            if self.lower_slope_level == "channel":
                e, x_db = L.excitation_gm2002(ic, mats, n_below)
            else:
                e, _ = L.excitation_moore2016(ic, ic > 0, mats, n_below)
                x_db = 10.0 * torch.log10(e)
            spec.append(L.specific_loudness(e, params, self.c, self.high_level))
            exc.append(e)
            lev.append(x_db)
        nsp = spec[0] if len(spec) == 1 else torch.cat(spec, dim=-2)
        lev_db = lev[0] if len(lev) == 1 else torch.cat(lev, dim=-2)
        if exc_db is None:
            e = exc[0] if len(exc) == 1 else torch.cat(exc, dim=-2)
            exc_db = 10.0 * torch.log10(e.clamp_min(1e-30))
        else:
            # numpy on this thread (a torch pass would open a parallel region; lhotse_amt._serial)
            exc_db = torch.from_numpy(exc_db.numpy().copy())
        ears = 2.0 if self.diotic else 1.0
        if nsp.device.type == "cpu" and not grad_recorded(nsp):
            inst = torch.from_numpy(nsp.detach().numpy().sum(-1) * (ears / 4.0))
        else:
            inst = ears * nsp.sum(-1) / 4.0
        stl = L.agc(inst, self.stl_attack, self.stl_release, -1, self._agc_backend)
        ltl = L.agc(stl, self.ltl_attack, self.ltl_release, -1, self._agc_backend)
        out = {
            "inst": inst,
            "stl": stl,
            "ltl": ltl,
            "max_ltl": ltl.amax(-1),
            "specific_loudness": nsp,
            "excitation": exc_db,
            "erb_excitation": lev_db,
        }
        if squeeze:
            out = {k: v.squeeze(0) for k, v in out.items()}
        out["frame_times_s"] = (
            torch.arange(f_total, dtype=torch.float64) + self.first_frame
        ) / self.frame_rate
        out["freqs"] = self.get_erb_frequencies()
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
        if which not in ("instantaneous", "short_term"):
            raise ValueError("which must be 'instantaneous' or 'short_term'")
        st = self.compute(x)
        spec = st["specific_loudness"]
        if which == "short_term":
            spec = L.agc(spec, self.stl_attack, self.stl_release, -2, self._agc_backend)
        return {"specific_loudness": spec, "stl": st["stl"], "ltl": st["ltl"]}

    def forward(self, x: Tensor) -> Any:
        st = self.compute(x)
        if self.return_stages:
            return st["ltl"], st
        return st["ltl"]

    def extra_repr(self) -> str:
        return (
            f"fs={self.fs:g}, preset={self.preset!r}, channels={self.n_channels}, "
            f"dtype={self.dtype}, learnable={self.learnable}"
        )


def _unused(name: str, d: dict) -> None:
    if d:
        raise ValueError(f"unknown {name}: {sorted(d)}")

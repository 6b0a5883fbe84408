"""Moore, Glasberg, Varathanathan & Schlittenlacher (2016): binaural time-varying loudness."""

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

__all__ = ["Moore2016", "MOORE2016_PRESETS"]

#: Reference variants. ``"amt-1.4"``: the AMT 1.4 ``moore2016`` model (Cambridge code of
#: J. Schlittenlacher, 2018), i.e. the 2016 model with the AGC constants of Moore, Jervis,
#: Harries & Schlittenlacher (2018), run in GNU Octave (the lowest channel, 47.5 Hz, gets A = NaN
#: outside the A(G) table and its specific loudness is set to 0). ``"moore2016-original"``: the
#: AGC constants of the 2016 paper (STL release 0.02, LTL release 0.0005) and MATLAB
#: interpolation semantics (A extrapolated for the lowest channel).
MOORE2016_PRESETS: dict[str, dict[str, Any]] = {
    "amt-1.4": {
        "stl_attack": 0.045,
        "stl_release": 0.033,
        "ltl_attack": 0.01,
        "ltl_release": 0.00133,
        "lowest_channel": "zero",
    },
    "moore2016-original": {
        "stl_attack": 0.045,
        "stl_release": 0.02,
        "ltl_attack": 0.01,
        "ltl_release": 0.0005,
        "lowest_channel": "extrapolate",
    },
}


def _alpha(group: str, d: dict, key: str, default: float) -> float:
    """A per-frame AGC smoothing coefficient popped from ``d``: a number in (0, 1]."""
    return check_number(
        f"{group}[{key!r}]", d.pop(key, default), min=0.0, max=1.0, min_inclusive=False
    )


class Moore2016(nn.Module):
    """Binaural loudness model for time-varying sounds (Moore et al. 2016).

    Pipeline per ear (1-ms frames, frame ``j`` centred on input sample ``32 j``, ``j = 0 …
    floor(T / 32)``): free-field outer + middle-ear FIR (``ff_32000``, 4097 taps, linear phase,
    applied by FFT convolution with its delay removed) → six-window spectrum (Hann 64 … 2 ms,
    2048-point grid) → components more than 60 dB below the strongest or below -30 dB SPL
    discarded → excitation pattern on 150 channels (1.75 … 39 Cam, 0.25-Cam steps; roex filters
    with level-dependent lower slope) → instantaneous specific loudness (C = 0.0631) → short-term
    AGC per channel → binaural inhibition (Gaussian smoothing across channels, ``p = 1.5978``) →
    per-ear short-term loudness → long-term AGC per ear; binaural loudness = left + right.

    Args:
        fs: input sampling rate (Hz). Other rates than 32 kHz are resampled to 32 kHz with
            :func:`scipy.signal.resample_poly` (not differentiable).
        learnable: make the loudness constant ``C`` and the inhibition exponent ``p``
            trainable ``nn.Parameter`` s.
        return_stages: ``forward`` also returns a dict of intermediate stages.
        dtype: computation dtype (``torch.float32`` or ``torch.float64``).
        preset: ``"amt-1.4"`` (default) or ``"moore2016-original"``, see ``MOORE2016_PRESETS``.
        outer_middle_ear_kwargs: ``{"taps": array}`` to replace the ear FIR (odd length,
            symmetric; the delay ``(len - 1) / 2`` is removed).
        spectrum_kwargs: ``{"prune": bool}`` (default True: the 60-dB/-30-dB component rule).
        excitation_kwargs: ``{"erb_lower": 1.75, "erb_upper": 39.0, "erb_step": 0.25}``.
        specific_loudness_kwargs: ``{"c": 0.0631, "lowest_channel": "zero" | "extrapolate"}``.
        temporal_integration_kwargs: STL AGC ``{"attack_alpha", "release_alpha"}`` per frame.
        binaural_loudness_kwargs: ``{"sigma": 0.08, "p": 1.5978}``.
        ltl_agc_kwargs: LTL AGC ``{"attack_alpha", "release_alpha"}`` per frame.
        chunk_frames: frames processed together in the excitation stage (memory/speed).
        backend: ``"auto"`` (default): the compiled CPU path
            (:class:`lhotse_amt.functional.loudness.FastExcitation`, numba) when the input is on
            the CPU and no gradient is needed, the differentiable torch reference otherwise;
            ``"torch"``: always the reference; ``"fast"``: always the compiled path (CPU, no
            gradient). Both give the same result up to float rounding.

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

    def __init__(
        self,
        fs: float = 32000,
        learnable: bool = False,
        return_stages: bool = False,
        dtype: torch.dtype = torch.float32,
        preset: str = "amt-1.4",
        outer_middle_ear_kwargs: dict[str, Any] | None = None,
        spectrum_kwargs: dict[str, Any] | None = None,
        excitation_kwargs: dict[str, Any] | None = None,
        specific_loudness_kwargs: dict[str, Any] | None = None,
        temporal_integration_kwargs: dict[str, Any] | None = None,
        binaural_loudness_kwargs: dict[str, Any] | None = None,
        ltl_agc_kwargs: dict[str, Any] | None = None,
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
            outer_middle_ear_kwargs=outer_middle_ear_kwargs,
            spectrum_kwargs=spectrum_kwargs,
            excitation_kwargs=excitation_kwargs,
            specific_loudness_kwargs=specific_loudness_kwargs,
            temporal_integration_kwargs=temporal_integration_kwargs,
            binaural_loudness_kwargs=binaural_loudness_kwargs,
            ltl_agc_kwargs=ltl_agc_kwargs,
        ).items():
            check_kwargs(k, v)
        check_int("chunk_frames", chunk_frames, min=1)
        check_choice("backend", backend, ("auto", "torch", "fast"))
        if preset not in MOORE2016_PRESETS:
            raise ValueError(f"unknown preset {preset!r}; choose from {list(MOORE2016_PRESETS)}")
        if dtype not in (torch.float32, torch.float64):
            raise ValueError("dtype must be torch.float32 or torch.float64")
        cfg = dict(MOORE2016_PRESETS[preset])
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

        ome = dict(outer_middle_ear_kwargs or {})
        taps = np.asarray(ome.pop("taps", L.loudness_tables()["ff_32000"]), dtype=np.float64)
        if taps.ndim != 1 or len(taps) % 2 == 0:
            raise ValueError("ear filter taps must be a 1-D array of odd length")
        if not np.isfinite(taps).all():
            raise ValueError("ear filter taps must be finite (no NaN or inf)")
        self._check_unused("outer_middle_ear_kwargs", ome)
        self.register_buffer("ear_fir", torch.tensor(taps, dtype=dtype), persistent=False)

        spk = dict(spectrum_kwargs or {})
        self.prune = check_bool("spectrum_kwargs['prune']", spk.pop("prune", True))
        self._check_unused("spectrum_kwargs", spk)
        self._bases = L.dft_bases("moore2016")
        for i, (_, _, basis) in enumerate(self._bases):
            self.register_buffer(
                f"dft_basis_{i}", torch.tensor(basis, dtype=dtype), persistent=False
            )

        exk = dict(excitation_kwargs or {})
        lo, hi = check_band(
            exk.pop("erb_lower", 1.75), exk.pop("erb_upper", 39.0), names=("erb_lower", "erb_upper")
        )
        step = check_positive_finite("erb_step", exk.pop("erb_step", 0.25))
        self._check_unused("excitation_kwargs", exk)
        cams = np.arange(lo, hi + step / 2, step)
        self.erb_numbers = cams
        self.erb_fc_hz = L.cam_to_hz(cams)
        self.n_channels = len(cams)
        mats = L.excitation_matrices(self.erb_fc_hz, "moore2016")
        self._n_below = mats["n_below"]
        for k in ("level", "upper", "lower_h"):
            self.register_buffer(f"exc_{k}", torch.tensor(mats[k], dtype=dtype), persistent=False)

        slk = dict(specific_loudness_kwargs or {})
        c = check_positive_finite("specific_loudness_kwargs['c']", slk.pop("c", 0.0631))
        lowest = slk.pop("lowest_channel", cfg["lowest_channel"])
        self._check_unused("specific_loudness_kwargs", slk)
        if lowest not in ("zero", "extrapolate"):
            raise ValueError("lowest_channel must be 'zero' or 'extrapolate'")
        params = L.specific_loudness_params(self.erb_fc_hz, "extrapolate")
        outside = L.specific_loudness_params(self.erb_fc_hz, "nan")["a"]
        keep = np.where(np.isnan(outside) & (lowest == "zero"), 0.0, 1.0)
        for k, v in params.items():
            self.register_buffer(f"sl_{k}", torch.tensor(v, dtype=dtype), persistent=False)
        self.register_buffer("channel_mask", torch.tensor(keep, dtype=dtype), persistent=False)
        self.lowest_channel = lowest

        tik = dict(temporal_integration_kwargs or {})
        self.stl_attack = _alpha(
            "temporal_integration_kwargs", tik, "attack_alpha", cfg["stl_attack"]
        )
        self.stl_release = _alpha(
            "temporal_integration_kwargs", tik, "release_alpha", cfg["stl_release"]
        )
        self._check_unused("temporal_integration_kwargs", tik)
        ltk = dict(ltl_agc_kwargs or {})
        self.ltl_attack = _alpha("ltl_agc_kwargs", ltk, "attack_alpha", cfg["ltl_attack"])
        self.ltl_release = _alpha("ltl_agc_kwargs", ltk, "release_alpha", cfg["ltl_release"])
        self._check_unused("ltl_agc_kwargs", ltk)

        bik = dict(binaural_loudness_kwargs or {})
        sigma = check_positive_finite("binaural_loudness_kwargs['sigma']", bik.pop("sigma", 0.08))
        p = check_positive_finite("binaural_loudness_kwargs['p']", bik.pop("p", 1.5978))
        self._check_unused("binaural_loudness_kwargs", bik)
        smooth = L.binaural_smoothing_matrix(self.n_channels, sigma, step)
        self.register_buffer("binaural_smooth", torch.tensor(smooth, dtype=dtype), persistent=False)

        if learnable:
            self.c = nn.Parameter(torch.tensor(c, dtype=dtype))
            self.inhibition_p = nn.Parameter(torch.tensor(p, dtype=dtype))
        else:
            self.register_buffer("c", torch.tensor(c, dtype=dtype), persistent=False)
            self.register_buffer("inhibition_p", torch.tensor(p, dtype=dtype), persistent=False)

    @staticmethod
    def _check_unused(name: str, d: dict) -> None:
        if d:
            raise ValueError(f"unknown {name}: {sorted(d)}")

    # ------------------------------------------------------------------------------------------
    @property
    def frame_rate(self) -> float:
        """Frames per second of all outputs (1000)."""
        return L.FS / L.HOP

    @property
    def n_features(self) -> int:
        """Channels of :meth:`specific_loudness_frames` (``2 * n_channels`` = 300)."""
        return self.n_ears * self.n_channels

    def n_frames(self, n_samples: int) -> int:
        """Number of output frames for ``n_samples`` input samples at 32 kHz."""
        return n_samples // L.HOP + 1

    def _prepare(self, x: Tensor) -> tuple[Tensor, bool]:
        if not isinstance(x, Tensor):
            x = torch.as_tensor(np.asarray(x))
        if x.dim() == 2:
            squeeze = True
            x = x.unsqueeze(0)
        elif x.dim() == 3:
            squeeze = False
        else:
            raise ValueError(
                "Moore2016 expects (2, T) or (B, 2, T) pressure in Pa (channels first: left, "
                f"right), got shape {tuple(x.shape)}"
            )
        if x.shape[1] != 2:
            raise ValueError(
                f"Moore2016 expects 2 ear channels on axis -2 (left, right), got {x.shape[1]} "
                f"(shape {tuple(x.shape)}); for a diotic sound stack the signal twice"
            )
        L.check_pressure_signal(x, "Moore2016 input", min_samples=1)
        x = x.to(self.dtype)
        if self.fs != L.FS:
            x = L.resample_to_32k(x, self.fs)
        if x.shape[-1] < L.HOP:
            raise ValueError(f"Moore2016 input too short: {x.shape[-1]} samples at 32 kHz (< 32)")
        return x, squeeze

    def _sl_numpy(self) -> dict[str, np.ndarray]:
        # per-channel specific-loudness constants for the compiled path (built once)
        if self._sl is None:
            sl = {k: getattr(self, f"sl_{k}").numpy() for k in ("g", "a", "alpha", "e_thrq")}
            sl["a_alpha"] = (self.sl_a**self.sl_alpha).numpy()
            sl["mask"] = self.channel_mask.numpy()
            self._sl = sl
        return self._sl

    @property
    def _agc_backend(self) -> str:
        # backend="torch" runs the AGC reference too; otherwise lhotse_amt.functional.loudness.agc
        # chooses (no-grad numba kernel or the differentiable operator lhotse_amt::agc)
        return "torch" if self.backend == "torch" else "auto"

    def _use_fast(self, x: Tensor) -> bool:
        if self.backend == "torch":
            return False
        ok = L.fast_path_ok(x, self)
        if self.backend == "fast" and not ok:
            raise RuntimeError("backend='fast' needs CPU input and no gradient")
        return ok

    def _params(self) -> dict[str, Tensor]:
        return {"g": self.sl_g, "a": self.sl_a, "alpha": self.sl_alpha, "e_thrq": self.sl_e_thrq}

    def _instantaneous(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Instantaneous specific loudness ``(B, 2, F, C)`` and excitation level ``(B, 2, F, C)``
        (dB, ``10 log10(E)``)."""
        n = x.shape[-1]
        f_total = self.n_frames(n)
        half = (self.ear_fir.shape[0] - 1) // 2
        bases = [
            (ln, b, getattr(self, f"dft_basis_{i}")) for i, (ln, b, _) in enumerate(self._bases)
        ]
        params = self._params()
        if self._use_fast(x):
            if self._fast is None:
                self._fast = L.FastExcitation(self.erb_fc_hz, "moore2016", "moore2016", self.dtype)
            keep_rule = ("prune", 1000.0) if self.prune else ("floor", 0.0)
            # diotic input (both ears bit-identical): the monaural stages are the same for both
            # ears, so they are computed once (exact)
            diotic = bool(torch.equal(x[:, 0], x[:, 1]))
            z = L.fir_filter_full(x[:, :1] if diotic else x, self.ear_fir)
            # frames without kept components: E = 1e-10, i.e. -100 dB (as in the torch path)
            nsp, e, _ = self._fast.specific_loudness_frames(
                z,
                -half,
                0,
                f_total,
                bases,
                keep_rule,
                self._sl_numpy(),
                float(self.c),
                "moore2016",
                excitation_db=-100.0,
            )
            if diotic:
                nsp, e = nsp.repeat(1, 2, 1, 1), e.repeat(1, 2, 1, 1)
            return nsp, e
        z = L.fir_filter_full(x, self.ear_fir)
        inten = L.multires_intensity(z, -half, 0, f_total, bases)
        keep = L.prune_components(inten) if self.prune else inten > 0
        spec, exc = [], []
        for f0 in range(0, f_total, self.chunk_frames):
            f1 = min(f0 + self.chunk_frames, f_total)
            ic, kc = inten[..., f0:f1, :], keep[..., f0:f1, :]
            cols = torch.nonzero(kc.reshape(-1, L.N_BINS).any(0)).flatten()
            if cols.numel() == 0:
                e = ic.new_full((*ic.shape[:-1], self.n_channels), 1e-10)
                spec.append(torch.zeros_like(e))
                exc.append(e)
                continue
            if cols.numel() == L.N_BINS:  # dense spectrum: no gathers
                mats = {
                    "level": self.exc_level,
                    "upper": self.exc_upper,
                    "lower_h": self.exc_lower_h,
                }
                e, anyk = L.excitation_moore2016(ic, kc, mats, self._n_below)
            else:
                mats = {
                    "level": self.exc_level[cols][:, cols],
                    "upper": self.exc_upper[cols],
                    "lower_h": self.exc_lower_h[cols],
                }
                n_below = np.searchsorted(cols.cpu().numpy(), self._n_below)
                e, anyk = L.excitation_moore2016(ic[..., cols], kc[..., cols], mats, n_below)
            nsp = L.specific_loudness(e, params, self.c, "moore2016")
            nsp = nsp * self.channel_mask * anyk[..., None].to(nsp.dtype)
            spec.append(nsp)
            exc.append(e)
        return torch.cat(spec, dim=-2), 10.0 * torch.log10(torch.cat(exc, dim=-2))

    def instantaneous_specific_loudness(self, x: Tensor) -> Tensor:
        """Instantaneous specific loudness ``(B, 2, F, C)`` (sone/Cam) of ``(B, 2, T)`` pressure
        (Pa), frame ``j`` centred on sample ``32 j`` (no AGC, no inhibition)."""
        x, _ = self._prepare(x)
        return self._instantaneous(x)[0]

    def compute(self, x: Tensor) -> dict[str, Tensor]:
        """Run the model and return every stage.

        Keys (shapes for ``(B, 2, T)`` input; ``F = floor(T / 32) + 1`` frames at 1 kHz,
        ``C = 150`` channels): ``stl``, ``ltl`` ``(B, F)`` binaural (sone); ``max_ltl`` ``(B,)``;
        ``stl_left``, ``stl_right``, ``ltl_left``, ``ltl_right`` ``(B, F)`` per ear after
        inhibition; ``inst_left``, ``inst_right`` ``(B, F)`` = Σ instantaneous specific
        loudness / 4 (no inhibition); ``excitation_left/right`` ``(B, F, C)`` (dB);
        ``inst_spec_loud_left/right``, ``stl_spec_loud_left/right`` ``(B, F, C)`` (sone/Cam);
        ``frame_times_s`` ``(F,)``; ``erb_fc_hz`` ``(C,)``. The batch axis is dropped for 2-D
        input.
        """
        x, squeeze = self._prepare(x)
        inst, exc = self._instantaneous(x)
        stl_spec = L.agc(inst, self.stl_attack, self.stl_release, -2, self._agc_backend)
        sl, sr = L.binaural_inhibition(
            stl_spec[:, 0], stl_spec[:, 1], self.binaural_smooth, self.inhibition_p
        )
        stl_l = sl.sum(-1) / 4.0
        stl_r = sr.sum(-1) / 4.0
        ltl_lr = L.agc(
            torch.stack([stl_l, stl_r], 1), self.ltl_attack, self.ltl_release, -1, self._agc_backend
        )
        ltl_l, ltl_r = ltl_lr[:, 0], ltl_lr[:, 1]
        stl = stl_l + stl_r
        ltl = ltl_l + ltl_r
        f = inst.shape[-2]
        out = {
            "stl": stl,
            "ltl": ltl,
            "max_ltl": ltl.amax(-1),
            "stl_left": stl_l,
            "stl_right": stl_r,
            "ltl_left": ltl_l,
            "ltl_right": ltl_r,
            "inst_left": inst[:, 0].sum(-1) / 4.0,
            "inst_right": inst[:, 1].sum(-1) / 4.0,
            "excitation_left": exc[:, 0],
            "excitation_right": exc[:, 1],
            "inst_spec_loud_left": inst[:, 0],
            "inst_spec_loud_right": inst[:, 1],
            "stl_spec_loud_left": stl_spec[:, 0],
            "stl_spec_loud_right": stl_spec[:, 1],
        }
        if squeeze:
            out = {k: v.squeeze(0) for k, v in out.items()}
        out["frame_times_s"] = torch.arange(f, dtype=torch.float64) / self.frame_rate
        out["erb_fc_hz"] = torch.tensor(self.erb_fc_hz)
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
        if which not in ("instantaneous", "short_term"):
            raise ValueError("which must be 'instantaneous' or 'short_term'")
        st = self.compute(x)
        key = "inst_spec_loud" if which == "instantaneous" else "stl_spec_loud"
        spec = torch.cat([st[f"{key}_left"], st[f"{key}_right"]], dim=-1)
        return {"specific_loudness": spec, "stl": st["stl"], "ltl": st["ltl"]}

    def forward(self, x: Tensor) -> Any:
        st = self.compute(x)
        res = (st["stl"], st["ltl"], st["max_ltl"])
        if self.return_stages:
            return res, st
        return res

    def extra_repr(self) -> str:
        return (
            f"fs={self.fs:g}, preset={self.preset!r}, channels={self.n_channels}, "
            f"dtype={self.dtype}, learnable={self.learnable}"
        )

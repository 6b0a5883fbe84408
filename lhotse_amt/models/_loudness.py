"""What :class:`Glasberg2002` and :class:`Moore2016` share: input handling, the frame loop from
the ear-filtered signal to specific loudness (plain-torch stage modules, or the no-gradient
CPU fast path of :mod:`lhotse_amt.ops.loudness_fast`), and the small torch_amt methods."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from .._attributes import forwarded_attribute
from .._dispatch import no_grad_kernels
from .._validation import check_choice, check_int, check_number, check_str
from ..functional import loudness as L
from ..modules.loudness import (
    ExcitationPattern,
    MultiResolutionSpectrum,
    OuterMiddleEarFilter,
    SpecificLoudness,
)
from ._base import init_model_settings

__all__ = [
    "GM2002_AGC",
    "LoudnessFrames",
    "LoudnessModelBase",
    "agc_coefficient",
    "unused_keys",
]

#: The short- and long-term AGC coefficients per 1-ms frame of Glasberg & Moore (2002),
#: Sec. 2.6, which the 2016 model keeps: STL attack 0.045, release 0.02 (T_a = 22 ms,
#: T_r = 50 ms), LTL attack 0.01, release 0.0005 (99.5 ms, 2 s); the presets of both models
#: start from them.
GM2002_AGC: dict[str, float] = {
    "stl_attack": 0.045,
    "stl_release": 0.02,
    "ltl_attack": 0.01,
    "ltl_release": 0.0005,
}


def agc_coefficient(group: str, d: dict, key: str, default: float) -> float:
    """A per-frame AGC smoothing coefficient popped from ``d``: a number in (0, 1]."""
    return check_number(
        f"{group}[{key!r}]", d.pop(key, default), min=0.0, max=1.0, min_inclusive=False
    )


def unused_keys(name: str, d: dict) -> None:
    """Refuse keys left in a ``*_kwargs`` dict."""
    if d:
        raise ValueError(f"unknown {name}: {sorted(d)}")


def _agc_alpha(term: str, which: str) -> property:
    """Read-only property: the ``which`` (``"attack"``/``"release"``) smoothing coefficient
    per frame of the short-term (``term="stl"``) or long-term (``"ltl"``) AGC stage."""
    label = {"stl": "Short-term", "ltl": "Long-term"}[term]

    def get(self: LoudnessModelBase) -> float:
        return getattr(self._agc_stage(term), f"{which}_alpha")

    return property(get, doc=f"{label} AGC {which} coefficient per frame.")


@dataclass
class LoudnessFrames:
    """Per-frame stages of one run, ``(..., F, C)`` each: ``specific_loudness`` (sone/Cam),
    ``excitation_db`` ``10 log10(max(E, 1e-30))`` and ``level_db`` (the input level per ERB at
    the channel centres where the model has one, else the excitation level; dB)."""

    specific_loudness: Tensor
    excitation_db: Tensor
    level_db: Tensor


class LoudnessModelBase(nn.Module):
    """Base of the loudness models. Subclasses set the stage submodules ``ear``
    (:class:`OuterMiddleEarFilter`), ``spec`` (:class:`MultiResolutionSpectrum`), ``erb``
    (the level stage or None), ``exc`` (:class:`ExcitationPattern`) and ``sl``
    (:class:`SpecificLoudness`) through :meth:`_stages`, and ``_empty_excitation`` (excitation
    of frames without kept components) and ``_zero_empty_frames``."""

    #: frames/s of all outputs
    frame_rate = L.FS / L.HOP
    #: the fast kernels' excitation level in frames without kept components (dB)
    _empty_db = -100.0
    _empty_excitation = 1e-10
    _zero_empty_frames = True
    _input_dims: tuple[int, int] = (1, 2)

    def _init_common(
        self, args: dict[str, Any], presets: dict[str, dict[str, Any]]
    ) -> dict[str, Any]:
        """Check and store the settings every loudness model has (see
        :func:`~lhotse_amt.models._base.init_model_settings`; ``args``: the constructor's
        ``locals()``): ``fs`` (whole Hz), ``learnable``, ``return_stages``, ``dtype``, the
        ``*_kwargs`` dicts, ``preset`` (a key of ``presets``), ``chunk_frames`` and
        ``backend``. Returns the preset's dict."""
        check_str("preset", args["preset"])
        cfg = init_model_settings(self, args, presets, integral_fs=True)
        self.chunk_frames = check_int("chunk_frames", args["chunk_frames"], min=1)
        self.backend = check_choice("backend", args["backend"], ("auto", "torch", "fast"))
        self._fast: Any = None
        return cfg

    def _set_channels(self, cams: np.ndarray) -> None:
        """Channel centres at ERB-numbers ``cams`` (Cam)."""
        self.erb_numbers = cams
        self.erb_fc_hz = L.cam_to_hz(cams)
        self.n_channels = len(cams)
        self.register_buffer(
            "channel_fc_hz", torch.tensor(self.erb_fc_hz, dtype=torch.float64), persistent=False
        )

    def _stages(
        self,
    ) -> tuple[
        OuterMiddleEarFilter, MultiResolutionSpectrum, Any, ExcitationPattern, SpecificLoudness
    ]:
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------
    @property
    def _agc_backend(self) -> str:
        # backend="torch" runs the AGC reference too; otherwise functional.loudness.agc chooses
        # (no-grad numba kernel or the differentiable operator lhotse_amt::agc)
        return "torch" if self.backend == "torch" else "auto"

    def _check_shape(self, x: Tensor) -> bool:
        """Raise for a wrong shape; return whether a batch axis is to be added."""
        raise NotImplementedError

    def _prepare(self, x: Tensor) -> tuple[Tensor, bool]:
        if not isinstance(x, Tensor):
            x = torch.as_tensor(np.asarray(x))
        squeeze = self._check_shape(x)
        if squeeze:
            x = x.unsqueeze(0)
        name = type(self).__name__
        L.check_pressure_signal(x, f"{name} input", min_samples=1)
        x = x.to(self.dtype)
        if self.fs != L.FS:
            x = L.resample_to_32k(x, self.fs)
        if x.shape[-1] < L.HOP:
            raise ValueError(f"{name} input too short: {x.shape[-1]} samples at 32 kHz (< 32)")
        return x, squeeze

    def _use_fast(self, x: Tensor) -> bool:
        if self.backend == "torch":
            return False
        from ..ops.loudness_fast import fast_path_ok

        ok = fast_path_ok(x, self)
        if self.backend == "fast" and not ok:
            raise RuntimeError(
                "backend='fast' needs eager CPU input and no gradient (got "
                f"device={x.device.type}, grad={torch.is_grad_enabled() and x.requires_grad})"
            )
        return ok

    def _filtered(self, x: Tensor, fast: bool) -> Tensor:
        ear = self._stages()[0]
        if fast:
            from ..ops.loudness_fast import fir_filter_full_fast

            return fir_filter_full_fast(x, ear.fir)
        return ear(x)

    def _frames(self, z: Tensor, j_first: int, n_frames: int, fast: bool) -> LoudnessFrames:
        """Specific loudness and excitation of frames ``j_first …`` from the ear-filtered ``z``
        (output of :meth:`_filtered`)."""
        ear, spec, erb, exc, sl = self._stages()
        t0 = -ear.delay
        if fast:
            if self._fast is None:
                from ..ops.loudness_fast import FastExcitation

                self._fast = FastExcitation(exc.fc_hz, exc.variant, spec.variant, self.dtype)
            nsp, e_db, _ = self._fast.specific_loudness_frames(
                z,
                t0,
                j_first,
                n_frames,
                spec.bases(),
                spec.keep_rule,
                sl.tail_constants(),
                float(sl.c),
                sl.high_level,
                excitation_db=self._empty_db,
            )
            return LoudnessFrames(nsp, e_db, e_db)
        inten = spec(z, t0, j_first, n_frames)
        keep = spec.kept(inten)
        ik = torch.where(keep, inten, torch.zeros_like(inten))
        if torch.compiler.is_compiling() or (ik.is_cuda and no_grad_kernels(ik)):
            # one dense chunk: no data-dependent shapes in the graph; on CUDA without
            # gradient, every frame in one pass (the lower skirts' operator stores no
            # (frames, K, C) weights), so the launches do not grow with the frames
            return self._chunk(ik, keep, None)
        parts = []
        for f0 in range(0, n_frames, self.chunk_frames):
            f1 = min(f0 + self.chunk_frames, n_frames)
            kc = keep[..., f0:f1, :]
            cols = torch.nonzero(kc.reshape(-1, L.N_BINS).any(0)).flatten()
            if cols.numel() == L.N_BINS:
                cols = None  # dense spectrum: no gathers
            parts.append(self._chunk(ik[..., f0:f1, :], kc, cols))
        return LoudnessFrames(
            *(
                torch.cat([getattr(p, k) for p in parts], dim=-2)
                for k in LoudnessFrames.__annotations__
            )
        )

    def _spectrum(self, z: Tensor, j_first: int, n_frames: int, fast: bool) -> Tensor:
        """Component intensities ``(..., F, 960)`` of frames ``j_first …`` (re (20 µPa)²)."""
        ear, spec = self._stages()[:2]
        if fast:
            from ..ops.loudness_fast import multires_intensity_fast

            return multires_intensity_fast(z, -ear.delay, j_first, n_frames, spec.bases())
        return spec(z, -ear.delay, j_first, n_frames)

    def _chunk(self, ik: Tensor, keep: Tensor, cols: Tensor | None) -> LoudnessFrames:
        _, _, erb, exc, sl = self._stages()
        if cols is not None and cols.numel() == 0:
            shape = (*ik.shape[:-1], sl.g.shape[0])
            e = ik.new_full(shape, self._empty_excitation)
            e_db = 10.0 * torch.log10(e.clamp_min(1e-30))
            return LoudnessFrames(ik.new_zeros(shape), e_db, e_db)
        if cols is not None:
            ik = ik[..., cols]
        level_db = erb(ik, cols) if erb is not None else None
        e = exc(ik, level_db, cols)
        nsp = sl(e)
        if self._zero_empty_frames:
            nsp = nsp * keep.any(dim=-1, keepdim=True).to(nsp.dtype)
        e_db = 10.0 * torch.log10(e.clamp_min(1e-30))
        per_channel = level_db is not None and erb.per_channel
        return LoudnessFrames(nsp, e_db, level_db if per_channel else e_db)

    def _agc_stage(self, term: str) -> nn.Module:  # pragma: no cover - abstract
        """The AGC stage (:class:`~lhotse_amt.modules.loudness.LoudnessAGC`) of the
        short-term (``term="stl"``) or long-term (``"ltl"``) loudness."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------
    stl_attack = _agc_alpha("stl", "attack")
    stl_release = _agc_alpha("stl", "release")
    ltl_attack = _agc_alpha("ltl", "attack")
    ltl_release = _agc_alpha("ltl", "release")

    c = forwarded_attribute(
        "specific_loudness.c",
        "The specific-loudness constant ``C`` (parameter with ``learnable=True``).",
    )

    def get_erb_frequencies(self) -> Tensor:
        """Channel centre frequencies (Hz), ``(C,)`` float64."""
        return self.channel_fc_hz

    @staticmethod
    def compute_loudness_level(sone: Tensor) -> Tensor:
        """Loudness level (phon) ``40 + 10 log2(N)`` of loudness ``N`` (sone); valid above about
        40 phon (1 sone). Same shape."""
        return 40.0 + 10.0 * torch.log2(sone.clamp_min(1e-12))

    def reset_state(self) -> None:
        """Nothing to reset: every call starts its AGCs from silence (``S[-1] = 0``) and keeps
        no state between calls. Present for torch_amt compatibility."""

    def get_parameters(self) -> dict[str, Any]:
        """Model settings: ``fs``, ``learnable``, ``return_stages``, ``dtype``, ``preset``."""
        return {
            "fs": self.fs,
            "learnable": self.learnable,
            "return_stages": self.return_stages,
            "dtype": self.dtype,
            "preset": self.preset,
        }

    def get_learnable_parameters(self) -> dict[str, dict[str, Tensor]]:
        """Trainable parameters by stage submodule: ``{stage: {name: tensor}}`` (detached
        copies); empty if ``learnable=False``."""
        out: dict[str, dict[str, Tensor]] = {}
        for name, mod in self.named_children():
            ps = {k: v.detach().clone() for k, v in mod.named_parameters()}
            if ps:
                out[name] = ps
        return out

    def extra_repr(self) -> str:
        return (
            f"fs={self.fs:g}, preset={self.preset!r}, channels={self.n_channels}, "
            f"dtype={self.dtype}, learnable={self.learnable}"
        )

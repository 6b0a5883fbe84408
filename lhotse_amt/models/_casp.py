"""Shared parts of the CASP-chain models (:class:`~lhotse_amt.models.Dau1997`,
:class:`~lhotse_amt.models.osses2021.Osses2021`): the chain of stateful stages ending in
gammatone filterbank -> IHC envelope -> adaptation loops -> modulation filterbank, and the
torch_amt ``forward`` on it."""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..functional.modulation import unpad_bands
from ._base import StreamingModel

__all__ = ["CASPModel"]


class CASPModel(StreamingModel):
    """Base of the CASP-chain models. Subclasses set :attr:`stage_names` (ending in
    ``"modulation"``) and build a module attribute of each stage's name; stages before the
    gammatone filterbank override :meth:`_stage` (and :meth:`_casp_front`)."""

    fused_chain = "casp"

    def _stage(self, name: str, y: Tensor, state: dict[str, Any]) -> tuple[Tensor, Any]:
        """Stage ``name`` on its input ``y`` from its entry in the stream ``state``; returns
        the output and the stage's new state (the modulation filterbank's output padded to
        ``(B, C, M, T)``)."""
        if name == "modulation":
            return self.modulation.forward_padded(y, state.get(name), return_state=True)
        return getattr(self, name)(y, state.get(name), return_state=True)

    def _run_stages(self, x: Tensor, state: dict, last: int, out: dict, new: dict) -> None:
        y = x
        for name in self.stage_names[: last + 1]:
            y, new[name] = self._stage(name, y, state)
            out[name] = y

    def _run(self, x: Tensor, upto: str | None = None) -> dict[str, Tensor]:
        """One-shot run of the stages on ``x (B, T)`` (up to ``upto``): the stage outputs."""
        return self._stages(x, None, upto)[0]

    def _casp_front(self, x: Tensor) -> Tensor:
        """The stages before the gammatone filterbank on ``x (B, T)``, ahead of the fused
        kernel (none here)."""
        return x

    def distribute_gradients(self) -> None:
        """torch_amt's training-loop hook, kept for compatibility: there it shares gradients
        among the filters its ``FastModulationFilterbank`` groups. Every filter here has its
        own coefficients and exact gradient, so it does nothing."""

    def forward(self, x: Tensor) -> list[Tensor] | tuple[list[Tensor], dict[str, Tensor]]:
        xb, squeeze = self._prepare(x)
        if self._fused_inference(xb):
            # inference: the fused kernel after the stages of :meth:`_casp_front` (CPU:
            # item by item into one output, peak memory output + one item; CUDA: the batch)
            fused = self._casp_fused(xb, self._casp_front)
            if fused is not None:
                return [c[0] for c in fused] if squeeze else fused
            out = {"modulation": self._itemwise(xb, lambda v: self._run(v)["modulation"])}
            chans = unpad_bands(out["modulation"], self._band_counts())
        else:
            # the modulation filterbank channel by channel: only the bands each channel
            # has are computed and differentiated (no padded tensor)
            out = self._run(xb, upto="adaptation")
            chans = self.modulation(out["adaptation"])
        if squeeze:
            out = {k: v[0] for k, v in out.items()}
            chans = [c[0] for c in chans]
        if self.return_stages:
            return chans, {k: out[k] for k in self.stage_names[:-1]}
        return chans

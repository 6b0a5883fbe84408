"""Decision stage on a CASP model's internal representation (torch_amt method names).

The internal representation is the list a CASP model's ``forward`` returns: one tensor
``(..., M_c, T')`` per auditory channel ``c`` (``M_c`` modulation bands, ``T'`` samples at
the model's output rate). The methods here reduce it to one decision variable per item,
as the optimal-detector back ends of Dau et al. (1996b, 1997) and Jepsen et al. (2008) do
in their simplest (energy / template-correlation) form.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["DecisionMixin"]

_METRICS = ("rms", "mean", "max", "l2")


def _check_repr(name: str, rep: object) -> list[Tensor]:
    if isinstance(rep, tuple) and len(rep) == 2 and isinstance(rep[1], dict):
        rep = rep[0]
    if (
        not isinstance(rep, (list, tuple))
        or not rep
        or not all(isinstance(t, Tensor) and t.dim() >= 2 for t in rep)
    ):
        raise TypeError(
            f"{name} must be the list of per-channel tensors (..., M_c, T) that the model's "
            f"forward returns, got {type(rep).__name__}"
        )
    return list(rep)


def _check_range(name: str, rng: tuple[int, int] | None, n: int) -> slice:
    if rng is None:
        return slice(None)
    if len(rng) != 2 or not all(isinstance(v, int) for v in rng) or not 0 <= rng[0] < rng[1]:
        raise ValueError(f"{name} must be (start, end) ints with 0 <= start < end, got {rng!r}")
    if rng[0] >= n:
        raise ValueError(f"{name} {rng!r} starts beyond the {n} available")
    return slice(rng[0], rng[1])


class DecisionMixin:
    """``roi_selection``, ``template_correlation``, ``compute_decision_variable``,
    ``make_decision``, ``detection_task`` and ``discrimination_task`` for a CASP model
    whose ``forward`` returns a list of ``(B, M_c, T')`` tensors at ``fs_resampled`` (else
    ``fs``) Hz."""

    def _output_rate(self) -> float:
        return float(getattr(self, "fs_resampled", getattr(self, "fs", 0.0)))

    def _internal(self, audio: Tensor) -> list[Tensor]:
        return _check_repr("the model output", self(audio))  # type: ignore[operator]

    def roi_selection(
        self,
        internal_repr: list[Tensor],
        time_window: tuple[float, float] | None = None,
        channel_range: tuple[int, int] | None = None,
        modulation_range: tuple[int, int] | None = None,
    ) -> list[Tensor]:
        """Region of interest of an internal representation.

        Args:
            internal_repr: list of ``(..., M_c, T')`` tensors (the model output).
            time_window: ``(start, end)`` in seconds at the output rate; samples
                ``int(start·fs') .. int(end·fs')`` (end excluded). ``None``: all.
            channel_range: ``(start, end)`` auditory-channel indices (end excluded).
            modulation_range: ``(start, end)`` modulation-band indices (end excluded).

        Returns: the selected channels, each ``(..., M_sel, T_sel)``.
        """
        rep = _check_repr("internal_repr", internal_repr)
        rep = rep[_check_range("channel_range", channel_range, len(rep))]
        if time_window is not None:
            t0, t1 = time_window
            if not 0 <= t0 < t1:
                raise ValueError(
                    f"time_window must be (start, end) s with 0 <= start < end, got {time_window!r}"
                )
            fs = self._output_rate()
            ts = slice(int(t0 * fs), int(t1 * fs))
        else:
            ts = slice(None)
        out = []
        for r in rep:
            ms = _check_range("modulation_range", modulation_range, r.shape[-2])
            out.append(r[..., ms, ts])
        return out

    def template_correlation(
        self, internal_repr: list[Tensor], template: list[Tensor], normalize: bool = True
    ) -> Tensor:
        """Correlation of an internal representation with a template (same layout; a
        template with batch 1 is used for every item).

        ``normalize=True``: Pearson correlation over all channels, bands and samples, in
        ``[-1, 1]``; ``False``: the plain sum of products. Returns ``(B,)`` (``()`` for
        unbatched representations).
        """
        rep = _check_repr("internal_repr", internal_repr)
        tpl = _check_repr("template", template)
        if len(rep) != len(tpl) or any(
            a.shape[-2:] != b.shape[-2:] for a, b in zip(rep, tpl, strict=True)
        ):
            raise ValueError("template must have the channels, bands and length of internal_repr")
        a = torch.cat([r.flatten(-2) for r in rep], dim=-1)
        b = torch.cat([r.flatten(-2) for r in tpl], dim=-1)
        if normalize:
            a = a - a.mean(-1, keepdim=True)
            b = b - b.mean(-1, keepdim=True)
            den = a.norm(dim=-1) * b.norm(dim=-1)
            return (a * b).sum(-1) / den.clamp_min(torch.finfo(den.dtype).tiny)
        return (a * b).sum(-1)

    def compute_decision_variable(
        self,
        internal_repr: list[Tensor],
        metric: str = "rms",
        channel_weights: Tensor | None = None,
        modulation_weights: Tensor | None = None,
    ) -> Tensor:
        """One decision variable per item.

        With weights ``w = channel_weights[c] · modulation_weights[m]`` (default 1) on
        every sample ``x`` of channel ``c``, band ``m``: ``"rms"`` = sqrt(Σ w x² / Σ w),
        ``"mean"`` = Σ w x / Σ w, ``"max"`` = max w x, ``"l2"`` = sqrt(Σ w x²) (MU for
        the CASP models). Returns ``(B,)`` (``()`` for unbatched representations).
        """
        rep = _check_repr("internal_repr", internal_repr)
        if metric not in _METRICS:
            raise ValueError(f"metric must be one of {_METRICS}, got {metric!r}")
        n_mod = max(r.shape[-2] for r in rep)
        if channel_weights is not None and channel_weights.shape != (len(rep),):
            raise ValueError(
                f"channel_weights must have shape ({len(rep)},), got {tuple(channel_weights.shape)}"
            )
        if modulation_weights is not None and modulation_weights.shape[0] < n_mod:
            raise ValueError(
                f"modulation_weights needs at least {n_mod} entries (the most bands of a "
                f"channel), got {tuple(modulation_weights.shape)}"
            )
        num = den = best = None
        for c, r in enumerate(rep):
            w = torch.ones(r.shape[-2], 1, dtype=r.dtype, device=r.device)
            if modulation_weights is not None:
                w = w * modulation_weights[: r.shape[-2], None].to(r)
            if channel_weights is not None:
                w = w * channel_weights[c].to(r)
            if metric == "max":
                m = (w * r).amax(dim=(-2, -1))
                best = m if best is None else torch.maximum(best, m)
                continue
            x = r if metric == "mean" else r.square()
            s = (w * x).sum(dim=(-2, -1))
            d = w.sum() * r.shape[-1]
            num = s if num is None else num + s
            den = d if den is None else den + d
        if metric == "max":
            return best
        if metric == "l2":
            return num.sqrt()
        if metric == "mean":
            return num / den
        return (num / den).sqrt()

    def make_decision(
        self, decision_var: Tensor, threshold: float = 0.0, criterion: str = "greater"
    ) -> Tensor:
        """``decision_var > threshold`` (``criterion="greater"``) or ``< threshold``
        (``"less"``), a bool tensor of the shape of ``decision_var``."""
        if criterion == "greater":
            return decision_var > threshold
        if criterion == "less":
            return decision_var < threshold
        raise ValueError(f"criterion must be 'greater' or 'less', got {criterion!r}")

    def detection_task(
        self,
        signal_audio: Tensor,
        noise_audio: Tensor | None = None,
        metric: str = "rms",
        threshold: float | None = None,
        return_decision_var: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Detection: the decision variable of ``signal_audio``'s internal representation
        (minus that of ``noise_audio``, batch 1 or B, when given), thresholded.

        Returns the bool decisions ``(B,)``; the decision variable alone when
        ``threshold`` is ``None``; ``(decisions, decision_var)`` with
        ``return_decision_var=True``.
        """
        rep = self._internal(signal_audio)
        if noise_audio is not None:
            ref = self._internal(noise_audio)
            rep = [a - b for a, b in zip(rep, ref, strict=True)]
        dv = self.compute_decision_variable(rep, metric=metric)
        if threshold is None:
            return dv
        dec = self.make_decision(dv, threshold)
        return (dec, dv) if return_decision_var else dec

    def discrimination_task(
        self,
        stimulus1: Tensor,
        stimulus2: Tensor,
        metric: str = "rms",
        decision_rule: str = "greater",
        return_decision_var: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Discrimination: ``True`` where stimulus 1 is chosen, i.e. its decision variable
        is greater (``decision_rule="greater"``) or less (``"less"``) than stimulus 2's.
        With ``return_decision_var=True`` also ``DV1 - DV2``."""
        if decision_rule not in ("greater", "less"):
            raise ValueError(f"decision_rule must be 'greater' or 'less', got {decision_rule!r}")
        dv1 = self.compute_decision_variable(self._internal(stimulus1), metric=metric)
        dv2 = self.compute_decision_variable(self._internal(stimulus2), metric=metric)
        delta = dv1 - dv2
        dec = self.make_decision(delta, 0.0, decision_rule)
        return (dec, delta) if return_decision_var else dec

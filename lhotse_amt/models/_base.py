"""Shared machinery of the sample-rate (CASP-family) models: input checks, streaming
through stateful stages, and the torch_amt output conventions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .. import _alloc
from .._dispatch import grad_recorded, no_grad_kernels
from .._validation import (
    as_float_tensor,
    check_band,
    check_bool,
    check_dtype,
    check_kwargs,
    check_rate,
    check_signal,
    check_str,
)

__all__ = ["PooledState", "StreamingModel", "init_model_settings", "merge_preset"]


@dataclass
class PooledState:
    """Streaming state of :meth:`StreamingModel.pooled_block_sums` between chunks.

    Attributes:
        front: states of the stages before the fused chain (their :meth:`stream` states;
            ``None`` at rest).
        kernel: the fused operator's state (:class:`lhotse_amt.ops.fused.KernelState`;
            ``None`` at rest).
    """

    front: Any = None
    kernel: Any = None


def _king_pooled_plan(envelope: bool) -> Callable[[nn.Module, bool], Any]:
    """Layout maker of the pooled King2019 chain: band gains ``pi / (2 sqrt 2)`` and
    ``|.|`` on the bands above ``pi_cutoff`` with ``envelope``, else signed bands."""

    def make(m64: nn.Module, precise: bool) -> Any:
        import numpy as np

        from ..ops import fused

        mfc = m64.mfc.detach().double().cpu().numpy()
        env = (mfc > m64.pi_cutoff) & bool(envelope)
        gain = np.where(env, np.pi / (2.0 * np.sqrt(2.0)), 1.0)
        return fused.king_plan(m64, gain, env, precise)

    return make


def refuse_jit_trace(name: str) -> None:
    """``torch.jit.trace`` records tensor operations only: the compiled kernels behind
    the models' operators and their Python-side branches would be recorded wrongly, so
    tracing is refused with a pointer to the tools that handle them."""
    if torch.jit.is_tracing():
        raise RuntimeError(
            f"{name} cannot be traced with torch.jit.trace (its recursions are custom "
            "operators with compiled kernels); use torch.compile(model) or "
            "torch.export.export(model, (x,)) instead"
        )


def init_model_settings(
    model: nn.Module,
    args: dict[str, Any],
    presets: dict[str, dict[str, Any]] | None = None,
    *,
    integral_fs: bool = False,
) -> dict[str, Any]:
    """Check the constructor arguments every model has and store them on ``model``.

    ``args`` are the constructor's arguments (its ``locals()``): ``fs`` (Hz; a whole number
    of Hz with ``integral_fs``), ``learnable`` and ``return_stages`` (bool), ``dtype``
    (float32/float64), every ``*_kwargs`` (a dict or ``None``) and, with ``presets``,
    ``preset`` (``None`` or one of its keys; stored as ``model.preset``). ``model.fs``,
    ``learnable``, ``return_stages`` and ``dtype`` are set. Returns a copy of the preset's
    settings (``{}`` without one).
    """
    fs = check_rate("fs", args["fs"], integral=integral_fs)
    check_bool("learnable", args["learnable"])
    check_bool("return_stages", args["return_stages"])
    check_dtype("dtype", args["dtype"])
    for name, value in args.items():
        if name.endswith("_kwargs"):
            check_kwargs(name, value)
    preset = None
    if presets is not None:
        preset = check_str("preset", args.get("preset"), allow_none=True)
        if preset is not None and preset not in presets:
            raise ValueError(
                f"unknown preset {preset!r} of {type(model).__name__}; choose from {list(presets)}"
            )
        model.preset = preset
    model.fs = float(fs)
    model.learnable = args["learnable"]
    model.return_stages = args["return_stages"]
    model.dtype = args["dtype"]
    return dict(presets[preset]) if preset is not None else {}


def merge_preset(preset_kwargs: dict | None, user_kwargs: dict | None) -> dict:
    """Preset values overridden by explicitly given keyword arguments."""
    out = dict(preset_kwargs or {})
    out.update(user_kwargs or {})
    return out


class StreamingModel(nn.Module):
    """Base for models made of a chain of stateful stages.

    Subclasses implement :meth:`_run_stages`, which runs the chain on a chunk and records
    the stage outputs and new states. :meth:`stream` processes a long signal chunk by chunk
    with the states carried explicitly, so the result equals one-shot processing;
    calling the model twice on the same input gives the same output (no hidden state).
    """

    fs: float
    dtype: torch.dtype
    return_stages: bool
    #: stage names in processing order (keys of the ``return_stages`` dict)
    stage_names: tuple[str, ...] = ()
    #: the fused no-grad chain of :meth:`pooled_block_sums` (``"casp"``, ``"king2019"``;
    #: ``None``: none)
    fused_chain: str | None = None
    #: constructor arguments (for the float64 twin of :meth:`_kernel_plan`)
    _init_kwargs: dict[str, Any]
    #: the stage whose channels are the model's auditory channels (:attr:`fc`)
    channel_stage: str = "filterbank"

    def _init_common(
        self, args: dict[str, Any], presets: dict[str, dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Check and store the settings every sample-rate model has (see
        :func:`init_model_settings`; ``args``: the constructor's ``locals()``) and the
        auditory grid ``flow < fhigh`` (Hz); keep the arguments for the float64 twin of
        :meth:`_kernel_plan`. Returns the preset's stage settings (``{}`` without one)."""
        args = {k: v for k, v in args.items() if k not in ("self", "__class__")}
        self._init_kwargs = args
        cfg = init_model_settings(self, args, presets)
        self.flow, self.fhigh = check_band(args["flow"], args["fhigh"])
        return cfg

    @property
    def fc(self) -> Tensor:
        """Centre frequencies of the auditory channels (Hz), ``(C,)`` (the characteristic
        frequencies of the DRNL channels in :class:`~lhotse_amt.models.Paulick2024`)."""
        return getattr(self, self.channel_stage).fc

    @property
    def num_channels(self) -> int:
        """Number of auditory channels ``C``."""
        return getattr(self, self.channel_stage).num_channels

    @property
    def mfc(self) -> list[Tensor]:
        """Modulation centre frequencies per channel (Hz)."""
        return self.modulation.mfc  # type: ignore[attr-defined]

    def _prepare(self, x: Tensor, min_samples: int = 1) -> tuple[Tensor, bool]:
        """Check ``forward``'s input (``(T,)`` or ``(B, T)``, real floating point, finite;
        integer PCM is an error) and move it to the model's device and dtype; returns the
        ``(B, T)`` tensor and whether the batch axis was added."""
        refuse_jit_trace(type(self).__name__)
        x = as_float_tensor(x)
        check_signal(x, min_samples=min_samples, max_dim=2, what=f"{type(self).__name__} input")
        squeeze = x.dim() == 1
        if squeeze:
            x = x.unsqueeze(0)
        return self._to_model(x), squeeze

    def _to_model(self, x: Tensor) -> Tensor:
        ref = next(iter(self.buffers()), None)
        device = ref.device if ref is not None else x.device
        return x.to(device=device, dtype=self.dtype)

    def _needs_grad(self, x: Tensor) -> bool:
        """Whether autograd records this call (input or a parameter requires grad)."""
        return grad_recorded(x, *self.parameters())

    def _band_counts(self) -> tuple[int, ...]:
        """Modulation bands per channel as Python ints (read once from the design's
        buffer: constants, so traced graphs do not depend on tensor data)."""
        counts = self.__dict__.get("_band_counts_cache")
        if counts is None:
            counts = tuple(int(n) for n in self.modulation.n_bands)  # type: ignore[attr-defined]
            self.__dict__["_band_counts_cache"] = counts
        return counts

    def _eager_inference(self, x: Tensor) -> bool:
        """Whether this call is eager inference, where the fused no-grad operators run
        (:func:`lhotse_amt._dispatch.no_grad_kernels`: on the CPU and on CUDA with
        Triton; the dispatcher picks the kernel). Under autograd and while
        ``torch.compile``/``torch.export`` trace the model, the stages run as the
        registered differentiable operators (:mod:`lhotse_amt.ops`), which have compiled
        backward kernels and fake implementations."""
        return no_grad_kernels(x, *self.parameters())

    def _fused_inference(self, x: Tensor) -> bool:
        """Whether the whole fused chain runs: :meth:`_eager_inference` without
        ``return_stages``."""
        return not self.return_stages and self._eager_inference(x)

    @staticmethod
    def _itemwise(x: Tensor, fn: Callable[[Tensor], Tensor]) -> Tensor:
        """``fn`` (batch in, batch out; items independent) applied to ``x (B, T)`` one
        item at a time, the results written into one output tensor: peak memory is the
        output plus one item's intermediates, not ``B`` items' (inference only)."""
        first = fn(x[:1])
        if x.shape[0] == 1:
            return first
        out = first.new_empty((x.shape[0], *first.shape[1:]))
        out[:1] = first
        del first
        for b in range(1, x.shape[0]):
            out[b : b + 1] = fn(x[b : b + 1])
        return out

    def _casp_fused(self, x: Tensor, front: Callable[[Tensor], Tensor]) -> list[Tensor] | None:
        """Inference output of a CASP chain (Dau1997, Osses2021) by the fused operator
        ``lhotse_amt::casp_samples_`` (:func:`lhotse_amt.ops.fused.casp_samples`): per
        item, ``front`` (the stages before the gammatone filterbank) and then gammatone,
        IHC, adaptation loops and modulation filterbank in one pass over the samples,
        written straight into the output (float64 recursions). Returns the per-channel
        outputs ``(B, M_c, T')`` (views of one tensor that holds only the bands each
        channel has), or ``None`` where the operator does not apply (a filter type it does
        not run). On CUDA the batch runs in one call (the operator's Triton kernel)."""
        from ..ops import fused

        if not fused.casp_supported(self):
            return None
        plan = self._kernel_plan("casp", fused.casp_plan)
        if x.device.type != "cpu":
            u = front(x)
            out = _alloc.empty_tensor(
                (x.shape[0], int(plan.n_bands.sum()), u.shape[-1]), self.dtype, u.device
            )
            fused.casp_samples(plan, u, out)
            return list(out.split(plan.n_bands.tolist(), dim=1))
        out = None
        for b in range(x.shape[0]):
            u = front(x[b : b + 1])
            if out is None:
                rows = int(plan.n_bands.sum())
                out = _alloc.empty_tensor((x.shape[0], rows, u.shape[-1]), self.dtype)
            fused.casp_samples(plan, u, out[b : b + 1])
        assert out is not None
        return list(out.split(plan.n_bands.tolist(), dim=1))

    # ------------------------------------------------------------------ pooled inference
    def pooled_supported(self) -> bool:
        """Whether :meth:`pooled_block_sums` runs this model (a fused chain, see
        :attr:`fused_chain`, whose kernel supports the model's filter types)."""
        from ..ops import fused

        return fused.chain_supported(self, self.fused_chain)

    def _fused_front(self, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        """Stages before the fused chain on a chunk ``x (B, T)``: output and new state
        (default: none)."""
        return x, state

    def pooled_block_sums(
        self,
        x: Tensor,
        state: PooledState | None,
        hop: int,
        ends: list[int],
        square: bool,
        envelope: bool = False,
    ) -> tuple[Tensor, PooledState]:
        """No-grad inference of the whole chain on a chunk ``x (B, T)``, pooled over
        blocks of ``hop`` samples in the same pass (operators ``lhotse_amt::casp_pooled`` /
        ``lhotse_amt::king_pooled``, :mod:`lhotse_amt.ops.fused`).

        Args:
            x: chunk of input samples ``(B, T)`` (the model's dtype and device: the CPU, or
                CUDA, where the operators run Triton kernels).
            state: the state returned with the previous chunk (``None``: rest).
            hop: samples per block.
            ends: valid samples of each item, counted from the chunk's start (samples at
                or after them are not summed).
            square: sum squares (rms pooling).
            envelope: King2019 only: bands above ``pi_cutoff`` as ``|band| pi / (2 sqrt
                2)`` (the causal stand-in for the phase insensitivity).

        Returns:
            Block sums ``(B, C, M, ceil(T / hop))`` float64 (band 0 the low-pass band of
            the CASP chains; 0 for bands a channel lacks) and the new state. Block ``k``
            holds samples ``[k hop, (k + 1) hop)``: the frame definition of
            :func:`lhotse_amt.functional.framing.frame_mean` before the division.
        """
        from ..ops import fused

        st = state or PooledState()
        u, front = self._fused_front(x, st.front)
        if self.fused_chain == "casp":
            plan = self._kernel_plan("casp", fused.casp_plan)
            sums, kst = fused.casp_pooled(plan, u, st.kernel, hop, ends, square)
        elif self.fused_chain == "king2019":
            plan = self._kernel_plan(
                f"king2019-pooled-{bool(envelope)}", _king_pooled_plan(envelope)
            )
            sums, kst = fused.king_pooled(plan, u, st.kernel, hop, ends, square)
        else:
            raise ValueError(f"{type(self).__name__} has no fused pooled chain")
        return sums, PooledState(front, kst)

    def pooled_modulation(
        self,
        x: Tensor,
        state: dict[str, Any] | None,
        upto: str,
        R: int,
        starts: Any,
        stops: Any,
        counts: Any,
        square: bool,
    ) -> tuple[Tensor | None, dict[str, Any]]:
        """No-grad inference: the stages up to ``upto`` on a chunk ``x (B, T)`` (their
        output at ``1 / R`` of the input rate), then the modulation filterbank and the
        frame pooling of its output held over ``R`` input samples per sample in one pass
        (operator ``lhotse_amt::modulation_pooled``); frame ``f`` of item ``b`` covers
        input samples ``[starts[b, f], stops[b, f])`` of the chunk, ``counts[b]`` frames.
        Returns the frame values ``(B, C, M + 1, F)`` float64 (``None`` for a chunk too
        short to reach the next decimated sample) and the new :meth:`stream` state."""
        from ..ops import fused

        out, new = self.stream(x, state, upto=upto)
        y = out[upto]
        mst = (state or {}).get("modulation")
        if y.shape[-1] == 0:
            new["modulation"] = mst
            return None, new
        mod = self.modulation  # type: ignore[attr-defined]
        sums, new["modulation"] = fused.modulation_pooled(
            y, mod, mst, starts, stops, counts, R, square
        )
        return sums, new

    def pooled_modulation_supported(self) -> bool:
        """Whether :meth:`pooled_modulation` runs this model's modulation filterbank."""
        from ..ops import fused

        return fused.modulation_pooled_supported(self.modulation)  # type: ignore[attr-defined]

    def _kernel_plan(self, name: str, make: Callable[[nn.Module, bool], Any]) -> Any:
        """``make(model64, precise)``: the coefficient layout of the fused CPU kernel
        ``name``, built once and cached. The kernels compute in float64 whatever the
        model dtype, so a float32 model's layout comes from a float64 twin (made from the
        constructor arguments: coefficients designed in float64, not float32-rounded
        buffers); ``precise`` (float64 limiter and magnitudes) is set for float64 models.
        A learnable model's layout comes from its current parameters and is rebuilt when
        they change."""
        precise = self.dtype == torch.float64
        key: tuple = (name, precise)
        if self.learnable:
            key += tuple((p.data_ptr(), p._version) for p in self.parameters())
        cache = self.__dict__.setdefault("_plans", {})
        if key not in cache:
            if self.learnable:
                cache.clear()  # stale parameter versions
            if precise or self.learnable:
                src: nn.Module = self
            else:
                kwargs = dict(self._init_kwargs, dtype=torch.float64, return_stages=False)
                src = type(self)(**kwargs)
            cache[key] = make(src, precise)
        return cache[key]

    def _stages(
        self, x: Tensor, state: dict[str, Any] | None, upto: str | None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Run the chain on ``x (B, T)`` from ``state`` (``None``: rest) up to the stage
        ``upto`` (``None``: all): returns the stage outputs and the new states, which
        :meth:`_run_stages` fills in processing order."""
        state = state or {}
        names = self.stage_names
        last = names.index(upto) if upto is not None else len(names) - 1
        out: dict[str, Tensor] = {}
        new = self._carried_state(state)
        self._run_stages(x, state, last, out, new)
        return out, new

    def _carried_state(self, state: dict[str, Any]) -> dict[str, Any]:
        """The entries of a stream state that belong to no stage (passed on as they are)."""
        return {}

    def _run_stages(self, x: Tensor, state: dict, last: int, out: dict, new: dict) -> None:
        """The stages ``stage_names[: last + 1]`` on ``x``, each from its entry in
        ``state``: their outputs go into ``out`` and their new states into ``new``."""
        raise NotImplementedError  # pragma: no cover - abstract

    def stream(
        self, x: Tensor, state: dict[str, Any] | None = None, upto: str | None = None
    ) -> tuple[dict[str, Tensor], dict[str, Any]]:
        """Run the stages on one chunk ``x (B, T)`` from ``state`` (``None``: the model's
        initial state). Returns ``(stage outputs, new state)``; pass the new state with
        the next chunk. ``upto`` stops after the named stage.

        The chunk is checked as ``forward``'s input (a real floating-point ``(B, T)``
        tensor of finite samples; integer PCM, NaN/inf and other shapes raise
        ``ValueError``, non-tensors ``TypeError``) and moved to the model's device and
        dtype."""
        if upto is not None and upto not in self.stage_names:
            raise ValueError(f"unknown stage {upto!r}; stages are {self.stage_names}")
        if state is not None and not isinstance(state, dict):
            raise TypeError(
                f"state must be None or the dict a previous stream() call returned, got "
                f"{type(state).__name__}"
            )
        if not isinstance(x, Tensor):
            raise TypeError(
                f"{type(self).__name__}.stream input must be a torch.Tensor (B, T), got "
                f"{type(x).__name__}"
            )
        x = as_float_tensor(x)
        check_signal(
            x, min_samples=1, min_dim=2, max_dim=2, name=f"{type(self).__name__}.stream input"
        )
        return self._stages(self._to_model(x), state, upto)

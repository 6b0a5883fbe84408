"""The models' fused no-grad inference chains as registered operators (``lhotse_amt::``).

Eager CPU inference runs each model's whole chain, or a long part of it, in one compiled
pass over the samples (:mod:`lhotse_amt.kernels.casp`, :mod:`lhotse_amt.kernels.king2019`,
:mod:`lhotse_amt.kernels.modbank_simd`, :mod:`lhotse_amt.kernels.paulick`; float64
recursions with coefficients from a float64 twin of the model). Each chain is one operator
here, with

* a CPU kernel (the fused numba chain), registered at the dispatcher level
  (``torch.library.Library``: a call costs no ``torch.compile`` machinery),
* for the pooled chains (``casp_pooled``, ``king_pooled``, ``modulation_pooled``) a CUDA
  kernel: one Triton launch that runs the chain and pools inside the kernel, so no
  sample-rate tensor is made on the GPU either (:mod:`lhotse_amt.kernels.triton_casp_pooled`,
  :mod:`~lhotse_amt.kernels.triton_king_pooled`,
  :mod:`~lhotse_amt.kernels.triton_modulation_pooled`; they run where
  :func:`lhotse_amt._dispatch.kernel_device` says); ``pool_held`` (the held-frame
  pooling of a decimated signal) has one too,
* a fake implementation (shapes only),
* no gradient: the operators serve inference; under autograd and while
  ``torch.compile``/``torch.export`` trace a model, the models run their stages as the
  differentiable operators (:mod:`lhotse_amt.ops.recursions`) instead. ``casp_samples_``
  and ``king_samples_`` run on CUDA as the ``casp_pooled``/``king_pooled`` Triton kernels
  with one-sample frames. The loudness extractors' streamed AGC, ``agc_stream``, is in
  :mod:`lhotse_amt.ops.agc_stream`.

The pooled operators implement the frame definition of
:func:`lhotse_amt.functional.framing.frame_mean` inside their sample loop: they return
per-hop sums (block ``k``: samples ``[k hop, (k + 1) hop)`` cut at the item's end), which
:class:`lhotse_amt.features.frames.FrameAccumulator` divides by the sample counts. The tests
compare them with :func:`~lhotse_amt.functional.framing.frame_mean` of the sample output.

A kernel's coefficient layout (its *plan*, built once per model by :func:`casp_plan` /
:func:`king_plan`) is not a tensor; the operators receive it as an integer handle
(:func:`plan_handle`) into a registry of live plans. Streaming states cross the operator
boundary as :class:`KernelState` (named arrays in the kernel's own layout; the CUDA
kernels have layouts of their own, so a stream stays on the device that started it).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._dispatch import kernel_device
from ..kernels import casp as _casp
from ..kernels import king2019 as _king
from ..kernels import modbank_simd as _modbank
from ..kernels import paulick as _paulick
from .rowop import DeviceKernels

__all__ = [
    "KernelState",
    "casp_plan",
    "casp_pooled",
    "casp_samples",
    "casp_supported",
    "chain_supported",
    "king_plan",
    "king_pooled",
    "king_samples",
    "modulation_pooled",
    "modulation_pooled_supported",
    "pooled_filters",
    "plan_handle",
    "pool_held",
]

_LIB = "lhotse_amt"
#: the operators' registrations (dispatcher-level: calling them costs no torch.compile
#: machinery, unlike ``torch.library.custom_op``, whose first call imports it)
_lib = torch.library.Library(_LIB, "FRAGMENT")


def _operator(schema: str) -> Any:
    """Define ``lhotse_amt::<schema>`` with the decorated function as its CPU and CUDA
    kernel (the function picks its host code by device, :class:`DeviceKernels`); the
    decorator returns the operator."""
    name = schema.split("(", 1)[0]

    def register(fn: Any) -> Any:
        _lib.define(schema)
        _lib.impl(name, fn, "CPU")
        _lib.impl(name, fn, "CUDA")
        return getattr(getattr(torch.ops, _LIB), name).default

    return register


def _triton(name: str) -> Any:
    """The Triton kernel module ``lhotse_amt.kernels.triton_<name>`` (imported on first
    use): a pooled chain's (``casp_pooled``, ...) or their shared host side
    (``pooled``)."""
    from importlib import import_module

    return import_module(f"..kernels.triton_{name}", __package__)


def _fake(name: str) -> Any:
    """Register the decorated function as the fake implementation of ``lhotse_amt::name``."""

    def register(fn: Any) -> Any:
        torch.library.register_fake(f"{_LIB}::{name}", fn, lib=_lib)
        return fn

    return register


_PLANS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()


def plan_handle(plan: Any) -> int:
    """Integer handle of a kernel plan for the operators (valid while the plan lives)."""
    _PLANS[id(plan)] = plan
    return id(plan)


def _plan(handle: int) -> Any:
    try:
        return _PLANS[handle]
    except KeyError:
        raise ValueError(f"no live fused-kernel plan with handle {handle}") from None


def _state_keys(table: dict[int, tuple[str, ...]], state: list[Tensor]) -> tuple[str, ...]:
    """The names of a kernel's state arrays, from their number."""
    try:
        return table[len(state)]
    except KeyError:
        raise ValueError(
            f"a fused-kernel state has {sorted(table)} arrays, got {len(state)}"
        ) from None


@dataclass(frozen=True)
class KernelState:
    """Streaming state of a fused kernel between chunks: named arrays in the kernel's own
    layout (a stream stays with the kernel that started it)."""

    keys: tuple[str, ...]
    arrays: tuple[Tensor, ...]

    @classmethod
    def from_arrays(cls, d: dict[str, Any]) -> KernelState:
        return cls(tuple(d), tuple(torch.as_tensor(v) for v in d.values()))

    def numpy(self) -> dict[str, np.ndarray]:
        return {k: v.numpy() for k, v in zip(self.keys, self.arrays)}

    def replace(self, arrays: list[Tensor]) -> KernelState:
        return KernelState(self.keys, tuple(arrays))


class _CpuPooled:
    """A pooled operator's CPU kernel (``kernel``: the chain's numba block-sum function,
    ``keys``: the names of its state arrays by their number)."""

    def __init__(self, kernel: Callable[..., Any], keys: dict[int, tuple[str, ...]]) -> None:
        self.kernel, self.keys = kernel, keys

    def pooled(
        self, p: Any, x: Tensor, state: list[Tensor], hop: int, ends: list[int], square: bool
    ) -> tuple[Tensor, list[Tensor]]:
        k = _state_keys(self.keys, state)
        st = dict(zip(k, (s.numpy() for s in state)))
        sums, new = self.kernel(p, x, st, hop, ends, square)
        return sums.contiguous(), [torch.from_numpy(new[n]) for n in k]

    def rest_state(self, plan: Any, x: Tensor, hop: int, square: bool) -> KernelState:
        _, st = self.kernel(plan, x[:, :0], None, hop, [0] * x.shape[0], square)
        return KernelState.from_arrays(st)


class _TritonPooled:
    """A pooled operator's CUDA kernel: the chain's Triton module ``triton_<name>`` under
    :mod:`lhotse_amt.kernels.triton_pooled` (its own state layout)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def pooled(
        self, p: Any, x: Tensor, state: list[Tensor], hop: int, ends: list[int], square: bool
    ) -> tuple[Tensor, list[Tensor]]:
        return _triton("pooled").pooled(_triton(self.name), p, x, state, hop, ends, square)

    def rest_state(self, plan: Any, x: Tensor, hop: int, square: bool) -> KernelState:
        gpu = _triton(self.name)
        return KernelState(gpu.STATE_KEYS, tuple(gpu.rest_state(plan, x.shape[0], x.device)))


def _pooled_operator(
    name: str, kernel: Callable[..., Any], keys: dict[int, tuple[str, ...]], bands: Any
) -> Callable[..., tuple[Tensor, KernelState]]:
    """Define the pooled operator ``lhotse_amt::name`` of a fused chain (``kernel``: its
    block-sum function; ``keys``: the names of its state arrays by their number;
    ``bands(plan)``: bands per channel of the sums; its CUDA kernel runs the chain's
    Triton module, :func:`_triton`) and return its caller
    ``(plan, x, state, hop, ends, square) -> (sums, new state)``."""

    kernels = DeviceKernels(_CpuPooled(kernel, keys), _TritonPooled(name))

    @_operator(
        f"{name}(Tensor x, int plan, Tensor[] state, int hop, int[] ends, bool square)"
        " -> (Tensor, Tensor[])"
    )
    def op(
        x: Tensor, plan: int, state: list[Tensor], hop: int, ends: list[int], square: bool
    ) -> tuple[Tensor, list[Tensor]]:
        return kernels.on(x).pooled(_plan(plan), x, state, hop, ends, square)

    @_fake(name)
    def _(
        x: Tensor, plan: int, state: list[Tensor], hop: int, ends: list[int], square: bool
    ) -> tuple[Tensor, list[Tensor]]:
        p = _plan(plan)
        nblk = -(-x.shape[-1] // hop)
        sums = x.new_empty((x.shape[0], p.C, bands(p), nblk), dtype=torch.float64)
        return sums, [torch.empty_like(s) for s in state]

    def call(
        plan: Any, x: Tensor, state: KernelState | None, hop: int, ends: list[int], square: bool
    ) -> tuple[Tensor, KernelState]:
        if state is None:  # the rest state in the layout of the kernel that will run
            state = kernels.on(x).rest_state(plan, x, hop, square)
        sums, new = op(x, plan_handle(plan), list(state.arrays), hop, ends, square)
        return sums, state.replace(new)

    return call


# --------------------------------------------------------------------------------------
# Dau1997 / Osses2021: gammatone, IHC, adaptation loops, modulation filterbank
# --------------------------------------------------------------------------------------


def casp_supported(model: torch.nn.Module) -> bool:
    """Whether the fused CASP chain runs ``model`` (``efilt`` bands with one pole, an SOS
    IHC, one time constant per loop)."""
    return _casp.fused_supported(model)


def chain_supported(model: torch.nn.Module, chain: str | None) -> bool:
    """Whether the fused pooled chain ``chain`` (``"casp"``, ``"king2019"``) runs
    ``model`` (King2019: second-order-section band-passes and IHC)."""
    if chain == "casp":
        return casp_supported(model)
    if chain == "king2019":
        return model.modulation_filterbank.form == "sos" and model.ihc.sos.dim() == 2
    return False


def casp_plan(model: torch.nn.Module, precise: bool) -> Any:
    """The fused CASP chain's coefficient layout for ``model`` (float64 ``precise``)."""
    from ..functional.adaptation import adaptation_coefficients

    ad = model.adaptation
    minlvl = 10.0 ** ((ad.minspl - ad.dboffset) / 20.0)
    tau = ad.tau.detach().to("cpu", torch.float64)
    loops = adaptation_coefficients(tau, ad.fs, ad.limit, minlvl)
    return _casp.CASPPooledPlan(model, precise, _gammatone_poles(model), loops)


def _gammatone_poles(model: torch.nn.Module) -> tuple[Tensor, Tensor]:
    """Complex poles and real gains ``(C,)`` (float64) of ``model.filterbank``."""
    from ..functional.gammatone import gammatone_poles

    fb = model.filterbank
    return gammatone_poles(fb.fc.double(), fb.fs, fb.n, fb.erb_scale.double())


#: state keys of the channel-vectorised kernel (8 arrays) and of the register kernel (2)
_CASP_KEYS = {8: ("gre", "gim", "ihc", "adapt", "pre", "lp", "xr", "xi"), 2: ("front", "mod")}
_casp_pooled = _pooled_operator("casp_pooled", _casp.casp_pooled, _CASP_KEYS, lambda p: p.M1)


def casp_pooled(
    plan: Any, x: Tensor, state: KernelState | None, hop: int, ends: list[int], square: bool
) -> tuple[Tensor, KernelState]:
    """Operator ``lhotse_amt::casp_pooled``: the fused chain on ``x (B, T)`` (the gammatone
    input) from ``state`` (``None``: rest), summed over blocks of ``hop`` samples (samples
    at or after ``ends[b]`` unused). Returns sums ``(B, C, M + 1, ceil(T / hop))`` float64
    (of squares if ``square``; 0 for bands a channel lacks) and the new state."""
    return _casp_pooled(plan, x, state, hop, ends, square)


@_operator("casp_samples_(Tensor x, Tensor(a!) out, int plan) -> ()")
def _casp_samples(x: Tensor, out: Tensor, plan: int) -> None:
    _CASP_SAMPLES.on(x)(_plan(plan), x, out)


def casp_samples_triton(plan: Any, x: Tensor, out: Tensor) -> None:
    """The CUDA kernel of ``casp_samples_``: :func:`_samples_by_pooling` with the Triton
    kernel of ``casp_pooled``, the bands each channel has copied into the rows of ``out``
    (also runs on CPU tensors in Triton's interpreter)."""
    rows = torch.as_tensor(
        [c * plan.M1 + m for c, n in enumerate(plan.n_bands.tolist()) for m in range(int(n))],
        device=x.device,
    )
    B = x.shape[0]

    def store(t0: int, sums: Tensor) -> None:
        out[:, :, t0 : t0 + sums.shape[-1]] = sums.reshape(B, -1, sums.shape[-1])[:, rows]

    _samples_by_pooling("casp_pooled", plan, x, store)


def king_samples_triton(plan: Any, x: Tensor, out: Tensor, pi_bands: list[int]) -> None:
    """The CUDA kernel of ``king_samples_``: :func:`_samples_by_pooling` with the Triton
    kernel of ``king_pooled`` into ``out (B, C, M, T)``, then the phase insensitivity of
    the bands ``pi_bands`` (operator ``lhotse_amt::rms_envelope``; also runs on CPU
    tensors in Triton's interpreter)."""

    def store(t0: int, sums: Tensor) -> None:
        out[..., t0 : t0 + sums.shape[-1]] = sums

    _samples_by_pooling("king_pooled", plan, x, store)
    if pi_bands:
        from .envelope import rms_envelope

        out.copy_(rms_envelope(out, pi_bands))


def _samples_by_pooling(name: str, plan: Any, x: Tensor, store: Callable[..., None]) -> None:
    """Every sample of a fused chain's bands on ``x (B, T)`` from rest: the Triton kernel
    of the pooled operator ``name`` with frames of one sample (their sums are the
    samples), in time blocks that bound its float64 output to :data:`_SAMPLES_BYTES` (at
    least :data:`_SAMPLES_BLOCK` samples: one launch for signals of a few seconds), each
    block's ``(B, C, bands, n)`` sums handed to ``store(t0, sums)``."""
    gpu, B, T = _TritonPooled(name), x.shape[0], x.shape[-1]
    state = list(gpu.rest_state(plan, x, 1, False).arrays)
    rows = B * plan.C * _triton(name).bands(plan)
    step = max(_SAMPLES_BLOCK, _SAMPLES_BYTES // (8 * rows))
    for t0 in range(0, T, step):
        xs = x[:, t0 : t0 + step]
        n = xs.shape[-1]
        sums, state = gpu.pooled(plan, xs, state, 1, [n] * B, False)
        store(t0, sums)


#: the fewest samples per call of the pooled Triton kernels in ``casp_samples_`` /
#: ``king_samples_``, and the size of their float64 block output they otherwise keep to
_SAMPLES_BLOCK = 1 << 12
_SAMPLES_BYTES = 1 << 28


@_fake("casp_samples_")
def _(x: Tensor, out: Tensor, plan: int) -> None:
    return None


def casp_samples(plan: Any, x: Tensor, out: Tensor) -> None:
    """Operator ``lhotse_amt::casp_samples_``: the fused chain on ``x (B, T)`` from rest,
    every band's samples written into ``out (B, R, T)`` (contiguous; the bands of channel
    0, low-pass first, then those of channel 1, ...). CPU: the fused kernel; CUDA: the
    Triton kernel of ``casp_pooled`` with one-sample frames."""
    _casp_samples(x, out, plan_handle(plan))


# --------------------------------------------------------------------------------------
# King2019: gammatone, compression, IHC, high-pass, modulation band-passes
# --------------------------------------------------------------------------------------


def king_plan(model: torch.nn.Module, gain: np.ndarray, use_abs: np.ndarray, precise: bool) -> Any:
    """The fused King2019 chain's layout; band ``m`` times ``gain[m]``, ``|.|`` first
    where ``use_abs[m]``."""
    return _king.KingPooledPlan(model, gain, use_abs, precise, _gammatone_poles(model))


#: state keys of the channel-vectorised kernel (5 arrays) and of the register kernel (1)
_KING_KEYS = {5: ("gre", "gim", "ihc", "post", "bank"), 1: ("front",)}


_king_pooled = _pooled_operator("king_pooled", _king.king_pooled, _KING_KEYS, lambda p: p.M)


def king_pooled(
    plan: Any, x: Tensor, state: KernelState | None, hop: int, ends: list[int], square: bool
) -> tuple[Tensor, KernelState]:
    """Operator ``lhotse_amt::king_pooled``: as :func:`casp_pooled` for the King2019 chain;
    sums ``(B, C, M, ceil(T / hop))``."""
    return _king_pooled(plan, x, state, hop, ends, square)


#: the kernels of ``casp_samples_`` and ``king_samples_`` per device
_CASP_SAMPLES = DeviceKernels(_casp.casp_samples, casp_samples_triton)
_KING_SAMPLES = DeviceKernels(_king.king_samples, king_samples_triton)


@_operator("king_samples_(Tensor x, Tensor(a!) out, int plan, int[] pi_bands) -> ()")
def _king_samples(x: Tensor, out: Tensor, plan: int, pi_bands: list[int]) -> None:
    _KING_SAMPLES.on(x)(_plan(plan), x, out, pi_bands)


@_fake("king_samples_")
def _(x: Tensor, out: Tensor, plan: int, pi_bands: list[int]) -> None:
    return None


def king_samples(plan: Any, x: Tensor, out: Tensor, pi_bands: list[int]) -> None:
    """Operator ``lhotse_amt::king_samples_``: the fused King2019 chain on ``x (B, T)``
    from rest into ``out (B, C, M, T)``; ``pi_bands`` become rms-matched Hilbert
    envelopes (see :func:`lhotse_amt.kernels.king2019.king_samples`)."""
    _king_samples(x, out, plan_handle(plan), list(pi_bands))


# --------------------------------------------------------------------------------------
# modulation filterbank pooled over held frames (Paulick2024), held pooling
# --------------------------------------------------------------------------------------


def modulation_pooled_supported(mod: torch.nn.Module) -> bool:
    """Whether the pooled modulation-filterbank kernel runs ``mod`` (one-pole ``efilt``
    bands, the register kernels enabled)."""
    return bool(_modbank.ENABLED) and mod.poles.shape[-1] == 1 and mod.poles.shape[-2] > 1


def pooled_filters(mod: torch.nn.Module) -> list[Tensor | None]:
    """The one-pole modulation filterbank ``mod``'s coefficients as the pooled kernels take
    them: ``lp_sos``, ``prefilter_sos`` (or ``None``), the band-pass poles and gains ``(C,
    M)`` complex, ``use_abs (C, M)`` and ``scale (C, M + 1)``."""
    return [
        mod.lp_sos, mod.prefilter_sos, mod.poles[:, 1:, 0], mod.gains[:, 1:, 0],
        mod.use_abs[:, 1:], mod.scale,
    ]  # fmt: skip


@_operator(
    "modulation_pooled(Tensor x, Tensor?[] filters, Tensor[] state, Tensor[] frames, int R, "
    "bool rms) -> (Tensor, Tensor[])"
)
def _modulation_pooled(
    x: Tensor,
    filters: list[Tensor | None],
    state: list[Tensor],
    frames: list[Tensor],
    R: int,
    rms: bool,
) -> tuple[Tensor, list[Tensor]]:
    # filters: lp_sos, prefilter_sos (or None), pole, gain, use_abs, scale; frames:
    # starts, stops, counts (see modulation_pooled)
    keys = ("lp", "bp", "pre")[: len(state)]
    st = dict(zip(keys, state)) or None
    out, new = _MODULATION_POOLED.on(x)(x, tuple(filters), st, tuple(frames), R, rms)
    return out, [new[k] for k in ("lp", "bp", "pre") if k in new]


def _modulation_pooled_cpu(
    x: Tensor, filters: tuple, state: dict | None, frames: tuple, R: int, rms: bool
) -> tuple[Tensor, dict]:
    f = tuple(t.numpy() for t in frames)
    out, new = _modbank.modulation_bank_pooled(x, filters, state, *f, R, rms)
    return torch.from_numpy(out), new


def _modulation_pooled_cuda(*args: Any) -> tuple[Tensor, dict]:
    return _triton("modulation_pooled").modulation_pooled(*args)


_MODULATION_POOLED = DeviceKernels(_modulation_pooled_cpu, _modulation_pooled_cuda)


@_fake("modulation_pooled")
def _(
    x: Tensor, filters: list[Tensor | None], state: list[Tensor], frames: list[Tensor], *_: Any
) -> tuple[Tensor, list[Tensor]]:
    lp_sos, prefilter_sos, pole = filters[:3]
    lead, C = x.shape[:-2], x.shape[-2]
    out = x.new_empty((*lead, C, pole.shape[-1] + 1, frames[0].shape[-1]), dtype=torch.float64)
    if state:
        return out, [torch.empty_like(s) for s in state]
    cdt = torch.complex128 if x.dtype == torch.float64 else torch.complex64
    new = [
        x.new_empty((*lead, C, lp_sos.shape[-2], 2)),
        x.new_empty((*lead, C, pole.shape[-1], 1), dtype=cdt),
    ]
    if prefilter_sos is not None:
        new.append(x.new_empty((*lead, C, prefilter_sos.shape[-2], 2)))
    return out, new


def modulation_pooled(
    x: Tensor,
    mod: torch.nn.Module,
    state: dict[str, Tensor] | None,
    starts: np.ndarray,
    stops: np.ndarray,
    counts: np.ndarray,
    R: int,
    rms: bool,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Operator ``lhotse_amt::modulation_pooled``: the modulation filterbank ``mod`` on
    ``x (B, C, T)`` and the frame means (rms if ``rms``) of its output held over ``R``
    input samples per sample; row ``b`` has ``counts[b]`` frames, frame ``f`` covering
    held samples ``[starts[b, f], stops[b, f])``. Returns ``(B, C, M + 1, F)`` float64
    and the filterbank's new state (keys ``lp``, ``bp``, ``pre``, as the unfused bank)."""
    st = [] if not state else [state[k] for k in ("lp", "bp", "pre") if k in state]
    filters = pooled_filters(mod)
    frames = [torch.from_numpy(np.ascontiguousarray(a, np.int64)) for a in (starts, stops, counts)]
    out, new = _modulation_pooled(x, filters, st, frames, int(R), bool(rms))
    return out, dict(zip(("lp", "bp", "pre"), new))


@_operator(
    "pool_held(Tensor y, Tensor cols, Tensor starts, Tensor stops, int R, bool rms) -> Tensor"
)
def _pool_held(y: Tensor, cols: Tensor, starts: Tensor, stops: Tensor, R: int, rms: bool) -> Tensor:
    return _POOL_HELD.on(y)(y, cols, starts, stops, R, rms)


def _pool_held_cpu(
    y: Tensor, cols: Tensor, starts: Tensor, stops: Tensor, R: int, rms: bool
) -> Tensor:
    return _paulick.pool_held(y, cols.numpy(), starts.numpy(), stops.numpy(), R, rms)


def _pool_held_cuda(*args: Any) -> Tensor:
    return _triton("modulation_pooled").pool_held(*args)


_POOL_HELD = DeviceKernels(_pool_held_cpu, _pool_held_cuda)


@_fake("pool_held")
def _(y: Tensor, cols: Tensor, starts: Tensor, stops: Tensor, R: int, rms: bool) -> Tensor:
    return y.new_empty((cols.shape[0], starts.shape[0]))


def pool_held(
    y: Tensor, cols: np.ndarray | None, starts: np.ndarray, stops: np.ndarray, R: int, rms: bool
) -> Tensor:
    """Operator ``lhotse_amt::pool_held``: frame means (rms if ``rms``) of ``y (D, M)``
    held over ``R`` input samples per sample, rows ``cols`` (``None``: all), frame ``f``
    over input samples ``[starts[f], stops[f])``: :func:`frame_mean` of the held signal
    (``y`` repeated ``R`` times along time), without building it. ``(len(cols), F)`` in
    the dtype of ``y``. The operator has CPU and CUDA kernels (:func:`kernel_device`);
    ``y`` on another device is pooled on the CPU and the frames moved back (frame-rate
    data, no sample-rate copy beyond ``y``)."""
    c = np.arange(y.shape[0]) if cols is None else np.asarray(cols, np.int64)
    out = _pool_held(
        y if kernel_device(y.device) else y.cpu(),
        torch.from_numpy(np.ascontiguousarray(c, np.int64)),
        torch.from_numpy(np.ascontiguousarray(starts, np.int64)),
        torch.from_numpy(np.ascontiguousarray(stops, np.int64)),
        int(R),
        bool(rms),
    )
    return out.to(y.device)

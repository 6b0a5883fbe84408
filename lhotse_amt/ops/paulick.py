"""Paulick et al. (2024)'s fused no-grad front end as registered operators
(``lhotse_amt::``), in the style of :mod:`lhotse_amt.ops.fused`:

* ``lhotse_amt::paulick_frontend``: DRNL filterbank -> inner hair cell -> adaptation loops
  (-> FIR decimator) in one compiled pass over the samples
  (:func:`lhotse_amt.kernels.paulick_frontend.frontend`), storing only the last stage;
* ``lhotse_amt::paulick_fir``: the direct-form FIR correlation of the ear filters and the
  decimator (:func:`lhotse_amt.kernels.paulick.fir`: float64 accumulation in a fixed
  order, so chunked and one-shot processing agree bit for bit);
* ``lhotse_amt::paulick_drnl``: the DRNL filterbank alone, both paths, the compression and
  all sections of a channel in one pass (:func:`lhotse_amt.kernels.paulick.drnl`: float64
  recursions): the ``"numba"`` backend of :func:`lhotse_amt.functional.drnl.drnl`;
* ``lhotse_amt::paulick_ihc``: the IHC recursion alone in the signal's dtype
  (:func:`lhotse_amt.kernels.paulick.ihc`; on CUDA the Triton kernel
  :func:`~lhotse_amt.kernels.paulick.ihc_triton`): the no-grad backends of
  :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick`.

Each has a CPU kernel (numba) and a CUDA kernel, registered at the dispatcher level (a
call costs no ``torch.compile`` machinery; the dispatcher picks the kernel by the
tensors' device, :class:`lhotse_amt.ops.rowop.DeviceKernels` the host functions), and a
fake implementation (shapes only); no gradient. The CUDA kernels of ``paulick_drnl``,
``paulick_fir`` and ``paulick_frontend`` (:mod:`lhotse_amt.kernels.triton_paulick`) run
the stages one after the other as the Triton kernels of the differentiable operators
(sections, IHC, adaptation loops, strided FIR; float64 recursions), with the CPU kernels'
arguments, results, state layouts and float32 rounding before the decimator (in Triton's
interpreter float64 results agree with the CPU kernels to ~1e-13 relative, float32
front-end outputs to ~2e-7; the operators run where
:func:`lhotse_amt._dispatch.kernel_device` says). They serve
eager inference of :class:`lhotse_amt.models.paulick2024.Paulick2024` and its stage
modules; under autograd and while ``torch.compile``/``torch.export`` trace the model, its
stages run as the differentiable operators (:mod:`lhotse_amt.ops.recursions`,
:mod:`lhotse_amt.ops.ihc_paulick`, :mod:`lhotse_amt.ops.fir`) instead.

Streaming states cross the operator boundary as tensors: the DRNL's section states
``[lin, nl1, nl2]`` (an empty list: rest), the decimator's history ``(..., C, K - 1)``
(``None``: zeros) and the number of samples it has seen. The wrappers :func:`frontend` and
:func:`fir` take and return them in the models' layout (dicts). A stream may move between
the devices: the states have the same layout on both.

Reference: L. Paulick, H. Relaño-Iborra, T. Dau (2024), "The Computational Auditory
Signal Processing and Perception Model (CASP): A Revised Version", bioRxiv.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..kernels import paulick as _paulick
from ..kernels import paulick_frontend as _frontend
from ..kernels import paulick_pooled as _pooled_cpu
from ..kernels.ihc_paulick_grad import IHC_STEP_KEYS
from .fused import _fake, _operator
from .rowop import DeviceKernels

__all__ = ["frontend", "fir", "drnl", "ihc", "pooled", "pooled_supported"]

#: the DRNL's state keys, in the order of the operator's state list
DRNL_STATE_KEYS = ("lin", "nl1", "nl2")

#: the kernels of the pooled chain: the fused register kernel on the CPU, the front end's
#: and the pooled modulation filterbank's Triton kernels chunk by chunk on CUDA
_POOLED = DeviceKernels(_pooled_cpu.pooled, "triton_paulick", attr="pooled")

#: the kernels of the front end, the FIR and the DRNL: numba on the CPU, the stage-wise
#: Triton kernels (:mod:`lhotse_amt.kernels.triton_paulick`) on CUDA
_FRONTEND = DeviceKernels(_frontend.frontend, "triton_paulick", attr="frontend")
_FIR = DeviceKernels(_paulick.fir, "triton_paulick", attr="fir")
_DRNL = DeviceKernels(_paulick.drnl, "triton_paulick", attr="drnl")


@_operator(
    "paulick_frontend(Tensor x, Tensor g, Tensor lin_sos, Tensor nl1_sos, Tensor nl2_sos, "
    "Tensor a, Tensor b, float c, Tensor[] drnl_state, float[] ihc_consts, Tensor ihc_state, "
    "Tensor adapt_a, Tensor adapt_m, Tensor adapt_state, float minlvl, bool use_limit, "
    "float out_offset, float out_scale, Tensor? dec_weight, int dec_factor, Tensor? dec_hist, "
    "int dec_t) -> (Tensor, Tensor[], Tensor, Tensor, Tensor)"
)
def _frontend_op(
    x: Tensor, g: Tensor, lin_sos: Tensor, nl1_sos: Tensor, nl2_sos: Tensor, a: Tensor,
    b: Tensor, c: float, drnl_state: list[Tensor], ihc_consts: list[float], ihc_state: Tensor,
    adapt_a: Tensor, adapt_m: Tensor, adapt_state: Tensor, minlvl: float, use_limit: bool,
    out_offset: float, out_scale: float, dec_weight: Tensor | None, dec_factor: int,
    dec_hist: Tensor | None, dec_t: int,
) -> tuple[Tensor, list[Tensor], Tensor, Tensor, Tensor]:  # fmt: skip
    y, drnl, w, s, dec = _FRONTEND.on(x)(
        x, (g, lin_sos, nl1_sos, nl2_sos, a, b, c),
        dict(zip(DRNL_STATE_KEYS, drnl_state)) or None, dict(zip(IHC_STEP_KEYS, ihc_consts)),
        ihc_state, adapt_a, adapt_m, adapt_state, minlvl, use_limit, out_offset, out_scale,
        dec_weight, dec_factor, None if dec_weight is None else {"hist": dec_hist, "t": dec_t},
    )  # fmt: skip
    hist = x.new_empty((*x.shape[:-1], g.shape[0], 0)) if dec is None else dec["hist"]
    return y, [drnl[k] for k in DRNL_STATE_KEYS], w, s, hist


def _decimated(T: int, R: int, t0: int) -> int:
    """Outputs of a decimator by ``R`` over ``T`` samples after ``t0`` seen: the samples
    ``n`` with ``(t0 + n) % R == 0`` (as
    :class:`lhotse_amt.models.paulick2024.FIRDecimator`)."""
    j0 = (-t0) % R
    return max(0, -(-(T - j0) // R))


#: the operator's argument names, in order
_FRONTEND_ARGS = tuple(arg.name for arg in _frontend_op._schema.arguments)


@_fake("paulick_frontend")
def _(*args: Any) -> tuple[Tensor, list[Tensor], Tensor, Tensor, Tensor]:
    p = dict(zip(_FRONTEND_ARGS, args, strict=True))
    x, g, dec_weight, dec_factor = p["x"], p["g"], p["dec_weight"], p["dec_factor"]
    lead, T = x.shape[:-1], x.shape[-1]
    C, J = g.shape[0], p["adapt_a"].shape[-1]
    f64 = torch.float64
    dec = dec_weight is not None and dec_factor > 0
    M = _decimated(T, dec_factor, p["dec_t"]) if dec else T
    K1 = dec_weight.numel() - 1 if dec else 0
    ydt = torch.float32 if x.dtype == torch.float32 else f64
    drnl = [
        x.new_empty((*lead, C, p[k].shape[-2], 2), dtype=f64)
        for k in ("lin_sos", "nl1_sos", "nl2_sos")
    ]
    return (
        x.new_empty((*lead, C, M), dtype=ydt),
        drnl,
        x.new_empty((*lead, C), dtype=f64),
        x.new_empty((*lead, C, J), dtype=f64),
        x.new_empty((*lead, C, K1)),
    )


def frontend(
    x: Tensor,
    drnl_coefs: tuple,
    drnl_state: dict | None,
    ihc_consts: dict[str, float],
    ihc_state: Tensor,
    adapt_a: Tensor,
    adapt_m: Tensor,
    adapt_state: Tensor,
    minlvl: float,
    use_limit: bool,
    out_offset: float,
    out_scale: float,
    dec_weight: Tensor | None = None,
    dec_factor: int = 0,
    dec_state: dict | None = None,
) -> tuple[Tensor, dict, Tensor, Tensor, dict | None]:
    """Operator ``lhotse_amt::paulick_frontend``: DRNL -> IHC -> adaptation loops (-> FIR
    decimator) in one pass over ``x (B, T)`` (no gradient; CPU: one compiled pass, CUDA:
    the stages' Triton kernels one after the other); the arguments and results of
    :func:`lhotse_amt.kernels.paulick_frontend.frontend`.

    Args:
        x: ``(B, T)`` stapes velocity (the DRNL input), float32 or float64.
        drnl_coefs: ``(g, lin_sos, nl1_sos, nl2_sos, a, b, c)``: gains ``(C,)``, the
            linear and the two nonlinear paths' sections ``(C, S, 6)``, the broken stick's
            ``a``, ``b`` ``(C,)`` and exponent ``c``.
        drnl_state: ``{"lin", "nl1", "nl2"}`` section states ``(B, C, S, 2)`` (``None``:
            rest).
        ihc_consts: the IHC step constants
            (:func:`lhotse_amt.functional.ihc_paulick.ihc_step_constants`, floats);
            ihc_state: ``(B, C)`` membrane deviation (V).
        adapt_a, adapt_m: ``(C, J)`` loop coefficients and limiter constants;
            adapt_state: ``(B, C, J)``; minlvl, use_limit, out_offset, out_scale: the
            adaptation-loop constants (output ``(v - out_offset) out_scale``, model units).
        dec_weight, dec_factor, dec_state: the FIR decimator by ``dec_factor``
            (``dec_weight (K,)`` flipped taps; ``dec_state`` ``{"hist": (B, C, K - 1),
            "t": samples seen}`` or ``None``); ``dec_weight=None``: no decimator.

    Returns:
        the adaptation output ``(B, C, T)`` (with the decimator ``(B, C, M)``) in ``x``'s
        dtype, the new DRNL, IHC and adaptation states (float64) and the new decimator
        state (``None`` without decimator).
    """
    g, lin_sos, nl1_sos, nl2_sos, a, b, c = drnl_coefs
    st = drnl_state or {}
    dec = dec_weight is not None
    ds = (dec_state or {}) if dec else {}
    t0 = int(ds.get("t", 0))
    y, drnl, w, s, hist = _frontend_op(
        x, g, lin_sos, nl1_sos, nl2_sos, a, b, float(c),
        [st[k] for k in DRNL_STATE_KEYS] if st else [],
        [float(ihc_consts[k]) for k in IHC_STEP_KEYS], ihc_state, adapt_a, adapt_m,
        adapt_state, float(minlvl), bool(use_limit), float(out_offset), float(out_scale),
        dec_weight, int(dec_factor), ds.get("hist"), t0,
    )  # fmt: skip
    new_dec = {"hist": hist, "t": t0 + x.shape[-1]} if dec and dec_factor > 0 else None
    return y, dict(zip(DRNL_STATE_KEYS, drnl)), w, s, new_dec


@_operator("paulick_fir(Tensor buf, Tensor w, int start, int stride, int n_out) -> Tensor")
def _fir_op(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    return _FIR.on(buf)(buf, w, start, stride, n_out)


@_fake("paulick_fir")
def _(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    return buf.new_empty((buf.shape[0], n_out))


def fir(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    """Operator ``lhotse_amt::paulick_fir``: ``y[r, i] = sum_k w[k] buf[r, start + i stride
    + k]`` for ``buf (N, L)`` and taps ``w (K,)`` (CPU and CUDA, no gradient; float64
    accumulation, every output in a fixed order), ``(N, n_out)`` in ``buf``'s dtype."""
    return _fir_op(buf, w, int(start), int(stride), int(n_out))


@_operator(
    "paulick_drnl(Tensor x, Tensor g, Tensor lin_sos, Tensor nl1_sos, Tensor nl2_sos, "
    "Tensor a, Tensor b, float c, Tensor?[] state) -> (Tensor, Tensor[])"
)
def _drnl_op(
    x: Tensor, g: Tensor, lin_sos: Tensor, nl1_sos: Tensor, nl2_sos: Tensor, a: Tensor,
    b: Tensor, c: float, state: list[Tensor | None],
) -> tuple[Tensor, list[Tensor]]:  # fmt: skip
    st = {k: z for k, z in zip(DRNL_STATE_KEYS, state, strict=True) if z is not None}
    y, new = _DRNL.on(x)(x, g, lin_sos, nl1_sos, nl2_sos, a, b, c, st)
    return y, [new[k] for k in DRNL_STATE_KEYS]


@_fake("paulick_drnl")
def _(
    x: Tensor, g: Tensor, lin_sos: Tensor, nl1_sos: Tensor, nl2_sos: Tensor, a: Tensor,
    b: Tensor, c: float, state: list[Tensor | None],
) -> tuple[Tensor, list[Tensor]]:  # fmt: skip
    lead, C = x.shape[:-1], g.shape[0]
    ydt = torch.float32 if x.dtype == torch.float32 else torch.float64
    states = [
        x.new_empty((*lead, C, sos.shape[-2], 2), dtype=torch.float64)
        for sos in (lin_sos, nl1_sos, nl2_sos)
    ]
    return x.new_empty((*lead, C, x.shape[-1]), dtype=ydt), states


def drnl(
    x: Tensor,
    g: Tensor,
    lin_sos: Tensor,
    nl1_sos: Tensor,
    nl2_sos: Tensor,
    a: Tensor,
    b: Tensor,
    c: float,
    state: dict[str, Tensor] | None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Operator ``lhotse_amt::paulick_drnl``: the DRNL filterbank of ``x (..., T)`` (CPU
    and CUDA, no gradient; float64 recursions) -> ``(..., C, T)`` in ``x``'s dtype (float64
    for other dtypes than float32) and the new section states ``{"lin", "nl1", "nl2"}``
    ``(..., C, S, 2)`` float64.

    The arguments are those of :func:`lhotse_amt.functional.drnl.drnl`: ``g``, ``a``,
    ``b`` ``(C,)``; the linear path's sections (gammatone and low-passes)
    ``lin_sos (C, S_lin, 6)``, the non-linear path's before and after the compression
    ``nl1_sos``, ``nl2_sos``; exponent ``c``; ``state`` the section states of a previous
    call (a missing key or ``None``: rest).
    """
    st = state or {}
    y, new = _drnl_op(
        x, g, lin_sos, nl1_sos, nl2_sos, a, b, float(c), [st.get(k) for k in DRNL_STATE_KEYS]
    )
    return y, dict(zip(DRNL_STATE_KEYS, new, strict=True))


#: the IHC kernels: numba on the CPU, Triton on CUDA
_IHC = DeviceKernels(_paulick.ihc, "paulick", attr="ihc_triton")


def _ihc_rows(k: Any, x: Tensor, consts: list[float], state: Tensor) -> tuple[Tensor, Tensor]:
    """The IHC operator with the kernel function ``k`` (``x (..., T)``, ``state (...)``;
    the kernels take ``(..., C, T)``)."""
    one = x.dim() < 2
    if one:
        x, state = x[None], state[None]
    y, w = k(x, dict(zip(IHC_STEP_KEYS, consts, strict=True)), state)
    return (y[0], w[0]) if one else (y, w)


@_operator("paulick_ihc(Tensor x, float[] consts, Tensor state) -> (Tensor, Tensor)")
def _ihc_op(x: Tensor, consts: list[float], state: Tensor) -> tuple[Tensor, Tensor]:
    return _ihc_rows(_IHC.on(x), x, consts, state)


@_fake("paulick_ihc")
def _(x: Tensor, consts: list[float], state: Tensor) -> tuple[Tensor, Tensor]:
    return x.new_empty(x.shape), x.new_empty(x.shape[:-1])


def ihc(x: Tensor, consts: dict[str, float], state: Tensor) -> tuple[Tensor, Tensor]:
    """Operator ``lhotse_amt::paulick_ihc``: the IHC recursion of
    :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference` on ``x (..., T)``
    (basilar-membrane velocity) from ``state (...)`` (``W``, volts; broadcast to
    ``x.shape[:-1]``), run in ``x``'s dtype (no gradient; CPU: numba, CUDA: Triton) ->
    ``W (..., T)`` and the final state ``(...)``, both in ``x``'s dtype. ``consts``: the
    step constants (:func:`lhotse_amt.functional.ihc_paulick.ihc_step_constants`, floats).
    """
    return _ihc_op(x, [float(consts[k]) for k in IHC_STEP_KEYS], state)


@_operator(
    "paulick_pooled(Tensor x, Tensor ear_weight, Tensor g, Tensor lin_sos, Tensor nl1_sos, "
    "Tensor nl2_sos, Tensor a, Tensor b, float c, float[] ihc_consts, Tensor ihc_state, "
    "Tensor adapt_a, Tensor adapt_m, Tensor adapt_state, float minlvl, bool use_limit, "
    "float out_offset, float out_scale, Tensor dec_weight, int dec_factor, "
    "Tensor?[] mod_filters, Tensor[] frames, bool rms) -> Tensor"
)
def _pooled_op(
    x: Tensor, ear_weight: Tensor, g: Tensor, lin_sos: Tensor, nl1_sos: Tensor,
    nl2_sos: Tensor, a: Tensor, b: Tensor, c: float, ihc_consts: list[float],
    ihc_state: Tensor, adapt_a: Tensor, adapt_m: Tensor, adapt_state: Tensor, minlvl: float,
    use_limit: bool, out_offset: float, out_scale: float, dec_weight: Tensor, dec_factor: int,
    mod_filters: list[Tensor | None], frames: list[Tensor], rms: bool,
) -> Tensor:  # fmt: skip
    front = (
        (g, lin_sos, nl1_sos, nl2_sos, a, b, c), dict(zip(IHC_STEP_KEYS, ihc_consts)),
        ihc_state, adapt_a, adapt_m, adapt_state, minlvl, use_limit, out_offset, out_scale,
    )  # fmt: skip
    return _POOLED.on(x)(
        x, ear_weight, front, dec_weight, dec_factor, tuple(mod_filters), tuple(frames), rms
    )


@_fake("paulick_pooled")
def _(x: Tensor, ear_weight: Tensor, g: Tensor, *args: Any) -> Tensor:
    mod_filters, frames = args[-3], args[-2]
    M1 = mod_filters[2].shape[-1]
    return x.new_empty((x.shape[0], g.shape[0], M1 + 1, frames[0].shape[-1]), dtype=torch.float64)


def pooled_supported(c: float, dec_factor: int) -> bool:
    """Whether :func:`pooled` runs a front end with broken-stick exponent ``c`` and
    decimation factor ``dec_factor`` (the register kernels: ``c = 1/4``, ``R >= 1``)."""
    from ..kernels import SIMD, paulick_simd

    return bool(SIMD) and paulick_simd.supported(c, dec_factor)


def pooled(
    x: Tensor,
    ear_weight: Tensor,
    front: tuple,
    dec_weight: Tensor,
    dec_factor: int,
    mod_filters: list[Tensor | None],
    frames: list[Tensor],
    rms: bool,
) -> Tensor:
    """Operator ``lhotse_amt::paulick_pooled``: the whole chain on the input ``x (B, T)``,
    pooled into frames in one pass (no gradient): the ear filter (``ear_weight (K,)``:
    flipped taps, from rest) -> DRNL -> IHC -> adaptation loops -> FIR decimator by ``R =
    dec_factor`` (``front``:
    :func:`frontend`'s arguments ``drnl_coefs, ihc_consts, ihc_state, adapt_a, adapt_m,
    adapt_state, minlvl, use_limit, out_offset, out_scale``; the DRNL and the decimator
    from rest, the IHC and loops from ``ihc_state``, ``adapt_state``) -> modulation
    filterbank from rest (``mod_filters``: ``lp_sos``, ``prefilter_sos`` or ``None``, band
    poles and gains ``(C, M)`` complex, ``use_abs (C, M)``, ``scale (C, M + 1)``) -> frame
    ``f`` of row ``b`` the mean (the rms if ``rms``) of the band outputs held over ``R``
    input samples per decimated sample, over input samples ``[starts[b, f], stops[b,
    f])``, ``counts[b]`` frames (``frames``: ``starts, stops (B, F)``, ``counts (B,)``
    int64, on the CPU).

    CPU: one register kernel (:func:`lhotse_amt.kernels.paulick_pooled.pooled`), one
    launch whatever the length, memory the input and the frames; CUDA: the front end's and
    the pooled filterbank's Triton kernels chunk by chunk
    (:func:`lhotse_amt.kernels.triton_paulick.pooled`). Needs :func:`pooled_supported`.

    Returns:
        ``(B, C, M + 1, F)`` float64 (0 for bands a channel lacks and frames past
        ``counts[b]``).
    """
    (g, lin_sos, nl1_sos, nl2_sos, a, b, c), ihc_consts, *states_and_loops = front[:6]
    minlvl, use_limit, out_offset, out_scale = front[6:10]
    return _pooled_op(
        x, ear_weight, g, lin_sos, nl1_sos, nl2_sos, a, b, float(c),
        [float(ihc_consts[k]) for k in IHC_STEP_KEYS], *states_and_loops, float(minlvl),
        bool(use_limit), float(out_offset), float(out_scale), dec_weight, int(dec_factor),
        list(mod_filters), list(frames), bool(rms),
    )  # fmt: skip

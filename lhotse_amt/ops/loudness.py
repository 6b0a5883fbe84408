"""The attack/release AGC of the loudness models as a registered operator ``lhotse_amt::agc``.

Like the recursion operators of :mod:`lhotse_amt.ops.recursions` it has

* a CPU kernel (numba, :mod:`lhotse_amt.kernels.agc_grad`),
* a CUDA kernel (Triton, :mod:`lhotse_amt.kernels.triton_agc`),
* a fake implementation (``torch.compile`` and ``torch.export`` trace through it without a
  graph break),
* an autograd formula whose backward is the operator ``lhotse_amt::agc_backward``: the
  adjoint recursion run backwards in time over the saved output (the output *is* the AGC
  state sequence, so nothing is recomputed; see :mod:`lhotse_amt.kernels.agc_grad`).

:func:`agc_nograd` runs the same recursion without gradient through the CPU kernel of
:mod:`lhotse_amt.kernels.agc` (down the frames, vectorised over channels): the eager
no-grad CPU path of :func:`lhotse_amt.functional.loudness.agc`.

The semantics are those of :func:`lhotse_amt.functional.loudness.agc_reference`
(Glasberg & Moore 2002, Sec. 2.6; Moore et al. 2016, Eqs. 4–5).

:func:`excitation_lower` is the no-grad operator ``lhotse_amt::excitation_lower``: the
excitation pattern's lower branch (the level-dependent lower skirts of the roex filters),
whose CUDA kernel (:mod:`lhotse_amt.kernels.triton_excitation`) computes every frame and
channel in one launch without the reference's ``(..., K, C)`` weights; the CPU kernel is
the plain-torch reference.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import Tensor

from .._validation import (
    FLOAT_DTYPES,
    check_bool,
    check_broadcast,
    check_real_array,
    check_tensor,
)
from ..functional.loudness.excitation import lower_branch_group, lower_branch_reference
from ..functional.loudness.temporal import check_agc_args
from ..kernels import agc_grad
from .rowop import DeviceKernels

__all__ = ["agc_rows", "agc", "agc_nograd", "excitation_lower", "excitation_lower_rows"]

_LIB = "lhotse_amt"


_AGC = DeviceKernels(agc_grad.KERNELS, "triton_agc")
_LOWER = DeviceKernels(lower_branch_reference, "triton_excitation", attr="lower_branch")


@torch.library.custom_op(f"{_LIB}::excitation_lower", mutates_args=(), device_types=("cpu", "cuda"))
def _excitation_lower_op(
    intensity: Tensor, s: Tensor, lower_h: Tensor, n_below: Tensor, per_channel: bool
) -> Tensor:
    """The excitation pattern's lower branch of ``intensity (R, K)`` (no gradient): slopes
    ``s`` ``(R, C)`` (``per_channel``) or ``(R, K)``, ``lower_h (K, C)``, ``n_below (C,)``
    int64 -> ``(R, C)``. CPU: the plain-torch reference; CUDA: one Triton kernel."""
    if intensity.device.type == "cpu":
        return lower_branch_reference(intensity, s, lower_h, n_below.tolist(), per_channel)
    group = lower_branch_group(lower_h)
    return _LOWER.on(intensity)(intensity, s, lower_h, n_below, group, per_channel)


@_excitation_lower_op.register_fake
def _(intensity: Tensor, s: Tensor, lower_h: Tensor, n_below: Tensor, per_channel: bool) -> Tensor:
    return intensity.new_empty((intensity.shape[0], lower_h.shape[1]))


def excitation_lower(
    intensity: Tensor,
    s: Tensor,
    lower_h: Tensor,
    n_below: Any,
    per_channel: bool,
) -> Tensor:
    """Lower branch of the excitation pattern without gradient, for any leading shape:
    ``intensity (..., K)``, ``s`` broadcasting to ``(..., C)`` (``per_channel``) or
    ``(..., K)``, ``lower_h (K, C)``, ``n_below`` ``(C,)`` (bins below each centre) ->
    ``(..., C)``; the values of
    :func:`lhotse_amt.functional.loudness.excitation.lower_branch_reference` to float
    rounding (the operator ``lhotse_amt::excitation_lower``)."""
    nb = _check_excitation_lower(intensity, s, lower_h, n_below, per_channel)
    return excitation_lower_rows(intensity, s, lower_h, nb, per_channel)


def excitation_lower_rows(
    intensity: Tensor, s: Tensor, lower_h: Tensor, n_below: Any, per_channel: bool
) -> Tensor:
    """:func:`excitation_lower` on arguments already checked
    (:func:`lhotse_amt.functional.loudness.excitation_pattern` checks them)."""
    lead, K = intensity.shape[:-1], intensity.shape[-1]
    C = lower_h.shape[1]
    n = C if per_channel else K
    x = intensity.reshape(-1, K).contiguous()
    ss = s.expand(*lead, n).reshape(-1, n).contiguous()
    nbt = torch.as_tensor(np.asarray(n_below, dtype=np.int64), device=intensity.device)
    y = _excitation_lower_op(x, ss, lower_h.contiguous(), nbt, bool(per_channel))
    return y.reshape(*lead, C)


def _check_excitation_lower(
    intensity: Any, s: Any, lower_h: Any, n_below: Any, per_channel: Any
) -> np.ndarray:
    """Check the arguments of :func:`excitation_lower` (shapes, dtypes, devices and the bin
    counts; no tensor values are read) and return ``n_below`` as int64."""
    check_tensor("intensity", intensity, min_dim=1, shape="(..., K)")
    check_tensor("lower_h", lower_h, min_dim=2, max_dim=2, shape="(K, C)")
    if check_bool("per_channel", per_channel):
        check_tensor("s", s, min_dim=1, shape="(..., C)")
        n = lower_h.shape[1]
    else:
        check_tensor("s", s, min_dim=1, shape="(..., K)")
        n = intensity.shape[-1]
    if intensity.dtype not in FLOAT_DTYPES or {s.dtype, lower_h.dtype} != {intensity.dtype}:
        raise TypeError(
            "intensity, s and lower_h must be all float32 or all float64, got "
            f"{intensity.dtype}, {s.dtype} and {lower_h.dtype}"
        )
    if {s.device, lower_h.device} != {intensity.device}:
        raise ValueError(
            f"intensity, s and lower_h must be on one device, got {intensity.device}, "
            f"{s.device} and {lower_h.device}"
        )
    K, C = lower_h.shape
    if intensity.shape[-1] != K:
        raise ValueError(
            f"lower_h {tuple(lower_h.shape)} must have a row per component of intensity "
            f"{tuple(intensity.shape)}"
        )
    lead = tuple(intensity.shape[:-1])
    if tuple(check_broadcast(("s", s.shape), ("intensity", (*lead, n)))) != (*lead, n):
        raise ValueError(f"s {tuple(s.shape)} must broadcast to {(*lead, n)}")
    nb = check_real_array("n_below", n_below, min=0)
    if nb.shape != (C,) or (nb != np.round(nb)).any() or (nb > K).any() or (np.diff(nb) < 0).any():
        raise ValueError(
            f"n_below must hold, for each of the {C} channels, the number of components "
            f"below its centre: non-decreasing integers in [0, {K}], got shape {nb.shape}"
        )
    return nb.astype(np.int64)


@torch.library.custom_op(f"{_LIB}::agc", mutates_args=(), device_types=("cpu", "cuda"))
def agc_rows(x: Tensor, attack: Tensor, release: Tensor, zi: Tensor) -> Tensor:
    """Attack/release AGC along axis 1 of ``x (B, T, C)``.

    ``attack``, ``release``: per-column smoothing coefficients ``(B, C)``; ``zi (B, C)``:
    the state before the first frame; all in the dtype of ``x`` (float32 or float64, the
    dtype the recursion runs in). Returns ``y (B, T, C)``, the state after every frame.
    """
    return _AGC.on(x).forward(x, attack, release, zi)


@agc_rows.register_fake
def _(x: Tensor, attack: Tensor, release: Tensor, zi: Tensor) -> Tensor:
    return torch.empty_like(x, memory_format=torch.contiguous_format)


@torch.library.custom_op(f"{_LIB}::agc_backward", mutates_args=(), device_types=("cpu", "cuda"))
def _agc_backward(
    gy: Tensor,
    x: Tensor,
    y: Tensor,
    attack: Tensor,
    release: Tensor,
    zi: Tensor,
    want_x: bool,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    return _AGC.on(x).backward(gy, x, y, attack, release, zi, want_x)


@_agc_backward.register_fake
def _(
    gy: Tensor, x: Tensor, y: Tensor, attack: Tensor, release: Tensor, zi: Tensor, want_x: bool
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    B, T, C = x.shape
    f64 = torch.float64
    return (
        x.new_empty((B, T, C) if want_x else (B, 0, C)),
        attack.new_empty((B, C), dtype=f64),
        attack.new_empty((B, C), dtype=f64),
        zi.new_empty((B, C), dtype=f64),
    )


def _agc_setup(ctx: Any, inputs: tuple, output: Tensor) -> None:
    ctx.save_for_backward(*inputs, output)


def _agc_grad(ctx: Any, gy: Tensor) -> tuple[Tensor | None, ...]:
    x, attack, release, zi, y = ctx.saved_tensors
    want_x = ctx.needs_input_grad[0]
    gx, ga, gr, gzi = _agc_backward(gy.contiguous(), x, y, attack, release, zi, want_x)
    return (
        gx if want_x else None,
        ga.to(attack.dtype) if ctx.needs_input_grad[1] else None,
        gr.to(release.dtype) if ctx.needs_input_grad[2] else None,
        gzi.to(zi.dtype) if ctx.needs_input_grad[3] else None,
    )


agc_rows.register_autograd(_agc_grad, setup_context=_agc_setup)


def _coef(v: Tensor | float, like: Tensor) -> Tensor:
    """``v`` (a number, or a tensor checked by :func:`check_agc_args`) in the dtype of
    ``like``."""
    if not torch.is_tensor(v):
        return torch.full((), float(v), dtype=like.dtype, device=like.device)
    return v.to(like.dtype)


def agc(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int = -1,
    state: Tensor | None = None,
) -> Tensor:
    """Attack/release AGC of ``x`` along ``dim`` (operator ``lhotse_amt::agc``).

    ``S[t] = S[t-1] + a (x[t] - S[t-1])`` with ``a = attack`` if ``x[t] > S[t-1]`` else
    ``release``; ``S[-1] = state`` (zeros if ``None``).

    Args:
        x: float32 or float64 ``(..., T, ...)``, time on axis ``dim``.
        attack, release: numbers or tensors that broadcast against the shape of ``x``
            without ``dim`` (e.g. ``(C,)`` per channel); differentiable.
        dim: the time axis.
        state: ``S[-1]``, broadcasting like ``attack``; differentiable.

    Returns:
        ``S`` of the shape and dtype of ``x``. No copy of ``x`` is made for any ``dim``
        (the operator reads ``x`` as ``(prod(shape[:dim]), T, prod(shape[dim + 1:]))``).

    Raises:
        TypeError, ValueError: as :func:`lhotse_amt.functional.loudness.temporal.
            check_agc_args` (coefficients outside (0, 1], shapes that do not broadcast).
    """
    check_agc_args(x, attack, release, dim, state)
    return agc_along(x, attack, release, dim, state)


def agc_along(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int,
    state: Tensor | None,
) -> Tensor:
    """:func:`agc` on arguments already checked (:func:`lhotse_amt.functional.loudness.agc`
    checks them once for every backend)."""
    dim = dim % x.dim()
    T = x.shape[dim]
    inner = x.shape[:dim] + x.shape[dim + 1 :]
    B, C = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1 :])
    coefs = []
    for v in (attack, release, state):
        v = 0.0 if v is None else v
        coefs.append(_coef(v, x).expand(inner).reshape(B, C).contiguous())
    y = agc_rows(x.reshape(B, T, C).contiguous(), *coefs)
    return y.reshape(x.shape)


def agc_nograd(x: Tensor, attack: float, release: float, dim: int) -> Tensor:
    """The AGC of :func:`agc` without gradient, number coefficients and zero initial state
    on the CPU kernel (:mod:`lhotse_amt.kernels.agc`; along the frames of ``(..., F, C)``
    vectorised over channels, without transposes). Same values as :func:`agc`."""
    from ..kernels import agc as kagc

    if x.dim() >= 2 and dim % x.dim() == x.dim() - 2:
        y = kagc.agc_numba_cols(x.reshape(-1, *x.shape[-2:]), attack, release)
        return y.reshape(x.shape)
    xt = x.movedim(dim, -1)
    shape = xt.shape
    y = kagc.agc_numba(xt.reshape(-1, shape[-1]), attack, release)
    return y.reshape(shape).movedim(-1, dim)

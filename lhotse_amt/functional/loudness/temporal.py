"""Temporal integration (attack/release AGC) and binaural inhibition of the loudness models.

Glasberg & Moore (2002), Sec. 2.6; Moore et al. (2016), Eqs. 4–7 (with the 2018 AGC constants
of Moore, Jervis, Harries & Schlittenlacher in the AMT 1.4 preset).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from ..._dispatch import kernel_device, no_grad_kernels
from ..._validation import (
    FLOAT_DTYPES,
    check_broadcast,
    check_choice,
    check_int,
    check_number,
    check_positive_finite,
    check_signal,
    check_tensor,
    require,
)

__all__ = [
    "AGC_BACKENDS",
    "agc_reference",
    "agc",
    "binaural_smoothing_matrix",
    "log_sech",
    "binaural_inhibition_reference",
    "binaural_inhibition",
]


def check_agc_args(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int,
    state: Tensor | None = None,
) -> None:
    """Check the arguments of the AGC functions (:func:`agc_reference`, :func:`agc`,
    :func:`lhotse_amt.ops.loudness.agc`): ``x`` a floating-point signal with at least one
    sample, ``dim`` one of its axes, ``attack``/``release`` numbers in (0, 1] or
    floating-point tensors broadcasting against the non-time axes of ``x`` (every element in
    (0, 1]), ``state`` None or such a tensor; raises ``TypeError``/``ValueError`` naming
    the argument."""
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="x")
    check_int("dim", dim, min=-x.dim(), max=x.dim() - 1)
    if state is not None and not (torch.is_tensor(state) and state.is_floating_point()):
        raise TypeError(f"state must be a floating-point tensor or None, got {state!r}")
    inner = x.shape[: dim % x.dim()] + x.shape[dim % x.dim() + 1 :]
    for name, v in (("attack", attack), ("release", release), ("state", state)):
        if not torch.is_tensor(v):
            if v is not None:
                check_number(name, v, min=0.0, max=1.0, min_inclusive=False)
            continue
        if not v.is_floating_point():
            raise TypeError(f"{name} must be a number or a floating-point tensor, got {v.dtype}")
        try:
            ok = check_broadcast((name, v.shape), ("x", inner)) == inner
        except ValueError:
            ok = False
        if not ok:
            raise ValueError(
                f"{name} of shape {tuple(v.shape)} must broadcast against the input's non-time "
                f"axes {tuple(inner)} (x {tuple(x.shape)}, dim={dim})"
            )
        if name != "state":
            require(((v > 0.0) & (v <= 1.0)).all(), f"{name} must lie in (0, 1] (every element)")


def agc_reference(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    state: Tensor | None = None,
) -> Tensor:
    """Attack/release one-pole smoother along the last axis, plain-torch reference
    (differentiable; it defines the semantics of :func:`agc` and of the operator
    ``lhotse_amt::agc``).

    ``S[j] = S[j-1] + a (N[j] - S[j-1])`` with ``a = attack`` if ``N[j] > S[j-1]`` else
    ``release``, ``S[-1] = 0`` (Glasberg & Moore 2002, Sec. 2.6; Moore et al. 2016, Eqs. 4–5)
    or ``state``. ``x`` is ``(..., T)``; ``attack``, ``release`` (in (0, 1], per frame) and
    ``state`` are numbers or tensors broadcasting against ``x.shape[:-1]``. Loops over time;
    all other axes are processed in parallel. Computed in the dtype of ``x``.
    """
    check_agc_args(x, attack, release, -1, state)
    zero = torch.zeros_like(x[..., 0])
    s = zero if state is None else zero + state.to(x.dtype)
    att = attack.to(x.dtype) if torch.is_tensor(attack) else torch.full_like(zero, attack)
    rel = release.to(x.dtype) if torch.is_tensor(release) else torch.full_like(zero, release)
    out = []
    for v in x.unbind(-1):
        a = torch.where(v > s, att, rel)
        s = s + a * (v - s)
        out.append(s)
    return torch.stack(out, -1)


#: ``backend`` values of :func:`agc`
AGC_BACKENDS = ("auto", "operator", "torch", "reference", "numba", "triton")


def agc(
    x: Tensor,
    attack: Tensor | float,
    release: Tensor | float,
    dim: int = -1,
    backend: str = "auto",
    state: Tensor | None = None,
) -> Tensor:
    """Attack/release AGC (see :func:`agc_reference`) of ``x`` along ``dim``.

    ``backend="auto"``: eager CPU calls without gradient (number coefficients, no
    ``state``, not traced by ``torch.compile``/``torch.export``;
    :func:`lhotse_amt._dispatch.no_grad_kernels`) run the numba kernel down the frames
    (:func:`lhotse_amt.ops.loudness.agc_nograd`); everything else on the CPU or CUDA runs
    the registered operator ``lhotse_amt::agc`` (:func:`lhotse_amt.ops.loudness.agc`:
    numba or Triton kernel, compiled backward w.r.t. ``x``, ``attack``, ``release`` and
    ``state``; same values as the numba kernel), other devices the reference.
    ``"operator"`` (or ``"triton"``) forces the operator, ``"torch"``/``"reference"`` the
    plain-torch reference, ``"numba"`` the no-grad CPU kernel (number coefficients, no
    ``state``, no gradient).
    """
    check_agc_args(x, attack, release, dim, state)
    check_choice("backend", backend, AGC_BACKENDS)
    from lhotse_amt.ops.loudness import agc_along, agc_nograd

    plain = state is None and not torch.is_tensor(attack) and not torch.is_tensor(release)
    if backend == "auto":
        tensors = [v for v in (attack, release, state) if torch.is_tensor(v)]
        if plain and x.device.type == "cpu" and no_grad_kernels(x, *tensors):
            backend = "numba"
        elif kernel_device(x.device):
            backend = "operator"
        else:
            backend = "torch"
    if backend in ("torch", "reference"):
        return agc_reference(x.movedim(dim, -1), attack, release, state).movedim(-1, dim)
    if backend in ("operator", "triton"):
        return agc_along(x, attack, release, dim, state)
    if not plain:
        raise ValueError(
            f"backend={backend!r} takes number attack/release and no state; use "
            "backend='operator' or 'torch' for tensor coefficients or a state"
        )
    return agc_nograd(x, attack, release, dim)


# ----------------------------------------------------------------------------------------------
# binaural inhibition (Moore et al. 2016)
# ----------------------------------------------------------------------------------------------
def binaural_smoothing_matrix(
    n_channels: int = 150, sigma: float = 0.08, step: float = 0.25
) -> np.ndarray:
    """Matrix ``M`` with ``S @ M`` = the cross-channel Gaussian smoothing of Moore et al. (2016).

    Weights ``exp(-(sigma g)^2)``, ``g = -18 … 18`` Cam in ``step`` steps, normalised to unit sum,
    applied as the central part of a full convolution over the ``n_channels`` channels.
    ``n_channels >= 1``; ``sigma`` (1/Cam) and ``step`` (Cam) finite and > 0.
    """
    n_channels = check_int("n_channels", n_channels, min=1)
    check_positive_finite("sigma", sigma)
    check_positive_finite("step", step)
    g = np.arange(-18.0, 18.0 + step / 2, step)
    w = np.exp(-((sigma * g) ** 2))
    w = w / w.sum()
    half = len(g) // 2
    m = np.zeros((n_channels, n_channels))
    for i in range(n_channels):
        for o in range(n_channels):
            d = o - i + half
            if 0 <= d < len(w):
                m[i, o] = w[d]
    return m


def log_sech(x: Tensor) -> Tensor:
    """``log sech(x)`` for ``x >= 0`` (a floating-point tensor), stable for large ``x``."""
    check_tensor("x", x)
    return math.log(2.0) - x - torch.log1p(torch.exp(-2.0 * x))


def _check_binaural_args(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: Tensor | float
) -> None:
    """``s_left``/``s_right`` floating ``(..., C)`` tensors that broadcast, ``smooth`` a
    ``(C, C)`` floating tensor, ``p`` a number > 0 or a floating tensor broadcasting with
    them (metadata only: the values are not read)."""
    check_tensor("s_left", s_left, min_dim=1, shape="(..., C)")
    check_tensor("s_right", s_right, min_dim=1, shape="(..., C)")
    if s_left.dtype != s_right.dtype:
        raise TypeError(
            f"s_left and s_right must have one dtype, got {s_left.dtype}, {s_right.dtype}"
        )
    c = s_left.shape[-1]
    check_tensor("smooth", smooth, trailing=(c, c), max_dim=2, shape=f"(C, C) = ({c}, {c})")
    if isinstance(p, Tensor):
        check_tensor("p", p)
        check_broadcast(("s_left", s_left.shape), ("s_right", s_right.shape), ("p", p.shape))
    else:
        check_positive_finite("p", p)
        check_broadcast(("s_left", s_left.shape), ("s_right", s_right.shape))


def binaural_inhibition_reference(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: Tensor | float = 1.5978
) -> tuple[Tensor, Tensor]:
    """Binaural inhibition of Moore et al. (2016), Eqs. 6–7, as in the Cambridge/AMT code.

    ``Ŝ = S @ smooth + 1e-13``; ``I_L = 2 / (1 + sech(Ŝ_R / Ŝ_L)^p)`` (and symmetrically);
    returns the inhibited specific loudness ``(S_L / I_L, S_R / I_R)``, shapes ``(..., C)``.
    Plain torch (differentiable in every input and ``p``).
    """
    _check_binaural_args(s_left, s_right, smooth, p)
    return _binaural_inhibition(s_left, s_right, smooth, p)


def _binaural_inhibition(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: Tensor | float
) -> tuple[Tensor, Tensor]:
    """:func:`binaural_inhibition_reference` on arguments already checked."""
    smooth = smooth.to(s_left.dtype)
    sl = s_left @ smooth + 1e-13
    sr = s_right @ smooth + 1e-13
    inh_l = 2.0 / (1.0 + torch.exp(p * log_sech(sr / sl)))
    inh_r = 2.0 / (1.0 + torch.exp(p * log_sech(sl / sr)))
    return s_left / inh_l, s_right / inh_r


def binaural_inhibition(
    s_left: Tensor, s_right: Tensor, smooth: Tensor, p: Tensor | float = 1.5978
) -> tuple[Tensor, Tensor]:
    """Binaural inhibition (:func:`binaural_inhibition_reference`).

    Eager CPU calls without gradient run
    :func:`lhotse_amt.ops.loudness_fast.binaural_inhibition_fast` (equal ears skip the
    smoothing, other inputs take one compiled pass; same values to ~2 ulp); everything else,
    including ``torch.compile``/``torch.export`` tracing, ears of different shapes, a ``p``
    of several elements and dtypes other than float32/float64, the plain-torch reference.
    """
    _check_binaural_args(s_left, s_right, smooth, p)
    if (
        s_left.shape == s_right.shape
        and (not torch.is_tensor(p) or p.numel() == 1)
        and s_left.dtype in FLOAT_DTYPES
        and s_left.device.type == "cpu"
        and no_grad_kernels(s_left, s_right, *((p,) if torch.is_tensor(p) else ()))
    ):
        from ...ops.loudness_fast import binaural_inhibition_fast

        return binaural_inhibition_fast(s_left, s_right, smooth, p)
    return _binaural_inhibition(s_left, s_right, smooth, p)

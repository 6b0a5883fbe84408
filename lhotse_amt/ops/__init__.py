"""Differentiable recursion operators (``torch.ops.lhotse_amt.*``) with broadcasting wrappers.

Each sequential recursion of the models (second-order sections, complex one-pole
cascades, adaptation loops, ...) is one registered operator with a CPU kernel, a CUDA
kernel, a fake implementation and a compiled backward (:mod:`lhotse_amt.ops.recursions`).
The functions here take tensors shaped ``(..., T)`` with coefficients that broadcast
against the leading dimensions, like :mod:`torch.nn.functional`, and turn the broadcast
into the operators' row maps (no input is copied per channel).

Each module of operators is imported, and its operators registered, when first used
(``lhotse_amt.ops.agc`` or ``from lhotse_amt.ops import agc`` imports
:mod:`lhotse_amt.ops.loudness`): a process that runs only the no-grad operators of
:mod:`lhotse_amt.ops.fused` does not define the differentiable ones and their kernels.
"""

from __future__ import annotations

import importlib
import math
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from .._validation import (
    FLOAT_DTYPES,
    check_bool,
    check_broadcast,
    check_indices,
    check_int,
    check_positive_finite,
    check_signal,
    check_tensor,
    describe_value,
    normalise_sections,
)

if TYPE_CHECKING:
    from .compression import broken_stick, drnl_compression
    from .envelope import rms_envelope
    from .fir import strided_fir
    from .ihc_paulick import ihc_paulick_recursion
    from .loudness import agc

#: the operators defined in this package's modules, by the module that defines them
_LAZY = {
    "broken_stick": "compression",
    "drnl_compression": "compression",
    "rms_envelope": "envelope",
    "strided_fir": "fir",
    "ihc_paulick_recursion": "ihc_paulick",
    "agc": "loudness",
}


def __getattr__(name: str) -> Any:
    # PEP 562: the operators of _LAZY, their module imported on first access
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


__all__ = [
    "sosfilt",
    "one_pole_cascade",
    "adaptation_loops_raw",
    "ihc_paulick_recursion",
    "agc",
    "rms_envelope",
    "strided_fir",
    "broken_stick",
    "drnl_compression",
    "row_map",
]


def check_input(x: Tensor, name: str = "x", min_dim: int = 1) -> Tensor:
    """The signal argument of an operator wrapper: a float32/float64 tensor with at least
    ``min_dim`` dimensions (empty allowed; the values are not scanned, the functional
    layer checks them); ``TypeError``/``ValueError`` naming ``name`` otherwise."""
    kw = {"min_dim": min_dim, "allow_empty": True, "finite": False, "dtypes": FLOAT_DTYPES}
    return check_signal(x, 0, None, name=name, **kw)


def row_map(shape: tuple[int, ...] | torch.Size, lead: torch.Size, device: torch.device) -> Tensor:
    """Row of a tensor with leading shape ``shape`` read by each row of the broadcast
    leading shape ``lead``: ``(prod(lead),)`` int64. ``ValueError`` where ``shape`` does
    not broadcast to ``lead``."""
    if check_broadcast(("shape", tuple(shape)), ("lead", tuple(lead))) != lead:
        raise ValueError(f"shape {tuple(shape)} does not broadcast to lead {tuple(lead)}")
    n = math.prod(shape)
    idx = torch.arange(n, device=device).reshape(tuple(shape))
    return idx.expand(lead).reshape(-1)


def _rows(x: Tensor, T: int) -> Tensor:
    # the row count spelled out: reshape(-1, 0) of an empty time axis is ambiguous
    return x.reshape(math.prod(x.shape[:-1]), T).contiguous()


def sosfilt(x: Tensor, sos: Tensor, zi: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Second-order sections over the last axis (operator ``lhotse_amt::sosfilt``).

    Args:
        x: real ``(..., T)``.
        sos: ``(..., S, 6)`` rows ``[b0, b1, b2, a0, a1, a2]`` (each divided by its ``a0``),
            broadcast with ``x.shape[:-1]``.
        zi: ``(..., S, 2)`` initial states (scipy's convention), zeros if ``None``.

    Returns:
        ``y (lead..., T)`` in the dtype of ``x`` and ``zf (lead..., S, 2)``.

    Raises:
        TypeError, ValueError: ``x`` not float32/float64 with time last, ``sos``/``zi``
            not floating tensors of those shapes (``S >= 1``), a section's ``a0``
            (``sos[..., 3]``) zero, leading shapes that do not broadcast.
    """
    check_input(x)
    check_tensor("sos", sos, min_dim=2, trailing=(6,), shape="(..., S, 6)")
    sos = normalise_sections(sos)
    T = x.shape[-1]
    S = sos.shape[-2]
    if S == 0:
        raise ValueError(f"sos must have at least one section, got shape {tuple(sos.shape)}")
    check_tensor("zi", zi, trailing=(S, 2), allow_none=True)
    shapes = [("x", x.shape[:-1]), ("sos", sos.shape[:-2])]
    lead = check_broadcast(*shapes, *([] if zi is None else [("zi", zi.shape[:-2])]))
    sdt = torch.promote_types(sos.dtype, x.dtype)
    if zi is None:
        z = x.new_zeros((math.prod(lead), S, 2), dtype=sdt)
    else:
        z = zi.to(sdt).expand(*lead, S, 2).reshape(-1, S, 2).contiguous()
    xrow = row_map(x.shape[:-1], lead, x.device)
    crow = row_map(sos.shape[:-2], lead, x.device)
    from .recursions import sosfilt_rows

    y, zf, _ = sosfilt_rows(_rows(x, T), xrow, sos.reshape(-1, S, 6).contiguous(), crow, z)
    return y.reshape(*lead, T), zf.reshape(*lead, S, 2)


def _as_ri(z: Tensor, dtype: torch.dtype) -> Tensor:
    """``(..., 2)`` real view (real, imaginary) of a complex or real tensor."""
    if torch.is_complex(z):
        return torch.view_as_real(z.contiguous())
    z = z.to(dtype)
    return torch.stack([z, torch.zeros_like(z)], -1)


def one_pole_cascade(
    x: Tensor,
    pole: Tensor,
    gain: Tensor,
    order: int,
    zi: Tensor | None = None,
    output: str = "real",
    use_abs: Tensor | None = None,
    select: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """``K = order`` identical complex one-pole sections and a gain (operator
    ``lhotse_amt::resonator``): ``u_k[n] = p u_k[n-1] + u_{k-1}[n]``, ``u_0 = x``.

    Args:
        x: real ``(..., T)``.
        pole: complex ``(...)``; gain: complex or real ``(...)``; both broadcast with
            ``x.shape[:-1]``.
        zi: complex section states ``(..., K)`` (``u_k[-1]``), zeros if ``None``; with
            ``select``, ``(batch..., S, K)`` (the selected filters' states).
        output: ``"real"`` (``Re(g u_K)``), ``"real2"`` (``2 Re(g u_K)``), ``"abs"``
            (``|g u_K|``), ``"complex"`` (``g u_K``) or ``"mixed"``: ``|g u_K|`` where
            ``use_abs`` (bool, broadcast like ``pole``) is true, else ``Re(g u_K)``.
        select: int64 ``(S,)``: run only these filters, indices into the flattened
            coefficient shape (the broadcast shape of ``pole``, ``gain``, ``use_abs``);
            the other filters are neither computed nor differentiated.

    Returns:
        ``y (lead..., T)`` and the complex final states ``(lead..., K)``; with ``select``,
        ``lead = (batch..., S)``, ``batch`` the leading dimensions before the coefficient
        shape.

    Raises:
        TypeError, ValueError: ``x`` not float32/float64 with time last, ``pole``/``gain``
            not floating or complex tensors, ``order`` not an integer >= 1, ``zi`` not a
            complex ``(..., order)`` tensor, ``use_abs`` not bool, ``select`` not a 1-d
            integer tensor, shapes that do not broadcast.
    """
    check_input(x)
    check_tensor("pole", pole, complex_ok=True)
    check_tensor("gain", gain, complex_ok=True)
    check_int("order", order, min=1)
    check_tensor("zi", zi, real_ok=False, complex_ok=True, trailing=(order,), allow_none=True)
    if use_abs is not None and not (torch.is_tensor(use_abs) and use_abs.dtype == torch.bool):
        raise TypeError(f"use_abs must be a bool tensor or None, got {describe_value(use_abs)}")
    check_indices("select", select)
    T = x.shape[-1]
    rdt = x.dtype
    coefs = [("pole", pole.shape), ("gain", gain.shape)]
    cshape = check_broadcast(*coefs, *([] if use_abs is None else [("use_abs", use_abs.shape)]))
    full = check_broadcast(("x", x.shape[:-1]), ("coefficients", cshape))
    if select is not None:
        batch = full[: len(full) - len(cshape)]
        if output == "complex" or full[len(batch) :] != cshape:
            raise ValueError(
                "select needs a real output and coefficients spanning the trailing "
                f"dimensions of x (coefficient shape {tuple(cshape)}, broadcast shape "
                f"{tuple(full)}, output {output!r})"
            )
        lead = torch.Size((*batch, select.shape[0]))
        if zi is not None and check_broadcast(("zi", zi.shape[:-1]), ("output", lead)) != lead:
            raise ValueError(f"zi of shape {tuple(zi.shape)} must broadcast to {(*lead, order)}")
    else:
        shapes = [("x and coefficients", full)] + ([] if zi is None else [("zi", zi.shape[:-1])])
        lead = check_broadcast(*shapes)
    sdt = torch.float64 if rdt == torch.float64 else torch.float32
    if zi is None:
        z = x.new_zeros((math.prod(lead), order, 2), dtype=sdt)
    else:
        z = torch.view_as_real(zi.expand(*lead, order).reshape(-1, order).contiguous()).to(sdt)
    p = _as_ri(pole.expand(cshape).reshape(-1), rdt)
    if output == "real2":
        gain = 2 * gain
    if output == "complex":
        g = gain.expand(cshape).reshape(-1)
        yr, zf = one_pole_cascade(x, pole, g.reshape(cshape), order, zi, output="real")
        yi, _ = one_pole_cascade(x, pole, (-1j * g).reshape(cshape), order, zi, output="real")
        return torch.complex(yr, yi), zf
    g = _as_ri(gain.expand(cshape).reshape(-1), rdt)
    if output in ("real", "real2"):
        mode = torch.zeros(p.shape[0], dtype=torch.int8, device=x.device)
    elif output == "abs":
        mode = torch.ones(p.shape[0], dtype=torch.int8, device=x.device)
    elif output == "mixed" and use_abs is not None:
        mode = use_abs.expand(cshape).reshape(-1).to(device=x.device, dtype=torch.int8)
    else:
        raise ValueError(
            f"output must be 'real', 'real2', 'abs', 'complex' or 'mixed' (with use_abs), "
            f"got {output!r}"
        )
    if select is None:
        xrow = row_map(x.shape[:-1], lead, x.device)
        crow = row_map(cshape, lead, x.device)
    else:
        n = math.prod(cshape)
        xrow = row_map(x.shape[:-1], full, x.device).reshape(-1, n)[:, select].reshape(-1)
        crow = row_map(cshape, full, x.device).reshape(-1, n)[:, select].reshape(-1)
    from .recursions import resonator_rows

    y, zf, _ = resonator_rows(_rows(x, T), xrow, p.contiguous(), g.contiguous(), mode, crow, z)
    zc = torch.view_as_complex(zf.reshape(*lead, order, 2).contiguous())
    return y.reshape(*lead, T), zc


def adaptation_loops_raw(
    x: Tensor, a: Tensor, m: Tensor, minlvl: float, use_limit: bool, state: Tensor
) -> tuple[Tensor, Tensor]:
    """Adaptation loops (operator ``lhotse_amt::adaptation_loops``): the raw loop output
    ``v`` before the model-unit scaling and the final states.

    ``x (..., T)`` float32/float64; ``a``, ``m`` ``(..., J)`` (``J >= 1``) floating,
    broadcast with ``x.shape[:-1]``; ``state (..., J)`` floating; ``minlvl > 0`` a number;
    ``use_limit`` a bool. Raises ``TypeError``/``ValueError`` naming the argument otherwise.
    """
    check_input(x)
    check_tensor("a", a, min_dim=1, shape="(..., J)")
    J = a.shape[-1]
    if J == 0:
        raise ValueError(f"a must have at least one loop (J >= 1), got shape {tuple(a.shape)}")
    check_tensor("m", m, trailing=(J,))
    check_tensor("state", state, trailing=(J,))
    minlvl = check_positive_finite("minlvl", minlvl)
    use_limit = check_bool("use_limit", use_limit)
    T = x.shape[-1]
    coefs = [("a", a.shape[:-1]), ("m", m.shape[:-1])]
    lead = check_broadcast(("x", x.shape[:-1]), *coefs, ("state", state.shape[:-1]))
    cshape = check_broadcast(*coefs)
    sdt = torch.float64 if x.dtype == torch.float64 else torch.float32
    z = state.to(sdt).expand(*lead, J).reshape(-1, J).contiguous()
    ar = a.expand(*cshape, J).reshape(-1, J).contiguous()
    mr = m.expand(*cshape, J).reshape(-1, J).contiguous()
    xrow = row_map(x.shape[:-1], lead, x.device)
    crow = row_map(cshape, lead, x.device)
    from .recursions import adaptation_rows

    y, zf, _ = adaptation_rows(_rows(x, T), xrow, ar, mr, crow, minlvl, use_limit, z)
    return y.reshape(*lead, T), zf.reshape(*lead, J)

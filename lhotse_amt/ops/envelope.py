"""The rms-matched Hilbert envelope as a registered operator, ``lhotse_amt::rms_envelope``.

King et al. (2019)'s phase insensitivity replaces each selected band ``x`` of a
modulation filterbank output by its Hilbert envelope ``e = |x + i H{x}|`` scaled to the
rms of ``x``: ``k e`` with ``k = rms(x) / rms(e)`` (0 where ``e`` is all zero). The
plain-torch reference that defines it is the autograd path of
:func:`lhotse_amt.functional.king2019_modulation.phase_insensitivity`
(``backend="reference"``); this operator gives the same values and gradients with

* the Hilbert transforms as real FFTs (``torch.fft``) and everything around them (the
  envelope, the rms sums, the scaling, the copy of the other bands; in the backward the
  whole chain rule but one Hilbert transform) in one numba pass per row on the CPU
  (:mod:`lhotse_amt.kernels.envelope`), one Triton launch on CUDA
  (:mod:`lhotse_amt.kernels.triton_envelope`), plain torch on other devices (the
  choice: :class:`lhotse_amt.ops.rowop.DeviceKernels`),
* a fake implementation (``torch.compile`` / ``torch.export`` trace through it),
* an analytic backward (operator ``lhotse_amt::rms_envelope_backward``): one more
  Hilbert transform, of ``dL/de h / e``, since ``H`` is antisymmetric (``H^T = -H``).

Reference: A. King, L. Varnet, C. Lorenzi (2019), JASA 145, 2277-2293.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor

from .._validation import check_int
from ..kernels import envelope as _cpu
from . import check_input
from .rowop import DeviceKernels

__all__ = ["rms_envelope_rows", "rms_envelope"]

_LIB = "lhotse_amt"


def _hilbert(v: Tensor, overwrite: bool = False) -> Tensor:
    """Hilbert transform along the last axis (DC and, for even lengths, Nyquist zero), as
    :func:`lhotse_amt.functional.king2019_modulation.hilbert_transform` (no checks);
    ``overwrite``: written into ``v`` (a contiguous buffer of the caller's, no longer
    needed) instead of a new tensor."""
    T = v.shape[-1]
    X = torch.fft.rfft(v, dim=-1)
    X[..., 0] = 0
    if T % 2 == 0:
        X[..., -1] = 0
    if overwrite:
        return torch.fft.irfft(X.mul_(-1j), n=T, dim=-1, out=v)
    return torch.fft.irfft(X.mul_(-1j), n=T, dim=-1)


def _forward_torch(x: Tensor, h: Tensor, sel: list[int]) -> tuple[Tensor, Tensor]:
    xs = x[:, sel].double()
    hd = h.double()
    mx = xs.square().mean(-1)
    me = mx + hd.square().mean(-1)
    pos = me > 0
    k = torch.where(pos, torch.sqrt(mx / torch.where(pos, me, 1.0)), 0.0)
    out = x.clone()
    out[:, sel] = (k[..., None] * torch.hypot(xs, hd)).to(x.dtype)
    return out, torch.stack([mx, me], -1)


def _backward_torch(
    g: Tensor, x: Tensor, h: Tensor, stats: Tensor, sel: list[int]
) -> tuple[Tensor, Tensor]:
    T = x.shape[-1]
    gs, xs, hd = g[:, sel].double(), x[:, sel].double(), h.double()
    mx, me = stats[..., 0:1], stats[..., 1:2]
    pos = me > 0
    k = torch.where(pos, torch.sqrt(mx / torch.where(pos, me, 1.0)), 0.0)
    e = torch.hypot(xs, hd)
    acc = (gs * e).sum(-1, keepdim=True)
    c1 = torch.where(pos, acc * k / (T * torch.where(pos, me, 1.0)), 0.0)
    c2 = torch.where(mx > 0, acc * k / (T * torch.where(mx > 0, mx, 1.0)), 0.0)
    ge = k * gs - c1 * e
    inv = torch.where(e > 0, 1.0 / torch.where(e > 0, e, 1.0), 0.0)
    gx = g.clone()
    gx[:, sel] = (c2 * xs + ge * xs * inv).to(x.dtype)
    return gx, (ge * hd * inv).to(h.dtype)


def _finish_torch(gx: Tensor, hgh: Tensor, sel: list[int]) -> None:
    gx[:, sel] -= hgh


#: the envelope kernels: numba on the CPU, Triton on CUDA, their functions in plain torch
#: on other devices
_KERNELS = DeviceKernels(
    _cpu,
    "triton_envelope",
    attr=None,
    other=SimpleNamespace(
        envelope_forward=_forward_torch,
        envelope_backward_direct=_backward_torch,
        envelope_backward_finish=_finish_torch,
    ),
)


def _rows(x: Tensor) -> Tensor:
    """``x (..., M, T)`` as rows ``(R, M, T)``."""
    return x.reshape(-1, x.shape[-2], x.shape[-1])


def _forward(k: Any, x: Tensor, sel: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """The operator's forward with the kernel functions ``k``."""
    x3 = _rows(x)
    h = _hilbert(x3[:, sel], overwrite=True)  # the selected bands' copy becomes h
    out, stats = k.envelope_forward(x3, h, sel)
    return out.view(x.shape), h, stats


def _backward_rows(
    k: Any, g: Tensor, x: Tensor, h: Tensor, stats: Tensor, sel: list[int]
) -> Tensor:
    """The backward operator with the kernel functions ``k``: all of the chain rule but
    one Hilbert transform in the kernels, that transform between them."""
    gx, gh = k.envelope_backward_direct(g, _rows(x), h, stats, sel)
    k.envelope_backward_finish(gx, _hilbert(gh, overwrite=True), sel)
    return gx.view(x.shape)


@torch.library.custom_op(f"{_LIB}::rms_envelope", mutates_args=())
def rms_envelope_rows(x: Tensor, sel: list[int]) -> tuple[Tensor, Tensor, Tensor]:
    """``x (..., M, T)`` real and contiguous, ``sel`` the bands to replace (distinct, in
    ``[0, M)``) -> the output shaped like ``x``, the Hilbert transforms of the selected
    bands ``(R, S, T)`` and the per-row ``(mean(x^2), mean(e^2))`` ``(R, S, 2)`` float64
    (both no gradient), ``R`` the product of the leading dimensions. The gradient may come
    in any layout (the CPU kernels transpose a time-major one block by block)."""
    return _forward(_KERNELS.on(x), x, sel)


@rms_envelope_rows.register_fake
def _(x: Tensor, sel: list[int]):
    R, T = math.prod(x.shape[:-2]), x.shape[-1]
    S = len(sel)
    return (
        torch.empty_like(x),
        x.new_empty((R, S, T)),
        x.new_empty((R, S, 2), dtype=torch.float64),
    )


@torch.library.custom_op(f"{_LIB}::rms_envelope_backward", mutates_args=())
def _rms_envelope_backward(
    g: Tensor, x: Tensor, h: Tensor, stats: Tensor, sel: list[int]
) -> Tensor:
    if x.device.type != "cpu":
        g = _rows(g.contiguous())
    return _backward_rows(_KERNELS.on(x), g, x, h, stats, sel)


@_rms_envelope_backward.register_fake
def _(g: Tensor, x: Tensor, h: Tensor, stats: Tensor, sel: list[int]):
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple, output: tuple) -> None:
    x, sel = inputs
    ctx.sel = sel
    ctx.mark_non_differentiable(output[1], output[2])
    ctx.save_for_backward(x, output[1], output[2])


def _backward(ctx: Any, g: Tensor, _gh: Tensor, _gs: Tensor) -> tuple[Tensor, None]:
    x, h, stats = ctx.saved_tensors
    # g keeps its layout: the CPU kernels read a time-major gradient (a model output
    # permuted to (B, T, F, M)) block by block; other devices make it contiguous
    g = g if g is not None else torch.zeros_like(x)
    return _rms_envelope_backward(g, x, h, stats, ctx.sel), None


rms_envelope_rows.register_autograd(_backward, setup_context=_setup)


def _band_list(bands: Any) -> list:
    """``bands`` as a list of its items: an iterable (not a string) or a 1-d integer
    tensor."""
    if torch.is_tensor(bands):
        if bands.dim() != 1 or bands.is_floating_point() or bands.is_complex():
            raise TypeError(
                f"bands must be a sequence of integers or a 1-d integer tensor, got a "
                f"{bands.dtype} tensor of shape {tuple(bands.shape)}"
            )
        return bands.tolist()
    if isinstance(bands, (str, bytes)) or not isinstance(bands, Iterable):
        raise TypeError(f"bands must be a sequence of integers, got {type(bands).__name__}")
    return list(bands)


def rms_envelope(x: Tensor, bands: Sequence[int]) -> Tensor:
    """Replace the bands ``bands`` of ``x (..., M, T)`` (real, floating) by their
    rms-matched Hilbert envelopes (operator ``lhotse_amt::rms_envelope``); the other bands
    pass unchanged. Returns a new tensor of the shape and dtype of ``x``. ``x`` must be
    float32/float64, ``bands`` a sequence (or 1-d integer tensor) of integers
    (``TypeError``/``ValueError`` naming the argument otherwise)."""
    if not isinstance(x, Tensor) or not x.is_floating_point() or x.dim() < 2:
        raise TypeError(
            f"x must be a real floating tensor (..., M, T), got "
            f"{type(x).__name__ if not isinstance(x, Tensor) else (x.dtype, tuple(x.shape))}"
        )
    check_input(x, min_dim=2)
    M, T = x.shape[-2], x.shape[-1]
    sel = sorted({check_int(f"bands[{i}]", b) for i, b in enumerate(_band_list(bands))})
    if sel and not (0 <= sel[0] and sel[-1] < M):
        raise ValueError(f"bands must lie in [0, {M}) (x has {M} bands on dim -2), got {sel}")
    if not sel or x.numel() == 0:
        return x.clone()
    lead = x.shape[:-2] if x.dim() > 2 else (1,)
    out, _, _ = rms_envelope_rows(x.reshape(*lead, M, T).contiguous(), sel)
    return out.reshape(x.shape)

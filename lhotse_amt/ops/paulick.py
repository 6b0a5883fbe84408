"""Paulick et al. (2024)'s fused no-grad front end as registered operators
(``lhotse_amt::``), in the style of :mod:`lhotse_amt.ops.fused`:

* ``lhotse_amt::paulick_frontend``: DRNL filterbank -> inner hair cell -> adaptation loops
  (-> FIR decimator) in one compiled pass over the samples
  (:func:`lhotse_amt.kernels.paulick_frontend.frontend`), storing only the last stage;
* ``lhotse_amt::paulick_fir``: the direct-form FIR correlation of the ear filters and the
  decimator (:func:`lhotse_amt.kernels.paulick.fir`: float64 accumulation in a fixed
  order, so chunked and one-shot processing agree bit for bit).

Each has a CPU kernel (numba), registered at the dispatcher level (a call costs no
``torch.compile`` machinery), and a fake implementation (shapes only); no gradient. They
serve eager CPU inference of :class:`lhotse_amt.models.paulick2024.Paulick2024`; under
autograd, on CUDA and while ``torch.compile``/``torch.export`` trace the model, its stages
run as the differentiable operators (:mod:`lhotse_amt.ops.recursions`,
:mod:`lhotse_amt.ops.ihc_paulick`, :mod:`lhotse_amt.ops.fir`) instead.

Streaming states cross the operator boundary as tensors: the DRNL's section states
``[lin, nl1, nl2]`` (an empty list: rest), the decimator's history ``(..., C, K - 1)``
(``None``: zeros) and the number of samples it has seen. The wrappers :func:`frontend` and
:func:`fir` take and return them in the models' layout (dicts).

Reference: L. Paulick, H. Relaño-Iborra, T. Dau (2024), "The Computational Auditory
Signal Processing and Perception Model (CASP): A Revised Version", bioRxiv.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..kernels import paulick as _paulick
from ..kernels import paulick_frontend as _frontend
from ..kernels.ihc_paulick_grad import IHC_STEP_KEYS
from .fused import _cpu_op, _fake

__all__ = ["frontend", "fir"]

#: the DRNL's state keys, in the order of the operator's state list
DRNL_STATE_KEYS = ("lin", "nl1", "nl2")


@_cpu_op(
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
    y, drnl, w, s, dec = _frontend.frontend(
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
    decimator) in one pass over ``x (B, T)`` (CPU, no gradient); the arguments and results
    of :func:`lhotse_amt.kernels.paulick_frontend.frontend`.

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


@_cpu_op("paulick_fir(Tensor buf, Tensor w, int start, int stride, int n_out) -> Tensor")
def _fir_op(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    return _paulick.fir(buf, w, start, stride, n_out)


@_fake("paulick_fir")
def _(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    return buf.new_empty((buf.shape[0], n_out))


def fir(buf: Tensor, w: Tensor, start: int, stride: int, n_out: int) -> Tensor:
    """Operator ``lhotse_amt::paulick_fir``: ``y[r, i] = sum_k w[k] buf[r, start + i stride
    + k]`` for ``buf (N, L)`` and taps ``w (K,)`` (CPU, no gradient; float64 accumulation,
    every output in a fixed order), ``(N, n_out)`` in ``buf``'s dtype."""
    return _fir_op(buf, w, int(start), int(stride), int(n_out))

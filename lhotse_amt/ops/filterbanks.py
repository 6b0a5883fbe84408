"""No-grad filterbank operators (``lhotse_amt::``), a CPU and a CUDA kernel each: the
``"numba"`` backends of the functional filterbanks, registered like the fused chains of
:mod:`lhotse_amt.ops.fused` (at the dispatcher level, a fake implementation with the
output shapes, no gradient). The dispatcher picks the kernel by device
(:class:`lhotse_amt.ops.rowop.DeviceKernels`): numba on the CPU, on CUDA the functions of
:mod:`lhotse_amt.kernels.triton_filterbanks` (Triton kernels and torch on the device, same
results, shapes, dtypes and state layouts; a stream's state may move between the devices).
Under autograd and while ``torch.compile``/``torch.export`` trace a model, the functionals
run the differentiable operators instead (:mod:`lhotse_amt.ops.recursions`).

* ``lhotse_amt::modulation_bank``: the ``efilt`` modulation filterbank (pre-filter and
  low-pass sections, one-pole complex band-passes, Re or ``|.|``, scale per band) of
  :func:`lhotse_amt.functional.modulation.modulation_filterbank`; CPU: one compiled pass
  (:mod:`lhotse_amt.kernels.modbank_simd`, 8 channels per vector register; the
  channel-by-channel :mod:`lhotse_amt.kernels.modbank` where the register kernels are
  switched off, :data:`lhotse_amt.kernels.SIMD`); CUDA: the second-order-section and
  resonator kernels of the recursion operators;
* ``lhotse_amt::lfilter``: direct-form IIR filters row by row
  (:func:`lhotse_amt.kernels.tf.lfilter`: ``scipy.signal.lfilter`` semantics, transposed
  direct form II, the recursion in ``x``'s dtype), King2019's transfer-function
  band-passes;
* ``lhotse_amt::sos_bank``: a bank of second-order-section filters sharing one input
  (:func:`lhotse_amt.kernels.tf.sos_bank`, float64 recursions), King2019's band-passes;
* ``lhotse_amt::phase_insensitivity_``: the rms-matched Hilbert envelopes of selected
  bands, in place (:func:`lhotse_amt.kernels.hilbert.phase_insensitivity_cpu_`; CUDA:
  torch's FFT on the device over the same blocks of rows).
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import Tensor

from ..kernels import hilbert as _hilbert
from ..kernels import modbank as _modbank
from ..kernels import modbank_simd as _modbank_simd
from ..kernels import tf as _tf
from .fused import _fake, _operator
from .rowop import DeviceKernels

__all__ = ["lfilter", "modulation_bank", "phase_insensitivity_", "sos_bank", "BLOCK_SAMPLES"]

#: samples per block of the in-place phase insensitivity's transforms
BLOCK_SAMPLES = _hilbert.BLOCK_SAMPLES

#: the modulation bank's state keys, in the operator's order
_BANK_KEYS = ("pre", "lp", "bp")


def _cpu_modulation_bank(x: Tensor, filters: tuple, state: dict) -> tuple[Tensor, dict]:
    kernel = _modbank_simd if _modbank_simd.ENABLED else _modbank
    return kernel.modulation_bank(x, filters, state)


#: the kernels per device: numba on the CPU, :mod:`lhotse_amt.kernels.triton_filterbanks`
#: on CUDA (the operators are registered for these two devices only)
_KERNELS = DeviceKernels(
    SimpleNamespace(
        modulation_bank=_cpu_modulation_bank,
        lfilter=_tf.lfilter,
        sos_bank=_tf.sos_bank,
        phase_insensitivity_=_hilbert.phase_insensitivity_cpu_,
    ),
    "triton_filterbanks",
    attr=None,
)


@_operator(
    "modulation_bank(Tensor x, Tensor lp_sos, Tensor? prefilter_sos, Tensor pole, "
    "Tensor gain, Tensor use_abs, Tensor scale, Tensor?[] state) -> (Tensor, Tensor?[])"
)
def _bank_op(
    x: Tensor, lp_sos: Tensor, prefilter_sos: Tensor | None, pole: Tensor, gain: Tensor,
    use_abs: Tensor, scale: Tensor, state: list[Tensor | None],
) -> tuple[Tensor, list[Tensor | None]]:  # fmt: skip
    st = {k: v for k, v in zip(_BANK_KEYS, state, strict=True) if v is not None}
    filters = (lp_sos, prefilter_sos, pole, gain, use_abs, scale)
    y, new = _KERNELS.on(x).modulation_bank(x, filters, st)
    return y, [new.get(k) for k in _BANK_KEYS]


@_fake("modulation_bank")
def _(
    x: Tensor, lp_sos: Tensor, prefilter_sos: Tensor | None, pole: Tensor, gain: Tensor,
    use_abs: Tensor, scale: Tensor, state: list[Tensor | None],
) -> tuple[Tensor, list[Tensor | None]]:  # fmt: skip
    lead, C, T = x.shape[:-2], x.shape[-2], x.shape[-1]
    M1 = pole.shape[-1]
    f64 = torch.float64
    pre = (
        None
        if prefilter_sos is None
        else x.new_empty((*lead, C, prefilter_sos.shape[0], 2), dtype=f64)
    )
    lp = x.new_empty((*lead, C, lp_sos.shape[0], 2), dtype=f64)
    bp = x.new_empty((*lead, C, M1, 1), dtype=torch.complex128)
    return x.new_empty((*lead, C, M1 + 1, T)), [pre, lp, bp]


def modulation_bank(x: Tensor, filters: tuple, state: dict | None) -> tuple[Tensor, dict]:
    """Operator ``lhotse_amt::modulation_bank``: ``x (..., C, T)`` through the bank's
    ``filters = (lp_sos, prefilter_sos, pole, gain, use_abs, scale)`` (low-pass sections
    ``(SL, 6)``, pre-filter sections ``(SP, 6)`` or ``None``, band-pass poles and gains
    complex ``(C, M - 1)``, ``use_abs (C, M - 1)``, ``scale (C, M)``) from ``state`` (keys
    ``pre``, ``lp``, ``bp``; missing: rest). Returns ``(..., C, M, T)`` in ``x``'s dtype
    and the new state."""
    st = state or {}
    y, new = _bank_op(x, *filters, [st.get(k) for k in _BANK_KEYS])
    return y, {k: v for k, v in zip(_BANK_KEYS, new, strict=True) if v is not None}


@_operator("lfilter(Tensor x, Tensor b, Tensor a, Tensor? zi) -> (Tensor, Tensor)")
def _lfilter_op(x: Tensor, b: Tensor, a: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    return _KERNELS.on(x).lfilter(x, b, a, zi)


@_fake("lfilter")
def _(x: Tensor, b: Tensor, a: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    return torch.empty_like(x), x.new_empty((x.shape[0], b.shape[-1] - 1))


def lfilter(x: Tensor, b: Tensor, a: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    """Operator ``lhotse_amt::lfilter``: the rows of ``x (N, T)`` through ``b``/``a``
    ``(N, K + 1)`` (``a[:, 0] == 1``) from ``zi (N, K)`` (``None``: rest) -> ``y (N, T)``
    and ``zf (N, K)`` in ``x``'s dtype."""
    return _lfilter_op(x, b, a, zi)


@_operator("sos_bank(Tensor x, Tensor sos, Tensor? zi) -> (Tensor, Tensor)")
def _sos_bank_op(x: Tensor, sos: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    return _KERNELS.on(x).sos_bank(x, sos, zi)


@_fake("sos_bank")
def _(x: Tensor, sos: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    N, T = x.shape
    M, S = sos.shape[0], sos.shape[1]
    return x.new_empty((N, M, T)), x.new_empty((N, M, S, 2), dtype=torch.float64)


def sos_bank(x: Tensor, sos: Tensor, zi: Tensor | None) -> tuple[Tensor, Tensor]:
    """Operator ``lhotse_amt::sos_bank``: ``M`` second-order-section filters ``sos (M, S,
    6)`` sharing the input rows ``x (N, T)``, from ``zi (N, M, S, 2)`` (``None``: rest) ->
    ``y (N, M, T)`` in ``x``'s dtype and ``zf (N, M, S, 2)`` float64."""
    return _sos_bank_op(x, sos, zi)


@_operator("phase_insensitivity_(Tensor(a!) x, int[] bands) -> ()")
def _phase_op(x: Tensor, bands: list[int]) -> None:
    _KERNELS.on(x).phase_insensitivity_(x, list(bands))


@_fake("phase_insensitivity_")
def _(x: Tensor, bands: list[int]) -> None:
    return None


def phase_insensitivity_(x: Tensor, bands: list[int]) -> None:
    """Operator ``lhotse_amt::phase_insensitivity_``: the bands ``bands`` (ascending) of
    the C-contiguous tensor ``x (..., M, T)`` (CPU or CUDA) replaced in place by their
    rms-matched Hilbert envelopes."""
    _phase_op(x, list(bands))

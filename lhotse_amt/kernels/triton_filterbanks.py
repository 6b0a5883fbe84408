"""CUDA implementations of the no-grad filterbank operators of
:mod:`lhotse_amt.ops.filterbanks`, with the arguments, results, state layouts and
semantics of their CPU kernels.

* :func:`modulation_bank` (``lhotse_amt::modulation_bank``, the ``efilt`` modulation
  filterbank of :func:`lhotse_amt.functional.modulation.modulation_filterbank`): the
  pre-filter and the low-pass as the second-order-section kernel of
  :mod:`lhotse_amt.kernels.triton_sos` and every band's complex one-pole resonator
  (``Re`` or ``|.|``) as the kernel of :mod:`lhotse_amt.kernels.triton_resonator`, one row
  per band reading its channel's pre-filtered row. As on the CPU
  (:mod:`lhotse_amt.kernels.modbank`) the recursions run in float64, the resonators on the
  float64 pre-filtered signal, and the padded bands are computed too (their states are
  part of the stream's state).
* :func:`lfilter` (``lhotse_amt::lfilter``): direct-form transfer functions ``b(z) /
  a(z)`` of order ``K`` row by row (:func:`scipy.signal.lfilter` semantics, transposed
  direct form II), a Triton kernel of its own (:func:`_lfilter_kernel`): the recursion
  runs in ``x``'s dtype with the CPU kernel's operation order and without fused
  multiply-adds (``enable_fp_fusion=False``), so its values are those of the CPU kernel
  (:func:`lhotse_amt.kernels.tf.lfilter`; float32 transfer functions of poles near
  ``z = 1`` amplify any rounding difference).
* :func:`sos_bank` (``lhotse_amt::sos_bank``): ``M`` second-order-section filters sharing
  one input row, the kernel of :mod:`~lhotse_amt.kernels.triton_sos` with one row per
  (input row, filter) (float64 recursions).
* :func:`phase_insensitivity_` (``lhotse_amt::phase_insensitivity_``): the rms-matched
  Hilbert envelopes of selected bands in place (King, Varnet & Lorenzi 2019), torch's FFT
  on the device over the blocks of rows of the CPU kernel
  (:func:`lhotse_amt.kernels.hilbert.phase_insensitivity_cpu_`); sums of squares in
  float64.

``TRITON_INTERPRET=1`` runs the Triton kernels on CPU tensors (tests);
:func:`phase_insensitivity_` runs on any device.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from . import triton_common as tc
from .hilbert import BLOCK_SAMPLES, hilbert_block_
from .triton_resonator import resonator_forward
from .triton_sos import sos_forward

if tc.HAVE_TRITON:
    import triton
    import triton.language as tl

__all__ = ["lfilter", "modulation_bank", "phase_insensitivity_", "sos_bank"]

#: the modulation bank's state keys
_BANK_KEYS = ("pre", "lp", "bp")

if tc.HAVE_TRITON:

    @triton.jit
    def _lfilter_kernel(x_ptr, b_ptr, a_ptr, z_ptr, y_ptr, R, T, K, BLOCK: tl.constexpr):
        # x, y (R, T); b, a (R, K + 1); z (R, K): zi on entry, zf on exit (K >= 1); all in
        # x's dtype. Per sample: y = z_0 + b_0 x; z_i = z_{i+1} + x b_{i+1} - y a_{i+1}
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1).to(tl.int64)
        cb = b_ptr + rr * (K + 1)
        ca = a_ptr + rr * (K + 1)
        zp = z_ptr + rr * K
        xp = x_ptr + rr * T
        yp = y_ptr + rr * T
        b0 = tl.load(cb)
        bK = tl.load(cb + K)
        aK = tl.load(ca + K)
        for _n in range(T):
            v = tl.load(xp)
            out = tl.load(zp, mask=rm, other=0.0) + b0 * v
            for i in range(K - 1):
                zn = tl.load(zp + i + 1, mask=rm, other=0.0)
                zn = zn + v * tl.load(cb + i + 1) - out * tl.load(ca + i + 1)
                tl.store(zp + i, zn, mask=rm)
            tl.store(zp + K - 1, v * bK - out * aK, mask=rm)
            tl.store(yp, out, mask=rm)
            xp += 1
            yp += 1


def lfilter(
    x: Tensor, b: Tensor, a: Tensor, zi: Tensor | None, block: int = tc.BLOCK_ROWS
) -> tuple[Tensor, Tensor]:
    """``x (N, T)``, ``b``/``a`` ``(N, K + 1)`` (``a[:, 0] == 1``), ``zi (N, K)``
    (``None``: rest) -> ``y (N, T)``, ``zf (N, K)``, everything in ``x``'s dtype (the
    recursion too, as :func:`lhotse_amt.kernels.tf.lfilter`); ``block``: rows per
    program."""
    tc.require()
    xc = tc.dense(x)
    dt, dev = xc.dtype, xc.device
    bc = b.detach().to(dtype=dt, device=dev).contiguous()
    ac = a.detach().to(dtype=dt, device=dev).contiguous()
    N, T = xc.shape
    K = bc.shape[1] - 1
    if zi is None:
        z = torch.zeros((N, K), dtype=dt, device=dev)
    else:
        z = zi.detach().to(dtype=dt, device=dev).reshape(N, K).clone()
    if K == 0:
        return xc * bc[:, :1], z
    y = torch.empty_like(xc)
    if N > 0 and T > 0:
        _lfilter_kernel[tc.grid(N, block)](
            xc, bc, ac, z, y, N, T, K, BLOCK=block, num_warps=1, enable_fp_fusion=False
        )
    return y, z


def _rows(n: int, device: torch.device) -> Tensor:
    return torch.arange(n, dtype=torch.int64, device=device)


def sos_bank(
    x: Tensor, sos: Tensor, zi: Tensor | None, block: int = tc.BLOCK_ROWS
) -> tuple[Tensor, Tensor]:
    """A bank of ``M`` SOS filters ``sos (M, S, 6)`` sharing the input rows ``x (N, T)``,
    from ``zi (N, M, S, 2)`` (``None``: rest) -> ``y (N, M, T)`` in ``x``'s dtype and
    ``zf (N, M, S, 2)`` float64 (float64 recursions); ``block``: rows per program."""
    N, T = x.shape
    M, S = sos.shape[0], sos.shape[1]
    dev = x.device
    f64 = torch.float64
    if zi is None:
        z = torch.zeros((N * M, S, 2), dtype=f64, device=dev)
    else:
        z = zi.detach().to(dtype=f64, device=dev).reshape(N * M, S, 2)
    r = _rows(N * M, dev)
    sos = sos.detach().to(dtype=f64, device=dev)
    y, zf, _ = sos_forward(x, r // M, sos, r % M, z, keep=False, block=block, fusion=False)
    return y.view(N, M, T), zf.view(N, M, S, 2)


def _section_state(state: dict, key: str, rows: int, S: int, dev: torch.device) -> Tensor:
    # a cascade's state (..., C, S, 2) of the bank as (rows, S, 2) float64 (missing: rest)
    if key not in state:
        return torch.zeros((rows, S, 2), dtype=torch.float64, device=dev)
    return state[key].detach().to(dtype=torch.float64, device=dev).reshape(rows, S, 2)


def _complex_rows(c: Tensor, dev: torch.device) -> Tensor:
    # a (possibly real) coefficient tensor as rows of (real, imaginary) float64
    c = c.detach().to(dev)
    c = c if c.is_complex() else torch.complex(c.double(), torch.zeros_like(c, dtype=torch.float64))
    return torch.view_as_real(c.to(torch.complex128).reshape(-1)).contiguous()


def _cascade(u: Tensor, sos: Tensor, z: Tensor) -> tuple[Tensor, Tensor]:
    # the rows of u (R, T) float64 through the sections sos (S, 6) from z (R, S, 2)
    r = _rows(u.shape[0], u.device)
    sos = sos.detach().to(dtype=torch.float64, device=u.device)[None]
    y, zf, _ = sos_forward(u, r, sos, torch.zeros_like(r), z, keep=False, fusion=False)
    return y, zf


def modulation_bank(x: Tensor, filters: tuple, state: dict | None) -> tuple[Tensor, dict]:
    """``x (..., C, T)`` through the bank's ``filters = (lp_sos, prefilter_sos, pole, gain,
    use_abs, scale)`` (low-pass sections ``(SL, 6)``, pre-filter sections ``(SP, 6)`` or
    ``None``, band-pass ``pole``/``gain`` complex ``(C, M - 1)``, ``use_abs (C, M - 1)``,
    ``scale (C, M)``) from ``state`` (keys ``pre``, ``lp``, ``bp``; missing: rest).

    Band 0 is ``scale[:, 0]`` times the low-pass of the pre-filtered signal ``u``; band
    ``m >= 1`` is ``scale[:, m]`` times ``Re`` or ``|.|`` of ``gain u / (1 - pole z^-1)``.
    Returns ``(..., C, M, T)`` in ``x``'s dtype and the new state: ``pre``/``lp``
    ``(..., C, S, 2)`` float64, ``bp (..., C, M - 1, 1)`` complex128."""
    lp_sos, prefilter_sos, pole, gain, use_abs, scale = filters
    st = state or {}
    lead, (C, T) = x.shape[:-2], x.shape[-2:]
    dev = x.device
    M1 = pole.shape[-1]
    B = math.prod(lead)
    rows = B * C  # (batch, channel) rows
    u = x.detach().reshape(rows, T).to(torch.float64)
    new: dict[str, Tensor] = {}
    if prefilter_sos is not None:
        z = _section_state(st, "pre", rows, prefilter_sos.shape[0], dev)
        u, zp = _cascade(u, prefilter_sos, z)
        new["pre"] = zp.view(*lead, C, prefilter_sos.shape[0], 2)
    z = _section_state(st, "lp", rows, lp_sos.shape[0], dev)
    lp, zl = _cascade(u, lp_sos, z)
    new["lp"] = zl.view(*lead, C, lp_sos.shape[0], 2)
    # the resonators: row r is band r % M1 of the channel row r // M1 of u
    R = rows * M1
    if "bp" in st:
        zb = st["bp"].detach().to(dev).reshape(R).to(torch.complex128)
        zb = torch.view_as_real(zb).reshape(R, 1, 2).contiguous()
    else:
        zb = torch.zeros((R, 1, 2), dtype=torch.float64, device=dev)
    r = _rows(R, dev)
    mode = use_abs.detach().to(device=dev, dtype=torch.int8).reshape(-1)
    p, g = _complex_rows(pole, dev), _complex_rows(gain, dev)
    crow = r % (C * M1)
    bands, zbf, _ = resonator_forward(u, r // M1, p, g, mode, crow, zb, keep=False, fusion=False)
    new["bp"] = torch.view_as_complex(zbf.view(R, 2)).view(*lead, C, M1, 1)
    sc = scale.detach().to(dtype=torch.float64, device=dev).reshape(C, M1 + 1)
    y = torch.empty((B, C, M1 + 1, T), dtype=x.dtype, device=dev)
    y[:, :, 0].copy_(lp.view(B, C, T).mul_(sc[:, :1]))
    y[:, :, 1:].copy_(bands.view(B, C, M1, T).mul_(sc[:, 1:, None]))
    return y.view(*lead, C, M1 + 1, T), {k: new[k] for k in _BANK_KEYS if k in new}


def phase_insensitivity_(x: Tensor, bands: list[int]) -> None:
    """The bands ``bands`` (ascending) of the C-contiguous tensor ``x (..., M, T)``
    (float32/float64) replaced in place by their rms-matched Hilbert envelopes
    ``|x + i H{x}| rms(x) / rms(|x + i H{x}|)`` (zeros where the envelope is all zero).

    Runs of consecutive bands go together, about
    :data:`~lhotse_amt.kernels.hilbert.BLOCK_SAMPLES` samples per batched FFT (the CPU
    kernel's blocks); the sums of squares in float64, the envelope in ``x``'s dtype."""
    M, T = x.shape[-2:]
    xt = x.detach().view(-1, M, T)  # in place: a view of x (raises where none exists)
    n_rows = xt.shape[0]
    if xt.numel() == 0 or not bands:
        return
    starts = [m for i, m in enumerate(bands) if i == 0 or m != bands[i - 1] + 1]
    ends = [m + 1 for i, m in enumerate(bands) if i + 1 == len(bands) or bands[i + 1] != m + 1]
    width = max(e - s for s, e in zip(starts, ends))
    per = min(n_rows, max(1, BLOCK_SAMPLES // max(T * width, 1)))
    ctype = torch.complex64 if x.dtype == torch.float32 else torch.complex128
    spec_buf = torch.empty((per * width * (T // 2 + 1),), dtype=ctype, device=x.device)
    hil_buf = torch.empty((per * width * T,), dtype=x.dtype, device=x.device)
    for s, e in zip(starts, ends):
        k = e - s
        for r0 in range(0, n_rows, per):
            part = xt[r0 : r0 + per, s:e]  # (n, k, T) view
            n = part.shape[0]
            h = hil_buf[: n * k * T].view(n, k, T)
            hilbert_block_(part, h, spec_buf[: n * k * (T // 2 + 1)].view(n, k, T // 2 + 1))
            sx = part.double().square().sum(-1, keepdim=True)
            se = sx + h.double().square().sum(-1, keepdim=True)
            gain = torch.where(se > 0, (sx / torch.where(se > 0, se, 1.0)).sqrt(), 0.0)
            part.copy_(torch.hypot(part, h).mul_(gain.to(x.dtype)))

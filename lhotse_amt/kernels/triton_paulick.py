"""CUDA kernels of Paulick et al. (2024)'s no-grad operators (:mod:`lhotse_amt.ops.paulick`:
``lhotse_amt::paulick_drnl``, ``lhotse_amt::paulick_fir``, ``lhotse_amt::paulick_frontend``,
``lhotse_amt::paulick_pooled``); same arguments,
results and state layouts as the CPU kernels :func:`lhotse_amt.kernels.paulick.drnl`,
:func:`lhotse_amt.kernels.paulick.fir` and :func:`lhotse_amt.kernels.paulick_frontend.frontend`.

* :func:`drnl`: the linear path ``g x`` and the non-linear path's first sections as
  launches of the section kernel (:mod:`lhotse_amt.kernels.triton_sos`, float64
  recursions without fused multiply-adds, as the CPU kernel; rows ``(item, channel)``:
  every channel's row reads its item's input row),
  the broken stick ``sign(u) min(a |u|, b |u|^c)`` elementwise in float64 with the CPU
  kernel's arithmetic (``|u|^(1/4)`` as two square roots), the non-linear path's last
  sections and the sum in float64, cast to the output dtype once;
* :func:`fir`: the strided FIR of :mod:`lhotse_amt.kernels.triton_fir` (float64
  accumulation in tap order; the CPU kernel sums phase by phase: last-bit differences);
* :func:`frontend`: DRNL -> IHC -> adaptation loops (-> FIR decimator) in one pass
  (:mod:`lhotse_amt.kernels.triton_paulick_frontend`: one launch, only the last stage
  stored);
* :func:`pooled`: :func:`frontend` and the pooled modulation filterbank
  (:func:`lhotse_amt.kernels.triton_modulation_pooled.modulation_pooled`) chunk by chunk
  (chunks sized by the memory of the decimated output, a multiple of the decimation
  factor), the frames that straddle two chunks combined from their parts' means weighted
  by their lengths.

Importing this module never fails without Triton; ``TRITON_INTERPRET=1``
runs the kernels on CPU tensors (tests).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from .triton_fir import fir_forward
from .triton_paulick_frontend import frontend
from .triton_sos import KERNELS as _SOS

__all__ = ["drnl", "fir", "frontend", "pooled"]

Tensor = torch.Tensor
F64 = torch.float64
#: the section kernel's options: no checkpoints, no fused multiply-adds
_SOS_OPTS = dict(keep=False, fusion=False)
#: the DRNL's state keys, in the order of its paths
_DRNL_KEYS = ("lin", "nl1", "nl2")

#: :func:`lhotse_amt.kernels.triton_fir.fir_forward`: ``y[r, i] = sum_k w[k] buf[r, start
#: + i stride + k]`` of ``buf (N, L)``, taps ``w (K,)`` -> ``(N, n_out)`` in ``buf``'s
#: dtype, float64 accumulation (the CUDA kernel of ``lhotse_amt::paulick_fir``)
fir = fir_forward


def _items(x: Tensor) -> tuple[tuple[int, ...], Tensor]:
    """The leading shape of ``x (..., T)`` and its items as float64 rows ``(N, T)``."""
    lead = tuple(x.shape[:-1])
    return lead, x.detach().reshape(math.prod(lead), x.shape[-1]).to(F64).contiguous()


def _drnl_states(zs: list[Tensor], lead: tuple[int, ...], C: int) -> dict[str, Tensor]:
    """The DRNL's section states ``[lin, nl1, nl2]`` ``(N C, S, 2)`` -> the dict of
    ``(..., C, S, 2)``."""
    return {k: z.reshape(*lead, C, z.shape[-2], 2) for k, z in zip(_DRNL_KEYS, zs)}


def _out_dtype(x: Tensor) -> torch.dtype:
    """Dtype of an output that follows ``x`` (float32 or float64)."""
    return torch.float32 if x.dtype == torch.float32 else F64


def _section_state(z: Tensor | None, N: int, C: int, S: int, dev: torch.device) -> Tensor:
    """``(..., C, S, 2)`` section states (broadcast over the items as on the CPU; ``None``:
    rest) -> the kernels' rows ``(N C, S, 2)`` float64."""
    if z is None:
        return torch.zeros((N * C, S, 2), dtype=F64, device=dev)
    zz = z.to(device=dev, dtype=F64).expand(*z.shape[:-3], C, S, 2).reshape(-1, C, S, 2)
    return zz.expand(N, C, S, 2).reshape(N * C, S, 2)


class _Rows:
    """The rows ``r = n C + k`` of ``N`` items and ``C`` channels: ``own`` (every row
    its own), ``item`` (the input row of its item) and ``chan`` (its channel's
    coefficient row) as int64 row maps."""

    def __init__(self, N: int, C: int, dev: torch.device) -> None:
        self.own = torch.arange(N * C, device=dev)
        self.item = torch.div(self.own, C, rounding_mode="floor")
        self.chan = self.own - self.item * C


def _drnl_rows(
    x: Tensor, coefs: tuple, state: dict | None, rows: _Rows, C: int
) -> tuple[Tensor, list[Tensor]]:
    """The DRNL of ``x (N, T)`` float64 -> ``(N C, T)`` float64 and the new section states
    ``[lin, nl1, nl2]`` ``(N C, S, 2)``."""
    g, lin_sos, nl1_sos, nl2_sos, a, b, c = coefs
    (N, T), dev = x.shape, x.device
    st = state or {}
    sos = [s.to(device=dev, dtype=F64) for s in (lin_sos, nl1_sos, nl2_sos)]
    zi = [_section_state(st.get(k), N, C, s.shape[-2], dev) for k, s in zip(_DRNL_KEYS, sos)]
    gd, ad, bd = (t.to(device=dev, dtype=F64).reshape(C, 1) for t in (g, a, b))
    lin_in = (x[:, None, :] * gd).reshape(N * C, T)  # g x, as the CPU kernel's products
    # (no fused multiply-adds: the values of the CPU kernel's sections)
    y, z_lin, _ = _SOS.forward(lin_in, rows.own, sos[0], rows.chan, zi[0], **_SOS_OPTS)
    u, z1, _ = _SOS.forward(x, rows.item, sos[1], rows.chan, zi[1], **_SOS_OPTS)
    m = u.abs().view(N, C, T)
    hi = bd * (m.sqrt().sqrt() if float(c) == 0.25 else m.pow(float(c)))
    u = torch.copysign(torch.minimum(ad * m, hi), u.view(N, C, T)).view(N * C, T)
    u, z2, _ = _SOS.forward(u, rows.own, sos[2], rows.chan, zi[2], **_SOS_OPTS)
    return y.add_(u), [z_lin, z1, z2]


def drnl(
    x: Tensor, g: Tensor, lin_sos: Tensor, nl1_sos: Tensor, nl2_sos: Tensor, a: Tensor,
    b: Tensor, c: float, state: dict | None,
) -> tuple[Tensor, dict]:  # fmt: skip
    """CUDA version of :func:`lhotse_amt.kernels.paulick.drnl`: the DRNL of ``x (..., T)``
    -> ``(..., C, T)`` in ``x``'s dtype (float64 for dtypes other than float32) and the
    section states ``{"lin", "nl1", "nl2"}`` ``(..., C, S, 2)`` float64 (float64
    recursions; tensors stay on ``x``'s device)."""
    lead, xr = _items(x)
    N, C = xr.shape[0], g.shape[0]
    y, zs = _drnl_rows(xr, (g, lin_sos, nl1_sos, nl2_sos, a, b, c), state, _Rows(N, C, x.device), C)
    return y.to(_out_dtype(x)).reshape(*lead, C, xr.shape[1]), _drnl_states(zs, lead, C)


#: input samples per chunk of :func:`pooled` at most (rounded down to a multiple of the
#: decimation factor; 23.8 s at 44.1 kHz)
POOLED_CHUNK = 1 << 20
#: bytes of a chunk's decimated front-end output ``(N, C, chunk / R)`` (as float64) at
#: most: a large batch takes shorter chunks
POOLED_BLOCK_BYTES = 256 << 20


def pooled(
    x: Tensor, ear_weight: Tensor, front: tuple, dec_weight: Tensor, dec_factor: int,
    mod_filters: tuple, frames: tuple[Tensor, Tensor, Tensor], rms: bool,
    chunk: int | None = None,
) -> Tensor:  # fmt: skip
    """CUDA version of :func:`lhotse_amt.kernels.paulick_pooled.pooled` (same arguments and
    result): the ear filter (:func:`fir`, its history read from ``x``), :func:`frontend`
    with the decimator, then the pooled modulation filterbank,
    over chunks of ``chunk`` input samples (``None``: :data:`POOLED_CHUNK`, or fewer so
    that the ``(N, C, chunk / R)`` output as float64 stays within
    :data:`POOLED_BLOCK_BYTES`; rounded down to a multiple of ``R = dec_factor``, so every
    chunk starts at a decimated sample)
    carrying every state. A frame's value is the mean of its parts in the chunks it
    overlaps, weighted by their lengths (squares for rms): the one-pass value to float
    rounding."""
    from .triton_modulation_pooled import modulation_pooled

    dev = x.device
    N, T = x.shape
    drnl_coefs, ihc_consts, w, adapt_a, adapt_m, s, *consts = front
    C, R = drnl_coefs[0].shape[0], int(dec_factor)
    if chunk is None:
        chunk = min(POOLED_CHUNK, POOLED_BLOCK_BYTES * R // (8 * max(N * C, 1)))
    chunk = max(R, int(chunk) // R * R)
    st, sp, cnt = (t.detach().cpu().numpy().astype(np.int64) for t in frames)
    st, sp = st.reshape(N, -1), sp.reshape(N, -1)
    F = st.shape[1]
    valid = np.arange(F)[None, :] < cnt.reshape(N, 1)
    total = torch.zeros((N, C, mod_filters[2].shape[-1] + 1, F), dtype=F64, device=dev)
    drnl_state, dec, mst = None, None, None
    we = ear_weight.detach().reshape(-1).to(device=dev, dtype=x.dtype)
    K = we.shape[0]
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        # the ear filter's output for the chunk (zeros before the signal)
        a = max(0, t0 - (K - 1))
        buf = x[:, a:t1]
        if a > t0 - (K - 1):
            buf = torch.nn.functional.pad(buf, (a - (t0 - (K - 1)), 0))
        u = fir(buf, we, 0, 1, t1 - t0)
        y, drnl_state, w, s, dec = frontend(
            u, drnl_coefs, drnl_state, ihc_consts, w, adapt_a, adapt_m, s, *consts,
            dec_weight, R, dec,
        )  # fmt: skip
        lo, hi = np.maximum(st, t0), np.minimum(sp, t1)
        inside = valid & (hi > lo)  # the frames overlapping the chunk: a run per row
        first = np.where(inside.any(1), inside.argmax(1), 0)
        n = inside.sum(1)
        Fl = max(1, int(n.max(initial=0)))
        idx = np.minimum(first[:, None] + np.arange(Fl)[None, :], F - 1)
        ls = np.where(np.arange(Fl)[None, :] < n[:, None], np.take_along_axis(lo, idx, 1), t0)
        le = np.where(np.arange(Fl)[None, :] < n[:, None], np.take_along_axis(hi, idx, 1), t0 + 1)
        local = tuple(torch.from_numpy(a).to(dev) for a in (ls - t0, le - t0, n))
        means, mst = modulation_pooled(y, mod_filters, mst, local, R, rms)
        part = means.square() if rms else means
        # each row's run of frames added at its place in one scatter (the padding entries
        # past a row's run carry weight 0 and land on a frame of that row: exact zeros)
        weight = np.where(np.arange(Fl)[None, :] < n[:, None], le - ls, 0).astype(np.float64)
        part = part * torch.from_numpy(weight).to(dev)[:, None, None]
        where = torch.from_numpy(idx).to(dev)[:, None, None, :].expand(part.shape)
        total.scatter_add_(3, where, part)
    length = torch.from_numpy(np.where(valid, sp - st, 1).astype(np.float64)).to(dev)
    total = total / length[:, None, None]
    return total.sqrt() if rms else total

"""CPU kernels (numba) of the rms-matched Hilbert envelope operator
(:mod:`lhotse_amt.ops.envelope`): the elementwise work and the per-row sums around the two
FFTs, in one pass per row and direction.

Row ``(r, s)`` of band ``m = sel[s]``: ``e = sqrt(x^2 + h^2)`` (``h`` the Hilbert
transform of ``x``), ``out = k e`` with ``k = rms(x) / rms(e)`` (0 where ``e`` is all zero;
``mean(e^2) = mean(x^2) + mean(h^2)``); the other bands are copied. The sums run in
float64 whatever the tensor dtype.

Backward of a row, given ``g = dL/dout`` and ``A = sum(g e)``:
``dL/de = k g - A k e / (T rms(e)^2)``, ``dL/dx = A k x / (T rms(x)^2) + dL/de x / e`` plus
``-H{dL/de h / e}`` (the Hilbert transform is antisymmetric), with the ``/ e`` terms zero
where ``e = 0`` (as for ``abs``).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from .cpu import _threads
from .fastmath import denormals_off, restore_fp_mode

__all__ = [
    "envelope_forward",
    "envelope_backward_direct",
    "envelope_backward_finish",
    "contiguous_rows",
]

_OPTS = dict(nogil=True, cache=True, error_model="numpy", boundscheck=False, fastmath={"contract"})
#: samples per block of the transposing copy (a block of both layouts stays in cache)
_TB = 64
#: partial sums of the row reductions (the loops vectorise)
_LN = 16


@njit(**_OPTS)
def _transpose_block(src, dst, n0, n1):  # pragma: no cover - compiled
    # samples n0 .. n1 of dst (N, T) from src (T, N) (its own function: the loops
    # compile as simple strided copies)
    for r in range(dst.shape[0]):
        for n in range(n0, n1):
            dst[r, n] = src[n, r]


@njit(parallel=True, **_OPTS)
def _rows_from_columns(src, dst):  # pragma: no cover - compiled
    # dst (B, N, T) = src (B, T, N) transposed, block by block of _TB samples: each block
    # reads _TB consecutive rows of src and writes _TB samples of every row of dst
    B, T, _ = src.shape
    nb = (T + _TB - 1) // _TB
    for j in prange(B * nb):
        b = j // nb
        n0 = (j % nb) * _TB
        _transpose_block(src[b], dst[b], n0, min(n0 + _TB, T))


@njit(inline="always", **_OPTS)
def _sq(x, h, n):  # pragma: no cover - compiled
    a = np.float64(x[n])
    b = np.float64(h[n])
    return a * a, b * b


@njit(**_OPTS)
def _row_power(x, h):  # pragma: no cover - compiled
    # sum(x^2) and sum(h^2) over rows (T,), in _LN partial sums (sample n into sum n % _LN:
    # the loop over the partial sums vectorises)
    T = x.shape[0]
    px = np.zeros(_LN)
    ph = np.zeros(_LN)
    full = T - T % _LN
    for n0 in range(0, full, _LN):
        for k in range(_LN):
            a2, b2 = _sq(x, h, n0 + k)
            px[k] += a2
            ph[k] += b2
    for n in range(full, T):
        a2, b2 = _sq(x, h, n)
        px[n - full] += a2
        ph[n - full] += b2
    return px.sum(), ph.sum()


@njit(inline="always", **_OPTS)
def _ge(g, x, h, n):  # pragma: no cover - compiled
    a2, b2 = _sq(x, h, n)
    return np.float64(g[n]) * math.sqrt(a2 + b2)


@njit(**_OPTS)
def _row_dot(g, x, h):  # pragma: no cover - compiled
    # sum(g e), e = sqrt(x^2 + h^2), over rows (T,), in _LN partial sums (as _row_power)
    T = x.shape[0]
    p = np.zeros(_LN)
    full = T - T % _LN
    for n0 in range(0, full, _LN):
        for k in range(_LN):
            p[k] += _ge(g, x, h, n0 + k)
    for n in range(full, T):
        p[n - full] += _ge(g, x, h, n)
    return p.sum()


@njit(**_OPTS)
def _row_out(x, h, k, out):  # pragma: no cover - compiled
    for n in range(x.shape[0]):
        a = np.float64(x[n])
        b = np.float64(h[n])
        out[n] = k * math.sqrt(a * a + b * b)


@njit(**_OPTS)
def _row_bwd(g, x, h, k, c1, c2, gx, gh):  # pragma: no cover - compiled
    for n in range(x.shape[0]):
        a = np.float64(x[n])
        b = np.float64(h[n])
        e = math.sqrt(a * a + b * b)
        ge = k * np.float64(g[n]) - c1 * e
        inv = 1.0 / e if e > 0.0 else 0.0
        gx[n] = c2 * a + ge * a * inv
        gh[n] = ge * b * inv


@njit(parallel=True, **_OPTS)
def _copy_other_bands(src, slot, dst):  # pragma: no cover - compiled
    # dst[r, m] = src[r, m] for the bands m not selected (slot[m] < 0): they pass through
    # the operator unchanged (the forward's output, the backward's gradient)
    R, M, _ = src.shape
    for r in prange(R):
        for m in range(M):
            if slot[m] < 0:
                dst[r, m, :] = src[r, m, :]


@njit(parallel=True, **_OPTS)
def _fwd(x, h, sel, out, stats):  # pragma: no cover - compiled
    # the selected bands m = sel[s] (the others: _copy_other_bands)
    R, S, T = h.shape
    for r in prange(R):
        fp = denormals_off()
        for s in range(S):
            m = sel[s]
            sx, sh = _row_power(x[r, m], h[r, s])
            se = sx + sh
            k = math.sqrt(sx / se) if se > 0.0 else 0.0
            stats[r, s, 0] = sx / T
            stats[r, s, 1] = se / T
            _row_out(x[r, m], h[r, s], k, out[r, m])
        restore_fp_mode(fp)


@njit(parallel=True, **_OPTS)
def _bwd_direct(g, x, h, sel, stats, gx, gh):  # pragma: no cover - compiled
    # gx: the gradient of the selected bands m = sel[s] but the Hilbert term (the others:
    # _copy_other_bands); gh = dL/de h / e
    R, S, T = h.shape
    for r in prange(R):
        fp = denormals_off()
        for s in range(S):
            m = sel[s]
            mx = stats[r, s, 0]
            me = stats[r, s, 1]
            if not me > 0.0:
                gx[r, m, :] = 0.0
                gh[r, s, :] = 0.0
                continue
            k = math.sqrt(mx / me)
            acc = _row_dot(g[r, m], x[r, m], h[r, s])
            c1 = acc * k / (T * me)
            c2 = acc * k / (T * mx) if mx > 0.0 else 0.0
            _row_bwd(g[r, m], x[r, m], h[r, s], k, c1, c2, gx[r, m], gh[r, s])
        restore_fp_mode(fp)


@njit(parallel=True, **_OPTS)
def _bwd_finish(gx, hgh, sel):  # pragma: no cover - compiled
    # gx[:, sel[s]] -= H{gh}[:, s]
    R, S, T = hgh.shape
    for r in prange(R):
        for s in range(S):
            m = sel[s]
            for n in range(T):
                gx[r, m, n] -= hgh[r, s, n]


def _sel(sel: list[int]) -> np.ndarray:
    return np.asarray(sel, dtype=np.int64)


def _slots(sel: list[int], M: int) -> np.ndarray:
    """``slot[m]``: the row ``s`` of band ``m`` in ``h`` (``sel[s] == m``), -1 for the bands
    that are not selected; made once per call instead of searched per row."""
    slot = np.full(M, -1, dtype=np.int64)
    slot[_sel(sel)] = np.arange(len(sel), dtype=np.int64)
    return slot


def contiguous_rows(g: torch.Tensor) -> torch.Tensor:
    """``g (..., F, M, T)`` (any strides) as C-contiguous rows ``(R, M, T)``: a view where
    it has them, else a copy. A time-major ``g`` (memory order ``(..., T, F, M)``: the
    gradient of a model output permuted to ``(B, T, F, M)``, as King2019 returns it) is
    transposed block by block instead of element by element along the rows."""
    M, T = g.shape[-2], g.shape[-1]
    if g.is_contiguous():
        return g.reshape(-1, M, T)
    gt = g.movedim(-1, -3) if g.dim() >= 3 else g
    if g.dim() < 3 or not gt.is_contiguous() or g.numel() == 0:
        return g.reshape(-1, M, T).contiguous()
    _threads()
    N = g.shape[-3] * M
    B = g.numel() // (N * T)
    out = _alloc.empty_tensor((B * g.shape[-3], M, T), g.dtype)
    _rows_from_columns(gt.reshape(B, T, N).numpy(), out.view(B, N, T).numpy())
    return out


def envelope_forward(
    x: torch.Tensor, h: torch.Tensor, sel: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``x (R, M, T)``, ``h (R, S, T)`` the Hilbert transforms of the bands ``sel`` ->
    ``out (R, M, T)`` and the per-row ``(mean(x^2), mean(e^2))`` ``(R, S, 2)`` float64."""
    _threads()
    out = _alloc.empty_tensor(tuple(x.shape), x.dtype)
    stats = torch.empty((x.shape[0], len(sel), 2), dtype=torch.float64)
    _copy_other_bands(x.numpy(), _slots(sel, x.shape[1]), out.numpy())
    _fwd(x.numpy(), h.numpy(), _sel(sel), out.numpy(), stats.numpy())
    return out, stats


def envelope_backward_direct(
    g: torch.Tensor, x: torch.Tensor, h: torch.Tensor, stats: torch.Tensor, sel: list[int]
) -> tuple[torch.Tensor, torch.Tensor]:
    """``gx (R, M, T)`` without the Hilbert term and ``gh (R, S, T)`` (its argument);
    ``g`` may have any strides (:func:`contiguous_rows`)."""
    g = contiguous_rows(g)
    _threads()
    gx = _alloc.empty_tensor(tuple(x.shape), x.dtype)
    gh = torch.empty_like(h)
    _copy_other_bands(g.numpy(), _slots(sel, x.shape[1]), gx.numpy())
    _bwd_direct(g.numpy(), x.numpy(), h.numpy(), _sel(sel), stats.numpy(), gx.numpy(), gh.numpy())
    return gx, gh


def envelope_backward_finish(gx: torch.Tensor, hgh: torch.Tensor, sel: list[int]) -> None:
    """``gx[:, sel] -= hgh`` in place."""
    _threads()
    _bwd_finish(gx.numpy(), hgh.numpy(), _sel(sel))

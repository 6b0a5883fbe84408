"""Compiled kernels of the Paulick et al. (2024) front end: DRNL filterbank, physiological
inner hair cell (IHC), a fused DRNL -> IHC -> adaptation-loop (-> FIR decimator) pass, the
FIR correlation of the ear filters and decimator, and the pooling of the held decimated
signal into frames.

Numba (CPU): ``@njit(cache=True)``, one batch row per ``prange`` iteration, time in the
outer loop and the auditory channels in the inner loop (the channels are independent
recursions, so the inner loop keeps many of them in flight at once). The DRNL and fused
kernels always compute in float64 (outputs are written in the input dtype, states are
float64): float32 rounding noise in the low-frequency DRNL sections would otherwise make
the output depend on the last bits of the input (~1e-3 relative after the adaptation
loops). The IHC kernel runs in its input's dtype (float32 or float64). Each evaluates
the recursion of its plain-torch reference:

* :func:`drnl` - :func:`lhotse_amt.functional.drnl.drnl`;
* :func:`ihc` - :func:`lhotse_amt.functional.ihc_paulick.ihc_paulick_reference` (the MET
  slopes enter as reciprocals, ``z * (1 / s)``: 1-ulp differences in the exponents);
* :func:`lhotse_amt.kernels.paulick_frontend.frontend` - the three stages in series (DRNL,
  IHC, adaptation loops of :mod:`lhotse_amt.functional.adaptation`), optionally followed by
  the FIR decimator of :class:`lhotse_amt.models.paulick2024.FIRDecimator` evaluated only at
  the kept samples, without storing the intermediate signals (its own module);
* :func:`fir` - direct-form FIR correlation, float64 accumulation in tap order (bit-exact
  under chunking), blocked so that the inner loop runs over outputs;
* :func:`pool_held` - frame means / rms of a signal held over ``R`` samples, ``O(D M)``.

Triton (CUDA): :func:`ihc_triton`, one program per block of rows, sequential in time
(:mod:`lhotse_amt.kernels.triton_stagewise`). Importing this module never fails without
Triton or a GPU, nor imports Triton (``HAS_TRITON`` / :func:`triton_available` import it
when asked); ``TRITON_INTERPRET=1`` runs the kernel on the CPU (tests).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit, prange

from .. import _alloc
from . import triton_interpreted, triton_module
from .cpu import _threads, overshoot_limit32_
from .fastmath import (
    NO_CFUNC,
    denormals_off,
    f64_from_bits,
    restore_fp_mode,
)
from .jobs import run_jobs

__all__ = [
    "drnl",
    "ihc",
    "fir",
    "pool_held",
    "ihc_triton",
    "triton_available",
]


_NOPY = dict(nogil=True, cache=True, fastmath=False, error_model="numpy", **NO_CFUNC)
# the fused front end may contract a * b + c into fused multiply-adds (one rounding instead
# of two: results change in the last bit, well inside the tests' tolerances)
_NOPY_FMA = dict(_NOPY, fastmath={"contract"})


def _np(t: torch.Tensor, dtype: np.dtype | None = None) -> np.ndarray:
    a = np.ascontiguousarray(t.detach().cpu().numpy())
    return a if dtype is None else np.ascontiguousarray(a.astype(dtype, copy=False))


def _out_dtype(x: torch.Tensor) -> np.dtype:
    """numpy dtype of a kernel output that follows ``x`` (float32 or float64)."""
    return np.dtype(np.float32) if x.dtype == torch.float32 else np.dtype(np.float64)


def _aligned_empty(shape: tuple[int, ...], dt: np.dtype) -> np.ndarray:
    """Uninitialised C-contiguous array whose data start on a 64-byte boundary."""
    n = int(np.prod(shape))
    buf = np.empty(n + 64 // np.dtype(dt).itemsize, dt)
    off = (-buf.ctypes.data % 64) // buf.itemsize
    return buf[off : off + n].reshape(shape)


def _pad_channels(a: np.ndarray, cp: int) -> np.ndarray:
    """Fresh 64-byte-aligned copy of ``a (..., C)`` with the channel (last) axis padded to
    ``cp`` by repeating the last channel (harmless extra lanes whose outputs are dropped)."""
    out = _aligned_empty((*a.shape[:-1], cp), a.dtype)
    c = a.shape[-1]
    out[..., :c] = a
    out[..., c:] = a[..., c - 1 : c]
    return out


def _sos_cm(sos: torch.Tensor, dt: np.dtype) -> np.ndarray:
    """``(C, S, 6)`` sections (``a0 = 1``) -> channel-minor ``(5, S, C)``: b0, b1, b2, a1, a2."""
    a = _np(sos, dt)[..., [0, 1, 2, 4, 5]]
    return np.ascontiguousarray(a.transpose(2, 1, 0))


def _state_cm(z: torch.Tensor | None, N: int, C: int, S: int, dt: np.dtype) -> np.ndarray:
    """``(..., C, S, 2)`` states (scipy convention) -> ``(N, 2, S, C)`` working copy."""
    if z is None:
        return np.zeros((N, 2, S, C), dt)
    zz = _np(z.expand(*z.shape[:-3], C, S, 2).reshape(-1, C, S, 2), dt)
    if zz.shape[0] != N:
        zz = np.broadcast_to(zz, (N, C, S, 2))
    # always a fresh array: the kernels update it in place (never the caller's state)
    return np.array(zz.transpose(0, 3, 2, 1), order="C", copy=True)


def _state_back(z: np.ndarray, lead: tuple[int, ...]) -> torch.Tensor:
    N, _, S, C = z.shape
    return torch.from_numpy(np.ascontiguousarray(z.transpose(0, 3, 2, 1))).reshape(*lead, C, S, 2)


# --------------------------------------------------------------------------------------
# per-sample building blocks (inlined into the kernels)
# --------------------------------------------------------------------------------------


@njit(inline="always", **_NOPY)
def _sections(v, cf, z):  # pragma: no cover - compiled
    # transposed direct form II biquads in series on every channel k of v at once;
    # coefficients cf (5, S, C): b0, b1, b2, a1, a2; states z (2, S, C). Multi-dimensional
    # indexing, no row views: views inside the sample loop cost reference-count updates
    # that numba cannot prune across the kernels' branches
    S = cf.shape[1]
    C = v.shape[0]
    for s in range(S):
        for k in range(C):
            w = v[k]
            o = cf[0, s, k] * w + z[0, s, k]
            z[0, s, k] = cf[1, s, k] * w - cf[3, s, k] * o + z[1, s, k]
            z[1, s, k] = cf[2, s, k] * w - cf[4, s, k] * o
            v[k] = o


@njit(inline="always", **_NOPY)
def _stick(u, a, b, c, quarter):  # pragma: no cover - compiled
    # sign(u) min(a |u|, b |u|^c); c = 1/4 as two square roots (vectorisable)
    C = u.shape[0]
    if quarter:
        for k in range(C):
            w = u[k]
            m = abs(w)
            lo = a[k] * m
            hi = b[k] * math.sqrt(math.sqrt(m))
            u[k] = math.copysign(lo if lo < hi else hi, w)
    else:
        for k in range(C):
            w = u[k]
            m = abs(w)
            lo = a[k] * m
            hi = b[k] * m**c
            u[k] = math.copysign(lo if lo < hi else hi, w)


@njit(inline="always", **_NOPY)
def _drnl_step(xv, g, L, N1, N2, a, b, c, quarter, ZL, Z1, Z2, v, u):  # pragma: no cover
    C = v.shape[0]
    for k in range(C):
        v[k] = g[k] * xv
        u[k] = xv
    _sections(v, L, ZL)
    _sections(u, N1, Z1)
    _stick(u, a, b, c, quarter)
    _sections(u, N2, Z2)
    for k in range(C):
        v[k] = v[k] + u[k]


# exp(x) without a libm call, so that the channel loops vectorise: x = k ln2 + r with
# |r| <= ln2 / 2, exp(r) by its degree-13 Taylor polynomial (truncation < 5e-18 relative,
# evaluated by Estrin's scheme), 2^k assembled from its IEEE-754 bits. Arguments are
# clamped to [-708, 709] (exp(-708) = 3e-308 stands for anything smaller). Agrees with
# math.exp to 2 ulp (tested).
_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
(_F0, _F1, _F2, _F3, _F4, _F5, _F6, _F7, _F8, _F9, _F10, _F11, _F12, _F13) = (
    1.0 / math.factorial(i) for i in range(14)
)


@njit(inline="always", **_NOPY)
def _exp(x):  # pragma: no cover - compiled
    x = min(max(x, -708.0), 709.0)
    kf = np.floor(x * _LOG2E + 0.5)
    r = (x - kf * _LN2_HI) - kf * _LN2_LO
    # Estrin's scheme: a dependency chain of depth 5 instead of Horner's 13, so that the
    # many channels of a vectorised loop overlap
    r2 = r * r
    r4 = r2 * r2
    r8 = r4 * r4
    q0 = (_F0 + _F1 * r) + r2 * (_F2 + _F3 * r)
    q1 = (_F4 + _F5 * r) + r2 * (_F6 + _F7 * r)
    q2 = ((_F8 + _F9 * r) + r2 * (_F10 + _F11 * r)) + r4 * (_F12 + _F13 * r)
    p = (q0 + r4 * q1) + r8 * q2
    return p * f64_from_bits((np.int64(kf) + 1023) << 52)


@njit(**_NOPY)
def _exp_array(x, y):  # pragma: no cover - compiled (tests)
    for i in range(x.shape[0]):
        y[i] = _exp(x[i])


def fast_exp(x: np.ndarray) -> np.ndarray:
    """The kernels' ``exp`` on a float64 array (for tests)."""
    x = np.ascontiguousarray(x, np.float64)
    y = np.empty_like(x)
    _exp_array(x, y)
    return y


@njit(inline="always", **_NOPY)
def _ihc_step(v, p, w):  # pragma: no cover - compiled
    # p: scale, Gmax, x0, 1/s0, 1/s1, zmax, k=dt/Cm, Gkf, Gks, dEP, dKf, dKs (reciprocal
    # slopes: multiplications instead of two divisions per sample and channel)
    scale, gmax, x0, r0, r1, zmax = p[0], p[1], p[2], p[3], p[4], p[5]
    kk, gkf, gks, dep, dkf, dks = p[6], p[7], p[8], p[9], p[10], p[11]
    C = v.shape[0]
    for k in range(C):
        z = x0 - scale * v[k]
        z = min(z, zmax)
        G = gmax / (1.0 + _exp(z * r1) * (1.0 + _exp(z * r0)))
        W = w[k]
        W = W + kk * (-G * (W + dep) - gkf * (W + dkf) - gks * (W + dks))
        w[k] = W
        v[k] = W


@njit(inline="always", **_NOPY)
def _adapt_step(v, a, m, r, s, minlvl, use_limit, c0, sc, fast, m32, t32):  # pragma: no cover
    # loop-major order (every channel through loop j, then j + 1): the same arithmetic per
    # channel as the sample-major reference, vectorisable over the channels; r = -2 / m.
    # The overshoot limiter (an exp and a division per channel) only changes values above
    # 1: its pass runs only for the loops where some channel exceeds 1 at this sample.
    # fast (float32 output): the limiter's correction in float32 (states stay float64),
    # cpu.overshoot_limit32_ as in :mod:`lhotse_amt.kernels.casp`
    J = a.shape[0]
    C = v.shape[0]
    for k in range(C):
        v[k] = max(v[k], minlvl)
    for j in range(J):
        n_over = 0
        for k in range(C):
            x = v[k] / s[j, k]
            v[k] = x
            if x > 1.0:
                n_over += 1
        if use_limit and n_over > 0:
            if fast:
                overshoot_limit32_(v, j, r, m32, t32)
            else:
                for k in range(C):
                    x = v[k]
                    lim = 2.0 * m[j, k] / (1.0 + _exp((x - 1.0) * r[j, k])) - (m[j, k] - 1.0)
                    v[k] = lim if x > 1.0 else x
        for k in range(C):
            s[j, k] = a[j, k] * s[j, k] + (1.0 - a[j, k]) * v[k]
    for k in range(C):
        v[k] = (v[k] - c0) * sc


# --------------------------------------------------------------------------------------
# kernels
# --------------------------------------------------------------------------------------


@njit(parallel=True, **_NOPY)
def _drnl_kernel(x, g, lin, nl1, nl2, a, b, c, zl, z1, z2, y):  # pragma: no cover
    N, T = x.shape
    C = g.shape[0]
    quarter = c == 0.25
    for r in prange(N):
        fp = denormals_off()
        v = np.empty(C, x.dtype)
        u = np.empty(C, x.dtype)
        ZL = zl[r]
        Z1 = z1[r]
        Z2 = z2[r]
        for n in range(T):
            _drnl_step(x[r, n], g, lin, nl1, nl2, a, b, c, quarter, ZL, Z1, Z2, v, u)
            for k in range(C):
                y[r, k, n] = v[k]
        restore_fp_mode(fp)


@njit(parallel=True, **_NOPY)
def _ihc_kernel(x, p, w, y):  # pragma: no cover - compiled
    N, C, T = x.shape
    for r in prange(N):
        fp = denormals_off()
        v = np.empty(C, x.dtype)
        wr = w[r].copy()
        for n in range(T):
            for k in range(C):
                v[k] = x[r, k, n]
            _ihc_step(v, p, wr)
            for k in range(C):
                y[r, k, n] = v[k]
        for k in range(C):  # (an element loop: array assignment compiles its error path)
            w[r, k] = wr[k]
        restore_fp_mode(fp)


@njit(inline="always", **_NOPY)
def tap_sums(a, src, n, w):  # pragma: no cover - compiled
    # a[i] += sum_q w[q] src[i + q] for i < n, float64: four taps per sweep over the outputs,
    # added in tap order (the same sum as one by one), then the remaining taps; the
    # summation order of every FIR output of this package's CPU kernels
    K = w.shape[0]
    q4 = K - K % 4
    for q in range(0, q4, 4):
        w0, w1, w2, w3 = w[q], w[q + 1], w[q + 2], w[q + 3]
        sq = src[q : q + n + 3]
        for ii in range(n):
            a[ii] = (((a[ii] + w0 * sq[ii]) + w1 * sq[ii + 1]) + w2 * sq[ii + 2]) + w3 * sq[ii + 3]
    for q in range(q4, K):
        wq = w[q]
        sq = src[q : q + n]
        for ii in range(n):
            a[ii] += wq * sq[ii]


@njit(**_NOPY)
def _fir_kernel(r0, r1, buf, w, start, stride, y):  # pragma: no cover - compiled
    # rows r0 .. r1: y[r, i] = sum_k w[k] buf[r, start + i stride + k] in polyphase form:
    # for each phase p the contiguous sub-signal buf[start + p :: stride] meets the taps
    # w[p :: stride].
    # float64 accumulation in a fixed order (phase by phase, taps in order) for every
    # output, whatever the chunking. Blocks of BL outputs stay in L1 while the taps sweep
    # over them (the inner loop runs over outputs: long, vectorised)
    N, M = y.shape
    BL = 512
    for r in range(r0, r1):
        fp = denormals_off()
        out = np.zeros(M)
        acc = np.zeros(BL)
        br = buf[r]
        for p in range(stride):
            sub = br[start + p :: stride].copy()
            wp = w[p::stride].copy()
            for i0 in range(0, M, BL):
                nb = min(BL, M - i0)
                a = acc[:nb]
                a[:] = 0.0
                tap_sums(a, sub[i0:], nb, wp)
                o = out[i0 : i0 + nb]
                for ii in range(nb):
                    o[ii] += a[ii]
        for i in range(M):
            y[r, i] = out[i]
        restore_fp_mode(fp)


@njit(**_NOPY)
def _pool_kernel(v, cols, s, e, R, rms, out):  # pragma: no cover - compiled
    # frame f of column i: sum over held samples q of |[R q, R q + R) & [s_f, e_f)| v[q]
    # (or v[q]^2), divided by e_f - s_f: the partial first and last held samples plus R
    # times the sum of those in between; each frame summed on its own, in sample order
    M = v.shape[1]
    nf = s.shape[0]
    for i in range(cols.shape[0]):
        row = v[cols[i]]
        for f in range(nf):
            sf = s[f]
            ef = e[f]
            qa = sf // R
            qb = min((ef - 1) // R, M - 1)
            va = np.float64(row[qa])
            vb = np.float64(row[qb])
            if rms:
                va = va * va
                vb = vb * vb
            if qb == qa:
                acc = (min(qa * R + R, ef) - sf) * va
            else:
                mid = 0.0
                for q in range(qa + 1, qb):
                    t = np.float64(row[q])
                    mid += t * t if rms else t
                acc = (qa * R + R - sf) * va + R * mid + (min(qb * R + R, ef) - qb * R) * vb
            p = acc / (ef - sf)
            out[i, f] = math.sqrt(p) if rms else p


# --------------------------------------------------------------------------------------
# torch wrappers
# --------------------------------------------------------------------------------------


def _drnl_args(x, g, lin_sos, nl1_sos, nl2_sos, a, b, state):
    lead = tuple(x.shape[:-1])
    T = x.shape[-1]
    # the recursions always run in float64 (float32 rounding noise of the low-frequency
    # sections would make the output depend on the last bits of the input); outputs are
    # cast back to the input dtype, states stay float64
    xn = _np(x.reshape(math.prod(lead), T), np.float64)
    dt = xn.dtype
    N = xn.shape[0]
    C = g.shape[0]
    st = state or {}
    args = (
        _np(g, dt),
        _sos_cm(lin_sos, dt),
        _sos_cm(nl1_sos, dt),
        _sos_cm(nl2_sos, dt),
        _np(a, dt),
        _np(b, dt),
    )
    zs = (
        _state_cm(st.get("lin"), N, C, lin_sos.shape[-2], dt),
        _state_cm(st.get("nl1"), N, C, nl1_sos.shape[-2], dt),
        _state_cm(st.get("nl2"), N, C, nl2_sos.shape[-2], dt),
    )
    return lead, xn, args, zs


def drnl(
    x: torch.Tensor,
    g: torch.Tensor,
    lin_sos: torch.Tensor,
    nl1_sos: torch.Tensor,
    nl2_sos: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    c: float,
    state: dict | None,
) -> tuple[torch.Tensor, dict]:
    """DRNL of ``x (..., T)`` -> ``(..., C, T)`` and the state dict (see
    :func:`lhotse_amt.functional.drnl.drnl` for arguments and state layout)."""
    _threads()
    lead, xn, args, zs = _drnl_args(x, g, lin_sos, nl1_sos, nl2_sos, a, b, state)
    N, T = xn.shape
    C = args[0].shape[0]
    # the kernel writes its float64 results straight into an array of the input dtype
    y = _alloc.empty((N, C, T), _out_dtype(x))
    if T > 0:
        _drnl_kernel(xn, *args, xn.dtype.type(c), *zs, y)
    new = {k: _state_back(z, lead).to(x.device) for k, z in zip(("lin", "nl1", "nl2"), zs)}
    return torch.from_numpy(y).reshape(*lead, C, T).to(device=x.device), new


def fir(buf: torch.Tensor, w: torch.Tensor, start: int, stride: int, n_out: int) -> torch.Tensor:
    """Strided FIR correlation ``y[r, i] = sum_k w[k] buf[r, start + i stride + k]`` of
    ``buf (N, L)`` with taps ``w (K,)``; float64 accumulation, output in ``buf``'s dtype.
    Every output is computed independently with a fixed summation order, so the result
    does not depend on how a signal is cut into chunks."""
    b = _np(buf)
    y = _alloc.empty((b.shape[0], n_out), b.dtype)
    if n_out > 0:
        run_jobs(_fir_kernel, b.shape[0], (b, _np(w, np.float64), int(start), int(stride), y))
    return torch.from_numpy(y).to(buf.device)


def pool_held(
    y: torch.Tensor, cols: np.ndarray | None, s: np.ndarray, e: np.ndarray, R: int, rms: bool
) -> torch.Tensor:
    """Frame means (or rms) of a decimated signal held over ``R`` input samples each.

    ``y (D, M)``: decimated sample ``q`` stands for input samples ``[R q, R q + R)``;
    ``s, e (F,)``: frame ``f`` covers input samples ``[s_f, e_f)`` (``s_f < e_f <= R M``);
    ``cols``: the rows to pool (``None``: all). Returns ``(len(cols), F)`` in ``y``'s dtype,
    float64 accumulation; a frame's value depends only on the samples it covers (so chunked
    and one-shot pooling agree bit for bit)."""
    v = _np(y)
    c = np.arange(v.shape[0]) if cols is None else np.asarray(cols, np.int64)
    out = np.empty((c.shape[0], len(s)), np.float64)
    if len(s) > 0 and c.shape[0] > 0:
        _pool_kernel(v, c, np.asarray(s, np.int64), np.asarray(e, np.int64), int(R), rms, out)
    return torch.from_numpy(out).to(device=y.device, dtype=y.dtype)


def _ihc_pack(p: dict[str, float], dt: np.dtype) -> np.ndarray:
    keys = ("scale", "gmax", "x0", "s0", "s1", "zmax", "k", "gkf", "gks", "dep", "dkf", "dks")
    v = [float(p[k]) for k in keys]
    v[3], v[4] = 1.0 / v[3], 1.0 / v[4]
    return np.array(v, dtype=dt)


def ihc(
    x: torch.Tensor, consts: dict[str, float], state: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """IHC of ``x (..., C, T)`` -> ``(..., C, T)``; ``consts`` from
    :func:`lhotse_amt.functional.ihc_paulick.ihc_step_constants`; ``state (..., C)``."""
    _threads()
    lead = tuple(x.shape[:-1])
    C, T = x.shape[-2], x.shape[-1]
    xn = _np(x.reshape(math.prod(lead[:-1]), C, T))
    dt = xn.dtype
    w = _np(state.expand(*lead).reshape(-1, C), dt).copy()
    y = _alloc.empty_like(xn)
    if T > 0:
        _ihc_kernel(xn, _ihc_pack(consts, dt), w, y)
    return (
        torch.from_numpy(y).reshape(*lead, T).to(x.device),
        torch.from_numpy(w).reshape(*lead).to(x.device),
    )


# --------------------------------------------------------------------------------------
# Triton (CUDA; CPU interpreter with TRITON_INTERPRET=1)
# --------------------------------------------------------------------------------------


def triton_available() -> bool:
    """True when :func:`ihc_triton` can run (CUDA device or ``TRITON_INTERPRET=1``, and
    Triton imports)."""
    return (torch.cuda.is_available() or triton_interpreted()) and triton_module() is not None


def __getattr__(name: str) -> bool:
    if name == "HAS_TRITON":  # whether Triton imports (it is imported at the first ask)
        return triton_module() is not None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def ihc_triton(
    x: torch.Tensor, consts: dict[str, float], state: torch.Tensor, block: int = 64
) -> tuple[torch.Tensor, torch.Tensor]:
    """Triton version of :func:`ihc` (same I/O; tensors stay on their device)."""
    if not triton_available():
        raise RuntimeError("Triton kernels need triton and a CUDA device (or TRITON_INTERPRET=1)")
    from .triton_stagewise import ihc_paulick

    return ihc_paulick(x, consts, state, block)

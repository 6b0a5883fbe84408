"""What the Triton kernels (CUDA) of the fused pooled inference chains share
(:mod:`lhotse_amt.kernels.triton_casp_pooled`, :mod:`~lhotse_amt.kernels.triton_king_pooled`,
:mod:`~lhotse_amt.kernels.triton_modulation_pooled`): the program prologue, the stages
two chains have in common (the rectified gammatone filterbank; the ``efilt`` modulation
filterbank's pre-filter, low-pass band and band-pass step), the frame pooling inside the
sample loop, and the host side (:func:`pooled`: outputs, coefficients on the device,
launch).

A program handles ``BLOCK`` auditory channels of one batch item (grid ``(B,
ceil(C / BLOCK))``: every row of a program has the item's length, so the loop over time
is uniform) and walks through the item's samples in blocks of ``CK``: each stage of the
chain runs over the block with its states in registers (the step functions of the
differentiable operators' kernels: :func:`~lhotse_amt.kernels.triton_sos.sos_planes`,
:func:`~lhotse_amt.kernels.triton_resonator.res_planes`,
:func:`~lhotse_amt.kernels.triton_adaptation.adapt_planes`), the signal between stages in
a float64 scratch ``(programs, planes, CK, BLOCK)`` whose size does not depend on the
signal's length. The last stage adds its output into per-frame sums in registers and
writes only those: no sample-rate tensor is made, and one launch covers the whole signal.

Block sums follow :func:`lhotse_amt.functional.framing.frame_mean`: block ``k`` of an item
holds samples ``[k hop, (k + 1) hop)`` cut at the item's end. The output tensor is also
the accumulator between sample blocks: a frame that straddles two of them is saved
after the first and loaded again before the second.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np
import torch

from . import triton_common as tc
from .triton_common import HAVE_TRITON

if HAVE_TRITON:
    import triton
    import triton.language as tl

    from .triton_resonator import real_input, res_planes
    from .triton_sos import sos_planes

__all__ = [
    "BLOCK_CHANNELS",
    "CHUNK",
    "channel_grid",
    "coefficients",
    "gammatone_rows",
    "Pooled",
    "pooled",
    "pooled_scratch",
]

#: channels per program
BLOCK_CHANNELS = 8
#: samples per block of the stage-by-stage pass (scratch planes of CK x BLOCK float64)
CHUNK = 128

if HAVE_TRITON:

    @triton.jit
    def channel_block(w_ptr, C, NPL, CK: tl.constexpr, BLOCK: tl.constexpr):
        """The program's item ``b`` (int64) and channels: mask ``rm``, channels clamped to
        the last one ``cc`` (coefficient rows for unmasked loads), rows ``r64 = b C + c``
        of the states (int64), the steps ``RV`` (sample) and ``PV`` (plane) of the
        scratch and the program's first scratch plane ``wp`` (``NPL`` planes)."""
        b = tl.program_id(0).to(tl.int64)
        lane = tl.arange(0, BLOCK)
        ch = tl.program_id(1) * BLOCK + lane
        rm = ch < C
        cc = tl.minimum(ch, C - 1).to(tl.int64)
        r64 = b * C + ch.to(tl.int64)
        RV = tl.zeros([BLOCK], tl.int64) + BLOCK
        prog = b * tl.num_programs(1) + tl.program_id(1)
        wp = w_ptr + prog * (NPL * CK * BLOCK) + lane
        return b, rm, cc, r64, RV, RV * CK, wp

    @triton.jit
    def item_length(ends_ptr, b, T):
        """Samples of item ``b`` that the chain runs over: ``min(T, ends[b])``, at least 0."""
        return tl.maximum(tl.minimum(tl.load(ends_ptr + b), T), 0)

    @triton.jit
    def pool_value(acc, v, SQUARE: tl.constexpr):
        """``acc + v`` (``acc + v^2`` for rms pooling)."""
        if SQUARE:
            v = v * v
        return acc + v

    @triton.jit
    def pool_sample(acc, v, t, Tb, hop, o, mask, SQUARE: tl.constexpr):
        """Sample ``t``'s value ``v`` added to the running block sums ``acc`` (rows ``o``
        of the output); where ``t`` closes its block of ``hop`` samples (or the item,
        ``Tb``) the sums are written and the next block starts from 0."""
        acc = pool_value(acc, v, SQUARE)
        if ((t + 1) % hop == 0) | (t == Tb - 1):
            tl.store(o + t // hop, acc, mask=mask)
            acc = tl.zeros_like(acc)
        return acc

    @triton.jit
    def sums_load(o, t0, hop, mask):
        """The running sums of the block that sample ``t0`` belongs to (rows ``o``)."""
        return tl.load(o + t0 // hop, mask=mask, other=0.0)

    @triton.jit
    def sums_save(o, acc, t1, Tb, hop, mask):
        """Keep the sums of a block that continues after sample ``t1`` (the next pass
        resumes from them)."""
        if (t1 < Tb) & (t1 % hop != 0):
            tl.store(o + t1 // hop, acc, mask=mask)

    @triton.jit
    def rectified_gammatone(
        xp, n, gam_ptr, cc, K, z_ptr, r64, rm, wp, RV, PV, knee, coef, expo,
        COMPRESS: tl.constexpr,
    ):  # fmt: skip
        """``n`` samples of the item (``xp``: the first) through the gammatone filterbank
        (``K`` complex one-pole stages of the channels' pole, output ``2 g Re(.)``; ``gam
        (C, 3)``: pole real, imaginary part, ``2 g``; states ``z (B, C, K, 2)``), with
        ``COMPRESS`` the broken-stick compression ``coef x^expo`` above ``knee`` (King et
        al. 2019), half-wave rectified into plane 0."""
        real_input(xp, n, wp, RV, PV)
        pr = tl.load(gam_ptr + cc * 3)
        pi = tl.load(gam_ptr + cc * 3 + 1)
        g2 = tl.load(gam_ptr + cc * 3 + 2)
        res_planes(n, pr, pi, K, z_ptr, r64, rm, wp, RV, PV, False)
        ps = wp + (K % 2) * 2 * PV
        pd = wp
        for _i in range(n):
            q = g2 * tl.load(ps)
            if COMPRESS:  # knee >= 0: a value at or below 0 stays there
                comp = coef * tl.exp(expo * tl.log(tl.where(q > 0.0, q, 1.0)))
                q = tl.where(q > knee, comp, q)
            tl.store(pd, tl.where(q > 0.0, q, 0.0))
            ps += RV
            pd += RV

    @triton.jit
    def prefilter_lowpass(
        n, pre_ptr, SP, zp_ptr, lp_ptr, SL, zl_ptr, c, r64, rm, wp, RV, PV
    ):  # fmt: skip
        """The modulation filterbank's pre-filter (``SP`` sections) on plane 0, its
        output ``u`` kept in plane ``SP``, and the low-pass band's sections (``SL``) on
        ``u`` (planes ``SP .. SP + SL``). Returns the planes of ``u`` and of the
        low-pass output."""
        sos_planes(n, pre_ptr, c, SP, zp_ptr, r64, rm, wp, RV, PV, SP + 1)
        pu = wp + SP * PV
        sos_planes(n, lp_ptr, c, SL, zl_ptr, r64, rm, pu, RV, PV, SL + 1)
        return pu, pu + SL * PV

    @triton.jit
    def band_coefs(c_ptr, cc, M, rm, MB: tl.constexpr):
        """The ``efilt`` band-pass coefficients of the rows' channels ``cc`` from
        ``(C, M, 6)``: pole (real, imaginary), gain (real, imaginary), scale and the
        ``|.|`` flag, ``(BLOCK, MB)`` (0 beyond band ``M``), and the band mask."""
        mm = tl.arange(0, MB)
        bm = rm[:, None] & (mm < M)[None, :]
        o = (cc[:, None] * M + mm[None, :]) * 6
        pr = tl.load(c_ptr + o, mask=bm, other=0.0)
        pi = tl.load(c_ptr + o + 1, mask=bm, other=0.0)
        gr = tl.load(c_ptr + o + 2, mask=bm, other=0.0)
        gi = tl.load(c_ptr + o + 3, mask=bm, other=0.0)
        k = tl.load(c_ptr + o + 4, mask=bm, other=0.0)
        ab = tl.load(c_ptr + o + 5, mask=bm, other=0.0)
        return pr, pi, gr, gi, k, ab != 0.0, bm

    @triton.jit
    def band_states(zb_ptr, out_ptr, r64, M, nout, bm, MB: tl.constexpr):
        """The band-pass states of the rows ``(BLOCK, MB)`` (real, imaginary) from ``zb
        (B, C, M, 2)`` and their offsets there, and the rows of the low-pass band and of
        the band-passes in ``out (B, C, M + 1, nout)``."""
        mm = tl.arange(0, MB)
        zbo = (r64[:, None] * M + mm[None, :]) * 2
        xr = tl.load(zb_ptr + zbo, mask=bm, other=0.0)
        xi = tl.load(zb_ptr + zbo + 1, mask=bm, other=0.0)
        o0 = out_ptr + r64 * (M + 1) * nout
        return xr, xi, zbo, o0, o0[:, None] + (mm[None, :] + 1) * nout

    @triton.jit
    def band_step(u, xr, xi, pr, pi, gr, gi, k, ab):
        """One sample of the complex one-pole band-passes (Dau et al. 1997 ``efilt``):
        state ``x <- p x + u``, output ``k |g x|`` where ``ab`` else ``k Re(g x)`` (the
        recursion of :func:`lhotse_amt.functional.modulation.modulation_filterbank`).
        Returns the new state and the output."""
        nr = pr * xr - pi * xi + u
        ni = pr * xi + pi * xr
        yr = gr * nr - gi * ni
        yi = gr * ni + gi * nr
        return nr, ni, k * tl.where(ab, tl.sqrt(yr * yr + yi * yi), yr)


_COEFS: weakref.WeakKeyDictionary[Any, dict[str, dict[str, torch.Tensor]]] = (
    weakref.WeakKeyDictionary()
)


def coefficients(
    plan: Any, device: torch.device, make: Callable[[Any], dict[str, np.ndarray]]
) -> dict[str, torch.Tensor]:
    """A plan's coefficient arrays ``make(plan)`` as float64 tensors on ``device`` (made
    once per plan and device)."""
    per_plan = _COEFS.setdefault(plan, {})
    key = str(device)
    if key not in per_plan:
        per_plan[key] = {
            k: torch.as_tensor(np.ascontiguousarray(v, np.float64), device=device)
            for k, v in make(plan).items()
        }
    return per_plan[key]


def gammatone_rows(plan: Any) -> np.ndarray:
    """The gammatone of a fused chain's plan as ``(C, 3)`` rows: pole real and imaginary
    part, twice the gain."""
    C = plan.C
    return np.stack([plan.pr[:C], plan.pi[:C], plan.g2[:C]], -1)


class Pooled(NamedTuple):
    """What a chain's ``launch`` gets: the zeroed block sums ``(B, C, bands, nblk)``
    float64, the state (a float64 copy, advanced in place), the items' ends on the
    device, the frame hop and the block count."""

    out: torch.Tensor
    state: list[torch.Tensor]
    ends: torch.Tensor
    hop: int
    nblk: int


def pooled(
    chain: ModuleType,
    plan: Any,
    x: torch.Tensor,
    state: list[torch.Tensor],
    hop: int,
    ends: list[int],
    square: bool,
    block: int = BLOCK_CHANNELS,
    ck: int = CHUNK,
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The CUDA kernel of a pooled operator: the chain of the Triton module ``chain``
    (:mod:`~lhotse_amt.kernels.triton_casp_pooled`,
    :mod:`~lhotse_amt.kernels.triton_king_pooled`: its ``STATE_KEYS``, ``bands(plan)``
    and ``launch``) on ``x (B, T)`` from ``state`` (not modified), summed over blocks of
    ``hop`` samples (samples at or after ``ends[b]`` unused; of squares if ``square``).
    Returns the block sums ``(B, C, bands, ceil(T / hop))`` float64 and the new state;
    ``block`` channels per program, ``ck`` samples per stage pass."""
    tc.require()
    keys = chain.STATE_KEYS
    if len(state) != len(keys):
        name = chain.__name__.rsplit(".", 1)[-1]
        raise ValueError(f"{name}: a state of {len(keys)} arrays {keys}, got {len(state)}")
    B, T = x.shape
    nblk = -(-T // hop)
    out = torch.zeros((B, plan.C, chain.bands(plan), nblk), dtype=torch.float64, device=x.device)
    st = [tc.f64(s).clone() for s in state]
    if B > 0 and T > 0:
        ends_t = torch.as_tensor(ends, dtype=torch.int64).to(x.device)
        chain.launch(plan, tc.dense(x), Pooled(out, st, ends_t, int(hop), nblk), square, block, ck)
    return out, st


def channel_grid(B: int, C: int, block: int) -> tuple[int, int]:
    """One program per item and block of ``block`` channels."""
    return (B, triton.cdiv(C, block))


def pooled_scratch(
    B: int, C: int, planes: int, ck: int, block: int, device: torch.device
) -> torch.Tensor:
    """The programs' float64 scratch planes ``(programs, planes, ck, block)``."""
    shape = (B * triton.cdiv(C, block), planes, ck, block)
    return torch.empty(shape, dtype=torch.float64, device=device)

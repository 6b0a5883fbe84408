"""What the Triton kernels of the differentiable operators share: availability, the
row-block prologue of a program, the copies between scratch planes, rows and checkpoints,
and the host-side helpers of the launch wrappers.

The kernels (:mod:`lhotse_amt.kernels.triton_sos`, :mod:`~lhotse_amt.kernels.triton_resonator`,
:mod:`~lhotse_amt.kernels.triton_adaptation`, :mod:`~lhotse_amt.kernels.triton_ihc_paulick`,
:mod:`~lhotse_amt.kernels.triton_agc`) all work the same way: one program handles a block of
``BLOCK`` rows (the rows are vectorised across the program) and walks through time inside
the kernel. A row-wise recursion's scratch buffer is laid out ``(planes, CK, RP)``: a plane
holds ``CK`` samples of every program's rows (``RP`` columns, the row count rounded up to
whole programs, so that scratch accesses need no mask), rows innermost so that the accesses
of a program are coalesced. Inside a kernel ``RV`` is the step from one sample to the next
in a plane (``RP``, a row vector) and ``PV = RV * CK`` the step from one plane to the next.

Importing this module never fails: without Triton (or without a CUDA device)
:func:`available` is ``False``. ``TRITON_INTERPRET=1`` runs the kernels on CPU tensors in
Triton's interpreter (tests).
"""

from __future__ import annotations

import torch

from . import triton_interpreted
from .rows import dense, f64, i64

try:  # pragma: no cover - depends on the installation
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except Exception:  # pragma: no cover
    triton = None
    tl = None
    HAVE_TRITON = False

__all__ = [
    "HAVE_TRITON",
    "BLOCK_ROWS",
    "available",
    "interpreted",
    "require",
    "dense",
    "f64",
    "i64",
]

#: rows per program
BLOCK_ROWS = 32


def interpreted() -> bool:
    """True when Triton runs in its CPU interpreter (``TRITON_INTERPRET=1``)."""
    return triton_interpreted()


def available() -> bool:
    """True when the Triton kernels can run (CUDA device, or Triton's CPU interpreter)."""
    return HAVE_TRITON and (torch.cuda.is_available() or interpreted())


def require() -> None:
    """Raise ``RuntimeError`` unless the Triton kernels can run."""
    if not available():
        raise RuntimeError("Triton kernels need triton and a CUDA device (or TRITON_INTERPRET=1)")


if HAVE_TRITON:

    @triton.jit
    def row_block(xrow_ptr, crow_ptr, R, RP, BLOCK: tl.constexpr):
        """The program's rows: mask ``rm``, rows ``r64`` (int64), rows clamped to the last
        one ``rr64`` (unmasked loads), the plane step ``RV``, input rows ``xr`` and
        coefficient rows ``c`` (row maps ``(R,)``)."""
        r = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        rm = r < R
        rr = tl.minimum(r, R - 1)
        RV = tl.zeros([BLOCK], tl.int64) + RP
        xr = tl.load(xrow_ptr + rr)
        c = tl.load(crow_ptr + rr)
        return rm, r.to(tl.int64), rr.to(tl.int64), RV, xr, c

    @triton.jit
    def load_plane(src, p, n, RV):
        """``n`` consecutive samples of the rows from ``src`` (their first sample) into the
        plane at ``p``, as float64."""
        for _i in range(n):
            tl.store(p, tl.load(src).to(tl.float64))
            src += 1
            p += RV

    @triton.jit
    def store_plane(p, dst, n, RV, rm):
        """``n`` samples of the plane at ``p`` into the rows at ``dst`` (their first sample),
        in the destination's dtype."""
        for _i in range(n):
            tl.store(dst, tl.load(p).to(dst.dtype.element_ty), mask=rm)
            p += RV
            dst += 1

    @triton.jit
    def plane_rows(xrow_ptr, crow_ptr, rec_ptr, R, RP, CK: tl.constexpr, BLOCK: tl.constexpr):
        """:func:`row_block`, then the step ``PV`` from one scratch plane to the next and
        the program's columns ``rp`` in the scratch buffer at ``rec_ptr``."""
        rm, r64, rr64, RV, xr, c = row_block(xrow_ptr, crow_ptr, R, RP, BLOCK)
        return rm, r64, rr64, RV, xr, c, RV * CK, rec_ptr + r64

    @triton.jit
    def reverse_block(bb, nb, T, CK: tl.constexpr):
        """Block ``bb`` of ``nb`` counted from the last (the backward's order): its index
        ``b``, its first sample ``t0`` and its number of samples ``n``."""
        b = nb - 1 - bb
        t0 = b * CK
        return b, t0, tl.minimum(CK, T - t0)

    @triton.jit
    def copy_states(z_ptr, ck_ptr, r64, rm, b, nb, NS, TO_CK: tl.constexpr):
        """The rows' ``NS`` float64 states ``z (R, NS)`` to (``TO_CK``) or from checkpoint
        ``b`` of ``ck (R, nb, NS)``."""
        for k in range(NS):
            zo = z_ptr + r64 * NS + k
            co = ck_ptr + (r64 * nb + b) * NS + k
            if TO_CK:
                tl.store(co, tl.load(zo, mask=rm, other=0.0), mask=rm)
            else:
                tl.store(zo, tl.load(co, mask=rm, other=0.0), mask=rm)


# --------------------------------------------------------------------------------------
# host side
# --------------------------------------------------------------------------------------


def i32(t: torch.Tensor) -> torch.Tensor:
    """``t`` detached, int32, contiguous."""
    return t.detach().to(torch.int32).contiguous()


def padded(R: int, block: int) -> int:
    """Scratch columns: every program's rows, so that scratch accesses need no mask."""
    return triton.cdiv(R, block) * block


def grid(R: int, block: int) -> tuple[int]:
    """One program per block of ``block`` rows."""
    return (triton.cdiv(R, block),)


def scratch(planes: int, ck: int, R: int, block: int, device: torch.device) -> torch.Tensor:
    """A float64 scratch buffer ``(planes, ck, padded(R, block))``."""
    return torch.empty((planes, ck, padded(R, block)), dtype=torch.float64, device=device)

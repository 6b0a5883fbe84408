"""Explicit-SIMD building blocks for numba intrinsics: LLVM IR on ``<W x double>`` vectors.

numba's loop vectoriser only vectorises innermost loops. A bank of recursive filters
vectorised over channels therefore keeps its states in memory: every sample loads and
stores each state and reloads each coefficient, and on the machines this package is
measured on those memory operations, not the arithmetic, set the speed. A kernel written
with these helpers instead runs the *time* loop for one block of ``W`` channels with its
states in vector registers (``W`` = 8 float64 lanes: one 512-bit register with AVX-512,
two 256-bit ones with AVX2; LLVM legalises the vector type for the target CPU, so the code
is portable).

:class:`VecBuilder` wraps an ``llvmlite`` IR builder with the vector operations the kernels
need (fused multiply-add, division, comparisons and selects, ``sqrt``, ``copysign``, ``floor``,
the float64 ``exp`` of :func:`lhotse_amt.kernels.paulick.fast_exp`), loads and stores of
vectors through array data pointers, and mutable vector variables (``alloca`` slots that
LLVM promotes to registers). :func:`array_ptr` and :func:`wide_function` are the glue to
numba's array model and function attributes.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "Codegen",
    "VecBuilder",
    "array_ptr",
    "block_ptr",
    "group_job",
    "lane_block",
    "store_tiles",
    "transpose8",
    "vector_codegen",
    "wide_function",
    "WIDTH",
    "vector_exp",
    "vector_exp32_nonpos",
]

#: float64 lanes per vector
WIDTH = 8

_D = ir.DoubleType()
_I64 = ir.IntType(64)
_I32 = ir.IntType(32)

# exp(x) = 2^k exp(r), x = k ln2 + r, |r| <= ln2 / 2; exp(r) by its degree-13 Taylor
# polynomial (Estrin's scheme); the same constants and evaluation order as the scalar
# ``_exp`` of :mod:`lhotse_amt.kernels.paulick`
_LOG2E = 1.4426950408889634
_LN2_HI = 0.6931471803691238
_LN2_LO = 1.9082149292705877e-10
_F = tuple(1.0 / math.factorial(i) for i in range(14))
# float32 exp: the constants of :func:`lhotse_amt.kernels.fastmath.exp32_nonpos`
_LN2HI_F = 0.693359375
_LN2LO_F = -2.12194440e-4
_E32 = tuple(1.0 / math.factorial(i) for i in range(9))


def wide_function(builder: ir.IRBuilder) -> None:
    """Let the function being built use 512-bit vector registers where the CPU has them.

    x86 LLVM otherwise splits 512-bit vector types into 256-bit halves (its tuning for code
    whose wide instructions are rare); ignored on CPUs without AVX-512."""
    attrs = builder.function.attributes
    set.add(attrs, '"prefer-vector-width"="512"')
    set.add(attrs, '"min-legal-vector-width"="512"')


def array_ptr(context, builder, aryty, value) -> ir.Value:  # noqa: ANN001
    """``double*`` to the first element of a numba array argument (C-contiguous float64)."""
    ary = context.make_array(aryty)(context, builder, value)
    return builder.bitcast(ary.data, _D.as_pointer())


def block_ptr(context, builder, aryty, value, g) -> ir.Value:  # noqa: ANN001
    """``double*`` to block ``g`` of a group array ``(G, rows, 8)`` (rows from its shape)."""
    ary = context.make_array(aryty)(context, builder, value)
    rows = builder.extract_value(ary.shape, 1)
    off = builder.mul(builder.mul(g, rows), ir.Constant(_I64, WIDTH))
    return builder.gep(builder.bitcast(ary.data, _D.as_pointer()), [off])


@njit(inline="always")
def lane_block(job, NB, C):  # noqa: ANN001, ANN201  # pragma: no cover - compiled
    """Job ``job`` of a register kernel's ``B * NB`` jobs (item, block of 8 channels of
    ``C``): the item ``b``, the block ``blk``, its first channel ``c0`` and its number of
    channels ``nl`` (at most 8)."""
    b = job // NB
    blk = job - b * NB
    c0 = blk * WIDTH
    return b, blk, c0, min(WIDTH, C - c0)


@njit(inline="always")
def group_job(job, NG, G):  # noqa: ANN001, ANN201  # pragma: no cover - compiled
    """Job ``job`` of a register kernel's ``B * NG`` jobs (item, group of ``G`` blocks of
    8 channels): the item ``b`` and the group's first block ``blk0``."""
    b = job // NG
    return b, (job - b * NG) * G


class Codegen:
    """The arguments of a register kernel's codegen (``context``, ``builder``, the
    argument types ``types`` and values ``args``), its :class:`VecBuilder` ``vb`` and the
    data pointers of its array arguments."""

    def __init__(self, context, builder: ir.IRBuilder, signature, args) -> None:  # noqa: ANN001
        self.context = context
        self.builder = builder
        self.types = signature.args
        self.args = args
        self.vb = VecBuilder(builder)

    def array(self, i: int):  # noqa: ANN201
        """numba's array structure of array argument ``i`` (``.data``, ``.shape``)."""
        return self.context.make_array(self.types[i])(self.context, self.builder, self.args[i])

    def ptr(self, i: int) -> ir.Value:
        """``double*`` to the first element of array argument ``i``."""
        return array_ptr(self.context, self.builder, self.types[i], self.args[i])

    def ptrs(self, *index: int) -> list[ir.Value]:
        """:meth:`ptr` of each argument ``index``."""
        return [self.ptr(i) for i in index]

    def block_ptr(self, i: int, g: ir.Value) -> ir.Value:
        """``double*`` to block ``g`` of the group array argument ``i``
        (:func:`block_ptr`)."""
        return block_ptr(self.context, self.builder, self.types[i], self.args[i], g)

    def block_ptrs(self, g: ir.Value, *index: int) -> list[ir.Value]:
        """:meth:`block_ptr` of block ``g`` of each argument ``index``."""
        return [self.block_ptr(i, g) for i in index]


def vector_codegen(body: Callable[[Codegen], None]) -> Callable:
    """The codegen of a register-kernel intrinsic (returning nothing) from ``body(cg)``:
    the function built with wide vector registers (:func:`wide_function`), ``body``
    emitting the kernel with the codegen's :class:`Codegen`."""

    def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
        wide_function(builder)
        body(Codegen(context, builder, signature, args))
        return context.get_dummy_value()

    return codegen


def transpose8(builder: ir.IRBuilder, rows: list[ir.Value]) -> list[ir.Value]:
    """Transpose 8 vectors of 8 lanes: ``out[j][i] = rows[i][j]`` (three stages of pairwise
    shuffles, 24 in all)."""

    def shuffle(a: ir.Value, c: ir.Value, mask: list[int]) -> ir.Value:
        return builder.shuffle_vector(a, c, ir.Constant(ir.VectorType(_I32, 8), mask))

    r = list(rows)
    for d, lo, hi in (
        (1, [0, 8, 2, 10, 4, 12, 6, 14], [1, 9, 3, 11, 5, 13, 7, 15]),
        (2, [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]),
        (4, [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]),
    ):
        out = list(r)
        for i in range(8):
            if i & d == 0:
                out[i], out[i + d] = shuffle(r[i], r[i + d], lo), shuffle(r[i], r[i + d], hi)
        r = out
    return r


class VecBuilder:
    """Vector operations on ``<width x double>`` (or ``<width x float>`` with
    ``single=True``) for one IR builder."""

    def __init__(self, builder: ir.IRBuilder, width: int = WIDTH, single: bool = False) -> None:
        self.b = builder
        self.w = width
        self.single = single
        self.ety = ir.FloatType() if single else _D
        self.ty = ir.VectorType(self.ety, width)
        self.ity = ir.VectorType(_I32 if single else _I64, width)
        self.ptr_ty = self.ty.as_pointer()
        mod = builder.module
        suffix = f"v{width}f32" if single else f"v{width}f64"
        un = ir.FunctionType(self.ty, [self.ty])
        bi = ir.FunctionType(self.ty, [self.ty, self.ty])
        tri = ir.FunctionType(self.ty, [self.ty, self.ty, self.ty])
        self._fma = cgutils.get_or_insert_function(mod, tri, f"llvm.fma.{suffix}")
        self._sqrt = cgutils.get_or_insert_function(mod, un, f"llvm.sqrt.{suffix}")
        self._floor = cgutils.get_or_insert_function(mod, un, f"llvm.floor.{suffix}")
        self._fabs = cgutils.get_or_insert_function(mod, un, f"llvm.fabs.{suffix}")
        self._copysign = cgutils.get_or_insert_function(mod, bi, f"llvm.copysign.{suffix}")

    # ------------------------------------------------------------------ values
    def const(self, c: float) -> ir.Constant:
        return ir.Constant(self.ty, [ir.Constant(self.ety, float(c))] * self.w)

    def splat(self, s: ir.Value) -> ir.Value:
        """Scalar double -> vector with every lane ``s``."""
        v = self.b.insert_element(ir.Constant(self.ty, ir.Undefined), s, ir.Constant(_I32, 0))
        mask = ir.Constant(ir.VectorType(_I32, self.w), [0] * self.w)
        return self.b.shuffle_vector(v, v, mask)

    def load(self, ptr: ir.Value, index: ir.Value | int) -> ir.Value:
        """Vector ``index`` of a ``double*`` holding consecutive vectors."""
        p = self.b.bitcast(ptr, self.ptr_ty)
        idx = ir.Constant(_I64, index) if isinstance(index, int) else index
        return self.b.load(self.b.gep(p, [idx]), align=8)

    def store(self, value: ir.Value, ptr: ir.Value, index: ir.Value | int) -> None:
        p = self.b.bitcast(ptr, self.ptr_ty)
        idx = ir.Constant(_I64, index) if isinstance(index, int) else index
        self.b.store(value, self.b.gep(p, [idx]), align=8)

    def var(self, init: ir.Value | None = None) -> ir.Value:
        """A mutable vector variable (an entry-block ``alloca``; promoted to a register)."""
        slot = cgutils.alloca_once(self.b, self.ty)
        if init is not None:
            self.b.store(init, slot)
        return slot

    # ------------------------------------------------------------------ arithmetic
    def add(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fadd(a, c)

    def sub(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fsub(a, c)

    def mul(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fmul(a, c)

    def div(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fdiv(a, c)

    def fma(self, a: ir.Value, c: ir.Value, d: ir.Value) -> ir.Value:
        """``a * c + d`` with one rounding."""
        return self.b.call(self._fma, [a, c, d])

    def sqrt(self, a: ir.Value) -> ir.Value:
        return self.b.call(self._sqrt, [a])

    def fabs(self, a: ir.Value) -> ir.Value:
        return self.b.call(self._fabs, [a])

    def copysign(self, mag: ir.Value, sign: ir.Value) -> ir.Value:
        return self.b.call(self._copysign, [mag, sign])

    def floor(self, a: ir.Value) -> ir.Value:
        return self.b.call(self._floor, [a])

    def lt(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered("<", a, c)

    def gt(self, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.fcmp_ordered(">", a, c)

    def select(self, mask: ir.Value, a: ir.Value, c: ir.Value) -> ir.Value:
        return self.b.select(mask, a, c)

    def minimum(self, a: ir.Value, c: ir.Value) -> ir.Value:
        """``a if a < c else c`` per lane (Python's ``min(a, c)`` for numbers)."""
        return self.select(self.lt(a, c), a, c)

    def maximum(self, a: ir.Value, c: ir.Value) -> ir.Value:
        """``a if a > c else c`` per lane (Python's ``max(a, c)`` for numbers)."""
        return self.select(self.gt(a, c), a, c)

    def any(self, mask: ir.Value) -> ir.Value:
        """i1: some lane of the ``<W x i1>`` mask is set."""
        bits = self.b.bitcast(mask, ir.IntType(self.w))
        return self.b.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(self.w), 0))

    def to(self, a: ir.Value, other: VecBuilder) -> ir.Value:
        """Convert ``a`` to the element type of ``other`` (same width)."""
        if other.single == self.single:
            return a
        if other.single:
            return self.b.fptrunc(a, other.ty)
        return self.b.fpext(a, other.ty)

    def concat(self, a: ir.Value, c: ir.Value) -> ir.Value:
        """Two vectors of this builder's width -> one of twice the width (``a`` first)."""
        mask = ir.Constant(ir.VectorType(_I32, 2 * self.w), list(range(2 * self.w)))
        return self.b.shuffle_vector(a, c, mask)

    def halves(self, a: ir.Value) -> tuple[ir.Value, ir.Value]:
        """A vector of twice this builder's width -> its two halves."""
        lo = ir.Constant(ir.VectorType(_I32, self.w), list(range(self.w)))
        hi = ir.Constant(ir.VectorType(_I32, self.w), list(range(self.w, 2 * self.w)))
        return self.b.shuffle_vector(a, a, lo), self.b.shuffle_vector(a, a, hi)

    def round_to_f32(self, a: ir.Value) -> ir.Value:
        """Round every lane to float32 and back (the value a float32 array would hold)."""
        f32 = ir.VectorType(ir.FloatType(), self.w)
        return self.b.fpext(self.b.fptrunc(a, f32), self.ty)

    def exp32_nonpos(self, u: ir.Value) -> ir.Value:
        """float32 ``exp`` of every lane for ``-37.5 <= u <= 0`` (``single`` builder only):
        :func:`lhotse_amt.kernels.fastmath.exp32_nonpos` (degree-8 Taylor polynomial,
        < 3e-7 relative)."""
        b = self.b
        k = self.floor(self.fma(u, self.const(_LOG2E), self.const(0.5)))
        nk = b.fneg(k)
        r = self.fma(nk, self.const(_LN2HI_F), u)
        r = self.fma(nk, self.const(_LN2LO_F), r)
        p = self.const(_E32[8])
        for i in range(7, -1, -1):
            p = self.fma(p, r, self.const(_E32[i]))
        ki = b.fptosi(k, self.ity)
        c127 = ir.Constant(self.ity, [ir.Constant(_I32, 127)] * self.w)
        c23 = ir.Constant(self.ity, [ir.Constant(_I32, 23)] * self.w)
        return self.mul(p, b.bitcast(b.shl(b.add(ki, c127), c23), self.ty))

    def exp(self, x: ir.Value) -> ir.Value:
        """``exp`` of every lane: arguments clamped to ``[-708, 709]``, ~2 ulp (the scalar
        kernels' ``_exp``)."""
        x = self.maximum(self.minimum(x, self.const(709.0)), self.const(-708.0))
        kf = self.floor(self.fma(x, self.const(_LOG2E), self.const(0.5)))
        nk = self.b.fneg(kf)
        r = self.fma(nk, self.const(_LN2_HI), x)
        r = self.fma(nk, self.const(_LN2_LO), r)
        r2 = self.mul(r, r)
        r4 = self.mul(r2, r2)
        r8 = self.mul(r4, r4)
        F = [self.const(f) for f in _F]

        def lin(i: int) -> ir.Value:  # F[i] + F[i + 1] r
            return self.fma(F[i + 1], r, F[i])

        q0 = self.fma(r2, lin(2), lin(0))
        q1 = self.fma(r2, lin(6), lin(4))
        q2 = self.fma(r4, lin(12), self.fma(r2, lin(10), lin(8)))
        p = self.fma(r8, q2, self.fma(r4, q1, q0))
        ki = self.b.fptosi(kf, self.ity)
        bits = self.b.shl(
            self.b.add(ki, ir.Constant(self.ity, [ir.Constant(_I64, 1023)] * self.w)),
            ir.Constant(self.ity, [ir.Constant(_I64, 52)] * self.w),
        )
        return self.mul(p, self.b.bitcast(bits, self.ty))


@intrinsic
def store_tiles(typingctx, ob, m, ntile, yflat, offs):  # noqa: ANN001
    """Write ``ntile`` tiles of 8 samples of band ``m`` of ``ob (bands, chunk, 8)``
    (float64, C-contiguous; lanes = channels) to ``yflat[offs[lane] + n]`` (``yflat``
    float32 or float64, 1-d; ``offs (8,)`` int64, lanes with ``offs < 0`` skipped): each
    8 x 8 tile transposed in registers, one vector store (rounded to ``yflat``'s dtype)
    per lane."""
    sig = types.none(ob, m, ntile, yflat, offs)

    @vector_codegen
    def codegen(cg: Codegen) -> None:
        builder, vb, args = cg.builder, cg.vb, cg.args
        op = cg.ptr(0)
        ety = cg.context.get_value_type(cg.types[3].dtype)
        vty = ir.VectorType(ety, WIDTH)
        yp = cg.array(3).data
        offp = cg.array(4).data
        offs = [builder.load(builder.gep(offp, [ir.Constant(_I64, k)])) for k in range(WIDTH)]
        chunk = builder.extract_value(cg.array(0).shape, 1)
        m0 = builder.mul(args[1], chunk)
        with cgutils.for_range(builder, args[2]) as loop:
            n = builder.mul(loop.index, ir.Constant(_I64, WIDTH))
            first = builder.add(m0, n)
            rows = [vb.load(op, builder.add(first, ir.Constant(_I64, k))) for k in range(WIDTH)]
            cols = transpose8(builder, rows)
            for lane in range(WIDTH):
                ok = builder.icmp_signed(">=", offs[lane], ir.Constant(_I64, 0))
                with builder.if_then(ok, likely=True):
                    v = cols[lane] if vty == vb.ty else builder.fptrunc(cols[lane], vty)
                    ptr = builder.gep(yp, [builder.add(offs[lane], n)])
                    builder.store(v, builder.bitcast(ptr, vty.as_pointer()), align=4)

    return sig, codegen


# ------------------------------------------------------------------------------------------
# array wrappers of the vector functions (tests)
# ------------------------------------------------------------------------------------------


def _unary_intrinsic(method: str, single: bool):  # noqa: ANN202
    @intrinsic
    def _apply(typingctx, src, dst, n):  # noqa: ANN001, ANN202
        sig = types.none(src, dst, n)

        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            vb = VecBuilder(builder, single=single)
            ety = vb.ety.as_pointer()
            sp = builder.bitcast(
                context.make_array(signature.args[0])(context, builder, args[0]).data, ety
            )
            dp = builder.bitcast(
                context.make_array(signature.args[1])(context, builder, args[1]).data, ety
            )
            with cgutils.for_range(builder, args[2]) as loop:
                vb.store(getattr(vb, method)(vb.load(sp, loop.index)), dp, loop.index)
            return context.get_dummy_value()

        return sig, codegen

    return _apply


_exp_apply = _unary_intrinsic("exp", False)
_exp32_apply = _unary_intrinsic("exp32_nonpos", True)


@njit(cache=True)
def _exp_run(src, dst, n):  # pragma: no cover - compiled
    _exp_apply(src, dst, n)


@njit(cache=True)
def _exp32_run(src, dst, n):  # pragma: no cover - compiled
    _exp32_apply(src, dst, n)


def _vector_map(run, x: np.ndarray, dtype: type) -> np.ndarray:  # noqa: ANN001
    x = np.asarray(x, dtype).ravel()
    n = -(-x.size // WIDTH)
    src = np.zeros(n * WIDTH, dtype)
    src[: x.size] = x
    dst = np.empty_like(src)
    run(src, dst, n)
    return dst[: x.size]


def vector_exp(x: np.ndarray) -> np.ndarray:
    """:meth:`VecBuilder.exp` on a float64 array (for tests)."""
    return _vector_map(_exp_run, x, np.float64)


def vector_exp32_nonpos(x: np.ndarray) -> np.ndarray:
    """:meth:`VecBuilder.exp32_nonpos` on a float32 array in ``[-37.5, 0]`` (for tests)."""
    return _vector_map(_exp32_run, x, np.float32)

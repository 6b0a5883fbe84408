"""Inline, vectorisable elementary functions for the numba kernels.

Library ``exp``/``log``/``pow`` calls keep LLVM from vectorising a loop; these versions
are branch-free polynomials with Cody-Waite range reduction and exponent-bit assembly, so
the loops that use them run in SIMD lanes. Each has an array wrapper for the tests:

* :func:`exp_nonpos` - float64 ``exp`` on ``[-37.5, 0]``, ~1 ulp (adaptation-loop
  limiter, ``precise`` kernels);
* :func:`exp32_nonpos` - float32 ``exp`` on ``[-37.5, 0]``, < 3e-7 relative;
* :func:`pow_pos` - float64 ``a ** n`` for positive normal ``a``, < 1e-9 relative.

:func:`prefer_wide_vectors` (called first thing in a kernel) lets LLVM vectorise that
kernel's loops with 512-bit registers on CPUs with AVX-512 (its default there is 256 bits
for every function); elsewhere it changes nothing. :func:`assume_distinct_arrays` lets LLVM
vectorise loops over many arrays without run-time overlap checks.

:func:`denormals_off` / :func:`restore_fp_mode` bracket the work of every kernel that runs
a recursion (filters, IHC, adaptation loops, smoothing): digital silence drives the
recursions' states through subnormal numbers (and a decaying state can stay on the smallest
one for ever), and x86 CPUs take a microcode assist of ~100 cycles for every subnormal
operand or result: without them, a second of silence after a sound costs 3-6 times as much
as a second of sound (``benchmarks/bench_silence.py``).
"""

from __future__ import annotations

import platform

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = [
    "KERNEL_OPTS",
    "NO_CFUNC",
    "exp_nonpos",
    "exp_nonpos_inline",
    "exp32_nonpos",
    "exp32_nonpos_inline",
    "f32_bits",
    "f32_from_bits",
    "f64_bits",
    "f64_from_bits",
    "pow_pos",
    "pow_pos_inline",
    "log_pos_inline",
    "exp_inline",
    "assume_distinct_arrays",
    "prefer_wide_vectors",
    "denormals_off",
    "restore_fp_mode",
]

#: numba options that every compiled kernel of this package takes: no C-callable (``cfunc``)
#: wrapper, which nothing here calls and whose code costs compile time at first use
NO_CFUNC = dict(no_cfunc_wrapper=True)

#: numba options of every inline function here and of the kernels using them: FMA
#: contraction only (no reassociation, no approximate functions)
KERNEL_OPTS = dict(
    nogil=True,
    cache=True,
    error_model="numpy",
    boundscheck=False,
    fastmath={"contract"},
    **NO_CFUNC,
)
_F = KERNEL_OPTS

_LOG2E_F = np.float32(1.4426950408889634)
_LN2HI_F = np.float32(0.693359375)
_LN2LO_F = np.float32(-2.12194440e-4)
_E = tuple(np.float32(1.0 / f) for f in (1, 1, 2, 6, 24, 120, 720, 5040, 40320))
# the degree-8 Taylor coefficients of exp in float64
_E64 = tuple(1.0 / f for f in (1, 1, 2, 6, 24, 120, 720, 5040, 40320))


@intrinsic
def prefer_wide_vectors(typingctx):  # pragma: no cover - compiled
    """Give the calling kernel the LLVM function attribute ``"prefer-vector-width"="512"``.

    x86 LLVM vectorises with 256-bit registers even where AVX-512 exists (the tuning
    ``prefer-256-bit``, chosen for code whose wide instructions are rare); the compute-bound
    channel loops of this package's kernels run ~1.1-1.7 times faster with 512-bit lanes.
    The attribute is per function, so nothing else in the process (other numba code
    included) is affected, and it is ignored on CPUs without AVX-512. Semantics are
    unchanged: only the width of the vector lanes differs (reductions under ``reassoc``
    may round differently, as between any two vector widths).
    """
    sig = types.none()

    def codegen(context, builder, signature, args):
        # llvmlite only accepts enumerated attribute names; a string attribute is written
        # verbatim into the function header
        set.add(builder.function.attributes, '"prefer-vector-width"="512"')
        return context.get_dummy_value()

    return sig, codegen


#: the x86 MXCSR bits flush-to-zero (15: subnormal results become 0) and
#: denormals-are-zero (6: subnormal operands read as 0)
_MXCSR_FTZ_DAZ = 0x8040
_X86 = platform.machine().lower() in {"x86_64", "amd64", "i386", "i686", "x86"}


def _mxcsr_functions(builder):  # noqa: ANN001, ANN202
    p8 = ir.IntType(8).as_pointer()
    fnty = ir.FunctionType(ir.VoidType(), [p8])
    st = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.stmxcsr")
    ld = cgutils.get_or_insert_function(builder.module, fnty, "llvm.x86.sse.ldmxcsr")
    return p8, st, ld


@intrinsic
def denormals_off(typingctx):  # pragma: no cover - compiled
    """Treat subnormal floats as zero in the calling thread; returns the previous mode.

    Sets flush-to-zero and denormals-are-zero in the x86 MXCSR of the thread running the
    kernel (a ``prange`` body runs in the threading layer's workers, so call it there) and
    returns the previous control word for :func:`restore_fp_mode`, which every kernel calls
    when it is done: nothing outside the kernel sees the change. Values below 2.2e-308
    (float64) or 1.2e-38 (float32) become 0: far below every tolerance of the models,
    whose signals are at least ~1e-10 of full scale where they matter. Elsewhere than x86
    it does nothing (returns 0).
    """
    sig = types.uint32()

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        if not _X86:
            return ir.Constant(i32, 0)
        p8, st, ld = _mxcsr_functions(builder)
        slot = cgutils.alloca_once(builder, i32)
        ptr = builder.bitcast(slot, p8)
        builder.call(st, [ptr])
        old = builder.load(slot)
        builder.store(builder.or_(old, ir.Constant(i32, _MXCSR_FTZ_DAZ)), slot)
        builder.call(ld, [ptr])
        return old

    return sig, codegen


@intrinsic
def restore_fp_mode(typingctx, mode):  # pragma: no cover - compiled
    """Restore the control word returned by :func:`denormals_off`."""
    sig = types.none(types.uint32)

    def codegen(context, builder, signature, args):
        if _X86:
            p8, _, ld = _mxcsr_functions(builder)
            slot = cgutils.alloca_once(builder, ir.IntType(32))
            builder.store(args[0], slot)
            builder.call(ld, [builder.bitcast(slot, p8)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def assume_distinct_arrays(typingctx):  # pragma: no cover - compiled
    """Mark the data pointers of the calling kernel's array arguments ``noalias``.

    LLVM vectorises a loop that writes one array and reads others only after proving (or
    checking at run time) that they do not overlap; a channel loop touching a dozen state
    and coefficient arrays needs more run-time checks than it allows, so it stays scalar.
    This tells LLVM that memory reached through one array argument is never reached
    through another, which holds when every array passed to the kernel is its own
    allocation (read-only arguments may share memory). The kernel's wrapper must
    guarantee it. Reference-count pointers (``i8*``) are left alone.
    """
    sig = types.none()

    def codegen(context, builder, signature, args):
        for a in builder.function.args[2:]:  # after the return and exception pointers
            t = a.type
            if isinstance(t, ir.PointerType) and not (
                isinstance(t.pointee, ir.IntType) and t.pointee.width == 8
            ):
                a.add_attribute("noalias")
        return context.get_dummy_value()

    return sig, codegen


def _bitcast(name: str, src, dst, llvm_dst):  # noqa: ANN001, ANN202
    """An intrinsic reinterpreting the bits of a ``src`` value as a ``dst`` value."""

    def impl(typingctx, x):  # noqa: ANN001, ANN202  # pragma: no cover - compiled
        def codegen(context, builder, signature, args):  # noqa: ANN001, ANN202
            return builder.bitcast(args[0], llvm_dst)

        return dst(src), codegen

    impl.__name__ = impl.__qualname__ = name
    return intrinsic(impl)


f32_bits = _bitcast("f32_bits", types.float32, types.int32, ir.IntType(32))
f32_from_bits = _bitcast("f32_from_bits", types.int32, types.float32, ir.FloatType())
f64_bits = _bitcast("f64_bits", types.float64, types.int64, ir.IntType(64))
f64_from_bits = _bitcast("f64_from_bits", types.int64, types.float64, ir.DoubleType())


@njit(inline="always", **_F)
def horner(x, c):  # pragma: no cover - compiled
    # c[n] x^n + ... + c[1] x + c[0] as ((c[n] x + c[n-1]) x + ...) x + c[0], c a tuple of
    # constants, lowest degree first (the loop unrolls into the written-out chain)
    p = c[len(c) - 1]
    for i in range(len(c) - 2, -1, -1):
        p = p * x + c[i]
    return p


@njit(inline="always", **_F)
def exp32_nonpos_inline(u):  # pragma: no cover - compiled
    # float32 exp(u) for -37.5 <= u <= 0 without a library call (vectorisable): Cody-Waite
    # reduction u = k ln2 + r, |r| <= ln2 / 2, degree-8 Taylor polynomial (truncation
    # < 6e-9 relative), 2^k from the float32 exponent bits
    k = np.floor(u * _LOG2E_F + np.float32(0.5))
    r = (u - k * _LN2HI_F) - k * _LN2LO_F
    return horner(r, _E) * f32_from_bits((np.int32(k) + np.int32(127)) << np.int32(23))


_LN2HI = 6.93147180369123816490e-01
_LN2LO = 1.90821492927058770002e-10
_LOG2E = 1.4426950408889634


@njit(inline="always", **_F)
def exp_nonpos_inline(u):  # pragma: no cover - compiled
    # float64 exp(u) for -37.5 <= u <= 0 without a library call (vectorisable):
    # u = k ln2 + r, |r| <= ln2 / 2, degree-12 Taylor polynomial (Estrin), 2^k from the
    # exponent bits; relative error ~1e-16
    k = np.floor(u * _LOG2E + 0.5)
    r = (u - k * _LN2HI) - k * _LN2LO
    r2 = r * r
    r4 = r2 * r2
    q0 = (1.0 + r) + (0.5 + r * (1.0 / 6.0)) * r2
    q1 = (1.0 / 24.0 + r * (1.0 / 120.0)) + (1.0 / 720.0 + r * (1.0 / 5040.0)) * r2
    q2 = (1.0 / 40320.0 + r * (1.0 / 362880.0)) + (1.0 / 3628800.0 + r * (1.0 / 39916800.0)) * r2
    p = (q0 + q1 * r4) + (q2 + r4 * (1.0 / 479001600.0)) * (r4 * r4)
    return p * f64_from_bits((np.int64(k) + 1023) << 52)


_LN2 = 0.6931471805599453
_SQRT2 = 1.4142135623730951
_MANT = np.int64(0x000FFFFFFFFFFFFF)
_ONE_BITS = np.int64(0x3FF0000000000000)


@njit(inline="always", **_F)
def log_pos_inline(a):  # pragma: no cover - compiled
    # log a for a normal positive float64 without library calls (vectorisable), absolute
    # error < 2e-11: log a = e ln2 + 2 atanh(s) with a = 2^e m, m in [sqrt(1/2), sqrt(2)),
    # s = (m - 1) / (m + 1) (|s| <= 0.1716, series to s^11)
    bits = f64_bits(a)
    e = (bits >> 52) - 1023
    m = f64_from_bits((bits & _MANT) | _ONE_BITS)
    big = m > _SQRT2
    m = m * 0.5 if big else m
    e = e + 1 if big else e
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    lm = (
        2.0 * s * (1.0 + z * (1.0 / 3.0 + z * (0.2 + z * (1.0 / 7.0 + z * (1.0 / 9.0 + z / 11.0)))))
    )
    return np.float64(e) * _LN2 + lm


@njit(inline="always", **_F)
def exp_inline(y):  # pragma: no cover - compiled
    # exp(y) for |y| < 700 without library calls (vectorisable), relative error < 1e-9:
    # exp(y) = 2^k exp(r), |r| <= ln2 / 2, degree-8 Taylor polynomial
    k = np.floor(y * _LOG2E + 0.5)
    r = (y - k * _LN2HI) - k * _LN2LO
    return horner(r, _E64) * f64_from_bits((np.int64(k) + 1023) << 52)


@njit(inline="always", **_F)
def pow_pos_inline(a, n):  # pragma: no cover - compiled
    # a^n for a normal positive float64 and |n log a| < 700 without library calls
    # (vectorisable), relative error < 1e-9: exp(n log a) by the two functions above
    return exp_inline(n * log_pos_inline(a))


# --------------------------------------------------------------------------------------
# array versions (tests): y[i] = f(x[i], *args) over a 1-D array
# --------------------------------------------------------------------------------------


def _array_version(fn, dtype: type, doc: str, binary: bool = False):  # noqa: ANN202
    opts = dict(cache=False, nogil=True, error_model="numpy", fastmath={"contract"})
    if binary:

        @njit(**opts)
        def loop(x, y, a):  # pragma: no cover - compiled
            for i in range(x.shape[0]):
                y[i] = fn(x[i], a)

    else:

        @njit(**opts)
        def loop(x, y, a):  # pragma: no cover - compiled
            for i in range(x.shape[0]):
                y[i] = fn(x[i])

    def apply(x: np.ndarray, a: float = 0.0) -> np.ndarray:
        x = np.ascontiguousarray(x, dtype)
        y = np.empty_like(x)
        loop(x, y, float(a))
        return y

    apply.__doc__ = doc
    return apply


exp_nonpos = _array_version(
    exp_nonpos_inline, np.float64, "The kernels' float64 ``exp`` on ``x`` in ``[-37.5, 0]``."
)
exp32_nonpos = _array_version(
    exp32_nonpos_inline, np.float32, "The kernels' float32 ``exp`` on ``x`` in ``[-37.5, 0]``."
)
pow_pos = _array_version(
    pow_pos_inline,
    np.float64,
    "``pow_pos(x, n)``: the kernels' ``x ** n`` for positive normal ``x``.",
    binary=True,
)

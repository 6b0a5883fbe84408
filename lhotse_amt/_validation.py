"""Input validation shared by the models, blocks and extractors: clear errors, never silent
wrong answers.

Conventions (every helper follows them, so messages read alike everywhere):

* a value of the wrong *type* raises :class:`TypeError`; a value of the right type outside
  what is allowed raises :class:`ValueError`;
* every message names the field (``name``), the value given and what is allowed;
* ``bool`` is never accepted as a number (``True`` is not a sampling rate), ints are accepted
  where floats are expected, numpy scalars are accepted like Python numbers;
* number checks return the value converted to a Python ``float``/``int``.

Signals: :func:`check_signal` (tensors: real floating dtype, dimensions, length, finite)
and :func:`as_float_tensor` (numpy/torch audio to a floating tensor). Integer or bool PCM
raises ``ValueError`` saying the audio must be floating point (scale it to [-1, 1] first).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Collection
from typing import Any

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "FLOAT_DTYPES",
    "MAX_SAMPLING_RATE",
    "as_float_tensor",
    "check_band",
    "check_bool",
    "check_broadcast",
    "check_choice",
    "check_device",
    "check_dtype",
    "check_frequencies",
    "check_indices",
    "check_kwargs",
    "check_int",
    "check_level_db",
    "check_number",
    "check_positive_finite",
    "check_preset",
    "check_real_array",
    "check_rate",
    "check_signal",
    "check_str",
    "check_tensor",
    "describe_value",
    "is_real_number",
    "normalise_sections",
]

#: the floating dtypes the models, kernels and operators compute in
FLOAT_DTYPES = (torch.float32, torch.float64)

#: highest sampling rate (Hz) any model or extractor accepts; far above any audio format,
#: low enough that a mistyped rate fails at once instead of designing huge filters
MAX_SAMPLING_RATE = 1_000_000.0

#: dB SPL range accepted for level settings (``full_scale_db_spl``, ``target_level_db_spl``,
#: ``dboffset``): far beyond any physical sound (~194 dB SPL in air) on both sides
LEVEL_DB_RANGE = (-50.0, 200.0)


# ------------------------------------------------------------------------------ scalars
def is_real_number(value: Any) -> bool:
    """Whether ``value`` is a real scalar number (Python or numpy), excluding ``bool``."""
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _type_name(value: Any) -> str:
    return type(value).__name__


def describe_value(v: Any) -> str:
    """A short description of an argument for a message: a tensor's dtype and shape, or
    the type."""
    if isinstance(v, Tensor):
        return f"{v.dtype} tensor of shape {tuple(v.shape)}"
    return _type_name(v)


def _type_error(name: str, expected: str, value: Any, allow_none: bool) -> TypeError:
    """``TypeError``: ``name`` must be ``expected`` (or None), naming the value given."""
    none = " or None" if allow_none else ""
    return TypeError(f"{name} must be {expected}{none}, got {value!r} ({_type_name(value)})")


def check_number(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    max: float | None = None,
    min_inclusive: bool = True,
    max_inclusive: bool = True,
    finite: bool = True,
    allow_none: bool = False,
    unit: str = "",
) -> float | None:
    """A real number (ints and numpy scalars accepted, bool not) within ``[min, max]``
    (bounds exclusive with ``min_inclusive``/``max_inclusive`` False), finite unless
    ``finite=False``. Returns it as a Python ``float`` (``None`` passes with
    ``allow_none``). Raises ``TypeError`` for other types, ``ValueError`` for other
    values."""
    if value is None and allow_none:
        return None
    if not is_real_number(value):
        raise _type_error(name, "a real number", value, allow_none)
    v = float(value)
    u = f" {unit}" if unit else ""
    # comparisons, not math.isnan/isinf: under torch.compile a model attribute can arrive
    # as a symbolic float, which comparisons guard on and math functions cannot trace
    if v != v or (finite and abs(v) == math.inf):
        raise ValueError(f"{name} must be a finite number, got {value!r}")
    lo_bad = min is not None and (v < min if min_inclusive else v <= min)
    hi_bad = max is not None and (v > max if max_inclusive else v >= max)
    if lo_bad or hi_bad:
        lo = "" if min is None else f"{'>=' if min_inclusive else '>'} {min:g}{u}"
        hi = "" if max is None else f"{'<=' if max_inclusive else '<'} {max:g}{u}"
        allowed = " and ".join(s for s in (lo, hi) if s)
        raise ValueError(f"{name} must be {allowed}, got {value!r}")
    return v


def check_positive_finite(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A finite number ``> 0`` (see :func:`check_number`)."""
    return check_number(name, value, min=0.0, min_inclusive=False, allow_none=allow_none)


def check_int(
    name: str,
    value: Any,
    *,
    min: int | None = None,
    max: int | None = None,
    allow_none: bool = False,
    allow_integral_float: bool = False,
) -> int | None:
    """An integer (Python or numpy; not bool) within ``[min, max]``. With
    ``allow_integral_float`` a float with an integral value (``16000.0``) is accepted too.
    Returns a Python ``int``."""
    if value is None and allow_none:
        return None
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise _type_error(name, "an integer", value, allow_none)
    if not isinstance(value, numbers.Integral):
        v = float(value)
        if not allow_integral_float:
            raise _type_error(name, "an integer", value, False)
        if not math.isfinite(v) or v != int(v):
            raise ValueError(f"{name} must be an integer, got {value!r}")
    out = int(value)
    if (min is not None and out < min) or (max is not None and out > max):
        lo = "" if min is None else f">= {min}"
        hi = "" if max is None else f"<= {max}"
        raise ValueError(f"{name} must be {' and '.join(s for s in (lo, hi) if s)}, got {value!r}")
    return out


def check_rate(name: str, fs: Any, *, integral: bool = False) -> float:
    """A sampling rate in Hz: a finite number in ``(0, MAX_SAMPLING_RATE]`` (bool is not a
    rate). With ``integral`` the value must be a whole number of Hz (``16000.0`` is fine,
    ``16000.5`` is not). Returns a ``float`` (an ``int`` with ``integral``)."""
    if not is_real_number(fs):
        raise TypeError(
            f"{name} must be a sampling rate in Hz (a number), got {fs!r} ({_type_name(fs)})"
        )
    v = float(fs)
    if not math.isfinite(v) or v <= 0.0 or v > MAX_SAMPLING_RATE:
        raise ValueError(
            f"{name} must be a finite sampling rate > 0 and <= {MAX_SAMPLING_RATE:g} Hz, got {fs!r}"
        )
    if integral:
        if v != math.floor(v):
            raise ValueError(
                f"{name} must be a whole number of Hz, got {fs!r} (a fractional rate would be "
                "truncated); resample the audio to an integer rate"
            )
        return int(v)
    return v


def check_band(
    lo: Any, hi: Any, *, names: tuple[str, str] = ("flow", "fhigh")
) -> tuple[float, float]:
    """Two finite frequencies (Hz) with ``0 < lo < hi``; returns them as floats."""
    a = check_positive_finite(names[0], lo)
    b = check_positive_finite(names[1], hi)
    if not a < b:
        raise ValueError(
            f"{names[0]} must be below {names[1]}, got {names[0]}={lo!r}, {names[1]}={hi!r}"
        )
    return a, b


def check_real_array(
    name: str,
    value: Any,
    *,
    min: float | None = None,
    min_inclusive: bool = True,
    unit: str = "",
) -> np.ndarray:
    """Real numbers (a number, sequence, numpy array or tensor) as a float64 array of the
    same shape, every one finite and ``>= min`` (``> min`` without ``min_inclusive``).
    ``TypeError`` for strings, bools, complex or ragged values, ``ValueError`` for others."""
    if isinstance(value, Tensor):
        value = value.detach().cpu().numpy()
    try:
        a = np.asarray(value)
    except ValueError:  # ragged sequences
        a = np.asarray(None)
    if a.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be real numbers, got {value!r} ({_type_name(value)})")
    a = a.astype(np.float64)
    bad = ~np.isfinite(a)
    if min is not None:
        bad |= a < min if min_inclusive else a <= min
    if bad.any():
        lo = "" if min is None else f" and {'>=' if min_inclusive else '>'} {min:g}"
        u = f" {unit}" if unit else ""
        raise ValueError(f"{name} must be finite{lo}{u}, got {a[bad][:4]}")
    return a


def check_frequencies(name: str, f: Any) -> np.ndarray:
    """``(C,)`` frequencies in Hz (a number, sequence or array), non-empty, finite and
    ``> 0``; returns them as a 1-D float64 array."""
    a = np.atleast_1d(check_real_array(name, f, min=0.0, min_inclusive=False, unit="Hz"))
    if a.ndim != 1 or a.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array of frequencies, got {a.shape}")
    return a


def check_level_db(name: str, value: Any, *, allow_none: bool = False) -> float | None:
    """A level in dB SPL, finite and within :data:`LEVEL_DB_RANGE` (-50 ... 200 dB SPL)."""
    return check_number(
        name,
        value,
        min=LEVEL_DB_RANGE[0],
        max=LEVEL_DB_RANGE[1],
        allow_none=allow_none,
        unit="dB SPL",
    )


def check_bool(name: str, value: Any, *, allow_none: bool = False) -> bool | None:
    """``True``/``False`` (or numpy bool). Strings such as ``"no"`` and numbers are a
    ``TypeError``: they would otherwise be read by truthiness."""
    if value is None and allow_none:
        return None
    if not isinstance(value, (bool, np.bool_)):
        raise _type_error(name, "True or False", value, allow_none)
    return bool(value)


def check_str(name: str, value: Any, *, allow_none: bool = False) -> str | None:
    """A string (``TypeError`` otherwise)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, str):
        raise _type_error(name, "a string", value, allow_none)
    return value


def _same_kind(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are comparable choices (bool, str, None, numbers apart)."""
    for kind in ((bool, np.bool_), str, type(None)):
        if isinstance(a, kind) or isinstance(b, kind):
            return isinstance(a, kind) and isinstance(b, kind)
    if is_real_number(a) and is_real_number(b):
        return True
    return type(a) is type(b)


def check_choice(name: str, value: Any, allowed: Collection[Any]) -> Any:
    """One of ``allowed`` (include ``None`` there to allow it). A value of a type none of
    the allowed values has raises ``TypeError`` (``"no"`` for a bool, ``1`` for a string),
    another value ``ValueError``; both messages list the allowed values."""
    options = list(allowed)
    kinds = [o for o in options if _same_kind(value, o)]
    if any(value == o for o in kinds):
        return value
    if not kinds:
        raise TypeError(f"{name} must be one of {options}, got {value!r} ({_type_name(value)})")
    raise ValueError(f"{name} must be one of {options}, got {value!r}")


def check_preset(what: str, value: Any, presets: Collection[str]) -> str:
    """A key of ``presets`` (``ValueError`` naming ``what`` and listing the keys
    otherwise)."""
    if not isinstance(value, str) or value not in presets:
        raise ValueError(f"unknown {what} {value!r}; choose from {sorted(presets)}")
    return value


def check_dtype(
    name: str,
    dtype: Any,
    allowed: Collection[torch.dtype] = FLOAT_DTYPES,
) -> torch.dtype:
    """A :class:`torch.dtype` among ``allowed`` (default float32/float64)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(
            f"{name} must be a torch.dtype ({', '.join(map(str, allowed))}), got {dtype!r} "
            f"({_type_name(dtype)})"
        )
    if dtype not in tuple(allowed):
        raise ValueError(f"{name} must be one of {', '.join(map(str, allowed))}, got {dtype}")
    return dtype


def check_kwargs(name: str, value: Any) -> dict:
    """An optional keyword-argument dict (``None`` gives ``{}``); its keys must be str."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _type_error(name, "a dict", value, True)
    bad = [k for k in value if not isinstance(k, str)]
    if bad:
        raise TypeError(f"{name} keys must be strings, got {bad!r}")
    return dict(value)


def check_device(name: str, device: Any) -> torch.device:
    """A valid torch device (string or :class:`torch.device`) that exists on this machine:
    ``"cuda"`` without CUDA is a ``ValueError`` saying so (rather than an assertion inside
    torch at the first computation)."""
    if not isinstance(device, (str, torch.device)):
        raise TypeError(
            f"{name} must be a torch device string such as 'cpu' or 'cuda:0', got {device!r} "
            f"({_type_name(device)})"
        )
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as e:
        raise ValueError(
            f"{name}={device!r} is not a valid torch device (e.g. 'cpu', 'cuda', 'cuda:1'): {e}"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(
                f"{name}={device!r} requested but CUDA is not available on this machine; "
                'use device="cpu"'
            )
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(
                f"{name}={device!r}: this machine has {torch.cuda.device_count()} CUDA device(s)"
            )
    elif dev.type not in ("cpu", "cuda"):
        avail = {
            "mps": lambda: torch.backends.mps.is_available(),
            "meta": lambda: True,
        }.get(dev.type)
        if avail is None or not avail():
            raise ValueError(
                f"{name}={device!r}: device type {dev.type!r} is not available here; use "
                '"cpu" or "cuda"'
            )
    return dev


# ------------------------------------------------------------------------------ signals
def as_float_tensor(x: np.ndarray | Tensor, dtype: torch.dtype | None = None) -> Tensor:
    """Convert numpy/torch audio to a floating tensor; reject integer PCM, bool and complex
    (``ValueError``) and other types (``TypeError``)."""
    if isinstance(x, np.ndarray):
        if not np.issubdtype(x.dtype, np.floating):
            raise ValueError(
                f"audio must be floating point (got numpy dtype {x.dtype}); integer PCM must be "
                "scaled to [-1, 1] first (e.g. x / 32768 for int16)"
            )
        x = torch.from_numpy(np.ascontiguousarray(x))
    elif isinstance(x, Tensor):
        if not x.is_floating_point():
            raise ValueError(
                f"audio must be floating point (got torch dtype {x.dtype}); integer PCM must be "
                "scaled to [-1, 1] first (e.g. x / 32768 for int16)"
            )
    else:
        raise TypeError(f"audio must be a numpy array or torch tensor, got {type(x).__name__}")
    return x if dtype is None else x.to(dtype)


def check_signal(
    x: Any,
    min_samples: int = 1,
    max_dim: int | None = 2,
    what: str | None = None,
    *,
    name: str | None = None,
    min_dim: int = 1,
    finite: bool = True,
    allow_empty: bool = False,
    dtypes: Collection[torch.dtype] | None = None,
) -> Tensor:
    """Check a signal tensor with time on the last axis and return it.

    ``TypeError`` if ``x`` is not a :class:`torch.Tensor`; ``ValueError`` if its dtype is
    not real floating point (integer PCM, bool, complex), if it has fewer than ``min_dim``
    or more than ``max_dim`` (``None``: any number of) dimensions, fewer than
    ``min_samples`` samples on the last axis, no elements (unless ``allow_empty``), or
    (``finite``) NaN/inf samples, or (``dtypes`` given) a dtype not among ``dtypes``.
    ``name`` (or the older ``what``) names the argument in the messages.
    """
    label = name or what or "signal"
    if not isinstance(x, Tensor):
        raise TypeError(f"{label} must be a torch.Tensor, got {_type_name(x)}")
    if not x.is_floating_point():
        raise ValueError(
            f"{label} must be a real floating point tensor (float32/float64), got dtype "
            f"{x.dtype}; integer PCM must be scaled to [-1, 1] first (e.g. x / 32768 for int16)"
        )
    if dtypes is not None and x.dtype not in tuple(dtypes):
        raise ValueError(f"{label} must have dtype {' or '.join(map(str, dtypes))}, got {x.dtype}")
    if x.dim() < min_dim or (max_dim is not None and x.dim() > max_dim):
        if max_dim is None:
            rng = f"at least {min_dim}"
        elif min_dim == max_dim:
            rng = f"{min_dim}"
        else:
            rng = f"{min_dim} to {max_dim}"
        tail = " with time last" if min_dim >= 1 else ""
        raise ValueError(f"{label} must have {rng} dimensions{tail}, got shape {tuple(x.shape)}")
    if x.dim() >= 1 and x.shape[-1] < min_samples:
        raise ValueError(
            f"{label} is too short: {x.shape[-1]} samples, need at least {min_samples}"
        )
    if x.numel() == 0 and not allow_empty:
        raise ValueError(f"{label} is an empty batch (shape {tuple(x.shape)})")
    if finite:
        if torch.compiler.is_compiling():
            # traced graphs (torch.compile / torch.export) keep the check as a run-time
            # assertion instead of a data-dependent branch
            torch._assert_async(torch.isfinite(x).all(), f"{label} contains NaN or inf samples")
        elif not _all_finite(x):
            raise ValueError(f"{label} contains NaN or infinite samples")
    return x


def check_tensor(
    name: str,
    value: Any,
    *,
    real_ok: bool = True,
    complex_ok: bool = False,
    trailing: tuple[int, ...] = (),
    min_dim: int = 0,
    max_dim: int | None = None,
    shape: str = "",
    allow_none: bool = False,
) -> Tensor | None:
    """A coefficient or state tensor: real floating (``real_ok``) or complex (``complex_ok``)
    dtype, at least ``min_dim`` (at most ``max_dim``) dimensions and the last axes of sizes
    ``trailing`` (``shape`` describes the expected shape in the message). ``TypeError`` for another
    type or dtype (integer and bool tensors included), ``ValueError`` for another shape;
    the values are not read (no data-dependent check)."""
    if value is None and allow_none:
        return None
    if not isinstance(value, Tensor):
        none = " or None" if allow_none else ""
        raise TypeError(f"{name} must be a torch.Tensor{none}, got {_type_name(value)}")
    kinds = [k for k, ok in (("real floating", real_ok), ("complex", complex_ok)) if ok]
    if not ((real_ok and value.is_floating_point()) or (complex_ok and value.is_complex())):
        raise TypeError(f"{name} must be a {' or '.join(kinds)} tensor, got dtype {value.dtype}")
    n = len(trailing)
    bad_dim = value.dim() < max(min_dim, n) or (max_dim is not None and value.dim() > max_dim)
    if bad_dim or tuple(value.shape[value.dim() - n :]) != trailing:
        want = shape or f"(..., {', '.join(map(str, trailing))})"
        raise ValueError(f"{name} must have shape {want}, got {tuple(value.shape)}")
    return value


def check_indices(name: str, value: Any, *, allow_none: bool = True) -> Tensor | None:
    """A 1-d int64 or int32 tensor of indices (``None`` passes with ``allow_none``);
    ``TypeError`` otherwise (the values are not read)."""
    if value is None and allow_none:
        return None
    if not (
        isinstance(value, Tensor) and value.dim() == 1 and value.dtype in (torch.int64, torch.int32)
    ):
        none = " or None" if allow_none else ""
        raise TypeError(
            f"{name} must be a 1-d int64/int32 tensor{none}, got {describe_value(value)}"
        )
    return value


def check_broadcast(*shapes: tuple[str, tuple[int, ...]]) -> torch.Size:
    """The broadcast of the named shapes ``(name, shape)``; ``ValueError`` listing them all
    where they do not broadcast (rather than torch's message without argument names)."""
    dims = [tuple(s) for _, s in shapes]
    try:
        if torch.compiler.is_compiling() or not all(type(d) is int for s in dims for d in s):
            return torch.broadcast_shapes(*dims)  # symbolic sizes while tracing
        # plain ints: numpy's rule, the same; torch.broadcast_shapes imports its symbolic
        # shape machinery (sympy, ~0.2 CPU-s) at its first call, which a first extract pays
        return torch.Size(np.broadcast_shapes(*dims))
    except (RuntimeError, ValueError):
        listed = ", ".join(f"{name} {tuple(s)}" for name, s in shapes)
        raise ValueError(f"shapes do not broadcast: {listed}") from None


def require(condition: torch.Tensor, message: str) -> None:
    """Raise ``ValueError(message)`` unless the boolean tensor ``condition`` holds.

    While ``torch.compile``/``torch.export`` trace the caller the check becomes a
    run-time assertion in the graph (a data-dependent ``if`` would break the graph).
    """
    if torch.compiler.is_compiling():
        torch._assert_async(condition, message)
    elif not bool(condition):
        raise ValueError(message)


def normalise_sections(sos: torch.Tensor, name: str = "sos") -> torch.Tensor:
    """Second-order sections ``(..., S, 6)`` divided by their ``a0 = sos[..., 3]``, which
    must be nonzero (``ValueError``). The filter kernels take ``a0 = 1``; the division is
    exact for sections that have it and, being differentiable, gives a learnable ``a0``
    its gradient."""
    require((sos[..., 3] != 0).all(), f"{name}[..., 3] (each section's a0) must be nonzero")
    return sos / sos[..., 3:4]


def _all_finite(x: torch.Tensor) -> bool:
    """Whether every element is finite; for CPU tensors by numpy on the calling thread (a
    torch reduction over a long signal opens a thread pool that oversubscribes a busy
    machine)."""
    if x.device.type == "cpu" and x.dtype in FLOAT_DTYPES:
        return bool(np.isfinite(x.detach().numpy()).all())
    return bool(torch.isfinite(x).all())

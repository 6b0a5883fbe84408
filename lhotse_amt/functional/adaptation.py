"""Adaptation loops (Dau, Püschel & Kohlrausch 1996a; Münkner, Kohlrausch & Püschel 1996).

Five divisive feedback loops in series model neural adaptation. Per channel and sample
(AMT ``adaptloop``/``comp_adaptloop``; the same numerics in AMT 0.9.10 and 1.4):

* ``v = max(x, minlvl)``;
* for loop ``j = 1 ... J``: ``v = v / s_j``; if ``limit > 1`` and ``v > 1`` the overshoot
  limitation ``v = 2 m_j / (1 + exp(-2 (v - 1) / m_j)) - (m_j - 1)``; then the low-pass state
  update ``s_j = a_j s_j + (1 - a_j) v``, with ``a_j = exp(-1 / (tau_j fs))``;
* output ``(v - c) * 100 / (1 - c)`` with ``c = minlvl^(1 / 2^J)`` (model units, "MU":
  silence maps to 0).

The initial states are the steady state for an input at ``minlvl``:
``s_j(0) = minlvl^(1 / 2^j)``, and ``m_j = (1 - s_j(0)^2) limit - 1``.
``minlvl = 10^((minspl - dboffset) / 20)`` (``1e-5`` for 0 dB SPL on the AMT 100-dB scale).

Two implementations with one semantics: :func:`adaptation_loops_reference` (plain torch,
a loop over samples: the definition, differentiable, slow) and the registered operator
``lhotse_amt::adaptation_loops`` (:mod:`lhotse_amt.ops`: compiled CPU and CUDA kernels
picked by the torch dispatcher, with a compiled backward), which :func:`adaptation_loops`
runs unless ``backend="reference"``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _validation as V
from .._validation import (
    check_bool,
    check_broadcast,
    check_number,
    check_rate,
    check_signal,
    require,
)

__all__ = [
    "ADAPTATION_PRESETS",
    "adaptation_coefficients",
    "adaptation_initial_state",
    "adaptation_loops",
    "adaptation_loops_reference",
]

ADAPTATION_PRESETS: dict[str, dict] = {
    # Dau et al. (1997): tau = 5, 50, 129, 253, 500 ms; overshoot limit 10 (Münkner 1996)
    "dau1997": dict(tau=(0.005, 0.050, 0.129, 0.253, 0.500), limit=10.0, minspl=0.0),
    # Osses & Kohlrausch (2021), AMT adt_osses2021: limit 5
    "osses2021": dict(tau=(0.005, 0.050, 0.129, 0.253, 0.500), limit=5.0, minspl=0.0),
    # Dau et al. (1996a): no overshoot limitation
    "dau1996": dict(tau=(0.005, 0.050, 0.129, 0.253, 0.500), limit=0.0, minspl=0.0),
    # Paulick et al. (2024): as Jepsen et al. (2008) / osses2021, limit 5
    "paulick2024": dict(tau=(0.005, 0.050, 0.129, 0.253, 0.500), limit=5.0, minspl=0.0),
}


def adaptation_coefficients(
    tau: Tensor, fs: float, limit: float, minlvl: float
) -> tuple[Tensor, Tensor, Tensor]:
    """Loop coefficients ``a_j`` ``(..., J)``, limiter constants ``m_j`` and states ``s_j(0)``.

    ``tau`` may carry gradients (learnable time constants); ``m_j`` and ``s_j(0)`` depend
    only on ``minlvl`` and ``limit``.
    """
    V.check_tensor("tau", tau, min_dim=1, shape="(..., J)")
    J = tau.shape[-1]
    a = torch.exp(-1.0 / (tau * fs))
    s0 = adaptation_initial_state(J, minlvl, dtype=tau.dtype, device=tau.device)
    m = (1.0 - s0**2) * limit - 1.0
    return a, m, s0


def adaptation_initial_state(
    n_loops: int, minlvl: float, dtype: torch.dtype = torch.float64, device: str | None = None
) -> Tensor:
    """``s_j(0) = minlvl^(1/2^j)``, ``j = 1 ... J`` (steady state at the minimum level)."""
    V.check_int("n_loops", n_loops, min=1)
    V.check_positive_finite("minlvl", minlvl)
    j = torch.arange(1, n_loops + 1, dtype=torch.float64)
    return (minlvl ** (1.0 / 2.0**j)).to(dtype=dtype, device=device)


def _output_scale(minlvl: float, n_loops: int) -> tuple[float, float]:
    c = minlvl ** (1.0 / 2.0**n_loops)
    return c, 100.0 / (1.0 - c)


def adaptation_loops_reference(
    x: Tensor,
    a: Tensor,
    m: Tensor,
    minlvl: float,
    limit: float,
    state: Tensor,
) -> tuple[Tensor, Tensor]:
    """Plain-torch definition of the loops: returns the raw loop output ``v`` and the
    final states. ``x (..., T)``; ``a, m (..., J)`` broadcast with ``x.shape[:-1]``;
    ``state (..., J)``. Loops over samples in Python: use only for tests and gradients.
    """
    J = a.shape[-1]
    lead = check_broadcast(("x", x.shape[:-1]), ("a", a.shape[:-1]), ("state", state.shape[:-1]))
    s = [state.expand(*lead, J)[..., j] for j in range(J)]
    aa = [a.expand(*lead, J)[..., j] for j in range(J)]
    mm = [m.expand(*lead, J)[..., j] for j in range(J)]
    use_limit = limit > 1.0
    out = []
    xc = torch.clamp(x, min=minlvl)
    for n in range(x.shape[-1]):
        v = xc[..., n]
        for j in range(J):
            v = v / s[j]
            if use_limit:
                lim = 2.0 * mm[j] / (1.0 + torch.exp(-2.0 * (v - 1.0) / mm[j])) - (mm[j] - 1.0)
                v = torch.where(v > 1.0, lim, v)
            s[j] = aa[j] * s[j] + (1.0 - aa[j]) * v
        out.append(v)
    y = torch.stack(out, -1) if out else x.new_zeros((*lead, 0))
    return y, torch.stack(s, -1)


def adaptation_loops(
    x: Tensor,
    fs: float,
    tau: Tensor | tuple[float, ...] = ADAPTATION_PRESETS["dau1997"]["tau"],
    limit: float = 10.0,
    minspl: float = 0.0,
    dboffset: float = 100.0,
    state: Tensor | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Adaptation loops on ``x (..., T)`` (non-negative IHC output, AMT level scale).

    Args:
        x: ``(..., T)``; the loops act independently on every leading index.
        fs: sampling rate in Hz.
        tau: time constants in seconds ``(J,)`` or per channel ``(..., J)``.
        limit: overshoot limitation factor (``<= 1`` disables it).
        minspl: minimum level in dB SPL; with ``dboffset`` (the dB SPL of amplitude 1)
            it gives ``minlvl = 10^((minspl - dboffset) / 20)``.
        state: loop states ``(..., J)`` from a previous call; the steady state at
            ``minlvl`` if ``None``.
        backend: ``"auto"`` (the operator: compiled CPU/CUDA kernels, compiled
            backward) or ``"reference"`` (the plain-torch loop over samples).

    Returns:
        ``(..., T)`` in model units (and the final states if ``return_state``).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, max_dim=None, allow_empty=True, name="x")
    check_rate("fs", fs)
    check_number("limit", limit)
    check_number("dboffset", dboffset)
    # minspl >= dboffset puts the minimum level at or above 1, where the output scale
    # 100 / (1 - minlvl^(1/2^J)) divides by zero or changes sign
    check_number("minspl", minspl, max=dboffset, max_inclusive=False, unit="dB SPL (dboffset)")
    if not torch.is_tensor(tau):
        tau = torch.as_tensor(tau, dtype=x.dtype)
    require((torch.isfinite(tau) & (tau > 0)).all(), "tau: time constants must be finite and > 0 s")
    tau = tau.to(device=x.device, dtype=x.dtype if x.is_floating_point() else torch.float32)
    V.check_tensor("tau", tau, min_dim=1, shape="(..., J)")
    minlvl = 10.0 ** ((minspl - dboffset) / 20.0)
    a, m, s0 = adaptation_coefficients(tau, fs, limit, minlvl)
    J = tau.shape[-1]
    lead = V.check_broadcast(("x", x.shape[:-1]), ("tau", tau.shape[:-1]))
    if state is None:
        state = s0.expand(*lead, J)
    V.check_tensor("state", state, trailing=(J,))
    V.check_broadcast(("x", x.shape[:-1]), ("tau", tau.shape[:-1]), ("state", state.shape[:-1]))
    if backend not in ("auto", "numba", "triton", "torch", "reference"):
        raise ValueError(
            f"backend must be 'auto' (the operator; 'numba'/'triton' name it too) or "
            f"'reference' ('torch'), got {backend!r}"
        )
    if backend in ("torch", "reference"):
        v, s = adaptation_loops_reference(x, a, m, minlvl, limit, state)
    else:
        from .. import ops

        v, s = ops.adaptation_loops_raw(x, a, m, minlvl, limit > 1.0, state)
    c, scale = _output_scale(minlvl, J)
    y = (v - c) * scale
    return (y, s) if return_state else y

"""Physiological inner-hair-cell (IHC) transduction of the revised CASP model
(Paulick, Relaño-Iborra & Dau 2024), after the IHC models of Altoè, Pulkki & Verhulst
(2018) and Verhulst, Altoè & Vasilkov (2018).

Per auditory channel, on the basilar-membrane velocity ``v`` (DRNL output, ``(..., C, T)``):

1. stereocilia displacement ``d = alpha v`` in metres, ``alpha = 10^(-105/20)``;
2. mechano-electrical transducer (MET) conductance, a second-order Boltzmann function
   ``G(d) = Gmax / (1 + exp((x0 - d) / s1) (1 + exp((x0 - d) / s0)))`` (siemens);
3. membrane circuit ``Cm dV/dt = -G (V - EP) - Gkf (V - Ekf) - Gks (V - Eks)`` (volts),
   integrated with the forward Euler method at ``dt = 1 / fs``::

       V[n] = V[n-1] + dt / Cm * (-G[n] (V[n-1] - EP) - Gkf (V[n-1] - Ekf) - Gks (V[n-1] - Eks))

4. pre-charge: before the signal, the circuit runs for ``precharge_duration`` (50 ms) from
   ``V = V_rest`` with the fixed conductance ``G_precharge`` (the MET conductance at rest,
   ``G(0)``), which brings it to its resting state ``V_pre``;
5. output: the receptor potential relative to that level, ``V[n] - V_pre`` (volts).

The 13 constants (siemens, metres, volts, farads):

==================  ======================  ==================================
``scaling_factor``  ``10^(-105/20)``        velocity -> displacement (m)
``Gmet_max``        30 nS                   maximum MET conductance
``x0``              20 nm                   displacement bias
``s0``              16 nm                   fast sensitivity
``s1``              35 nm                   slow sensitivity
``EP``              90 mV                   endocochlear potential
``Cm``              12.5 pF                 membrane capacitance
``Gkf``, ``Gks``    19.8 nS each            fast / slow K+ conductances
``Ekf``, ``Eks``    -71 mV, -78 mV          fast / slow K+ reversal potentials
``V_rest``          -57.03 mV               start of the pre-charge
``G_precharge``     3.3514 nS               pre-charge conductance (= ``G(0)``)
==================  ======================  ==================================

**Resting potential.** With constant K+ conductances the circuit's resting potential is
``V_ss = (G EP + Gkf Ekf + Gks Eks) / (G + Gkf + Gks)`` = **-61.66 mV** for
``G = G_precharge``, not the documented -57.03 mV (that value belongs to the full model of
Verhulst et al. 2018, whose K+ conductances are voltage dependent). The membrane time
constant is ``Cm / (G + Gkf + Gks)`` = 0.29 ms, so the 50-ms pre-charge from -57.03 mV lands
on ``V_ss`` (to ``exp(-170)``): ``V_pre = V_ss`` in practice and silence gives an output of
(almost exactly) 0. We keep the documented constants and procedure; the pre-charge is
evaluated in closed form, ``V_pre = V_ss + (V_rest - V_ss) (1 - r)^N`` with
``r = dt (G_precharge + Gkf + Gks) / Cm`` and ``N = round(precharge_duration fs)`` (the
exact value of ``N`` forward-Euler steps).

**Saturation.** ``G`` is bounded by ``[0, Gmax]`` and every Euler step is a convex
combination of ``V`` and the instantaneous equilibrium (``dt (G + Gkf + Gks) / Cm < 1``
for ``fs`` above about 5.6 kHz), so ``V`` stays between ``(Gkf Ekf + Gks Eks) / (Gkf + Gks)``
= -74.5 mV (``G = 0``) and ``(Gmax EP + Gkf Ekf + Gks Eks) / (Gmax + Gkf + Gks)`` = -3.6 mV
(``G = Gmax``): the output saturates at -12.84 mV and +58.07 mV re ``V_pre``.

**Numerics.** The recursion runs on the deviation ``W = V - V_pre`` (mathematically the same
recursion; in float32 it keeps the resolution of the small deviations that the
adaptation loops see, down to their 1e-5 minimum level). The exponent ``(x0 - d)`` is
capped at ``60 s0`` (``d < -940 nm``, where ``G < 1e-45`` S) so that neither ``exp`` nor the
gradient overflow. Sampling rates at which ``dt (Gmax + Gkf + Gks) / Cm`` reaches 1 (below
about 5.6 kHz) are rejected.

Four implementations share this semantics: :func:`ihc_paulick_reference` (plain torch,
loop over samples: the definition, differentiable with respect to the input and all 13
constants), the registered operator ``lhotse_amt::ihc_paulick``
(:func:`lhotse_amt.ops.ihc_paulick_recursion`: compiled CPU/CUDA kernels, float64
recursion, compiled backward; what :func:`ihc_paulick` runs while autograd records, on
CUDA and under ``torch.compile`` / ``torch.export``), and the no-grad operator
``lhotse_amt::paulick_ihc`` (:func:`lhotse_amt.ops.paulick.ihc`: a numba kernel on the
CPU, a Triton kernel on CUDA, recursion in the signal's dtype; eager inference).
"""

from __future__ import annotations

import torch
from torch import Tensor

from .._validation import (
    check_bool,
    check_broadcast,
    check_choice,
    check_positive_finite,
    check_rate,
    check_signal,
    check_tensor,
    require,
)
from .iir import resolve_backend

__all__ = [
    "IHC_PAULICK_CONSTANTS",
    "ihc_step_constants",
    "precharge_level",
    "resting_potential",
    "met_conductance",
    "ihc_paulick_reference",
    "ihc_paulick",
]

#: the 13 constants (SI units) and their order
IHC_PAULICK_CONSTANTS: dict[str, float] = {
    "scaling_factor": 10.0 ** (-105.0 / 20.0),
    "Gmet_max": 30e-9,
    "x0": 20e-9,
    "s0": 16e-9,
    "s1": 35e-9,
    "EP": 90e-3,
    "Cm": 12.5e-12,
    "Gkf": 19.8e-9,
    "Gks": 19.8e-9,
    "Ekf": -71e-3,
    "Eks": -78e-3,
    "V_rest": -57.03e-3,
    "G_precharge": 3.3514e-9,
}

#: cap of ``(x0 - d) / s0`` (see the module docstring)
ZMAX_OVER_S0 = 60.0


def met_conductance(d: Tensor, p: dict[str, Tensor | float]) -> Tensor:
    """MET conductance ``G(d)`` (S) for displacement ``d`` (m), exponent capped at ``60 s0``."""
    z = torch.minimum(p["x0"] - d, torch.as_tensor(ZMAX_OVER_S0) * p["s0"])
    return p["Gmet_max"] / (1.0 + torch.exp(z / p["s1"]) * (1.0 + torch.exp(z / p["s0"])))


def resting_potential(p: dict[str, Tensor | float], G: Tensor | float | None = None) -> Tensor:
    """Steady state ``V_ss`` (V) of the circuit at conductance ``G`` (default ``G_precharge``)."""
    G = p["G_precharge"] if G is None else G
    num = G * p["EP"] + p["Gkf"] * p["Ekf"] + p["Gks"] * p["Eks"]
    return torch.as_tensor(num / (G + p["Gkf"] + p["Gks"]))


def precharge_level(p: dict[str, Tensor | float], fs: float, duration: float = 0.05) -> Tensor:
    """``V_pre``: the potential after ``round(duration fs)`` Euler steps from ``V_rest`` at
    ``G_precharge`` (closed form, differentiable)."""
    n = int(round(duration * fs))
    r = (p["G_precharge"] + p["Gkf"] + p["Gks"]) / (p["Cm"] * fs)
    vss = resting_potential(p)
    return vss + (p["V_rest"] - vss) * torch.as_tensor(1.0 - r) ** n


def ihc_step_constants(p: dict[str, Tensor | float], fs: float, duration: float = 0.05) -> dict:
    """Constants of the deviation recursion ``W[n] = W[n-1] + k (-G (W + dEP) - Gkf (W + dKf)
    - Gks (W + dKs))`` with ``k = dt / Cm`` and ``dE = V_pre - E`` (tensors)."""
    vpre = precharge_level(p, fs, duration)
    t = lambda v: torch.as_tensor(v)  # noqa: E731
    return {
        "scale": t(p["scaling_factor"]),
        "gmax": t(p["Gmet_max"]),
        "x0": t(p["x0"]),
        "s0": t(p["s0"]),
        "s1": t(p["s1"]),
        "zmax": t(ZMAX_OVER_S0 * p["s0"]),
        "k": t(1.0 / (p["Cm"] * fs)),
        "gkf": t(p["Gkf"]),
        "gks": t(p["Gks"]),
        "dep": vpre - p["EP"],
        "dkf": vpre - p["Ekf"],
        "dks": vpre - p["Eks"],
        "vpre": vpre,
    }


def _check_fs(p: dict, fs: float) -> None:
    check_rate("fs", fs)
    gmax_step = (p["Gmet_max"] + p["Gkf"] + p["Gks"]) / (p["Cm"] * fs)
    if torch.is_tensor(gmax_step):
        if torch.compiler.is_compiling():
            # a run-time assertion in traced graphs (no data-dependent branch)
            require(
                gmax_step.detach() < 1.0,
                f"fs={fs:g} Hz is too low for the forward-Euler IHC circuit: dt (Gmax + Gkf "
                f"+ Gks) / Cm must stay below 1",
            )
            return
        gmax_step = float(gmax_step.detach())
    if not gmax_step < 1.0:
        raise ValueError(
            f"fs={fs:g} Hz is too low for the forward-Euler IHC circuit (dt (Gmax + Gkf + Gks) "
            f"/ Cm = {gmax_step:.3g} >= 1); use fs >= "
            f"{float((p['Gmet_max'] + p['Gkf'] + p['Gks']) / p['Cm']):.0f} Hz"
        )


def ihc_paulick_reference(
    x: Tensor, c: dict[str, Tensor], state: Tensor | None = None
) -> tuple[Tensor, Tensor]:
    """Plain-torch definition (loop over samples: tests and gradients only).

    Args:
        x: ``(..., T)`` basilar-membrane velocity.
        c: :func:`ihc_step_constants`.
        state: ``W`` before the first sample ``(...)`` (0 = the pre-charged resting state).

    Returns:
        ``W = V - V_pre`` ``(..., T)`` in volts and the final state ``(...)``.
    """
    W = x.new_zeros(x.shape[:-1]) if state is None else state.to(x.dtype).expand(x.shape[:-1])
    zmax = c["zmax"]
    out = []
    for n in range(x.shape[-1]):
        z = torch.minimum(c["x0"] - c["scale"] * x[..., n], zmax)
        G = c["gmax"] / (1.0 + torch.exp(z / c["s1"]) * (1.0 + torch.exp(z / c["s0"])))
        W = W + c["k"] * (
            -G * (W + c["dep"]) - c["gkf"] * (W + c["dkf"]) - c["gks"] * (W + c["dks"])
        )
        out.append(W)
    y = torch.stack(out, -1) if out else x.new_zeros(x.shape)
    return y, W


def ihc_paulick(
    x: Tensor,
    fs: float,
    params: dict[str, Tensor | float] | None = None,
    state: Tensor | None = None,
    *,
    precharge_duration: float = 0.05,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, Tensor]:
    """Receptor potential re the pre-charged resting level (V) of velocity ``x (..., T)``.

    Args:
        x: ``(..., T)`` DRNL output (basilar-membrane velocity, AMT level scale).
        fs: sampling rate (Hz).
        params: the 13 constants (``IHC_PAULICK_CONSTANTS`` keys; tensors may require grad).
        state: ``W (...)`` from a previous call (streaming); ``None`` = resting state.
        backend: ``"auto"``: the no-grad operator ``lhotse_amt::paulick_ihc`` for eager
            inference (no gradient recorded, not traced; CPU, and CUDA where Triton
            runs), otherwise the operator ``lhotse_amt::ihc_paulick`` (compiled kernels
            and backward); ``"numba"`` / ``"triton"`` force the no-grad operator (the
            device picks its kernel: numba on the CPU, Triton on CUDA); ``"reference"``
            (``"torch"``) the plain-torch loop over samples.

    Returns:
        ``(..., T)`` (and the final state ``(...)`` if ``return_state``).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=1, min_dim=1, max_dim=None, name="IHC input x")
    check_positive_finite("precharge_duration", precharge_duration)
    check_choice("backend", backend, ("auto", "numba", "triton", "torch", "reference"))
    p = dict(IHC_PAULICK_CONSTANTS)
    p.update(params or {})
    _check_fs(p, fs)
    if check_tensor("state", state, allow_none=True) is not None:
        lead = x.shape[:-1]
        if check_broadcast(("x without time", lead), ("state", state.shape)) != lead:
            raise ValueError(f"state must broadcast to {tuple(lead)}, got {tuple(state.shape)}")
    dtype = x.dtype if x.is_floating_point() else torch.float32
    p64 = {
        k: v.to(device=x.device, dtype=torch.float64)
        if torch.is_tensor(v)
        else torch.tensor(v, dtype=torch.float64, device=x.device)
        for k, v in p.items()
    }
    c64 = ihc_step_constants(p64, fs, precharge_duration)
    if state is None:
        state = x.new_zeros(x.shape[:-1])
    tensors = [v for v in p.values() if torch.is_tensor(v)]
    be = backend
    if be == "auto":
        be = resolve_backend("auto", x, state, *tensors)
    if be == "auto":
        from ..ops import ihc_paulick_recursion

        y, w = ihc_paulick_recursion(x, c64, state)
    elif be in ("torch", "reference"):
        c = {k: v.to(device=x.device, dtype=dtype) for k, v in c64.items()}
        y, w = ihc_paulick_reference(x, c, state)
    else:  # "numba" / "triton": the no-grad operator
        from ..ops import paulick

        cf = {k: float(v.to(dtype)) for k, v in c64.items()}
        y, w = paulick.ihc(x, cf, state.to(x.dtype))
    return (y, w) if return_state else y

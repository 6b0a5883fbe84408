"""Dual-resonance non-linear (DRNL) filterbank (Meddis, O'Mard & Lopez-Poveda 2001;
Lopez-Poveda & Meddis 2001; parameters of Jepsen, Ewert & Dau 2008).

Every channel with characteristic frequency ``fc`` (Hz) sums two parallel paths fed by the
stapes signal ``x`` (the middle-ear output; the filterbank itself is the same for both
parameter sets, the middle ear is applied by the caller):

* **linear path**: ``g x`` -> gammatone ``GT_lin`` (order 2) -> ``n_lp_lin`` 2nd-order
  Butterworth low-passes;
* **non-linear path**: gammatone ``GT_nl`` (order ``n_nl``) -> broken-stick compression
  ``y = sign(u) min(a |u|, b |u|^c)`` -> ``GT_nl`` again -> ``n_lp_nl`` 2nd-order Butterworth
  low-passes;
* output (basilar-membrane velocity, arbitrary units on the AMT level scale):
  ``linear + non-linear``.

Each parameter follows the regression ``p(fc) = 10^p0 fc^p1`` (Lopez-Poveda & Meddis 2001,
JASA 110, 3107, Table III; Jepsen et al. 2008, JASA 124, 422, Table I):

=====================  =======================  ===========================================
quantity (Hz or 1)     ``jepsen2008``            ``lopezpoveda2001``
=====================  =======================  ===========================================
linear gain ``g``       [4.20405, -0.47909]       same
``GT_lin`` centre       [-0.06762, 1.01679]       same
``GT_lin`` bandwidth    [0.03728, 0.75]           [0.03728, 0.78563]
linear LP cut-off       [-0.06762, 1.01]          [-0.06762, 1.01679]
linear LPs              4 x 2nd order             same
``GT_nl`` centre        [-0.05252, 1.01650]       same
``GT_nl`` bandwidth     [-0.03193, 0.77]          [-0.03193, 0.77426]
``GT_nl`` order         2                         3
``a``                   [1.40298, 0.81916]        same
``b``                   [1.61912, -0.81867]       same
``c``                   0.25                      same
``a, b`` evaluated at   ``min(fc, 1500)``         ``fc``
non-linear LP cut-off   [-0.05252, 1.01650]       same
non-linear LPs          3 x 2nd order             same
=====================  =======================  ===========================================

The gammatones are the real "classic" pole-zero gammatones of the AMT: with
``theta = 2 pi f / fs`` and ``phi = 2 pi bw / fs`` (``f`` centre, ``bw`` bandwidth in Hz) and
pole ``p = exp(-phi - i theta)``, ``n`` identical biquads
``a0 (1 - Re(p) z^-1) / ((1 - p z^-1)(1 - p* z^-1))`` in series, where
``a0 = |1 + b1 e^{-i theta} + b2 e^{-2 i theta}| / |1 + alpha e^{-i theta}|``,
``alpha = -e^{-phi} cos theta``, ``b1 = 2 alpha``, ``b2 = e^{-2 phi}`` (0 dB at ``f``). They
run as second-order sections (never as the expanded polynomial, which is ill-conditioned
at low ``f / fs``); the low-passes are ``scipy.signal.butter(2, f / (fs / 2))`` sections.

Implementations: the no-grad operator ``lhotse_amt::paulick_drnl``, a compiled kernel that
runs the whole channel (both paths, the compression and all sections) sample by sample
(:func:`lhotse_amt.ops.paulick.drnl`; CPU inference), and plain torch built on
:func:`lhotse_amt.functional.iir.sosfilt` (any device, differentiable with respect to the
signal and every coefficient; its filters run as the registered ``sosfilt`` operator or,
with ``backend="torch"``, as the plain-torch reference). Checked against the AMT
0.9.10 ``lopezpoveda2001`` reference outputs (``tests/modules/test_drnl_reference.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from .._validation import (
    check_bool,
    check_choice,
    check_frequencies,
    check_int,
    check_rate,
    check_signal,
    check_tensor,
)
from .butter import butter
from .iir import resolve_backend, sosfilt

__all__ = [
    "DRNL_PRESETS",
    "DRNLDesign",
    "drnl_parameters",
    "classic_gammatone_sos",
    "butter_lowpass_sos",
    "design_drnl",
    "broken_stick",
    "drnl",
]

# Lopez-Poveda & Meddis (2001), Table III (average normal-hearing listener)
_LOPEZPOVEDA2001: dict = dict(
    lin_gain=(4.20405, -0.47909),
    lin_fc=(-0.06762, 1.01679),
    lin_bw=(0.03728, 0.78563),
    lin_lp=(-0.06762, 1.01679),
    lin_gt_order=2,
    lin_lp_order=4,
    nl_fc=(-0.05252, 1.01650),
    nl_bw=(-0.03193, 0.77426),
    nl_gt_order=3,
    nl_lp=(-0.05252, 1.01650),
    nl_lp_order=3,
    a=(1.40298, 0.81916),
    b=(1.61912, -0.81867),
    c=0.25,
    compresslimit=None,
)

#: ``[p0, p1]`` regressions ``10^p0 fc^p1`` and structural constants of both parameter sets.
DRNL_PRESETS: dict[str, dict] = {
    # Jepsen, Ewert & Dau (2008), Table I (CASP): Lopez-Poveda & Meddis (2001) with these
    # bandwidths, low-pass cut-off and gammatone order; compression parameters frozen above
    # 1.5 kHz
    "jepsen2008": {
        **_LOPEZPOVEDA2001,
        "lin_bw": (0.03728, 0.75),
        "lin_lp": (-0.06762, 1.01),
        "nl_bw": (-0.03193, 0.77),
        "nl_gt_order": 2,
        "compresslimit": 1500.0,
    },
    "lopezpoveda2001": _LOPEZPOVEDA2001,
}


def _reg(p: tuple[float, float], f: np.ndarray) -> np.ndarray:
    return 10.0 ** p[0] * f ** p[1]


def drnl_parameters(fc: np.ndarray, preset: str = "jepsen2008", **overrides) -> dict:
    """Per-channel DRNL parameters (Hz, or dimensionless) for characteristic frequencies ``fc``.

    Args:
        fc: ``(C,)`` characteristic frequencies in Hz.
        preset: ``"jepsen2008"`` or ``"lopezpoveda2001"``.
        overrides: replace any entry of :data:`DRNL_PRESETS` (e.g. ``compresslimit=None``).

    Returns:
        dict with ``(C,)`` arrays ``lin_gain, lin_fc, lin_bw, lin_lp, nl_fc, nl_bw, nl_lp, a, b``,
        the scalar ``c`` and the integer orders.
    """
    check_choice("preset", preset, tuple(DRNL_PRESETS))
    check_frequencies("fc", fc)
    p = dict(DRNL_PRESETS[preset])
    unknown = set(overrides) - set(p)
    if unknown:
        raise ValueError(f"unknown DRNL parameter(s) {sorted(unknown)}; valid: {sorted(p)}")
    p.update(overrides)
    fc = np.atleast_1d(np.asarray(fc, dtype=np.float64))
    if (fc <= 0).any():
        raise ValueError("DRNL characteristic frequencies must be positive")
    fa = fc if p["compresslimit"] is None else np.minimum(fc, float(p["compresslimit"]))
    out = {
        k: _reg(p[k], fc)
        for k in ("lin_gain", "lin_fc", "lin_bw", "lin_lp", "nl_fc", "nl_bw", "nl_lp")
    }
    out["a"] = _reg(p["a"], fa)
    out["b"] = _reg(p["b"], fa)
    out["c"] = float(p["c"])
    for k in ("lin_gt_order", "lin_lp_order", "nl_gt_order", "nl_lp_order"):
        out[k] = int(p[k])
    return out


def classic_gammatone_sos(f: np.ndarray, bw: np.ndarray, fs: float, order: int) -> np.ndarray:
    """``(C, order, 6)`` sections of the AMT "classic" pole-zero gammatone (module docstring).

    Args:
        f: ``(C,)`` centre frequencies (Hz); bw: ``(C,)`` bandwidth parameters (Hz).
        fs: sampling rate (Hz); order: number of identical biquads.
    """
    check_rate("fs", fs)
    check_int("order", order, min=1)
    f = check_frequencies("f", f)
    bw = check_frequencies("bw", bw)
    theta = 2.0 * np.pi * f / fs
    phi = 2.0 * np.pi * bw / fs
    alpha = -np.exp(-phi) * np.cos(theta)
    b1 = 2.0 * alpha
    b2 = np.exp(-2.0 * phi)
    e1 = np.exp(-1j * theta)
    a0 = np.abs(1.0 + b1 * e1 + b2 * e1**2) / np.abs(1.0 + alpha * e1)
    sec = np.stack([a0, a0 * alpha, np.zeros_like(a0), np.ones_like(a0), b1, b2], -1)
    return np.repeat(sec[:, None, :], order, axis=1)


def butter_lowpass_sos(cutoff: np.ndarray, fs: float, n_sections: int) -> np.ndarray:
    """``(C, n_sections, 6)``: ``n_sections`` identical ``butter(2, cutoff / (fs/2))`` sections."""
    check_rate("fs", fs)
    check_int("n_sections", n_sections, min=1)
    cutoff = check_frequencies("cutoff", cutoff)
    if (cutoff >= fs / 2.0).any():
        raise ValueError(f"cutoff must lie below fs/2 = {fs / 2:g} Hz, got max {cutoff.max():g}")
    secs = [butter(2, c / (fs / 2.0), output="sos")[0] for c in cutoff]
    return np.repeat(np.stack(secs)[:, None, :], n_sections, axis=1)


@dataclass
class DRNLDesign:
    """Coefficients of a DRNL filterbank (all float64 numpy arrays, ``C`` channels).

    ``lin_gain (C,)``, ``lin_gt (C, n_lin, 6)``, ``lin_lp (C, n_lplin, 6)``,
    ``nl_gt (C, n_nl, 6)`` (used before and after the compression), ``nl_lp (C, n_lpnl, 6)``,
    ``a, b (C,)``, ``c`` scalar; ``params`` the per-channel values of :func:`drnl_parameters`.
    """

    fs: float
    fc: np.ndarray
    lin_gain: np.ndarray
    lin_gt: np.ndarray
    lin_lp: np.ndarray
    nl_gt: np.ndarray
    nl_lp: np.ndarray
    a: np.ndarray
    b: np.ndarray
    c: float
    params: dict


def design_drnl(fs: float, fc: np.ndarray, preset: str = "jepsen2008", **overrides) -> DRNLDesign:
    """Design the filterbank for ``fc`` (Hz) at ``fs`` (Hz).

    Raises:
        ValueError: if any gammatone centre frequency or low-pass cut-off of any channel
            reaches ``fs / 2`` (the non-linear path sits above ``fc``: at 16 kHz the highest
            usable ``fc`` is about 6.9 kHz).
    """
    fs = check_rate("fs", fs)
    prm = drnl_parameters(fc, preset, **overrides)
    fc = np.atleast_1d(np.asarray(fc, np.float64))
    nyq = fs / 2.0
    for k in ("lin_fc", "lin_lp", "nl_fc", "nl_lp"):
        if (prm[k] >= nyq).any():
            i = int(np.argmax(prm[k]))
            raise ValueError(
                f"DRNL channel fc={fc[i]:.1f} Hz needs a {k} frequency of {prm[k][i]:.1f} Hz, "
                f"at or above the Nyquist frequency fs/2 = {nyq:g} Hz: lower fhigh or raise fs"
            )
    return DRNLDesign(
        fs=fs,
        fc=fc,
        lin_gain=prm["lin_gain"],
        lin_gt=classic_gammatone_sos(prm["lin_fc"], prm["lin_bw"], fs, prm["lin_gt_order"]),
        lin_lp=butter_lowpass_sos(prm["lin_lp"], fs, prm["lin_lp_order"]),
        nl_gt=classic_gammatone_sos(prm["nl_fc"], prm["nl_bw"], fs, prm["nl_gt_order"]),
        nl_lp=butter_lowpass_sos(prm["nl_lp"], fs, prm["nl_lp_order"]),
        a=prm["a"],
        b=prm["b"],
        c=prm["c"],
        params=prm,
    )


def broken_stick(u: Tensor, a: Tensor, b: Tensor, c: Tensor | float) -> Tensor:
    """Broken-stick compression ``sign(u) min(a |u|, b |u|^c)`` (Lopez-Poveda & Meddis 2001,
    eq. 1), evaluated as ``u min(a, b |u|^(c-1))`` with ``|u|`` bounded below by 1e-30 so that
    the gradient stays finite at ``u = 0`` (same values)."""
    mag = u.abs().clamp_min(1e-30)
    return u * torch.minimum(a, b * mag ** (c - 1.0))


def drnl(
    x: Tensor,
    lin_gain: Tensor,
    lin_gt: Tensor,
    lin_lp: Tensor,
    nl_gt: Tensor,
    nl_lp: Tensor,
    a: Tensor,
    b: Tensor,
    c: Tensor | float,
    state: dict[str, Tensor] | None = None,
    *,
    return_state: bool = False,
    backend: str = "auto",
) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
    """Run the DRNL filterbank on the stapes signal ``x (..., T)``.

    Args:
        x: ``(..., T)`` middle-ear output (AMT level scale: rms 1 = 100 dB SPL before the
            ear filters).
        lin_gain, a, b: ``(C,)``; lin_gt, lin_lp, nl_gt, nl_lp: ``(C, S, 6)`` sections
            (see :class:`DRNLDesign`); c: compression exponent.
        state: ``{"lin": (..., C, S_lin, 2), "nl1": (..., C, n_nl, 2),
            "nl2": (..., C, n_nl + n_lpnl, 2)}`` section states from a previous call
            (scipy ``zi`` convention), zeros if ``None``.
        backend: ``"auto"`` (the fused operator ``lhotse_amt::paulick_drnl`` for eager
            CPU inference, the ``sosfilt`` operators otherwise), ``"numba"`` (the fused
            operator) or ``"torch"`` (the plain-torch reference).

    Returns:
        ``(..., C, T)`` basilar-membrane velocity (and the new state dict).
    """
    return_state = check_bool("return_state", return_state)
    check_signal(x, min_samples=0, min_dim=1, max_dim=None, allow_empty=True, name="DRNL input x")
    check_choice("backend", backend, ("auto", "numba", "torch"))
    state = state or {}
    lin_sos = torch.cat([lin_gt, lin_lp], dim=-2)
    nl2_sos = torch.cat([nl_gt, nl_lp], dim=-2)
    sections = {"lin": lin_sos, "nl1": nl_gt, "nl2": nl2_sos}
    if not isinstance(state, dict) or set(state) - set(sections):
        raise TypeError(f"state must be None or a dict with keys {list(sections)}, got {state!r}")
    for k, z in state.items():
        check_tensor(f"state[{k!r}]", z, trailing=(sections[k].shape[-2], 2))
    c_t = c if torch.is_tensor(c) else torch.tensor(float(c), dtype=lin_gain.dtype)
    be = resolve_backend(backend, x, lin_gain, lin_sos, nl_gt, nl2_sos, a, b, c_t)
    if be == "numba":
        from ..ops import paulick

        y, new = paulick.drnl(x, lin_gain, lin_sos, nl_gt, nl2_sos, a, b, float(c_t), state)
        return (y, new) if return_state else y
    dtype = torch.promote_types(x.dtype, lin_gain.dtype)
    fb = "torch" if be == "torch" else "auto"  # the reference, or the operators
    xc = x.to(dtype).unsqueeze(-2)  # (..., 1, T)
    lin_in = xc * lin_gain.to(dtype)[:, None]
    y_lin, z_lin = sosfilt(lin_in, lin_sos, state.get("lin"), return_state=True, backend=fb)
    u, z1 = sosfilt(xc, nl_gt, state.get("nl1"), return_state=True, backend=fb)
    if be == "torch":
        u = broken_stick(u, a.to(dtype)[:, None], b.to(dtype)[:, None], c_t.to(dtype))
    else:  # the operator: one pass forward, one backward
        from ..ops import drnl_compression

        u = drnl_compression(u, a, b, c_t)
    u, z2 = sosfilt(u, nl2_sos, state.get("nl2"), return_state=True, backend=fb)
    y = (y_lin + u).to(x.dtype if x.is_floating_point() else dtype)
    return (y, {"lin": z_lin, "nl1": z1, "nl2": z2}) if return_state else y

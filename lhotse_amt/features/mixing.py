"""Feature-domain mixing hooks (``mix``, ``compute_energy``, ``scale``) of the ``amt-*``
extractors, one scheme per output domain.

Lhotse mixes precomputed features of lazy ``MixedCut``s through these static hooks, on a
default-config extractor looked up by name. The models are nonlinear, so every scheme is an
approximation: it maps each value back to an intensity-like quantity, adds those with
Lhotse's energy factor and maps the sum forward again, so a negligible addition leaves the
features unchanged. Lhotse's padding values (-1000, -23.03) are read as silence. Extracting
from the mixed audio (``mix_eagerly=True``, or ``OnTheFlyFeatures`` on mixed cuts) is exact.

* :class:`MUMixing`: model units of the adaptation loops (Dau1997, Osses2021, Paulick2024).
* :class:`KingMixing`: the compressed-amplitude units of King2019.
* :class:`LoudnessMixing`: specific loudness (sone/Cam) of Glasberg2002 and Moore2016.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
from lhotse.utils import LOG_EPSILON

__all__ = [
    "MIX_KNEE_MU",
    "IntensityMixing",
    "KingMixing",
    "LoudnessMixing",
    "MUMixing",
    "intensity_to_mu",
    "mu_to_intensity",
]

_MINLVL = 1e-5  # 0 dB SPL on the AMT 100-dB scale
_C = _MINLVL ** (1.0 / 32.0)
#: Lhotse's feature padding values: ``FeatureMixer``'s ``padding_value`` and ``LOG_EPSILON``
#: (``PaddingCut``'s default ``feat_value``); read as silence by the mixing hooks
_LHOTSE_PADDING = (-1000.0, LOG_EPSILON)


def _without_padding(features: np.ndarray) -> np.ndarray:
    """``features`` as float64 with Lhotse's padding values (-1000 and -23.03, within 1e-5 so
    that the float32 and float64 forms both match) replaced by 0 (silence)."""
    f = np.array(features, dtype=np.float64)
    pad = np.zeros(f.shape, dtype=bool)
    for v in _LHOTSE_PADDING:
        pad |= np.abs(f - v) <= 1e-5
    f[pad] = 0.0
    return f


#: model units up to which the mixing hooks read a value as a steady-state level
MIX_KNEE_MU = 30.0
_KNEE_BASE = MIX_KNEE_MU * (1.0 - _C) / 100.0 + _C
_KNEE_INTENSITY = _KNEE_BASE**64 - _MINLVL**2
_KNEE_SLOPE = 64.0 * _KNEE_BASE**63 * (1.0 - _C) / 100.0  # d intensity / d MU at the knee


def mu_to_intensity(mu: np.ndarray) -> np.ndarray:
    """Model units -> signed intensity-like quantity of the feature-domain mixing hooks.

    Up to :data:`MIX_KNEE_MU` (30 MU) in magnitude, the steady-state inverse of the
    adaptation loops: ``a^2 - minlvl^2`` with ``a = (|MU| (1 - c) / 100 + c)^32`` the
    amplitude on the 100-dB scale that gives ``|MU|`` in steady state (``c = minlvl^(1/32)``,
    ``minlvl = 1e-5``; Dau et al. 1996, JASA 99, 3615). Above the knee it continues linearly
    with the slope it has there: larger values are onsets (overshoot) and modulation-band
    excursions, not steady levels, and read as levels (the power 64) a 300-MU onset of a
    65-dB noise would be a 170-dB intensity that no SNR gain could make negligible.

    The mapping is odd: values below 0 MU (the undershoot after offsets, modulation bands
    below their mean) map to negative values of the same size, so adding a small intensity
    changes every value a little (see :class:`MUMixing`). Lhotse's padding values (-1000,
    -23.03) map to 0 (silence).
    """
    m = _without_padding(mu)
    a = np.abs(m)
    low = (np.minimum(a, MIX_KNEE_MU) * ((1.0 - _C) / 100.0) + _C) ** 64 - _MINLVL**2
    mag = np.where(a <= MIX_KNEE_MU, low, _KNEE_INTENSITY + (a - MIX_KNEE_MU) * _KNEE_SLOPE)
    return np.copysign(np.where(a == 0.0, 0.0, mag), m)  # silence exactly 0


def intensity_to_mu(intensity: np.ndarray) -> np.ndarray:
    """Inverse of :func:`mu_to_intensity` (odd: negative values give negative MU)."""
    i = np.asarray(intensity, dtype=np.float64)
    a = np.abs(i)
    low = ((np.minimum(a, _KNEE_INTENSITY) + _MINLVL**2) ** (1.0 / 64.0) - _C) * (
        100.0 / (1.0 - _C)
    )
    mag = np.where(a <= _KNEE_INTENSITY, low, MIX_KNEE_MU + (a - _KNEE_INTENSITY) / _KNEE_SLOPE)
    return np.copysign(np.where(a == 0.0, 0.0, np.maximum(mag, 0.0)), i)  # silence exactly 0


class IntensityMixing:
    """The mixing scheme every domain follows: :meth:`to_intensity` maps each value to an
    intensity-like quantity (0 for silence), intensities are added with Lhotse's energy
    factor, and :meth:`from_intensity` maps back (float32). ``compute_energy`` is the mean
    intensity magnitude plus :attr:`energy_floor` (Lhotse needs a positive energy)."""

    energy_floor: ClassVar[float] = 0.0

    @classmethod
    def to_intensity(cls, features: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def from_intensity(cls, intensity: np.ndarray) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def compute_energy(cls, features: np.ndarray) -> float:
        return float(np.mean(np.abs(cls.to_intensity(features)))) + cls.energy_floor

    @classmethod
    def mix(
        cls, features_a: np.ndarray, features_b: np.ndarray, energy_scaling_factor_b: float
    ) -> np.ndarray:
        ia = cls.to_intensity(features_a)
        ib = cls.to_intensity(features_b)
        return cls.from_intensity(ia + float(energy_scaling_factor_b) * ib).astype(np.float32)

    @classmethod
    def scale(cls, features: np.ndarray, energy_scaling_factor: float) -> np.ndarray:
        i = float(energy_scaling_factor) * cls.to_intensity(features)
        return cls.from_intensity(i).astype(np.float32)


class MUMixing(IntensityMixing):
    """Feature-domain mixing hooks for model-unit features.

    Each value is mapped to a signed intensity by :func:`mu_to_intensity`, the intensities
    are added with Lhotse's energy factor, and the sum is mapped back. The mapping is odd
    and invertible, so ``mix(a, b, g)`` tends to ``a`` as ``g`` tends to 0 for every value,
    negative ones included (``scale(a, 1) == a`` to rounding).
    """

    #: energy of silence (the minimum level's intensity; Lhotse needs a positive energy)
    energy_floor: ClassVar[float] = _MINLVL**2
    to_intensity = staticmethod(mu_to_intensity)
    from_intensity = staticmethod(intensity_to_mu)


#: compression exponent and knee amplitude (30 dB SPL on the 100-dB scale) assumed by the
#: King2019 feature-domain mixing hooks (the default config's broken-stick compression)
_KING_N = 0.3
_KING_KNEE = 10.0 ** ((30.0 - 100.0) / 20.0)


def _king_to_intensity(features: np.ndarray) -> np.ndarray:
    # inverse of the broken-stick compression (linear below the knee, power n above), squared,
    # sign kept (band-pass values are signed); Lhotse's padding values are silence
    f = _without_padding(features)
    a = np.abs(f)
    amp = np.where(
        a <= _KING_KNEE, a, _KING_KNEE * (np.maximum(a, _KING_KNEE) / _KING_KNEE) ** (1.0 / _KING_N)
    )
    return np.copysign(amp * amp, f)


def _king_from_intensity(intensity: np.ndarray) -> np.ndarray:
    amp = np.sqrt(np.abs(intensity))
    comp = np.where(
        amp <= _KING_KNEE, amp, _KING_KNEE * (np.maximum(amp, _KING_KNEE) / _KING_KNEE) ** _KING_N
    )
    return np.copysign(comp, intensity).astype(np.float32)


class KingMixing(IntensityMixing):
    """Feature-domain mixing hooks of ``amt-king2019`` (approximations; see
    :class:`~lhotse_amt.features.king2019.King2019Extractor`). Lhotse calls them on a
    default-config extractor, so they treat every column alike: each value is expanded by
    the inverse of the default broken-stick compression (linear below the 30-dB knee, power
    1 / 0.3 above) and squared with its sign kept; these intensities are added with
    Lhotse's energy factor and mapped back. ``compute_energy`` is their mean magnitude
    (proportional to the sound's power for a stationary sound), so Lhotse's SNR gains act
    on the sound's power."""

    energy_floor: ClassVar[float] = _KING_KNEE**2 * 1e-6
    to_intensity = staticmethod(_king_to_intensity)
    from_intensity = staticmethod(_king_from_intensity)


#: the mid-level specific-loudness law the mixing hooks invert: A and alpha of the channels
#: above 500 Hz (Moore, Glasberg & Baer 1997)
_MIX_A = 4.72096
_MIX_ALPHA = 0.2


class LoudnessMixing(IntensityMixing):
    """Feature-domain mixing hooks of specific loudness: each value ``N'`` is mapped back to
    an excitation by inverting the mid-level specific-loudness law ``N' = C [(E + A)^alpha -
    A^alpha]`` (Moore, Glasberg & Baer 1997, Eq. 3) with the constants of the channels above
    500 Hz (``A = 4.72``, ``alpha = 0.2``), excitations are added with Lhotse's energy
    factor and mapped forward again. Near threshold ``N'`` grows about linearly with ``E``,
    so a quiet added sound adds little loudness, as in the models. Values <= 0, including
    Lhotse's padding values, are silence. ``mix_c`` is the model's constant ``C`` (sone/Cam
    per unit of the law)."""

    mix_c: ClassVar[float] = 0.046871
    energy_floor: ClassVar[float] = 1e-20

    @classmethod
    def to_intensity(cls, features: np.ndarray) -> np.ndarray:
        v = np.maximum(np.asarray(features, dtype=np.float64), 0.0)
        a_alpha = _MIX_A**_MIX_ALPHA
        e = (v / cls.mix_c + a_alpha) ** (1.0 / _MIX_ALPHA) - _MIX_A
        return np.where(v > 0.0, np.maximum(e, 0.0), 0.0)  # silence exactly 0

    @classmethod
    def from_intensity(cls, energy: np.ndarray) -> np.ndarray:
        e = np.maximum(energy, 0.0)
        n = cls.mix_c * ((e + _MIX_A) ** _MIX_ALPHA - _MIX_A**_MIX_ALPHA)
        return np.maximum(n, 0.0).astype(np.float32)

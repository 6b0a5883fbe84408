"""Published reference values used by the perception recipe (sources in README.md)."""

from __future__ import annotations

import numpy as np

#: ANSI S3.4-2007, Table 7: loudness (sone) of a 1-kHz tone presented binaurally in free
#: field (frontal incidence) at a loudness level of L phon (= L dB SPL at 1 kHz); values as
#: transcribed in the test scripts of the deeuu/loudness library ("#Table 7").
ANSI_TABLE7_PHON = np.array([0, 1, 2, 3, 4, 5, 7.5] + list(range(10, 125, 5)), dtype=float)
ANSI_TABLE7_SONE = np.array(
    [0.0011, 0.0018, 0.0028, 0.0044, 0.0065, 0.0088, 0.017, 0.029, 0.070, 0.142, 0.255,
     0.422, 0.662, 0.997, 1.461, 2.098, 2.970, 4.166, 5.813, 8.102, 11.326, 15.980, 22.929,
     33.216, 48.242, 70.362, 103.274, 152.776, 227.855, 341.982]
)  # fmt: skip


def ansi_sone(level_db: np.ndarray) -> np.ndarray:
    """ANSI S3.4-2007 Table 7 loudness at ``level_db`` (log-linear interpolation)."""
    return np.exp(np.interp(level_db, ANSI_TABLE7_PHON, np.log(ANSI_TABLE7_SONE)))


def sone_to_phon(sone: np.ndarray) -> np.ndarray:
    """Inverse of :func:`ansi_sone` (loudness level of a model's loudness in sone)."""
    s = np.clip(np.asarray(sone, float), ANSI_TABLE7_SONE[0], ANSI_TABLE7_SONE[-1])
    return np.interp(np.log(s), np.log(ANSI_TABLE7_SONE), ANSI_TABLE7_PHON)


def sone_rule(level_db: np.ndarray) -> np.ndarray:
    """The classic sone-scale rule: 1 sone at 40 phon, doubling per 10 phon."""
    return 2.0 ** ((np.asarray(level_db, float) - 40.0) / 10.0)


#: Viemeister (1979), broadband-noise TMTF: thresholds (20 log m) of about -23 to -26 dB
#: below 50-60 Hz, a low-pass characteristic with a 3-dB cut-off of about 50-60 Hz, and
#: about 50 % modulation (-6 dB) needed at 500 Hz.
TMTF_LOW_RANGE_DB = (-26.0, -23.0)
TMTF_LOW_DB = -24.5  # middle of the range
TMTF_CUTOFF_HZ = (50.0, 60.0)
TMTF_500HZ_DB = -6.0


def tmtf_reference(fm: np.ndarray, cutoff: float = 55.0, t0: float = TMTF_LOW_DB) -> np.ndarray:
    """The first-order low-pass description of the published TMTF (dB)."""
    fm = np.asarray(fm, float)
    return t0 + 10.0 * np.log10(1.0 + (fm / cutoff) ** 2)


#: bounds checked by the tests (see README.md, "Acceptance bounds")
LOUDNESS_MAX_PHON_ERROR = {(30, 100): 2.0, (20, 30): 3.0}
TMTF_BOUNDS = {
    "low_rate_mean_db": (-28.0, -22.0),  # fitted via the internal noise (mean of fm <= 16 Hz)
    "rise_256_vs_low_db": (5.0, 20.0),  # published: ~12 dB (low-pass, fc 50-60 Hz)
    "flat_below_db": 6.0,  # thresholds at fm <= 32 Hz within this range of each other
}

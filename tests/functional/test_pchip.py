"""The local PCHIP interpolation of the loudness models' tables against
:class:`scipy.interpolate.PchipInterpolator` (knots with sign changes, flat runs and
repeated values; evaluation inside, at and outside the knots)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.interpolate import PchipInterpolator

from lhotse_amt.functional.loudness.excitation import loudness_tables, pchip_interpolate


@pytest.mark.parametrize("seed", range(40))
def test_pchip_matches_scipy(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    x = np.sort(rng.choice(np.linspace(-5.0, 40.0, 400), n, replace=False))
    y = rng.standard_normal(n) if seed % 3 else np.cumsum(np.abs(rng.standard_normal(n)))
    if seed % 4 == 0:
        y[int(rng.integers(0, n))] = y[0]  # a flat or repeated piece
    xi = np.concatenate([np.linspace(x[0] - 3.0, x[-1] + 3.0, 300), x])
    ref = PchipInterpolator(x, y, extrapolate=True)(xi)
    np.testing.assert_allclose(pchip_interpolate(x, y, xi), ref, rtol=1e-14, atol=1e-14)


def test_pchip_matches_scipy_on_the_loudness_table() -> None:
    t = loudness_tables()
    x, y = t["g_db_for_a"], t["a_for_g"]
    xi = np.linspace(-30.0, 5.0, 2000)
    ref = PchipInterpolator(x, y, extrapolate=True)(xi)
    np.testing.assert_allclose(pchip_interpolate(x, y, xi), ref, rtol=1e-14, atol=0)

"""beta_interval inverts each distinct (a, b) once on long inputs: the same values as one
inversion per entry."""

import numpy as np
import pytest
from scipy.special import betaincinv

from topcal.calibrators.intervals import beta_interval


@pytest.mark.parametrize("distinct", [30, 20_000])  # few pairs (grouped), all distinct (not)
def test_long_inputs_equal_one_inversion_per_entry(distinct):
    rng = np.random.default_rng(0)
    t = rng.integers(0, distinct, 20_000) + 0.5
    f = rng.integers(0, 7, 20_000) + rng.random(20_000) * (distinct > 100) + 0.5
    for level in (0.5, 0.9, 0.99):
        tail = 0.5 * (1.0 - level)
        lo, hi = beta_interval(t, f, level)
        np.testing.assert_array_equal(lo, betaincinv(t, f, tail))
        np.testing.assert_array_equal(hi, betaincinv(t, f, 1.0 - tail))


def test_broadcast_scalar_and_array():
    lo, hi = beta_interval(0.5, np.full(5000, 3.5), 0.9)
    assert lo.shape == hi.shape == (5000,)
    np.testing.assert_array_equal(lo, betaincinv(0.5, 3.5, 0.5 * (1.0 - 0.9)))
    np.testing.assert_array_equal(hi, betaincinv(0.5, 3.5, 1.0 - 0.5 * (1.0 - 0.9)))

import math

import pytest

from sparsebench.suite.interpolate import value_at


def test_power_law_between_neighbours_is_exact():
    # y = 2 x^-0.5 at x = 4 and 16: at 8 the power law gives 2 / sqrt(8)
    got = value_at([4.0, 16.0], [1.0, 0.5], 8.0)
    assert got is not None and not got.exact
    assert got.value == pytest.approx(2 / math.sqrt(8), rel=1e-12)
    assert (got.x_low, got.x_high) == (4.0, 16.0)


def test_linear_in_y_when_a_bracket_value_is_zero():
    # halfway in log x between 2 and 8 is 4: the mean of 0 and 0.3
    got = value_at([8.0, 2.0], [0.3, 0.0], 4.0)
    assert got.value == pytest.approx(0.15)


def test_a_point_at_the_target_is_used_as_it_is():
    got = value_at([4.0, 8.0, 16.0], [0.3, 0.2, 0.1], 8.0)
    assert got.exact and got.value == 0.2


def test_no_extrapolation_and_missing_values_skipped():
    assert value_at([4.0, 8.0], [0.3, 0.2], 16.0) is None
    assert value_at([4.0, 8.0], [0.3, 0.2], 2.0) is None
    assert value_at([4.0, 8.0, 16.0], [0.3, None, 0.1], 8.0).exact is False
    assert value_at([], [], 8.0) is None


def test_target_must_be_positive():
    with pytest.raises(ValueError, match="> 0"):
        value_at([1.0, 2.0], [1.0, 2.0], 0.0)


def test_a_point_within_one_percent_is_read_as_the_end_of_the_sweep():
    # BatchTopK at k = 4 measures L0 4.02 on one seed: its sweep still reaches L0 = 4.
    got = value_at([4.02, 8.01, 16.0], [0.3, 0.2, 0.1], 4.0)
    assert got.exact and got.value == 0.3 and got.x_low == 4.02
    # 4.05 is 1.25 % away: below the sweep's range, nothing is read.
    assert value_at([4.05, 8.0], [0.3, 0.2], 4.0) is None
    # of two points within the tolerance, the nearer one
    assert value_at([3.97, 4.01, 8.0], [0.31, 0.30, 0.2], 4.0).value == 0.30
    # the tolerance is the caller's to tighten
    assert value_at([4.02, 8.0], [0.3, 0.2], 4.0, rtol=1e-9) is None

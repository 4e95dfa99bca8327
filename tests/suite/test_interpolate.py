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
    with pytest.raises(ValueError, match="finite number > 0"):
        value_at([1.0, 2.0], [1.0, 2.0], 0.0)


def test_a_target_just_beyond_an_end_is_read_at_that_end():
    # BatchTopK at k = 4 measures L0 4.02 on one seed: its sweep still reaches L0 = 4.
    got = value_at([4.02, 8.01, 16.0], [0.3, 0.2, 0.1], 4.0)
    assert got.exact and got.value == 0.3 and (got.x_low, got.i_low) == (4.02, 0)
    got = value_at([16.0, 4.0, 15.9], [0.1, 0.3, 0.11], 16.05)  # 0.3 % beyond the top end
    assert got.exact and got.value == 0.1 and got.i_low == 0
    # 4.05 is 1.25 % away: below the sweep's range, nothing is read.
    assert value_at([4.05, 8.0], [0.3, 0.2], 4.0) is None
    # the tolerance is the caller's to tighten
    assert value_at([4.02, 8.0], [0.3, 0.2], 4.0, rtol=1e-9) is None


def test_inside_the_range_a_near_point_does_not_replace_the_interpolation():
    # (7.93, 0.16) and (16, 0.108): at 8, the power law between them, not 0.16
    got = value_at([7.93, 16.0], [0.16, 0.108], 8.0)
    w = (math.log(8.0) - math.log(7.93)) / (math.log(16.0) - math.log(7.93))
    want = math.exp(math.log(0.16) + w * (math.log(0.108) - math.log(0.16)))
    assert not got.exact and got.value == pytest.approx(want, rel=1e-12)
    assert (got.i_low, got.i_high) == (0, 1)


def test_positions_are_those_of_the_callers_lists():
    got = value_at([16.0, 4.0, 8.0], [0.1, 0.3, 0.2], 6.0)
    assert (got.i_low, got.i_high) == (1, 2) and (got.x_low, got.x_high) == (4.0, 8.0)


def test_a_sweep_that_does_not_move_x_and_a_target_that_is_not_finite_are_refused():
    with pytest.raises(ValueError, match="share an x"):
        value_at([128.0, 128.0, 128.0], [0.3, 0.2, 0.001], 128.0)
    for bad in (math.inf, math.nan, -1.0):
        with pytest.raises(ValueError, match="finite number > 0"):
            value_at([4.0, 8.0], [0.3, 0.2], bad)

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


def _groups() -> dict[int, tuple[list, list]]:
    """Sweeps covering every branch of the rule: exact points, ends within and beyond the
    tolerance, non-positive y (linear in y), skipped points (None, NaN, inf, x <= 0), a
    shared x, one point, no usable point; plus random sweeps."""
    import random

    nan, inf = float("nan"), float("inf")
    fixed = [
        ([1.0, 2.0, 4.0], [0.5, 0.25, 0.125]),
        ([4.0, 1.0, 2.0], [0.1, 0.0, -0.3]),
        ([8.0, 16.0], [0.2, 0.1]),
        ([4.02, 16.0], [0.2, 0.1]),  # 4 within 1 % of the low end
        ([2.0, 3.96], [0.2, 0.1]),  # 4 within 1 % of the high end
        ([4.5, 16.0], [0.2, 0.1]),  # beyond the tolerance
        ([1.0, None, 8.0, -2.0, 0.0, inf], [0.4, 0.3, 0.1, 0.2, 0.2, 0.1]),
        ([1.0, 5.0, 8.0], [0.4, nan, None]),
        ([2.0, 2.0, 8.0], [0.4, 0.3, 0.1]),  # shared x: no single reading
        ([4.0], [0.3]),
        ([None, -1.0], [0.3, 0.2]),
    ]
    rng = random.Random(0)
    for _ in range(300):
        n = rng.randint(1, 6)
        xs = rng.sample([0.5, 1, 2, 3, 3.97, 4, 4.03, 5, 7, 8, 12, 16, 20], n)
        ys = [rng.choice([None, rng.uniform(-0.2, 1.0), rng.uniform(0.01, 1.0)]) for _ in xs]
        fixed.append(([float(x) for x in xs], ys))
    return dict(enumerate(fixed))


@pytest.mark.parametrize("t", [4.0, 8.0, 16.0, 3.0, 0.7])
def test_values_at_reads_every_group_as_value_at_does(t):
    import polars as pl

    from sparsebench.suite.interpolate import values_at

    groups = _groups()
    frame = pl.DataFrame(
        [{"g": g, "x": x, "y": y} for g, (xs, ys) in groups.items() for x, y in zip(xs, ys)],
        schema={"g": pl.Int64, "x": pl.Float64, "y": pl.Float64},
    )
    got = {r["g"]: r for r in values_at(frame, ["g"], "x", "y", t).iter_rows(named=True)}
    for g, (xs, ys) in groups.items():
        try:
            want = value_at(xs, ys, t)
        except ValueError:
            assert got[g]["shared_x"] and got[g]["value"] is None, (xs, ys)
            continue
        if want is None:
            assert g not in got or got[g]["value"] is None, (xs, ys, got.get(g))
            continue
        row = got[g]
        assert row["value"] == pytest.approx(want.value, rel=1e-12, abs=1e-15), (xs, ys)
        assert (row["exact"], row["x_low"], row["x_high"]) == (
            want.exact, want.x_low, want.x_high
        ), (xs, ys)  # fmt: skip


def test_values_at_refuses_a_target_that_is_not_positive():
    import polars as pl

    from sparsebench.suite.interpolate import values_at

    frame = pl.DataFrame({"g": [0], "x": [1.0], "y": [1.0]})
    with pytest.raises(ValueError, match="finite number > 0"):
        values_at(frame, ["g"], "x", "y", 0.0)

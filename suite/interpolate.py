"""A metric at a matched value of another, read off a sweep: the one interpolation rule shared
by the boards' matched tables and the claims engine (``at:`` tests).

The sweep is a set of points (x, y), e.g. one seed's (sparsity, error) over a knob's sweep.
The value at x = t is interpolated between the two neighbouring points that bracket t, linear
in log x and, where both bracketing y are positive, linear in log y (a power law between
neighbours: error-vs-sparsity curves are close to one, and linear-in-y interpolation of a
convex curve overstates them); otherwise linear in y (a fraction can be 0). Never
extrapolated: outside the sweep's range the value is None, except that a t beyond an end of
the sweep by at most ``rtol`` (relative; 1 %, ours) is read at that end point: a knob that
sets x only to within a fraction of a percent of its nominal value (a measured outcome
landing just either side of the value the knob aims at) would otherwise miss the end points of
its own sweep. Inside the range it always
interpolates, so the tolerance never replaces a reading by a neighbour's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

RTOL = 0.01


@dataclass(frozen=True)
class AtValue:
    """The value at x = t and how it was read: ``exact`` (a point at t, or an end point
    within the tolerance), or interpolated between ``x_low`` and ``x_high`` (the bracketing
    points' x); ``i_low`` and ``i_high`` are those points' positions in the caller's lists."""

    value: float
    exact: bool
    x_low: float
    x_high: float
    i_low: int
    i_high: int


def value_at(
    xs: Sequence[float], ys: Sequence[float | None], t: float, rtol: float = RTOL
) -> AtValue | None:
    """y at x = t from the points (xs, ys) (any order; x > 0; a point whose x or y is None or
    not finite is skipped); None when t lies outside the sweep's x range (beyond the
    tolerance) or no bracket has both y. Raises ValueError for a t that is not a finite
    number > 0, or when two usable points share an x (a sweep must move x)."""
    if not (math.isfinite(t) and t > 0):
        raise ValueError(
            f"the matched value must be a finite number > 0 (interpolation is in log x), got {t}"
        )
    pts = sorted(
        (float(x), float(y), i)
        for i, (x, y) in enumerate(zip(xs, ys, strict=True))
        if y is not None and x is not None and math.isfinite(y) and math.isfinite(x) and x > 0
    )
    if not pts:
        return None
    if len({x for x, _, _ in pts}) < len(pts):
        raise ValueError(f"two points share an x in {sorted(x for x, _, _ in pts)}")
    for x, y, i in pts:
        if x == t:
            return AtValue(y, True, x, x, i, i)
    (x_min, y_min, i_min), (x_max, y_max, i_max) = pts[0], pts[-1]
    if t < x_min:
        return AtValue(y_min, True, x_min, x_min, i_min, i_min) if x_min - t <= rtol * t else None
    if t > x_max:
        return AtValue(y_max, True, x_max, x_max, i_max, i_max) if t - x_max <= rtol * t else None
    for (x0, y0, i0), (x1, y1, i1) in zip(pts, pts[1:]):
        if x0 < t < x1:
            w = (math.log(t) - math.log(x0)) / (math.log(x1) - math.log(x0))
            if y0 > 0 and y1 > 0:
                y = math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
            else:
                y = y0 + w * (y1 - y0)
            return AtValue(y, False, x0, x1, i0, i1)
    return None  # unreachable: t lies in [x_min, x_max] and is no point's x


def values_at(
    points: pl.DataFrame, by: Sequence[str], x: str, y: str, t: float, rtol: float = RTOL
) -> pl.DataFrame:
    """:func:`value_at` for every group of ``points`` at once: one row per group of ``by`` that
    has a usable point, with ``value`` (null where :func:`value_at` gives None), ``exact``,
    ``x_low``, ``x_high`` as in :class:`AtValue`, and ``shared_x`` (true where two usable points
    share an x: :func:`value_at` raises there, and ``value`` is null). The same rule and the
    same formulas (a board reads thousands of sweeps; one Python call per sweep does not
    scale); tested equal to :func:`value_at`."""
    if not (math.isfinite(t) and t > 0):
        raise ValueError(
            f"the matched value must be a finite number > 0 (interpolation is in log x), got {t}"
        )
    by = list(by)
    X, Y = pl.col("_x"), pl.col("_y")
    usable = (
        points.select(*by, _x=pl.col(x).cast(pl.Float64), _y=pl.col(y).cast(pl.Float64))
        .filter(X.is_finite() & Y.is_finite() & (X > 0))
        .sort("_x")  # each group's points in x order: first/last below are the ends
    )
    below, above = X < t, X > t
    g = usable.group_by(by, maintain_order=True).agg(
        shared_x=X.n_unique() < pl.len(),
        y_at=Y.filter(X == t).first(),
        x_min=X.first(), y_min=Y.first(), x_max=X.last(), y_max=Y.last(),
        x0=X.filter(below).last(), y0=Y.filter(below).last(),
        x1=X.filter(above).first(), y1=Y.filter(above).first(),
    )  # fmt: skip
    x0, y0, x1, y1 = pl.col("x0"), pl.col("y0"), pl.col("x1"), pl.col("y1")
    w = (math.log(t) - x0.log()) / (x1.log() - x0.log())
    between = (
        pl.when((y0 > 0) & (y1 > 0))
        .then((y0.log() + w * (y1.log() - y0.log())).exp())
        .otherwise(y0 + w * (y1 - y0))
    )
    at_min = (pl.col("x_min") > t) & (pl.col("x_min") - t <= rtol * t)
    at_max = (pl.col("x_max") < t) & (t - pl.col("x_max") <= rtol * t)
    outside = (pl.col("x_min") > t) | (pl.col("x_max") < t)
    exact = pl.col("y_at").is_not_null()
    return g.select(
        *by,
        value=pl.when(pl.col("shared_x"))
        .then(None)
        .when(exact)
        .then(pl.col("y_at"))
        .when(at_min)
        .then(pl.col("y_min"))
        .when(at_max)
        .then(pl.col("y_max"))
        .when(~outside)
        .then(between),
        exact=exact | at_min | at_max,
        x_low=pl.when(exact).then(t).when(at_min).then("x_min").when(at_max).then("x_max")
        .otherwise(x0),
        x_high=pl.when(exact).then(t).when(at_min).then("x_min").when(at_max).then("x_max")
        .otherwise(x1),
        shared_x="shared_x",
    )  # fmt: skip

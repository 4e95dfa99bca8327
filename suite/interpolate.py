"""A metric at a matched value of another, read off a sweep: the one interpolation rule shared
by the boards' matched tables and the claims engine (``at:`` tests).

The sweep is a set of points (x, y), e.g. one seed's (sparsity, error) over a knob's sweep.
The value at x = t is interpolated between the two neighbouring points that bracket t, linear
in log x and, where both bracketing y are positive, linear in log y (a power law between
neighbours: error-vs-sparsity curves are close to one, and linear-in-y interpolation of a
convex curve overstates them); otherwise linear in y (a fraction can be 0). Never
extrapolated: outside the sweep's range the value is None. A point within ``rtol`` of t
(relative; 1 % by default, ours) is used as it is: a knob that sets x only to within a
fraction of a percent (an SAE's L0 at its nominal k lands 0.5 % either side of k) would
otherwise never reach the end points of its own sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

RTOL = 0.01


@dataclass(frozen=True)
class AtValue:
    """The value at x = t and how it was read: ``exact`` (a point within the tolerance of t,
    the nearest one), or ``interpolated``
    between ``x_low`` and ``x_high`` (the bracketing points' x)."""

    value: float
    exact: bool
    x_low: float
    x_high: float


def value_at(
    xs: Sequence[float], ys: Sequence[float | None], t: float, rtol: float = RTOL
) -> AtValue | None:
    """y at x = t from the points (xs, ys) (any order; x > 0; a None or non-finite y is
    skipped); None when t lies outside the sweep's x range or no bracket has both y."""
    if not t > 0:
        raise ValueError(f"the matched value must be > 0 (interpolation is in log x), got {t}")
    pts = sorted(
        (float(x), float(y))
        for x, y in zip(xs, ys, strict=True)
        if y is not None and x is not None and math.isfinite(y) and float(x) > 0
    )
    near = [(abs(x - t), x, y) for x, y in pts if abs(x - t) <= rtol * t]
    if near:
        _, x, y = min(near)
        return AtValue(y, True, x, x)
    for (x0, y0), (x1, y1) in zip(pts, pts[1:]):
        if x0 < t < x1:
            w = (math.log(t) - math.log(x0)) / (math.log(x1) - math.log(x0))
            if y0 > 0 and y1 > 0:
                y = math.exp(math.log(y0) + w * (math.log(y1) - math.log(y0)))
            else:
                y = y0 + w * (y1 - y0)
            return AtValue(y, False, x0, x1)
    return None

"""The intervals behind the verdicts (two-sided, at a stated level, over seeds).

* :func:`welch_diff`: mean(a) − mean(b) ± t·se with Welch's standard error
  ``se = sqrt(s_a²/n_a + s_b²/n_b)`` and the Welch–Satterthwaite degrees of freedom (Welch
  1947); the interval of Welch's unequal-variance t-test.
* :func:`mean_interval`: the one-sample t interval of a mean (Student).
* :func:`ratio_interval`: mean(a) / mean(b) by a percentile bootstrap over seeds (Efron &
  Tibshirani 1993, ch. 13): each group resampled with replacement, 10,000 resamples, a fixed
  generator seed so the verdict is a function of the records alone.
* :func:`slope_interval`: the least-squares slope of log y on log x ± t·se with n − 2
  degrees of freedom (a fitted scaling exponent).

With ``exact=True`` (``stat: exact`` in a claim, for deterministic metrics such as FLOPs or
color counts) every interval collapses to its point estimate.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

BOOTSTRAP_RESAMPLES = 10_000
BOOTSTRAP_SEED = 0


def _t(level: float, df: float) -> float:
    return float(stats.t.ppf(0.5 + level / 2, df)) if df > 0 else math.inf


def welch_diff(
    a: Sequence[float], b: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(estimate, low, high) of mean(a) − mean(b). ``a``/``b``: per-seed values (n ≥ 1; with
    n = 1 in a group and not exact the interval is unbounded)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = float(a.mean() - b.mean())
    if exact:
        return d, d, d
    va = a.var(ddof=1) / a.size if a.size > 1 else math.inf
    vb = b.var(ddof=1) / b.size if b.size > 1 else math.inf
    se2 = va + vb
    if se2 == 0:
        return d, d, d
    if math.isinf(se2):
        return d, -math.inf, math.inf
    df = se2**2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    h = _t(level, df) * math.sqrt(se2)
    return d, d - h, d + h


def mean_interval(
    a: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(mean, low, high): the t interval of the mean of per-seed values ``a``."""
    a = np.asarray(a, float)
    m = float(a.mean())
    if exact:
        return m, m, m
    if a.size < 2:
        return m, -math.inf, math.inf
    se = a.std(ddof=1) / math.sqrt(a.size)
    h = _t(level, a.size - 1) * se
    return m, m - h, m + h


def ratio_interval(
    a: Sequence[float], b: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(mean(a)/mean(b), low, high) by the percentile bootstrap over seeds."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    r = float(a.mean() / b.mean()) if b.mean() != 0 else math.inf
    if exact or (a.size == 1 and b.size == 1):
        return (r, r, r) if exact else (r, -math.inf, math.inf)
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    ma = a[rng.integers(0, a.size, (BOOTSTRAP_RESAMPLES, a.size))].mean(axis=1)
    mb = b[rng.integers(0, b.size, (BOOTSTRAP_RESAMPLES, b.size))].mean(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        boot = ma / mb
    lo, hi = np.nanquantile(boot, [0.5 - level / 2, 0.5 + level / 2])
    return r, float(lo), float(hi)


def slope_interval(
    x: Sequence[float], y: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(slope, low, high) of log y = slope · log x + c, least squares over every (x, y) point
    (one per seed and x). Needs x > 0, y > 0 and at least 3 points at 2 distinct x."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    fit = stats.linregress(lx, ly)
    k = float(fit.slope)
    if exact or lx.size < 3:
        return (k, k, k) if exact else (k, -math.inf, math.inf)
    h = _t(level, lx.size - 2) * float(fit.stderr)
    return k, k - h, k + h

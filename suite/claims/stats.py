"""The intervals behind the verdicts (two-sided, at a stated level, over seeds).

* :func:`welch_diff`: mean(a) − mean(b) ± t·se with Welch's standard error
  ``se = sqrt(s_a²/n_a + s_b²/n_b)`` and the Welch–Satterthwaite degrees of freedom (Welch
  1947); the interval of Welch's unequal-variance t-test.
* :func:`paired_diff`: mean over seeds of a_s − b_s ± t·sd/√n with n − 1 degrees of freedom
  (Student's paired t interval, as ``scipy.stats.ttest_rel``), for cells that share each
  seed's inputs (the same θ0 and experts, the same data order): the seed's own offset cancels.
* :func:`mean_interval`: the one-sample t interval of a mean (Student).
* :func:`ratio_interval`: mean(a) / mean(b) by the delta method on the log ratio (Casella &
  Berger 2002, Sec. 5.5.4): se² = s_a²/(n_a m_a²) + s_b²/(n_b m_b²) with Welch–Satterthwaite
  degrees of freedom on the two terms, exponentiated. A percentile bootstrap over 3 seeds
  covered the true ratio in only about 79 % of simulated 95 % intervals (a resampled mean never
  leaves the seeds' range); this interval covered it in about 96 %.
* :func:`slope_interval`: the least-squares slope of log y on log x ± t·se with n − 2
  degrees of freedom (a fitted scaling exponent).
* :func:`seeds_needed`: for an undecided test, the fewest seeds per cell at which the
  interval's half-width would fall below the observed distance to the boundary if the
  observed spread and effect held (a point estimate: about even odds of deciding there).

With ``exact=True`` (``stat: exact`` in a claim, for metrics the pillar declares deterministic,
such as color counts) every interval collapses to its point estimate. Values with no spread
(:func:`no_spread`: equal up to rounding) give a point interval too; whether a point is
evidence is the judge's call, for a deterministic metric only (a tie of accuracies on a
1,000-image test set is chance, not a measured zero variance).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

# Values closer than this, relative to their magnitude, are a tie: sums and differences of the
# same numbers round differently (three copies of 0.901 have a variance of 1.8e-32, not 0),
# and metrics pass through float32 (relative precision 1.2e-7) on their way to a record, so a
# spread below a few float32 steps is rounding, not a measured difference.
TIE_RTOL = 1e-6


def no_spread(values: Sequence[float], scale: float | None = None) -> bool:
    """Whether ``values`` (at least 2) are all equal up to rounding at ``scale`` (default:
    their largest magnitude; for differences, pass the magnitude of what was subtracted)."""
    v = np.asarray(values, float)
    if v.size < 2:
        return False
    ref = float(np.abs(v).max()) if scale is None else scale
    return float(v.max() - v.min()) <= TIE_RTOL * ref


def _var_of_mean(a: np.ndarray) -> float:
    """s²/n of the per-seed values (0 for a tie, inf for one value)."""
    if a.size < 2:
        return math.inf
    return 0.0 if no_spread(a) else float(a.var(ddof=1)) / a.size


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
    va, vb = _var_of_mean(a), _var_of_mean(b)
    se2 = va + vb
    if se2 == 0:
        return d, d, d
    if math.isinf(se2):
        return d, -math.inf, math.inf
    df = se2**2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    h = _t(level, df) * math.sqrt(se2)
    return d, d - h, d + h


def paired_diff(a: Sequence[float], b: Sequence[float], level: float) -> tuple[float, float, float]:
    """(estimate, low, high) of the mean of a_s − b_s, ``a`` and ``b`` aligned by seed (n ≥ 2
    pairs; with one pair the interval is unbounded, and so it is when every pair differs by
    the same amount up to rounding: a spread of zero over a few seeds, e.g. two cells that tie
    on a 1,000-image test set, is no evidence that the spread is small)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape:
        raise ValueError(f"paired values need equal lengths, got {a.size} and {b.size}")
    d = a - b
    if paired_ties(a, b):
        return float(d.mean()), -math.inf, math.inf
    return mean_interval(d, level)


def paired_ties(a: Sequence[float], b: Sequence[float]) -> bool:
    """Whether the per-seed differences a_s − b_s (at least 2) are all equal up to rounding
    (at the magnitude of the values subtracted, not of the differences)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    scale = float(max(np.abs(a).max(initial=0.0), np.abs(b).max(initial=0.0)))
    return no_spread(a - b, scale)


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
    se = math.sqrt(_var_of_mean(a))
    h = _t(level, a.size - 1) * se
    return m, m - h, m + h


def ratio_interval(
    a: Sequence[float], b: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(mean(a)/mean(b), low, high): the delta-method interval of the log ratio. Needs
    positive means (else unbounded) and at least 2 values per group (else unbounded)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    ma, mb = float(a.mean()), float(b.mean())
    r = ma / mb if mb != 0 else math.copysign(math.inf, ma)
    if ma <= 0 or mb <= 0:  # a ratio of costs or speeds: with a sign or a zero it says nothing
        return (r if math.isfinite(r) else math.nan), -math.inf, math.inf
    if exact:
        return r, r, r
    if a.size < 2 or b.size < 2:
        return r, -math.inf, math.inf
    va, vb = _var_of_mean(a) / ma**2, _var_of_mean(b) / mb**2
    se2 = va + vb
    if se2 == 0:
        return r, r, r
    df = se2**2 / (va**2 / (a.size - 1) + vb**2 / (b.size - 1))
    h = _t(level, df) * math.sqrt(se2)
    return r, r * math.exp(-h), r * math.exp(h)


def slope_interval(
    x: Sequence[float], y: Sequence[float], level: float, exact: bool = False
) -> tuple[float, float, float]:
    """(slope, low, high) of log y = slope · log x + c, least squares over every (x, y) point
    (one per seed and x). Needs x > 0, y > 0 and at least 3 points at 2 distinct x; points
    on a line up to rounding give a point interval."""
    lx, ly = np.log(np.asarray(x, float)), np.log(np.asarray(y, float))
    fit = stats.linregress(lx, ly)
    k = float(fit.slope)
    if exact or lx.size < 3:
        return (k, k, k) if exact else (k, -math.inf, math.inf)
    if no_spread(ly - (k * lx + float(fit.intercept)), float(np.abs(ly).max())):
        return k, k, k
    h = _t(level, lx.size - 2) * float(fit.stderr)
    return k, k - h, k + h


def seeds_needed(
    variances: Sequence[float], distance: float, level: float, paired_or_mean: bool, cap: int = 100
) -> int | None:
    """Fewest seeds n per cell (2 to ``cap``) at which t·se(n) < ``distance`` (the gap between
    the estimate and the boundary the interval must clear), the spread taken as observed:
    ``paired_or_mean``: one variance v (of the per-seed differences or of one cell), se² = v/n
    with n − 1 degrees of freedom; else Welch with two cells of n seeds each, variances
    v_a, v_b: se² = (v_a + v_b)/n, df = (v_a + v_b)²(n − 1)/(v_a² + v_b²). None where it takes
    more than ``cap`` seeds, or nothing is to be gained (no distance, no spread)."""
    v = [float(x) for x in variances]
    if not distance > 0 or not all(math.isfinite(x) and x >= 0 for x in v) or sum(v) == 0:
        return None
    for n in range(2, cap + 1):
        if paired_or_mean:
            se, df = math.sqrt(v[0] / n), n - 1
        else:
            se = math.sqrt(sum(v) / n)
            df = sum(v) ** 2 * (n - 1) / sum(x * x for x in v)
        if _t(level, df) * se < distance:
            return n
    return None

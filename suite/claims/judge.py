"""Verdicts: a claim and the runs tables -> ``holds`` / ``fails`` / ``inconclusive``, with the
numbers behind it. The verdict is a function of the records alone.

How a test is judged (``level`` is the two-sided interval level, default 0.95; see
:mod:`.stats` for the intervals):

* ``order`` (``a op b`` with ``margin`` m; ``>``: a > b − m): the Welch interval of
  d = mean(a) − mean(b) (for ``<``: of mean(b) − mean(a)). ``holds`` when it lies above −m,
  ``fails`` when it lies below −m, ``inconclusive`` when it contains −m (the difference is
  inside seed noise).
* ``equal`` (|a − b| ≤ tol): ``holds`` when the Welch interval of d lies inside [−tol, tol]
  (an equivalence test, as in TOST), ``fails`` when it lies outside, else inconclusive.
* ``ratio`` (mean(a)/mean(b) op threshold) and ``value`` (mean(a) op bound, or within
  [low, high]): the delta-method interval of the ratio / the t interval of the mean, compared
  with the threshold or band the same way.
* ``ranking`` (cells best first, in the metric's direction): an ``order`` test between every
  pair i < j of the cells, not only neighbours (two steps inside the noise can add up to a
  clear difference between the ends); ``fails`` if any pair fails, ``holds`` only if every
  pair holds and every cell could be read, else inconclusive. A cell that cannot be read
  (missing, failed, too few seeds) makes its pairs inconclusive and leaves the others judged.
* ``trend`` (the metric along a column, e.g. ``target_sparsity``): an ``order`` test between
  every pair of values of the column (a later value against an earlier one), combined as
  ranking; ``constant``: an ``equal`` test of every pair, the first against every value
  included (so that small steps cannot add up to a drift).
* ``exponent``: the interval of the fitted slope of log metric on log ``along``.

``at: {X: [x, ...]}`` (order, equal, ratio, value, ranking) reads the metric Y at X = x
instead of at a cell: each selector then addresses a *sweep*, the cells it matches that differ
only in their setting (``setting_id``, e.g. a k or λ grid). Per seed, that seed's points
(X, Y) across the sweep give Y at X = x by :func:`sparsebench.suite.interpolate.value_at`
(log x, log y where positive, never extrapolated); these per-seed values are the cell's values
for the test's interval. A seed whose sweep does not bracket x is dropped (the reason says
so); fewer than ``min_seeds`` left makes the claim inconclusive. Each x is judged on its own
and the verdicts combine as a ranking's (holds iff every x holds, fails if any fails).

A cell that is missing, has fewer than ``min_seeds`` finished seeds (default 2; 1 with
``stat: exact``; distinct seeds: a seed with two rows makes the cell inconclusive), or has a
row whose status is not ``ok`` (failed, diverged, skipped, or none) makes the claim
inconclusive, naming the cell; a selector that matches several cells also does (narrow it
with more filters). Every inconclusive verdict carries its ``reason_kind`` (a key of
:data:`REASONS`: not run, failed, too few seeds, ambiguous, unusable, no spread, inside the
noise, error), set where the judge stops: each :class:`Inconclusive` names its kind, a test
whose interval contains its boundary is ``noise``, and a combined verdict (ranking, trend,
``at``) takes the first kind in :data:`REASONS`' order among its undecided parts.

A spread of zero is evidence only for a metric its pillar declares deterministic
(:attr:`~sparsebench.suite.pillar.Metric.deterministic`: a count or a formula of the
configuration). For any other metric, cells whose seeds all tie (two cells for Welch's and
the ratio's intervals, one for a mean, the per-seed differences for ``paired``, the points of
a slope) would give a point interval that "holds" on chance ties, e.g. accuracies on a
1,000-image test set: such a test is inconclusive and says so. ``stat: exact`` (refused for a
metric that is not deterministic when the file is read) makes intervals points; a tie at the
boundary holds only where a margin allows it, and values that differ across seeds make the
test inconclusive. A test holds on a one-sided reading of a two-sided interval, i.e. at
one-sided error 0.025 for the default level, with no correction for the number of claims
judged.

With ``stat: paired`` (order, equal, ranking, trend) the Welch interval of d is replaced by
the paired t interval of the per-seed differences a_s − b_s (:func:`.stats.paired_diff`), for
cells that share each seed's inputs, such as merges of one seed's experts: the offset a seed
gives both cells cancels. Both cells must have the same seeds (else inconclusive, naming
them); differences that are all equal are inconclusive (a point for a deterministic metric).

"Seeds" above are the pillar's replicates (:attr:`~sparsebench.suite.pillar.Pillar.replicate`):
the ``seed`` column by default, ``trial`` for a pillar of timings, whose
cells are one fixed configuration measured in several independent jobs. ``min_seeds``, n,
the duplicated-replicate check and the pairing of ``stat: paired`` all read that column, and
a cell's replicates are the rows whose ids differ only in a ``/<replicate><n>`` part.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cache
from itertools import combinations
from typing import Any

import polars as pl

from sparsebench.suite.catalog import closest
from sparsebench.suite.interpolate import value_at

from . import stats
from .parse import Claim, ClaimError

VERDICTS = ("holds", "fails", "inconclusive")
# Why a verdict is inconclusive (its ``reason_kind``) -> the words the pages show. The order
# is also precedence: a claim combined from several pairs or x takes the first kind among
# them, so that what blocks a judgement (a cell not run) shows before what a run decides
# (the noise).
REASONS = {
    "not_run": "not run",  # no runs table, no cell matching a selector, no values along
    "failed": "failed",  # a row whose status is not ok (failed, diverged, skipped, none)
    "too_few_seeds": "too few seeds",  # fewer than min_seeds, or not the seeds paired needs
    "ambiguous": "ambiguous cell",  # a selector names several cells or a seed twice
    "unusable": "unusable values",  # a value missing, not finite or outside what the test reads
    "no_spread": "no spread",  # seeds that tie on a metric that is not deterministic
    "noise": "inside the noise",  # the interval contains the claim's boundary
    "error": "could not be judged",  # the judge raised: a bug or a table it cannot read
}
_SEED_PART = re.compile(r"(^|/)seed\d+(?=/|$)")
_SEED_LABEL = re.compile(r"\s*\bseed[= ]?\d+\b")


@cache
def _replicate_parts(replicate: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """(id part, label part) that name one replicate, e.g. ``/seed3`` and ``seed=3``, or
    ``/trial1`` and ``trial 1``: stripped, they leave what the replicates of a cell share."""
    if replicate == "seed":
        return _SEED_PART, _SEED_LABEL
    name = re.escape(replicate)
    return re.compile(rf"(^|/){name}\d+(?=/|$)"), re.compile(rf"\s*\b{name}[= ]?\d+\b")


def _strip_replicate(ids: pl.Series, replicate: str) -> pl.Series:
    """``ids`` without their replicate part (:func:`_replicate_parts`' id part, removed as
    ``re.sub`` removes it), vectorised: a selection may hold a million rows. polars' regex has
    no look-ahead, so the part is matched with the ``/`` after it, which goes back in; a part
    right after another then waits for the next pass."""
    pattern = rf"(^|/){re.escape(replicate)}\d+(/|$)"
    out = ids.cast(pl.String)
    for _ in range(64):
        stripped = out.str.replace_all(pattern, "$2")
        if stripped.equals(out):
            break
        out = stripped
    return out


def _replicate(pillar: str) -> str:
    """The column holding ``pillar``'s replicates (``seed`` for an unknown pillar)."""
    from sparsebench.suite.pillar import PillarError, get_pillar

    try:
        return get_pillar(pillar).replicate or "seed"
    except PillarError:
        return "seed"


@dataclass
class CellStat:
    """One addressed cell: its filters, per-seed values and their summary."""

    selector: dict[str, Any]
    label: str = ""
    values: list[float] = field(default_factory=list)
    # the replicate of each value: its seed, or its trial where the pillar's replicate is trial
    seeds: list[int] = field(default_factory=list)
    n: int = 0
    mean: float | None = None
    std: float | None = None
    problem: str | None = None  # why it cannot be used (missing, failed, ambiguous, ...)
    problem_kind: str | None = None  # that problem's key in REASONS
    # with ``at``: the column and x, each seed's reading (its value and the settings that
    # bracket x) and the seeds whose sweep does not reach x
    at: dict[str, Any] | None = None


@dataclass
class Verdict:
    """The judgement of one claim; ``estimate``/``low``/``high`` are the tested quantity
    (difference, ratio, mean or slope) and its interval, when the test has one number."""

    claim: Claim
    verdict: str
    reason: str
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    cells: list[CellStat] = field(default_factory=list)
    pairs: list[dict[str, Any]] = field(default_factory=list)
    # inconclusive only: the seeds per cell the observed effect and spread would need
    # (:func:`.stats.seeds_needed`); None where no number can say it
    seeds_needed: int | None = None
    # inconclusive only: why, as a key of REASONS (None for holds and fails)
    reason_kind: str | None = None

    def __post_init__(self) -> None:
        if self.verdict == "inconclusive" and self.reason_kind not in REASONS:
            raise ValueError(
                f"an inconclusive verdict needs a reason kind, not {self.reason_kind!r}"
            )
        if self.verdict != "inconclusive":
            self.reason_kind = None


class Inconclusive(Exception):
    """A problem that makes the claim inconclusive: the message says which, ``kind`` (a key
    of :data:`REASONS`) what sort."""

    def __init__(self, message: str, kind: str) -> None:
        assert kind in REASONS, kind
        super().__init__(message)
        self.kind = kind


def _first_kind(kinds) -> str:
    """The kind that explains a combined inconclusive verdict: the first in REASONS' order."""
    present = set(kinds)
    return next((k for k in REASONS if k in present), "noise")


def _noise(verdict: str) -> str | None:
    """The reason kind of a test that read its interval: inconclusive only inside the noise."""
    return "noise" if verdict == "inconclusive" else None


def _match(name: str, dtype: pl.DataType, value: Any) -> pl.Expr:
    """Rows whose column ``name`` (of ``dtype``) holds ``value`` (or one of a list of them):
    numbers to a relative 1e-9, anything else by its text; null never matches."""
    col = pl.col(name)
    out = pl.lit(False)
    for v in value if isinstance(value, list) else [value]:
        if dtype == pl.Boolean:  # polars casts True to "true", str(True) is "True"
            if isinstance(v, bool):
                out = out | (col == v).fill_null(False)
        elif isinstance(v, bool) or not isinstance(v, int | float) or dtype == pl.Utf8:
            out = out | (col.cast(pl.Utf8) == str(v)).fill_null(False)
        else:
            x = col.cast(pl.Float64)
            out = out | ((x - float(v)).abs() <= 1e-9 * max(1.0, abs(float(v)))).fill_null(False)
    return out


def _select(runs: pl.DataFrame, filters: dict[str, Any]) -> pl.DataFrame:
    for col in filters:
        if col not in runs.columns:
            raise Inconclusive(
                f"column {col!r} is not in this pillar's runs table", kind="unusable"
            )
    if not filters:
        return runs
    return runs.filter(*(_match(c, runs.schema[c], v) for c, v in filters.items()))


def _describe(filters: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in filters.items()) or "(all rows)"


def _matching(runs: pl.DataFrame | None, filters: dict[str, Any]) -> pl.DataFrame:
    """The rows ``filters`` select; Inconclusive when there is no table or no row."""
    if runs is None:
        raise Inconclusive("no runs table of this pillar in the results", kind="not_run")
    rows = _select(runs, filters)
    if rows.height == 0:
        raise Inconclusive(
            f"no cell matches {_describe(filters)}{_suggest(runs, filters)}", kind="not_run"
        )
    return rows


def _suggest(runs: pl.DataFrame, filters: dict[str, Any]) -> str:
    """``"; did you mean task='mnist'?"`` for the first text value of ``filters`` that no row
    holds but is close to one a row does (a typo of a task or setting in a selector, which
    the claim file alone cannot catch); ``""`` otherwise."""
    for col, value in filters.items():
        if runs[col].dtype != pl.Utf8:
            continue
        present = sorted(runs[col].drop_nulls().unique().to_list())
        for v in value if isinstance(value, list) else [value]:
            if str(v) not in present and (match := closest(v, present)) is not None:
                return f"; did you mean {col}={match!r}?"
    return ""


def _unfinished(rows: pl.DataFrame, filters: dict[str, Any], what: str = "") -> None:
    """Inconclusive if a row's status is not ``ok``: a null status is no evidence that the
    job finished (polars would drop it from ``status != "ok"``)."""
    bad = rows.filter(pl.col("status").is_null() | (pl.col("status") != "ok"))
    if not bad.height:
        return
    statuses = bad["status"].to_list()
    kinds = sorted({s for s in statuses if s is not None})
    kinds += ["with no status"] if None in statuses else []
    raise Inconclusive(
        f"{_describe(filters)}: {bad.height} row(s){what} {', '.join(kinds)} (e.g. "
        f"{bad['cell_id'][0]}): only status ok is finished; a claim over a failed or "
        "unfinished cell is not judged",
        kind="failed",
    )


def _cell(
    runs: pl.DataFrame | None,
    filters: dict[str, Any],
    metric: str,
    row_key,
    min_seeds: int,
    replicate: str = "seed",
) -> CellStat:
    """The per-replicate values of the one cell ``filters`` address (``replicate``: the
    column whose distinct values count, ``seed`` or ``trial``; ``seed`` where the table lacks
    it); raises Inconclusive."""
    stat = CellStat(selector=filters)
    rows = _matching(runs, filters)
    if replicate not in rows.columns:  # a table without it (hand-built, or older): seeds
        replicate = "seed"
    label_part = _replicate_parts(replicate)[1]
    key = [c for c in row_key if c != replicate and c in rows.columns]
    rows = rows.with_columns(_cell=_strip_replicate(rows["cell_id"], replicate))
    groups = rows.select(["_cell", *key]).unique()
    if groups.height > 1:
        some = "; ".join(groups["_cell"].head(3).to_list())
        raise Inconclusive(
            f"{_describe(filters)} matches {groups.height} cells (e.g. {some}): add filters "
            "(setting, task, ...) so that it names one",
            kind="ambiguous",
        )
    label = rows["label"][0] if "label" in rows.columns else groups["_cell"][0]
    stat.label = label_part.sub("", label)  # the mean is over replicates
    _unfinished(rows, filters)
    # n counts replicates, not rows: a record read twice must not narrow the interval
    has_rep = replicate in rows.columns
    reps = rows[replicate].to_list() if has_rep else [None] * rows.height
    ids = [
        f"{replicate} {s}" if s is not None else c
        for s, c in zip(reps, rows["cell_id"].to_list(), strict=True)
    ]
    counts = Counter(ids)
    dup = sorted(i for i, k in counts.items() if k > 1)
    if dup:
        raise Inconclusive(
            f"{_describe(filters)}: {'; '.join(f'{i} has {counts[i]} rows' for i in dup)}: "
            f"each {replicate} counts once, so a cell with a duplicated {replicate} is not "
            "judged",
            kind="ambiguous",
        )
    if not rows.schema[metric].is_numeric():
        raise Inconclusive(
            f"{_describe(filters)}: column {metric!r} holds {rows.schema[metric]}, not numbers",
            kind="unusable",
        )
    raw = rows[metric].to_list()
    if any(v is None or not math.isfinite(v) for v in raw):
        raise Inconclusive(
            f"{_describe(filters)}: {metric} is missing or not finite in "
            f"{sum(v is None or not math.isfinite(v) for v in raw)} finished row(s)",
            kind="unusable",
        )
    values = [float(v) for v in raw]
    if len(values) < min_seeds:
        raise Inconclusive(
            f"{_describe(filters)}: {len(values)} {replicate}(s) with {metric}, the test needs "
            f"{min_seeds}",
            kind="too_few_seeds",
        )
    stat.values, stat.n = values, len(values)
    if has_rep and None not in reps:
        stat.seeds = [int(s) for s in reps]
    stat.mean = sum(values) / len(values)
    if len(values) > 1:
        m = stat.mean
        stat.std = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    return stat


def _sweep_key(
    rows: pl.DataFrame, row_key, replicate: str = "seed"
) -> tuple[pl.DataFrame, list[str]]:
    """``rows`` with ``_sweep``: the cell id without its replicate and setting parts, so that
    the cells of one sweep (same everything but setting and replicate) share it."""
    key = [c for c in row_key if c not in (replicate, "setting_id") and c in rows.columns]
    sids = rows["setting_id"].to_list() if "setting_id" in rows.columns else [None] * rows.height
    id_part = _replicate_parts(replicate)[0]
    ids = [
        "/".join(p for p in id_part.sub("", c).split("/") if p != sid)
        for c, sid in zip(rows["cell_id"].to_list(), sids, strict=True)
    ]
    return rows.with_columns(pl.Series("_sweep", ids)), key


def _varying_params(rows: pl.DataFrame) -> list[str]:
    """The method parameters whose values differ between the rows' settings (from
    ``params_json``; none when the table has no such column)."""
    if "params_json" not in rows.columns:
        return []
    params = [json.loads(p) for p in rows["params_json"].unique().to_list() if p is not None]
    keys = sorted({k for p in params for k in p})
    return [k for k in keys if len({json.dumps(p.get(k), sort_keys=True) for p in params}) > 1]


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, int | float) and math.isfinite(v)


def _sweep_cell(
    runs: pl.DataFrame | None,
    filters: dict[str, Any],
    metric: str,
    row_key,
    min_seeds: int,
    column: str,
    x: float,
    replicate: str = "seed",
) -> CellStat:
    """The per-replicate values of ``metric`` at ``column`` = ``x`` over the one sweep that
    ``filters`` address (its cells differ only in setting and replicate: ``seed`` or
    ``trial``); raises Inconclusive."""
    stat = CellStat(selector=filters)
    rows = _matching(runs, filters)
    if replicate not in rows.columns:  # a table without it (hand-built, or older): seeds
        replicate = "seed"
    for c in (column, replicate):
        if c not in rows.columns:
            raise Inconclusive(f"column {c!r} is not in this pillar's runs table", kind="unusable")
    rows, key = _sweep_key(rows, row_key, replicate)
    groups = rows.select(["_sweep", *key]).unique(maintain_order=True)
    if groups.height > 1:
        some = "; ".join(groups["_sweep"].head(3).to_list())
        raise Inconclusive(
            f"{_describe(filters)} matches {groups.height} sweeps (e.g. {some}): with at, a "
            "selector may span settings and seeds, nothing else; add filters (width, "
            "activations, task, ...) so that it names one",
            kind="ambiguous",
        )
    varying = _varying_params(rows)
    if len(varying) > 1:
        raise Inconclusive(
            f"{_describe(filters)} matches more than one sweep: its settings differ in "
            f"{', '.join(varying)}; with at, a sweep's settings vary one parameter (give the "
            "other values their own method entry in the spec, or filter on a column)",
            kind="ambiguous",
        )
    _unfinished(rows, filters, " of the sweep")
    for c in (column, metric):
        missing = sum(not _finite(v) for v in rows[c].to_list())
        if missing:
            raise Inconclusive(
                f"{_describe(filters)}: {c} is missing or not finite in {missing} finished "
                "row(s) of the sweep",
                kind="unusable",
            )
    setting = rows["setting"] if "setting" in rows.columns else rows["cell_id"]
    rows = rows.with_columns(setting.alias("_setting"))
    twice = rows.group_by(replicate, "_setting").len().filter(pl.col("len") > 1).sort(replicate)
    if twice.height:
        raise Inconclusive(
            f"{_describe(filters)}: {replicate} {twice[replicate][0]} has {twice['len'][0]} "
            f"rows at {twice['_setting'][0]}: each {replicate} counts once, so a sweep with a "
            f"duplicated {replicate} is not judged",
            kind="ambiguous",
        )
    n_settings = rows["_setting"].n_unique()
    label_part = _replicate_parts(replicate)[1]
    label = label_part.sub("", rows["label"][0] if "label" in rows.columns else rows["_sweep"][0])
    first = rows["_setting"][0]
    for wrap in ("({})", "[{}]"):  # the setting as the pillars' labels show it
        if wrap.format(first) in label:
            label = label.replace(wrap.format(first), wrap.format(f"{n_settings} settings"), 1)
            break
    stat.label = f"{label} at {column}={x:g}"
    readings, dropped = [], []
    for seed in sorted(set(rows[replicate].to_list())):
        pts = rows.filter(pl.col(replicate) == seed).sort(column)
        xs, ys = pts[column].cast(pl.Float64).to_list(), pts[metric].cast(pl.Float64).to_list()
        names = pts["_setting"].to_list()
        try:
            got = value_at(xs, ys, x)
        except ValueError as e:  # a column the sweep does not move
            raise Inconclusive(
                f"{stat.label}: {replicate} {seed}'s settings do not move {column} ({e}); at "
                "needs a column that the sweep's settings change",
                kind="unusable",
            ) from None
        if got is None:
            dropped.append({"seed": seed, "range": [min(xs), max(xs)]})
            continue
        low, high = got.i_low, got.i_high
        readings.append({
            "seed": seed, "value": got.value, "exact": got.exact,
            "low": {"setting": names[low], column: xs[low], metric: ys[low]},
            "high": {"setting": names[high], column: xs[high], metric: ys[high]},
        })  # fmt: skip
    stat.at = {"column": column, "value": x, "seeds": readings, "dropped": dropped}
    values = [r["value"] for r in readings]
    stat.seeds = [int(r["seed"]) for r in readings]
    if len(values) < min_seeds:
        why = "; ".join(
            f"{replicate} {d['seed']}'s sweep spans {column} "
            f"{_fmt(d['range'][0])}–{_fmt(d['range'][1])}"
            for d in dropped  # the readings keep the key "seed" for any replicate
        )
        raise Inconclusive(
            f"{stat.label}: {len(values)} {replicate}(s) bracket {column} = {x:g}, the test needs "
            f"{min_seeds}" + (f" ({why}; never extrapolated)" if why else ""),
            kind="too_few_seeds",
        )
    stat.values, stat.n = values, len(values)
    stat.mean = sum(values) / len(values)
    if len(values) > 1:
        m = stat.mean
        stat.std = math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))
    return stat


def _brackets(c: CellStat) -> str:
    """How a cell's value at x was read: the bracketing settings (with how many seeds each)
    and the seeds dropped, e.g. "k=4 … k=8 ×3; seed 2 dropped (l0 5.1–31)"."""
    if c.at is None:
        return ""
    col, seen = c.at["column"], {}
    for r in c.at["seeds"]:
        lo, hi = r["low"]["setting"], r["high"]["setting"]
        name = lo if r["exact"] else f"{lo} … {hi}"
        seen[name] = seen.get(name, 0) + 1
    parts = [f"{k} ×{n}" for k, n in seen.items()]
    parts += [
        f"seed {d['seed']} dropped ({col} {_fmt(d['range'][0])}–{_fmt(d['range'][1])})"
        for d in c.at["dropped"]
    ]
    return "; ".join(parts)


def _above(low: float, high: float, point: float, exact: bool, allow_tie: bool) -> str:
    """holds if the interval lies above ``point``, fails if below, else inconclusive."""
    if exact:
        return "holds" if low > point or (allow_tie and low == point) else "fails"
    if low > point:
        return "holds"
    if high < point:
        return "fails"
    return "inconclusive"


def _diff(x: _Ctx, first: CellStat, second: CellStat):
    """(d, low, high) of first − second: Welch's interval of the difference of the means,
    a point (``exact``), or the paired interval over the seeds both cells have (``paired``:
    their seed sets must be equal, else Inconclusive). Inconclusive where the interval would
    be a point from seeds that tie on a metric that is not deterministic."""
    if x.stat != "paired":
        x.no_ties(first, second)
        return stats.welch_diff(first.values, second.values, x.level, x.exact)
    unnamed = len(first.seeds) < first.n  # a value whose replicate is null pairs with none
    if (
        unnamed
        or sorted(first.seeds) != sorted(second.seeds)
        or len(set(first.seeds)) < len(first.seeds)
    ):
        raise Inconclusive(
            f"stat: paired needs the same {x.replicate}s, once each, in both cells: "
            f"{first.label} has {sorted(first.seeds)}, {second.label} {sorted(second.seeds)}",
            kind="too_few_seeds",
        )
    by_seed = dict(zip(second.seeds, second.values, strict=True))
    b = [by_seed[s] for s in first.seeds]
    if stats.paired_ties(first.values, b):
        d = sum(first.values) / len(b) - sum(b) / len(b)
        if x.deterministic:
            return d, d, d
        raise x.no_evidence(
            f"{first.label} − {second.label}: {len(b)} {x.replicate}s all differ by {_fmt(d)}"
        )
    return stats.paired_diff(first.values, b, x.level)


def _order(x: _Ctx, a: CellStat, b: CellStat, op: str, margin: float):
    """(verdict, d, low, high) of ``a op b`` with margin; d is oriented so that > −m holds."""
    first, second = (a, b) if op == ">" else (b, a)
    d, lo, hi = _diff(x, first, second)
    return _above(lo, hi, -margin, x.exact, allow_tie=margin > 0), d, lo, hi


def _equal(x: _Ctx, a: CellStat, b: CellStat, tol: float):
    d, lo, hi = _diff(x, a, b)
    if -tol <= lo and hi <= tol:
        return "holds", d, lo, hi
    if lo > tol or hi < -tol or x.exact:
        return "fails", d, lo, hi
    return "inconclusive", d, lo, hi


def _combine(verdicts: list[str]) -> str:
    if "fails" in verdicts:
        return "fails"
    return "holds" if all(v == "holds" for v in verdicts) else "inconclusive"


def _fmt(x: float | None) -> str:
    if x is None:
        return "–"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    return f"{x:.4g}"


def _deterministic(pillar: str, metric: str) -> bool:
    """Whether ``pillar`` declares ``metric`` deterministic (False if either is unknown)."""
    from sparsebench.suite.pillar import PillarError, get_pillar

    try:
        found = [m for m in get_pillar(pillar).metrics if m.name == metric]
    except PillarError:
        return False
    return bool(found) and found[0].deterministic


class _Ctx:
    """What the kind functions need: the test, its metric's table and cell lookup."""

    def __init__(
        self,
        claim: Claim,
        tables: dict[str, pl.DataFrame | None],
        row_keys: dict,
        at: tuple[str, float] | None = None,
    ):
        self.claim, self.t = claim, claim.test
        self.level, self.stat = self.t["level"], self.t["stat"]
        self.exact = self.stat == "exact"
        self.deterministic = _deterministic(self.t["pillar"], self.t["metric"])
        self.replicate = _replicate(self.t["pillar"])  # what n counts: seeds or trials
        self.runs = tables.get(self.t["pillar"])
        self.key = row_keys.get(self.t["pillar"], ())
        self.at = at  # (column, x): cells are sweeps read at column = x
        self.cells: list[CellStat] = []

    def cell(self, filters: dict[str, Any]) -> CellStat:
        t, sel = self.t, {**self.t["where"], **filters}
        if self.at is None:
            c = _cell(self.runs, sel, t["metric"], self.key, t["min_seeds"], self.replicate)
        else:
            c = _sweep_cell(
                self.runs, sel, t["metric"], self.key, t["min_seeds"], *self.at,
                replicate=self.replicate,
            )  # fmt: skip
        self.cells.append(c)
        if self.exact and len(set(c.values)) > 1:
            raise Inconclusive(
                f"{_describe(filters)}: stat: exact, but {t['metric']} differs across the "
                f"{c.n} {self.replicate}s ({_fmt(min(c.values))} to {_fmt(max(c.values))}); "
                "use welch",
                kind="unusable",
            )
        return c

    def try_cell(self, filters: dict[str, Any]) -> CellStat:
        """:meth:`cell`, but a cell that cannot be used comes back with its ``problem`` (and
        keeps its slot in :attr:`cells`) instead of stopping the claim: a ranking or trend
        still judges the pairs of the other cells."""
        n = len(self.cells)
        try:
            return self.cell(filters)
        except Inconclusive as e:
            c = self.cells[n] if len(self.cells) > n else CellStat({**self.t["where"], **filters})
            del self.cells[n:]
            c.problem, c.problem_kind = str(e), e.kind
            self.cells.append(c)
            return c

    def no_evidence(self, what: str) -> Inconclusive:
        return Inconclusive(
            f"{what}: a spread of zero is no evidence for {self.t['metric']}, which is not "
            "deterministic",
            kind="no_spread",
        )

    def no_ties(self, *cells: CellStat) -> None:
        """Inconclusive if every one of ``cells`` has seeds that all tie (the interval would be
        a point) and the metric is not deterministic; one cell with a spread is enough."""
        if self.exact or self.deterministic or not all(stats.no_spread(c.values) for c in cells):
            return
        raise self.no_evidence(
            "; ".join(f"{c.label}: {c.n} {self.replicate}s all {_fmt(c.values[0])}" for c in cells)
        )

    def interval(self, what: str, est: float, lo: float, hi: float, against: str) -> str:
        exact = {"exact": " (exact)", "paired": f" (paired by {self.replicate})"}.get(self.stat, "")
        return (
            f"{what} = {_fmt(est)}, {self.level * 100:.4g}% interval [{_fmt(lo)}, {_fmt(hi)}] "
            f"against {against}{exact}"
        )


def _side(op: str, lo: float, hi: float, point: float, exact: bool) -> str:
    """``op`` ``>``: the interval above ``point``; ``<``: below it."""
    if op == ">":
        return _above(lo, hi, point, exact, False)
    return _above(-hi, -lo, -point, exact, False)


def _bound(t: dict[str, Any], lo: float, hi: float, exact: bool) -> tuple[str, str]:
    """(verdict, what it was against) of the interval [lo, hi] against ``op`` ``bound``, or
    inside the band ``within``: holds inside it, fails wholly outside it."""
    if "within" not in t:
        return _side(t["op"], lo, hi, t["bound"], exact), f"{t['op']} {_fmt(t['bound'])}"
    low_b, high_b = t["within"]
    if low_b <= lo and hi <= high_b:
        v = "holds"
    elif hi < low_b or lo > high_b or exact:
        v = "fails"
    else:
        v = "inconclusive"
    return v, f"the band [{_fmt(low_b)}, {_fmt(high_b)}]"


def _judge_pair(x: _Ctx) -> Verdict:
    t = x.t
    a, b = x.cell(t["a"]), x.cell(t["b"])
    if t["kind"] == "order":
        v, est, lo, hi = _order(x, a, b, t["op"], t.get("margin", 0.0))
        what = "mean(a) − mean(b)" if t["op"] == ">" else "mean(b) − mean(a)"
        margin = t.get("margin", 0.0)
        against = f"> {_fmt(-margin)}" if margin else "> 0"
    elif t["kind"] == "equal":
        v, est, lo, hi = _equal(x, a, b, t["tol"])
        what, against = "mean(a) − mean(b)", f"[{_fmt(-t['tol'])}, {_fmt(t['tol'])}]"
    else:
        x.no_ties(a, b)
        if not (a.mean and a.mean > 0 and b.mean and b.mean > 0):
            raise Inconclusive(
                f"a ratio needs positive means: {a.label} {_fmt(a.mean)}, {b.label} "
                f"{_fmt(b.mean)} (a zero or a sign makes mean(a) / mean(b) say nothing)",
                kind="unusable",
            )
        est, lo, hi = stats.ratio_interval(a.values, b.values, x.level, x.exact)
        v = _side(t["op"], lo, hi, t["threshold"], x.exact)
        what, against = "mean(a) / mean(b)", f"{t['op']} {_fmt(t['threshold'])}"
    reason = x.interval(what, est, lo, hi, against)
    return Verdict(x.claim, v, reason, est, lo, hi, x.cells, reason_kind=_noise(v))


def _judge_value(x: _Ctx) -> Verdict:
    t = x.t
    a = x.cell(t["a"])
    x.no_ties(a)
    est, lo, hi = stats.mean_interval(a.values, x.level, x.exact)
    v, against = _bound(t, lo, hi, x.exact)
    reason = x.interval("mean", est, lo, hi, against)
    return Verdict(x.claim, v, reason, est, lo, hi, x.cells, reason_kind=_noise(v))


def _name(c: CellStat) -> str:
    return c.label or _describe(c.selector)


def _pair(first: CellStat, second: CellStat, test) -> dict[str, Any]:
    """One pair of a ranking or trend: its verdict, difference and interval, or inconclusive
    (with its ``reason``) where a cell cannot be used or the pair cannot be judged."""
    none = {"verdict": "inconclusive", "diff": None, "low": None, "high": None}
    if first.problem or second.problem:
        bad = [c for c in (first, second) if c.problem]
        why = f"{' and '.join(map(_name, bad))} cannot be judged"
        kind = _first_kind(c.problem_kind for c in bad)
        return {**none, "reason": why, "reason_kind": kind}
    try:
        v, d, lo, hi = test(first, second)
    except Inconclusive as e:
        return {**none, "reason": str(e), "reason_kind": e.kind}
    judged = {"verdict": v, "diff": d, "low": lo, "high": hi}
    return {**judged, "reason_kind": "noise"} if v == "inconclusive" else judged


def _pairs_verdict(
    x: _Ctx, cells: list[CellStat], pairs: list[dict], head, diff: str = "diff"
) -> Verdict:
    """Every pair combined: fails if any pair fails, holds only if every pair holds (so no
    cell is missing), else inconclusive; the reason names the unusable cells once, then
    every pair (``head(pair)`` its first words, ``diff`` the word for its difference)."""

    def one(p: dict[str, Any]) -> str:
        if p["diff"] is None:
            return f"{head(p)}: inconclusive ({p['reason']})"
        return (
            f"{head(p)}: {p['verdict']} ({diff} {_fmt(p['diff'])}, "
            f"[{_fmt(p['low'])}, {_fmt(p['high'])}])"
        )

    problems = [c.problem for c in cells if c.problem]
    reason = "; ".join([*problems, *map(one, pairs)])
    kinds = [c.problem_kind for c in cells if c.problem_kind]
    kinds += [p["reason_kind"] for p in pairs if p.get("reason_kind")]
    return Verdict(x.claim, _combine([p["verdict"] for p in pairs]), reason, cells=x.cells,
                   pairs=pairs, reason_kind=_first_kind(kinds))  # fmt: skip


def _judge_ranking(x: _Ctx) -> Verdict:
    from sparsebench.suite.pillar import get_pillar

    t = x.t
    higher = {m.name: m.higher_is_better for m in get_pillar(t["pillar"]).metrics}
    op, margin = (">" if higher[t["metric"]] else "<"), t.get("margin", 0.0)
    cells = [x.try_cell(f) for f in t["order"]]

    def test(a: CellStat, b: CellStat):
        return _order(x, a, b, op, margin)

    pairs = []
    for a, b in combinations(cells, 2):  # every pair, best first: not only neighbours
        pairs.append({"better": _name(a), "worse": _name(b), **_pair(a, b, test)})
    return _pairs_verdict(x, cells, pairs, lambda p: f"{p['better']} vs {p['worse']}")


def _along(x: _Ctx, tolerant: bool = False) -> tuple[list[float], list[CellStat]]:
    """The values of ``along`` present for the cells of ``a``, ascending, and their cells
    (``tolerant``: a cell that cannot be used comes back with its problem)."""
    t, along = x.t, x.t["along"]
    if x.runs is None:
        raise Inconclusive("no runs table of this pillar in the results", kind="not_run")
    base = _select(x.runs, {**t["where"], **t["a"]})
    try:
        xs = sorted({float(v) for v in base[along].drop_nulls().to_list()}) if base.height else []
    except (TypeError, ValueError):
        raise Inconclusive(f"{along!r} is not a numeric column", kind="unusable") from None
    if len(xs) < 2:
        raise Inconclusive(
            f"{_describe({**t['where'], **t['a']})}: {len(xs)} value(s) of {along}; a trend "
            "needs at least 2",
            kind="not_run",
        )
    read = x.try_cell if tolerant else x.cell
    return xs, [read({**t["a"], along: v}) for v in xs]


def _judge_trend(x: _Ctx) -> Verdict:
    t = x.t
    xs, cells = _along(x, tolerant=True)

    def test(c0: CellStat, c1: CellStat):
        """The later value ``c1`` against the earlier ``c0``."""
        if t["direction"] == "constant":
            return _equal(x, c1, c0, t["tol"])
        op = ">" if t["direction"] == "increasing" else "<"
        return _order(x, c1, c0, op, t.get("margin", 0.0))

    pairs = []
    # every pair, not only neighbours: small steps inside the noise can add up to a clear
    # change (or drift, for constant), which only the pair of the ends shows
    for i, j in combinations(range(len(xs)), 2):
        pairs.append({"from": xs[i], "to": xs[j], **_pair(cells[i], cells[j], test)})
    return _pairs_verdict(
        x, cells, pairs, lambda p: f"{t['along']} {_fmt(p['from'])} → {_fmt(p['to'])}", "change"
    )


def _judge_exponent(x: _Ctx) -> Verdict:
    t = x.t
    xs, cells = _along(x)
    px = [v for v, c in zip(xs, cells, strict=True) for _ in c.values]
    py = [v for c in cells for v in c.values]
    if min(px) <= 0 or min(py) <= 0:
        raise Inconclusive(
            f"{t['along']} and {t['metric']} must be > 0 for a log-log fit", kind="unusable"
        )
    est, lo, hi = stats.slope_interval(px, py, x.level, x.exact)
    what = f"slope of log {t['metric']} on log {t['along']} ({len(py)} points)"
    if lo == hi and not (x.exact or x.deterministic):
        raise x.no_evidence(f"{what}: the points lie exactly on a line")
    v, against = _bound(t, lo, hi, x.exact)
    reason = x.interval(what, est, lo, hi, against)
    return Verdict(x.claim, v, reason, est, lo, hi, x.cells, reason_kind=_noise(v))


_KINDS = {
    "order": _judge_pair,
    "equal": _judge_pair,
    "ratio": _judge_pair,
    "value": _judge_value,
    "ranking": _judge_ranking,
    "trend": _judge_trend,
    "exponent": _judge_exponent,
}


def _variance(values: list[float]) -> float:
    n = len(values)
    m = sum(values) / n
    return sum((v - m) ** 2 for v in values) / (n - 1)


def _seeds_needed(x: _Ctx, v: Verdict) -> int | None:
    """For an inconclusive order, equal, ratio or value test with an interval: the seeds per
    cell at which the interval would clear its boundary if the observed effect and spread
    held (None for the other kinds, a missing cell, or one seed)."""
    t, est = x.t, v.estimate
    if est is None or v.low is None or not math.isfinite(est) or x.exact:
        return None
    cells = [c for c in v.cells if c.n]
    if any(c.n < 2 for c in cells) or len(cells) != (1 if t["kind"] == "value" else 2):
        return None
    if t["kind"] == "value":
        if "within" in t:
            lo_b, hi_b = t["within"]
            distance = (
                min(est - lo_b, hi_b - est) if lo_b <= est <= hi_b else max(lo_b - est, est - hi_b)
            )
        else:
            distance = abs(est - t["bound"])
        return stats.seeds_needed([_variance(cells[0].values)], distance, x.level, True)
    a, b = cells
    if t["kind"] == "ratio":
        if est <= 0 or a.mean is None or b.mean is None or not a.mean or not b.mean:
            return None
        rel = [_variance(a.values) / a.mean**2, _variance(b.values) / b.mean**2]
        distance = abs(math.log(est) - math.log(t["threshold"]))
        return stats.seeds_needed(rel, distance, x.level, False)
    if t["kind"] == "order":
        distance = abs(est + t.get("margin", 0.0))
    else:  # equal: to hold, the interval inside ±tol; to fail, wholly outside it
        distance = abs(t["tol"] - abs(est))
    if x.stat == "paired":
        by_seed = dict(zip(b.seeds, b.values, strict=True))
        diffs = [va - by_seed[s] for s, va in zip(a.seeds, a.values, strict=True)]
        return stats.seeds_needed([_variance(diffs)], distance, x.level, True)
    return stats.seeds_needed([_variance(a.values), _variance(b.values)], distance, x.level, False)


def _judge_one(x: _Ctx) -> Verdict:
    try:
        v = _KINDS[x.claim.test["kind"]](x)
        if v.verdict == "inconclusive" and x.claim.test["kind"] in (
            "order",
            "equal",
            "ratio",
            "value",
        ):
            try:
                v.seeds_needed = _seeds_needed(x, v)
            except (ValueError, KeyError, ZeroDivisionError):  # cells a power estimate can't read
                v.seeds_needed = None
        return v
    except Inconclusive as e:
        return Verdict(x.claim, "inconclusive", str(e), cells=x.cells, reason_kind=e.kind)
    except Exception as e:  # one broken claim must not cost the others their verdicts
        why = f"could not be judged ({type(e).__name__}: {e})"
        return Verdict(x.claim, "inconclusive", why, cells=x.cells, reason_kind="error")


def _judge_at(claim: Claim, tables: dict[str, pl.DataFrame | None], row_keys: dict) -> Verdict:
    """Every x of ``at`` judged on its own, combined as a ranking; one entry of ``pairs`` per
    x with its verdict, interval and each cell's mean and bracketing settings."""
    [(column, xs)] = claim.test["at"].items()
    parts = [(v, _judge_one(_Ctx(claim, tables, row_keys, (column, v)))) for v in xs]
    pairs = [
        {
            "at": v,
            "column": column,
            "verdict": p.verdict,
            "estimate": p.estimate,
            "low": p.low,
            "high": p.high,
            "reason": p.reason,
            "reason_kind": p.reason_kind,
            "cells": [
                {
                    "label": c.label,
                    "mean": c.mean,
                    "n": c.n,
                    "values": c.values,
                    "brackets": _brackets(c),
                    **(c.at or {}),
                }
                for c in p.cells
            ],
            **({"pairs": p.pairs} if p.pairs else {}),
        }
        for v, p in parts
    ]

    def one(v: float, p: Verdict) -> str:
        how = "; ".join(f"{c.label}: {_fmt(c.mean)} from {_brackets(c)}" for c in p.cells if c.n)
        return f"at {column} = {v:g}: {p.verdict}: {p.reason}" + (f" [{how}]" if how else "")

    reason = " | ".join(one(v, p) for v, p in parts)
    verdict = _combine([p.verdict for _, p in parts])
    # One slot per selector and x, so that the LaTeX Mean macros keep their letters when one
    # x could not read a cell (the cells of a part are read in selector order, up to the first
    # that fails).
    width = len(claim.selectors)
    cells = [
        c
        for _, p in parts
        for c in [*p.cells, *(CellStat(selector=sel) for sel in claim.selectors[len(p.cells) :])][
            : max(width, len(p.cells))
        ]
    ]
    single = parts[0][1] if len(parts) == 1 else None
    est, lo, hi = (single.estimate, single.low, single.high) if single else (None, None, None)
    kind = _first_kind(p.reason_kind for _, p in parts if p.reason_kind)
    return Verdict(claim, verdict, reason, est, lo, hi, cells, pairs, reason_kind=kind)


def judge(claim: Claim, tables: dict[str, pl.DataFrame | None], row_keys: dict) -> Verdict:
    """Judge one claim against the runs tables (pillar name -> table, None if absent) with
    the pillars' row keys (pillar name -> columns that, with the cell id, identify a row)."""
    if "at" in claim.test:
        try:
            return _judge_at(claim, tables, row_keys)
        except Exception as e:  # one broken claim must not cost the others their verdicts
            why = f"could not be judged ({type(e).__name__}: {e})"
            return Verdict(claim, "inconclusive", why, reason_kind="error")
    return _judge_one(_Ctx(claim, tables, row_keys))


def load_tables(bench_dir, pillars: set[str]) -> dict[str, pl.DataFrame | None]:
    """``<bench_dir>/<pillar>/runs.parquet`` of each pillar (None where it does not exist)."""
    from pathlib import Path

    from sparsebench.suite import paths
    from sparsebench.suite.tables import TableError, read_runs

    out: dict[str, pl.DataFrame | None] = {}
    for name in pillars:
        path = paths.runs_table_in(Path(bench_dir) / name)
        if not path.is_file():
            out[name] = None
            continue
        try:
            out[name] = read_runs(path)
        except TableError as e:
            raise ClaimError(str(e)) from None
    return out


def judge_all(claims: list[Claim], bench_dir) -> list[Verdict]:
    """Every claim judged against the tables under ``bench_dir`` (results/<bench>)."""
    from sparsebench.suite.pillar import get_pillar

    pillars = {c.test["pillar"] for c in claims}
    tables = load_tables(bench_dir, pillars)
    keys = {p: tuple(get_pillar(p).row_key) for p in pillars}
    return [judge(c, tables, keys) for c in claims]


def judge_pillar(pillar: str, runs: pl.DataFrame | None, files=None) -> list[Verdict]:
    """The claims that address ``pillar`` in ``files`` (default: every claim file that ships,
    ``claims/*.yaml``), judged against ``runs``, that pillar's runs table, as :func:`judge_all`
    judges them: what a pillar's board shows of the claims about it. Files that address other
    pillars only are not parsed; ClaimError if an addressed file is invalid."""
    from pathlib import Path

    from sparsebench.suite.pillar import get_pillar

    from . import BUILTIN
    from .parse import load_files, read

    if files is None:
        files = sorted(BUILTIN.glob("*.yaml"))

    def addresses(path) -> bool:
        data = read(path)
        default = (data.get("defaults") or {}).get("pillar")
        tests = [c.get("test") or {} for c in data.get("claims") or [] if isinstance(c, dict)]
        return any(t.get("pillar", default) == pillar for t in tests if isinstance(t, dict))

    found = load_files([Path(f) for f in files if addresses(f)])
    claims = [c for c in found if c.test["pillar"] == pillar]
    keys = {pillar: tuple(get_pillar(pillar).row_key)}
    return [judge(c, {pillar: runs}, keys) for c in claims]

"""Claim files (``claims/<paper>.yaml``) -> validated :class:`Claim` objects.

A claim file is data: it is read with the spec's YAML loader (floats like ``1e-3``, duplicate
keys refused), checked against ``claim.schema.json``, and then against the pillar registry:
the pillar must exist, the metric must be one of its :attr:`Pillar.metrics`, and every filter
column must be a column of its runs table. Every error names the file, the claim id and what
is allowed (:class:`ClaimError`). Nothing in a claim file is ever evaluated as code.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema

from sparsebench.suite.catalog import did_you_mean
from sparsebench.suite.schema_errors import first_error, format_error, keypath

SCHEMA_PATH = Path(__file__).with_name("claim.schema.json")
KINDS = ("order", "equal", "ratio", "value", "ranking", "trend", "exponent")
# Keys each kind needs (beyond kind and metric) and the ones it may have.
_NEEDS: dict[str, tuple[str, ...]] = {
    "order": ("a", "b", "op"),
    "equal": ("a", "b", "tol"),
    "ratio": ("a", "b", "op", "threshold"),
    "value": ("a",),
    "ranking": ("order",),
    "trend": ("a", "along", "direction"),
    "exponent": ("a", "along"),
}
_MAY: dict[str, tuple[str, ...]] = {
    "order": ("margin", "at"),
    "equal": ("at",),
    "ratio": ("at",),
    "value": ("op", "bound", "within", "at"),
    "ranking": ("margin", "at"),
    "trend": ("margin", "tol"),
    "exponent": ("op", "bound", "within"),
}
_COMMON = ("kind", "pillar", "metric", "where", "stat", "level", "level_why", "min_seeds")


class ClaimError(ValueError):
    """An invalid claim file; the message names the file, the claim id and what is allowed."""


@dataclass(frozen=True)
class Claim:
    """One claim of a paper, ready to judge.

    Attributes:
        id: unique over every claim file of a run (``rigl-set-static-90``).
        paper: the file's ``paper`` mapping (key, authors, year, title, venue, url).
        statement: the claim in words.
        source: where the paper says it: ``where`` (table/figure), ``setting``, ``numbers``.
        ours: our scaled setting in words; ``why``: why it tests the direction.
        test: the merged test mapping (defaults filled in): kind, pillar, metric, where,
            a/b/order selectors, op, margin, tol, threshold, bound, within, along,
            direction, stat, level, min_seeds, and ``at`` ({column: [x, ...]}: the metric
            read off each selector's sweep at column = x, see :mod:`.judge`).
        file: the claim file it came from.
    """

    id: str
    paper: dict[str, Any]
    statement: str
    source: dict[str, Any]
    why: str
    test: dict[str, Any]
    file: str
    ours: str = ""
    selectors: tuple[dict[str, Any], ...] = field(default=(), compare=False)


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _where(err: jsonschema.ValidationError, data: Any) -> str:
    return _where_path(list(err.absolute_path), data)


def _where_path(path: list[Any], data: Any) -> str:
    """``claim 'id': test.margin`` for a key path under ``claims``, else the key path."""
    if len(path) >= 2 and path[0] == "claims" and isinstance(path[1], int):
        try:
            cid = data["claims"][path[1]].get("id", f"#{path[1] + 1}")
        except (AttributeError, IndexError, KeyError, TypeError):
            cid = f"#{path[1] + 1}"
        rest = ".".join(map(str, path[2:])) or "(the claim)"
        return f"claim {cid!r}: {rest}"
    return keypath(path)


_ID_PATTERN = (
    "{value!r} is not a valid name: lower-case letters and digits in words joined by '-' "
    "(e.g. rigl-set-static-90)"
)


def read(path: str | Path) -> dict[str, Any]:
    """The parsed YAML of a claim file; ClaimError if missing, empty or not a mapping, or
    past the bounds every spec and claim file has (size, UTF-8, aliases, nesting:
    :func:`sparsebench.suite.spec.read_yaml`)."""
    from sparsebench.suite.spec import read_yaml

    path = Path(path)
    if path.exists() and not path.is_file():  # a folder, a FIFO, a device: never read it
        raise ClaimError(f"{path}: not a regular file; a claim file is a YAML text file")
    if not path.is_file():
        raise ClaimError(f"{path}: claim file not found")
    data = read_yaml(path, "claim file", ClaimError)
    if data is None:
        raise ClaimError(f"{path}: the claim file is empty; see docs/claims.md for the format")
    if not isinstance(data, dict):
        raise ClaimError(f"{path}: a claim file is a YAML mapping, got {type(data).__name__}")
    return data


def _merge(defaults: dict[str, Any], test: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(defaults)
    where = {**out.pop("where", {}), **test.get("where", {})}
    out.update(copy.deepcopy(test))
    out["where"] = where
    out.setdefault("stat", "welch")
    out.setdefault("level", 0.95)
    out.setdefault("min_seeds", 1 if out["stat"] == "exact" else 2)
    return out


# the kinds judged on a difference of two cells, which ``stat: paired`` takes seed by seed
PAIRED_KINDS = ("order", "equal", "ranking", "trend")


def _a(word: str) -> str:
    return "an" if word[:1] in "aeiou" else "a"


def _check_test(t: dict[str, Any], where: str) -> None:
    """Kind-specific keys and the registry: pillar, metric, filter columns."""
    from sparsebench.suite.pillar import PillarError, get_pillar
    from sparsebench.suite.record import COMMON_COLUMNS

    kind = t["kind"]
    if t.get("level", 0.95) != 0.95 and not t.get("level_why"):
        raise ClaimError(
            f"{where}: level: {t['level']} differs from the suite's 0.95; say why in level_why "
            "(the pages show every verdict at another level)"
        )
    missing = [k for k in ("pillar", "metric", *_NEEDS[kind]) if k not in t]
    if missing:
        raise ClaimError(
            f"{where}: {_a(kind)} {kind!r} test needs {', '.join(map(repr, missing))} (in the "
            f"test or the file's defaults); it takes {', '.join(_NEEDS[kind] + _MAY[kind])}"
        )
    extra = sorted(set(t) - set(_COMMON) - set(_NEEDS[kind]) - set(_MAY[kind]))
    if extra:
        raise ClaimError(
            f"{where}: key {', '.join(map(repr, extra))} does not apply to {_a(kind)} {kind!r} "
            f"test; it takes {', '.join(_NEEDS[kind] + _MAY[kind])}"
        )
    if kind in ("value", "exponent") and ("within" in t) == ("op" in t or "bound" in t):
        raise ClaimError(f"{where}: {_a(kind)} {kind!r} test takes either op and bound, or within")
    if kind in ("value", "exponent") and ("op" in t) != ("bound" in t):
        raise ClaimError(f"{where}: {_a(kind)} {kind!r} test takes op and bound together")
    if kind == "trend" and (t["direction"] == "constant") != ("tol" in t):
        raise ClaimError(
            f"{where}: a 'constant' trend needs tol (the largest change between neighbours "
            "that counts as constant), and only a constant trend takes tol"
        )
    if t.get("stat") == "paired" and kind not in PAIRED_KINDS:
        raise ClaimError(
            f"{where}: stat: paired compares two cells seed by seed; {_a(kind)} {kind!r} test "
            f"takes welch or exact (paired: {', '.join(PAIRED_KINDS)})"
        )
    if "within" in t and t["within"][0] > t["within"][1]:
        raise ClaimError(f"{where}: within: {t['within']} is empty (lower > upper)")
    try:
        pillar = get_pillar(t["pillar"])
    except PillarError as e:
        raise ClaimError(f"{where}: pillar: {e}") from None
    metrics = {m.name: m for m in pillar.metrics}
    if t["metric"] not in metrics:
        raise ClaimError(
            f"{where}: unknown metric {t['metric']!r} of pillar {pillar.name!r}; its metrics: "
            f"{', '.join(metrics)}{did_you_mean(t['metric'], metrics)}"
        )
    if t.get("stat") == "exact" and not metrics[t["metric"]].deterministic:
        # an exact test reads one value as the truth: it can never be inside the noise
        det = [m.name for m in pillar.metrics if m.deterministic]
        raise ClaimError(
            f"{where}: stat: exact is for deterministic metrics (the same on every seed and "
            f"rerun), and {t['metric']!r} of pillar {pillar.name!r} is not; its deterministic "
            f"metrics: {', '.join(det) or 'none'}. Use welch or paired over seeds"
        )
    columns = {**COMMON_COLUMNS, **pillar.columns}
    selectors = [t["where"], *(t[k] for k in ("a", "b") if k in t), *t.get("order", [])]
    used = [c for s in selectors for c in s] + ([t["along"]] if "along" in t else [])
    unknown = sorted({c for c in used if c not in columns})
    if unknown:
        raise ClaimError(
            f"{where}: unknown column {', '.join(map(repr, unknown))} of pillar "
            f"{pillar.name!r}; its columns: {', '.join(sorted(columns))}"
            f"{did_you_mean(unknown[0], columns)}"
        )
    if "a" in t and "b" in t and {**t["where"], **t["a"]} == {**t["where"], **t["b"]}:
        raise ClaimError(f"{where}: a and b name the same cell; a comparison needs two")
    if "order" in t:
        cells = [tuple(sorted({**t["where"], **o}.items(), key=str)) for o in t["order"]]
        if len(set(map(str, cells))) < len(cells):
            raise ClaimError(f"{where}: order names a cell twice; a ranking needs distinct cells")
    if kind == "ratio" and not t["threshold"] > 0:
        raise ClaimError(
            f"{where}: threshold: {t['threshold']} is not allowed; a ratio of positive means "
            "is compared with a threshold > 0"
        )
    # a cell is all of its replicates, whatever they scored: a filter that picks some of them
    # (by seed, by status, by the metric's own value) chooses the evidence
    chosen = {"seed", "status", pillar.replicate, t["metric"]} & set(used)
    if chosen:
        raise ClaimError(
            f"{where}: a filter on {', '.join(map(repr, sorted(chosen)))} selects some rows of a "
            "cell by their replicate, status or result; a cell is judged on all its replicates "
            "(failed ones make it inconclusive), so filter on its configuration only"
        )
    if "along" in t and columns[t["along"]] not in (int, float):
        raise ClaimError(
            f"{where}: along: {t['along']!r} is not a numeric column; {_a(kind)} {kind} runs along "
            "one (e.g. target_sparsity, n_atoms, sparsity)"
        )
    if "at" in t:
        _check_at(t, columns, used, where)
    _check_names(pillar, selectors, where)


def _check_at(t: dict[str, Any], columns: dict[str, type], used: list[str], where: str) -> None:
    """``at: {column: x or [x, ...]}``: one numeric column of the pillar (not the metric, not
    a filter), each x > 0 (the interpolation is in log x), no x twice; normalised in place to
    ``{column: [float, ...]}``."""
    from sparsebench.suite.pillar import get_pillar

    [(col, raw)] = t["at"].items()  # the schema allows exactly one column
    # the replicate column (seed, or trial): the sweep is read per replicate, not across them
    replicates = {"seed", get_pillar(t["pillar"]).replicate}
    numeric = sorted(c for c, typ in columns.items() if typ in (int, float) and c not in replicates)
    if col not in numeric:
        what = "an unknown column" if col not in columns else "not a numeric column"
        raise ClaimError(
            f"{where}: at: {col!r} is {what} of pillar {t['pillar']!r}; the metric is read at "
            f"a value of a numeric column: {', '.join(numeric)}"
            f"{did_you_mean(col, numeric) if col not in columns else ''}"
        )
    if col == t["metric"]:
        raise ClaimError(f"{where}: at: {col!r} is the claim's metric; read it at another column")
    if col in get_pillar(t["pillar"]).cell_axes:
        raise ClaimError(
            f"{where}: at: {col!r} is an axis of pillar {t['pillar']!r}'s cells (one cell per "
            "value), not an outcome of a method's settings; write one claim per value with "
            f"where: {{{col}: x}}"
        )
    if col in used:
        raise ClaimError(
            f"{where}: at: {col!r} is also a filter (where, a, b or order); the sweep is read "
            f"at {col} = x, so {col} cannot also select rows"
        )
    if used_setting := [c for c in ("setting", "setting_id") if c in used]:
        raise ClaimError(
            f"{where}: at: a filter on {used_setting[0]!r} leaves one setting, but at reads "
            f"{col} across the sweep of settings; drop that filter"
        )
    values = raw if isinstance(raw, list) else [raw]
    for v in values:
        if (
            isinstance(v, bool)
            or not isinstance(v, int | float)
            or not math.isfinite(v)
            or not v > 0
        ):
            raise ClaimError(
                f"{where}: at: {col}: {v!r} is not allowed; give a finite number > 0 or a "
                "list of them (the sweep is interpolated in log x)"
            )
    if len(set(values)) < len(values):
        raise ClaimError(f"{where}: at: {col}: {values} repeats a value; list each once")
    t["at"] = {col: [float(v) for v in values]}


def _check_names(pillar: Any, selectors: list[dict[str, Any]], where: str) -> None:
    """Method (or backend) names in the selectors are registered, or rows the pillar adds
    (references, baselines): a typo is an error here, not a "no cell matches" later."""
    from sparsebench.suite import registry

    column = pillar.method_column
    allowed = set(registry.all_methods(pillar.families)) | set(pillar.extra_method_names)
    for sel in selectors:
        values = sel.get(column, [])
        for v in values if isinstance(values, list) else [values]:
            if str(v) not in allowed:
                raise ClaimError(
                    f"{where}: unknown {column} {v!r} of pillar {pillar.name!r}; "
                    f"allowed: {', '.join(sorted(allowed))}{did_you_mean(v, sorted(allowed))}"
                )


def parse(data: dict[str, Any], source: str) -> list[Claim]:
    """Validate parsed claim-file ``data`` (from ``source``) into claims; ClaimError if not."""
    from sparsebench.suite.spec import first_non_finite, show_number

    if (found := first_non_finite(data)) is not None:
        path, value = found
        raise ClaimError(
            f"{source}: {_where_path(list(path), data)}: {show_number(value)} is not a finite "
            "number; "
            "a threshold, margin, tol, bound or level that is not finite makes the test hold "
            "or fail whatever was measured"
        )
    schema = _schema()
    if (err := first_error(schema, data)) is not None:
        where = _where(err, data)
        raise ClaimError(format_error(err, source, where=where, pattern=_ID_PATTERN, schema=schema))
    defaults = data.get("defaults", {})
    claims, seen = [], set()
    for raw in data["claims"]:
        where = f"{source}: claim {raw['id']!r}"
        if raw["id"] in seen:
            raise ClaimError(f"{where}: the id is used twice in this file; ids are unique")
        seen.add(raw["id"])
        test = _merge(defaults, raw["test"])
        _check_test(test, where)
        sels = (
            tuple(test["order"])
            if test["kind"] == "ranking"
            else tuple(test[k] for k in ("a", "b") if k in test)
        )
        claims.append(
            Claim(
                id=raw["id"],
                paper=dict(data["paper"]),
                statement=raw["statement"],
                source=dict(raw["source"]),
                why=raw["why"],
                test=test,
                file=source,
                ours=raw.get("ours", ""),
                selectors=sels,
            )
        )
    return claims


def load_file(path: str | Path) -> list[Claim]:
    """The claims of one file (``sparsebench claims --check FILE``)."""
    return parse(read(path), str(path))


def load_files(paths: list[str | Path]) -> list[Claim]:
    """The claims of several files; ClaimError if an id repeats across them."""
    from .outputs import macro_name

    claims: list[Claim] = []
    first: dict[str, str] = {}
    macros: dict[str, str] = {}
    for p in paths:
        for c in load_file(p):
            if c.id in first:
                raise ClaimError(
                    f"{p}: claim {c.id!r} is also in {first[c.id]}; claim ids are unique over "
                    "all the claim files of a benchmark (they name LaTeX macros)"
                )
            macro = macro_name(c.id, "")
            if macro in macros:
                raise ClaimError(
                    f"{p}: claim {c.id!r} gives the same LaTeX macro names ({macro}...) as "
                    f"claim {macros[macro]!r}; rename one"
                )
            first[c.id], macros[macro] = str(p), c.id
            claims.append(c)
    return claims

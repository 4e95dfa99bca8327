"""Pandera schemas (polars backend) for the tables the suite aggregates.

:class:`CommonSchema` describes the columns every pillar's runs table shares (see
:mod:`suite.record`): dtypes, value checks, and the consistency of status and error. Each
pillar's table subclasses it and adds its own columns and checks.

:func:`validate_table` is the entry point: it validates lazily (collecting every problem, not
only the first) and turns pandera's failure cases into a :class:`TableError` whose message
names the row (index, cell id, the pillar's row key and, when given, the record file), the
column and the check, so a human can find and fix the record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import polars as pl

from sparsebench.suite.frames import TableError, polars_dtype, without_hypothesis
from sparsebench.suite.record import COMMON_COLUMNS, STATUSES

with without_hypothesis():
    import pandera.backends.polars.builtin_checks  # noqa: F401 - what validation imports later
    import pandera.polars as pa
    from pandera.errors import SchemaErrors

# Fields that identify a row in error messages, before the pillar's row key.
_IDENT_FIELDS: tuple[str, ...] = ("cell_id",)


# Polars dtypes of the common columns: what collect_records builds and RunsSchema expects.
COMMON_DTYPES: dict[str, pl.DataType] = {c: polars_dtype(t) for c, t in COMMON_COLUMNS.items()}


class CommonSchema(pa.DataFrameModel):
    """The columns every pillar's runs table has (:data:`~sparsebench.suite.record.
    COMMON_COLUMNS`); a pillar's table subclasses it with its own columns and checks.

    Identity and provenance columns are never null; ``error`` is set exactly on rows that did
    not finish (status other than ``ok``)."""

    benchmark: str
    pillar: str
    cell_id: str
    label: str
    method: str
    params_json: str
    setting_id: str
    setting: str = pa.Field(nullable=True)
    seed: int = pa.Field(ge=0, nullable=True)
    status: str = pa.Field(isin=list(STATUSES))
    error: str = pa.Field(nullable=True)
    device: str = pa.Field(nullable=True)
    threads: int = pa.Field(ge=1)
    parallel_jobs: int = pa.Field(ge=1)
    cell_s: float = pa.Field(ge=0.0, nullable=True)
    torch_version: str
    package_version: str
    git_sha: str
    git_dirty: bool
    spec_hash: str
    trigger: str
    started_at: str
    finished_at: str

    class Config:
        strict = False  # extra keys (host, ...) are allowed

    # Dataframe checks fill null with True: a null status is already reported by its column
    # check, and repeating it here would only add noise.
    @pa.dataframe_check
    def ok_has_no_error(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        return data.lazyframe.select((~ok | pl.col("error").is_null()).fill_null(True))

    @pa.dataframe_check
    def failed_has_error(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        has_error = pl.col("error").is_not_null() & (pl.col("error").str.strip_chars() != "")
        return data.lazyframe.select((ok | has_error).fill_null(True))


def pillar_table(pillar: Any, base: type[CommonSchema] | None = None) -> type[CommonSchema]:
    """The runs-table model of ``pillar``: ``base`` (its own checks; default
    :class:`CommonSchema`) plus what every pillar's table needs, generated from the pillar's
    declaration rather than written again in each table:

    * every column of ``pillar.columns`` that ``base`` does not declare, nullable, of its type;
    * rows unique on ``cell_id`` and the pillar's ``row_key``;
    * ``registered_method``: on an ``ok`` row the ``method_column`` holds a method registered
      in the pillar's families or one of its ``extra_method_names`` (a cell that failed
      before it ran a method may name a placeholder instead);
    * ``ok_has_metric``: an ``ok`` row carries the pillar's :attr:`ok_metric` (default: its
      first metric).
    """
    base = base or CommonSchema
    declared = set(base.to_schema().columns)
    extra = {c: t for c, t in pillar.columns.items() if c not in declared}
    method_col, metric = pillar.method_column, pillar.ok_metric

    class Config:
        strict = False
        unique = ["cell_id", *pillar.row_key]

    def registered(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        known = pl.col(method_col).is_in(pillar.method_names())
        return data.lazyframe.select((~ok | known).fill_null(True))

    def ok_has_metric(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        return data.lazyframe.select((~ok | pl.col(metric).is_not_null()).fill_null(True))

    attrs: dict[str, Any] = {
        "__module__": base.__module__,
        "__annotations__": dict(extra),
        "Config": Config,
        "registered_method": pa.dataframe_check(classmethod(registered)),
        **{c: pa.Field(nullable=True) for c in extra},
    }
    if metric:
        attrs["ok_has_metric"] = pa.dataframe_check(classmethod(ok_has_metric))
    name = base.__name__ if base is not CommonSchema else f"{pillar.name.title()}Schema"
    return type(name, (base,), attrs)


def pillar_problems(pillar: Any) -> dict[str, Callable[[dict[str, Any]], str]]:
    """Readable messages of :func:`pillar_table`'s generated checks."""
    method_col, metric = pillar.method_column, pillar.ok_metric

    def unregistered(row: dict[str, Any]) -> str:
        allowed = ", ".join(pillar.method_names())
        return (
            f"column '{method_col}' = {row.get(method_col)!r} is not a registered method of "
            f"{'/'.join(pillar.families)}; allowed: {allowed}"
        )

    return {
        "registered_method": unregistered,
        "ok_has_metric": lambda row: (
            f"column '{metric}' is null but status is 'ok' (ok rows carry their metric)"
        ),
    }


def finite_check(*columns: str):
    """A pandera column check: the float ``columns`` are finite where present (JSON records
    may hold NaN/Infinity, and polars orders NaN above every number, so ge(0) alone lets NaN
    through)."""

    @pa.check(*columns, name="finite")
    def _finite(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_finite())

    return _finite


def _common_problem(check: str, row: dict[str, Any]) -> str | None:
    status = row.get("status")
    if check == "ok_has_no_error":
        return f"column 'error' = {row.get('error')!r} but status is 'ok' (ok rows have no error)"
    if check == "failed_has_error":
        return f"column 'error' is empty but status is {status!r} (say why the job failed)"
    if check == "multiple_fields_uniqueness":
        return "duplicate row: another row has the same cell id (and row key)"
    return None


_CHECK_WORDS: list[tuple[str, Callable[[re.Match[str]], str]]] = [
    (r"greater_than_or_equal_to\((.*)\)", lambda m: f"must be >= {m[1]}"),
    (r"less_than_or_equal_to\((.*)\)", lambda m: f"must be <= {m[1]}"),
    (r"greater_than\((.*)\)", lambda m: f"must be > {m[1]}"),
    (r"less_than\((.*)\)", lambda m: f"must be < {m[1]}"),
    (r"isin\((.*)\)", lambda m: f"must be one of {m[1]}"),
    (r"not_nullable", lambda m: "must not be null"),
    (r"finite", lambda m: "must be finite (not NaN or infinite)"),
]


def _check_words(check: str) -> str:
    for pattern, words in _CHECK_WORDS:
        if m := re.fullmatch(pattern, check):
            return f"{words(m)} [{check}]"
    return f"fails check {check}"


def _ident(row: dict[str, Any], source: str | None, fields: Sequence[str]) -> str:
    parts = [f"{k}={row[k]}" for k in fields if row.get(k) is not None]
    if source is not None:
        parts.append(f"file {source}")
    return f" ({', '.join(parts)})" if parts else ""


def format_failures(
    failure_cases: pl.DataFrame,
    df: pl.DataFrame,
    sources: Sequence[str] | None = None,
    table: str = "runs",
    limit: int = 30,
    ident: Sequence[str] = (),
    problems: dict[str, Callable[[dict[str, Any]], str]] | None = None,
) -> tuple[str, list[int]]:
    """Turn pandera's (polars) failure cases into a human message; also return the bad rows.

    One line per problem: ``row 3 (task=..., method=..., seed=1, file ...): column 'test_acc' =
    1.5 must be <= 1.0 [less_than_or_equal_to(1.0)]``; whole-column problems (wrong dtype)
    have no row. ``ident`` names the columns that identify a row besides ``cell_id``;
    ``problems`` maps a pillar's dataframe-check names to ``row -> message``. At most
    ``limit`` lines, then a count of the rest.
    """
    fields = (*_IDENT_FIELDS, *ident)
    cases = failure_cases.sort(["index", "column", "check"], nulls_last=False)
    # pandera still runs the value checks of a mistyped column and reports their ComputeError;
    # the dtype line already says what is wrong, so drop those.
    is_dtype = pl.col("check").str.starts_with("dtype(")
    mistyped = cases.filter(is_dtype).get_column("column").to_list()
    cases = cases.filter(
        is_dtype | pl.col("index").is_not_null() | ~pl.col("column").is_in(mistyped)
    )
    lines: list[str] = []
    rows: set[int] = set()
    for case in cases.iter_rows(named=True):
        idx, col, check, value = case["index"], case["column"], case["check"], case["failure_case"]
        context = case["schema_context"]
        if idx is None:
            if m := re.fullmatch(r"dtype\('?(.*?)'?\)", check):
                lines.append(f"column '{col}' has dtype {value}, expected {m[1]}")
            elif check == "column_in_dataframe":
                lines.append(f"column '{value}' is missing")
            else:
                lines.append(f"{context} '{col}' fails {check}: {value}")
            continue
        idx = int(idx)
        rows.add(idx)
        row = df.row(idx, named=True) if idx < df.height else {}
        source = sources[idx] if sources is not None and idx < len(sources) else None
        where = f"row {idx}{_ident(row, source, fields)}"
        if context == "Column":
            shown_value = repr(row[col]) if col in row else value  # repr quotes strings
            lines.append(f"{where}: column '{col}' = {shown_value} {_check_words(check)}")
        else:
            explain = (problems or {}).get(check)
            problem = (explain(row) if explain else _common_problem(check, row)) or (
                f"fails dataframe check {check}"
            )
            lines.append(f"{where}: {problem}")
    shown = lines[:limit]
    if len(lines) > limit:
        shown.append(f"... and {len(lines) - limit} more")
    head = (
        f"{table} table is invalid: {len(lines)} problem(s)"
        + (f" in {len(rows)} row(s)" if rows else "")
        + " (rows are 0-based)"
    )
    return head + "\n  " + "\n  ".join(shown), sorted(rows)


def validate_table(
    df: pl.DataFrame,
    schema: type[CommonSchema] = CommonSchema,
    *,
    sources: Sequence[str] | None = None,
    table: str = "runs",
    ident: Sequence[str] = (),
    problems: dict[str, Callable[[dict[str, Any]], str]] | None = None,
) -> pl.DataFrame:
    """Validate a runs table against ``schema`` (every failure at once) and return it.

    ``sources`` (optional, one per row, e.g. the record file paths) is quoted in the message so
    the faulty record can be found; ``ident`` and ``problems`` as in :func:`format_failures`.

    Raises :class:`TableError` naming every failing row (index, cell id, row key, file), column
    and check; also when columns are missing altogether.
    """
    missing = [c for c in schema.to_schema().columns if c not in df.columns]
    if missing:
        raise TableError(
            f"{table} table lacks column(s) {', '.join(missing)}; every record must carry the "
            "common columns of sparsebench.suite.record.COMMON_COLUMNS and its pillar's "
            "columns (null where unknown)"
        )
    try:
        schema.validate(df, lazy=True)
    except SchemaErrors as e:
        cases = e.failure_cases
        if not isinstance(cases, pl.DataFrame):  # defensive: other backends return pandas
            raise TableError(f"{table} table is invalid:\n{e}") from None
        message, rows = format_failures(
            cases, df, sources, table=table, ident=ident, problems=problems
        )
        raise TableError(message, rows=rows, failure_cases=cases) from None
    return df

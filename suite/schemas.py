"""Pandera schemas (polars backend) for the tables the suite aggregates.

:class:`RunsSchema` describes the runs table: one row per record (see :mod:`suite.record`), the
common columns with their dtypes, value checks, and row-level consistency checks between status,
error and metrics. Pillar tables subclass it and add their own columns.

:func:`validate_runs` is the entry point: it validates lazily (collecting every problem, not only
the first) and turns pandera's failure cases into a :class:`TableError` whose message names the
row (index, task/method/sparsity/seed and, when given, the record file), the column and the
check, so a human can find and fix the record.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandera.polars as pa
import polars as pl
from pandera.errors import SchemaErrors

from sparsebench.suite.record import COMMON_COLUMNS, STATUSES, atomic_write

# Columns a failed/diverged record must leave null (it never got that far); set on ok records.
FAILED_NULL_COLUMNS: tuple[str, ...] = (
    "test_acc",
    "test_loss",
    "val_acc",
    "val_loss",
    "actual_sparsity",
    "steps",
    "train_flops",
    "inference_flops",
    "train_flops_rel_dense",
    "inference_flops_rel_dense",
    "params_nonzero",
    "train_wall_s",
    "infer_ms",
)

# Float metrics that must be finite when present: JSON records may hold NaN/Infinity (Python's
# json writes them), and polars orders NaN above every number, so ge(0) alone lets NaN through.
FINITE_COLUMNS: tuple[str, ...] = (
    "target_sparsity",
    "actual_sparsity",
    "test_acc",
    "test_loss",
    "val_acc",
    "val_loss",
    "train_flops",
    "inference_flops",
    "train_flops_rel_dense",
    "inference_flops_rel_dense",
    "train_wall_s",
    "infer_ms",
)

# One row per job: a duplicate would silently weigh a seed twice in the means.
RUN_KEY: tuple[str, ...] = ("benchmark", "task", "method", "setting_id", "target_sparsity", "seed")

# Fields that identify a row in error messages, in this order.
_IDENT_FIELDS: tuple[str, ...] = ("task", "method", "setting_id", "target_sparsity", "seed")

_DTYPES: dict[type, pl.DataType] = {
    str: pl.String(),
    float: pl.Float64(),
    int: pl.Int64(),
    bool: pl.Boolean(),
}


def polars_dtype(py_type: type) -> pl.DataType:
    """The polars dtype a column of :data:`COMMON_COLUMNS` python type ``py_type`` has."""
    return _DTYPES[py_type]


# Polars dtypes of the common columns: what collect_records builds and RunsSchema expects.
COMMON_DTYPES: dict[str, pl.DataType] = {c: polars_dtype(t) for c, t in COMMON_COLUMNS.items()}


class TableError(ValueError):
    """A table (or the records behind it) is missing or invalid.

    ``rows`` lists the 0-based indices of the offending rows (empty when the problem is not
    tied to rows, e.g. a wrong dtype or no records at all); ``failure_cases`` holds pandera's
    raw failure cases when the error came from schema validation.
    """

    def __init__(
        self,
        message: str,
        rows: Sequence[int] = (),
        failure_cases: pl.DataFrame | None = None,
    ) -> None:
        super().__init__(message)
        self.rows = list(rows)
        self.failure_cases = failure_cases


class RunsSchema(pa.DataFrameModel):
    """The runs table: one row per job record (common columns; pillar columns may be added).

    Identity and provenance columns are never null. Metric and cost columns are nullable since a
    failed or diverged job leaves them null; the dataframe checks tie nullness to ``status``.
    """

    benchmark: str
    pillar: str
    task: str
    dataset: str
    model: str
    method: str
    params_json: str
    setting_id: str
    setting: str
    execution: str = pa.Field(nullable=True)
    target_sparsity: float = pa.Field(ge=0.0, lt=1.0)
    actual_sparsity: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    seed: int = pa.Field(ge=0)
    status: str = pa.Field(isin=list(STATUSES))
    error: str = pa.Field(nullable=True)
    test_acc: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    test_loss: float = pa.Field(ge=0.0, nullable=True)
    val_acc: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    val_loss: float = pa.Field(ge=0.0, nullable=True)
    epochs: int = pa.Field(ge=0, nullable=True)
    steps: int = pa.Field(ge=0, nullable=True)
    train_flops: float = pa.Field(ge=0.0, nullable=True)
    inference_flops: float = pa.Field(ge=0.0, nullable=True)
    train_flops_rel_dense: float = pa.Field(ge=0.0, nullable=True)
    inference_flops_rel_dense: float = pa.Field(ge=0.0, nullable=True)
    params_total: int = pa.Field(ge=0, nullable=True)
    params_nonzero: int = pa.Field(ge=0, nullable=True)
    train_wall_s: float = pa.Field(ge=0.0, nullable=True)
    infer_ms: float = pa.Field(ge=0.0, nullable=True)
    infer_batch: int = pa.Field(ge=1, nullable=True)
    layer_densities_json: str = pa.Field(nullable=True)
    device: str = pa.Field(nullable=True)
    threads: int = pa.Field(ge=1)
    parallel_jobs: int = pa.Field(ge=1)
    torch_version: str
    package_version: str
    git_sha: str
    git_dirty: bool
    spec_hash: str
    started_at: str
    finished_at: str

    class Config:
        strict = False  # extra keys (host, pillar columns) are allowed
        unique = list(RUN_KEY)

    @pa.check(*FINITE_COLUMNS, name="finite")
    def _finite(cls, data: pa.PolarsData) -> pl.LazyFrame:
        return data.lazyframe.select(pl.col(data.key).is_finite())

    # Dataframe checks fill null with True: a null status is already reported by its column
    # check, and repeating it here would only add noise.
    @pa.dataframe_check
    def ok_has_test_acc(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        return data.lazyframe.select((~ok | pl.col("test_acc").is_not_null()).fill_null(True))

    @pa.dataframe_check
    def ok_has_no_error(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        return data.lazyframe.select((~ok | pl.col("error").is_null()).fill_null(True))

    @pa.dataframe_check
    def failed_has_error(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        has_error = pl.col("error").is_not_null() & (pl.col("error").str.strip_chars() != "")
        return data.lazyframe.select((ok | has_error).fill_null(True))

    @pa.dataframe_check
    def failed_has_no_metrics(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        all_null = pl.all_horizontal([pl.col(c).is_null() for c in FAILED_NULL_COLUMNS])
        return data.lazyframe.select((ok | all_null).fill_null(True))

    @pa.dataframe_check
    def dense_at_zero_sparsity(cls, data: pa.PolarsData) -> pl.LazyFrame:
        dense = pl.col("method") == "dense"
        zero = pl.col("target_sparsity") == 0.0
        return data.lazyframe.select((dense == zero).fill_null(True))

    @pa.dataframe_check
    def nonzero_at_most_total(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("params_nonzero") <= pl.col("params_total")
        return data.lazyframe.select(ok.fill_null(True))


def _row_problem(check: str, row: dict[str, Any]) -> str | None:
    """Column and reason for a failed dataframe-level check on ``row``, or None if unknown."""
    status = row.get("status")
    if check == "ok_has_test_acc":
        return "column 'test_acc' is null but status is 'ok' (ok rows need a test accuracy)"
    if check == "ok_has_no_error":
        return f"column 'error' = {row.get('error')!r} but status is 'ok' (ok rows have no error)"
    if check == "failed_has_error":
        return f"column 'error' is empty but status is {status!r} (say why the job failed)"
    if check == "failed_has_no_metrics":
        bad = [c for c in FAILED_NULL_COLUMNS if row.get(c) is not None]
        cols = ", ".join(f"'{c}'" for c in bad) or "(metrics)"
        return f"column(s) {cols} set but status is {status!r} (failed rows have null metrics)"
    if check == "dense_at_zero_sparsity":
        return (
            f"column 'target_sparsity' = {row.get('target_sparsity')!r} with method "
            f"{row.get('method')!r} (dense runs at 0.0, sparse methods in (0, 1))"
        )
    if check == "nonzero_at_most_total":
        return (
            f"column 'params_nonzero' = {row.get('params_nonzero')!r} exceeds "
            f"'params_total' = {row.get('params_total')!r}"
        )
    if check == "multiple_fields_uniqueness":
        return f"duplicate run: another row has the same ({', '.join(RUN_KEY)})"
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


def _ident(row: dict[str, Any], source: str | None) -> str:
    parts = [f"{k}={row[k]}" for k in _IDENT_FIELDS if row.get(k) is not None]
    if source is not None:
        parts.append(f"file {source}")
    return f" ({', '.join(parts)})" if parts else ""


def format_failures(
    failure_cases: pl.DataFrame,
    df: pl.DataFrame,
    sources: Sequence[str] | None = None,
    table: str = "runs",
    limit: int = 30,
) -> tuple[str, list[int]]:
    """Turn pandera's (polars) failure cases into a human message; also return the bad rows.

    One line per problem: ``row 3 (task=..., method=..., seed=1, file ...): column 'test_acc' =
    1.5 must be <= 1.0 [less_than_or_equal_to(1.0)]``; whole-column problems (wrong dtype)
    have no row. At most ``limit`` lines, then a count of the rest.
    """
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
        where = f"row {idx}{_ident(row, source)}"
        if context == "Column":
            shown_value = repr(row[col]) if col in row else value  # repr quotes strings
            lines.append(f"{where}: column '{col}' = {shown_value} {_check_words(check)}")
        else:
            problem = _row_problem(check, row) or f"fails dataframe check {check}"
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


def validate_runs(
    df: pl.DataFrame,
    *,
    sources: Sequence[str] | None = None,
    schema: type[RunsSchema] = RunsSchema,
) -> pl.DataFrame:
    """Validate the runs table against ``schema`` and return it unchanged.

    ``sources`` (optional, one per row, e.g. the record file paths) is quoted in the message so
    the faulty record can be found. ``schema`` may be a pillar subclass of :class:`RunsSchema`.

    Raises :class:`TableError` naming every failing row (index, task/method/sparsity/seed, file),
    column and check; also when common columns are missing altogether.
    """
    missing = [c for c in schema.to_schema().columns if c not in df.columns]
    if missing:
        raise TableError(
            f"runs table lacks column(s) {', '.join(missing)}; every record must carry the "
            "common columns of sparsebench.suite.record.COMMON_COLUMNS (null where unknown)"
        )
    try:
        schema.validate(df, lazy=True)
    except SchemaErrors as e:
        cases = e.failure_cases
        if not isinstance(cases, pl.DataFrame):  # defensive: other backends return pandas
            raise TableError(f"runs table is invalid:\n{e}") from None
        message, rows = format_failures(cases, df, sources)
        raise TableError(message, rows=rows, failure_cases=cases) from None
    return df


def validate_and_write(df: pl.DataFrame, schema: type, out_parquet: Path, what: str) -> None:
    """Validate ``df`` against the pandera ``schema`` (all failures at once) and write it
    atomically to ``out_parquet``. Raises TableError naming the first failing rows."""
    try:
        schema.validate(df, lazy=True)
    except pa.errors.SchemaErrors as e:
        cases = e.failure_cases.head(5).to_dicts()
        raise TableError(f"invalid {what} runs table: {cases}") from None
    atomic_write(Path(out_parquet), df.write_parquet)


_PY_DTYPES = {str: pl.String, int: pl.Int64, float: pl.Float64, bool: pl.Boolean}


def rows_frame(rows: list[dict[str, Any]], columns: dict[str, type]) -> pl.DataFrame:
    """Record rows as a typed frame: ``columns`` (name -> python type) first, then every other
    key of the rows (provenance: spec_hash, git_sha, torch_version, times, ...) as strings."""
    schema = {c: _PY_DTYPES[t] for c, t in columns.items()}
    extra = sorted({k for r in rows for k in r} - set(schema))
    table: dict[str, list[Any]] = {c: [r.get(c) for r in rows] for c in schema}
    for c in extra:
        table[c] = [None if r.get(c) is None else str(r[c]) for r in rows]
    schema |= {c: pl.String for c in extra}
    return pl.DataFrame(table, schema=schema, strict=False)

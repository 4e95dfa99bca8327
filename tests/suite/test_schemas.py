"""CommonSchema, the classification runs table and validate_table: valid tables pass; each kind of
bad row is refused with a message that names the row, its identifying fields, the column and
the check."""

from __future__ import annotations

from typing import Any

import polars as pl
import pytest

from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.classification.table import COLUMNS, ClassificationSchema
from sparsebench.suite.record import COMMON_COLUMNS
from sparsebench.suite.schemas import (
    COMMON_DTYPES,
    CommonSchema,
    TableError,
    polars_dtype,
    validate_table,
)

PILLAR = get_pillar("classification")
DTYPES = {**COMMON_DTYPES, **{c: polars_dtype(t) for c, t in COLUMNS.items()}}


def frame(records: list[dict[str, Any]]) -> pl.DataFrame:
    # Explicit dtypes, as tables.collect builds them: all-null columns keep their type.
    return pl.from_dicts(records, schema_overrides=DTYPES, infer_schema_length=None)


def validate_runs(df: pl.DataFrame, **kw: Any) -> pl.DataFrame:
    """The classification runs table's validation, as tables.aggregate runs it."""
    assert issubclass(PILLAR.table, ClassificationSchema)  # its own checks + the generated ones
    return validate_table(
        df, PILLAR.table, ident=PILLAR.row_key, problems=PILLAR.row_problems(), **kw
    )


@pytest.fixture
def good(make_record) -> list[dict[str, Any]]:
    return [
        make_record(method="dense", seed=0),
        make_record(method="rigl", seed=0),
        make_record(method="set", seed=1, val_acc=None),  # a metric may be missing on ok rows
        make_record(method="set", seed=2, status="failed", error="ValueError: bad"),
        make_record(method="rigl", seed=3, status="diverged", error="loss is nan at step 7"),
    ]


def rejected(records: list[dict[str, Any]], **kw: Any) -> TableError:
    with pytest.raises(TableError) as info:
        validate_runs(frame(records), **kw)
    return info.value


def test_schema_covers_common_columns() -> None:
    cols = CommonSchema.to_schema().columns
    assert list(cols) == list(COMMON_COLUMNS)
    for name, col in cols.items():
        assert col.dtype.type == COMMON_DTYPES[name], name


def test_classification_schema_covers_its_columns() -> None:
    cols = ClassificationSchema.to_schema().columns
    assert set(cols) == set(COMMON_COLUMNS) | set(COLUMNS)
    for name, col in cols.items():
        assert col.dtype.type == DTYPES[name], name


def test_valid_table_passes_unchanged(good) -> None:
    df = frame(good)
    assert "host" in df.columns  # extra keys are allowed
    out = validate_runs(df)
    assert out.equals(df)


def test_table_error_is_value_error() -> None:
    assert issubclass(TableError, ValueError)


def test_accuracy_out_of_range_names_row_column_and_check(good) -> None:
    good[1]["test_acc"] = 1.5
    err = rejected(good)
    msg = str(err)
    assert "row 1 (" in msg
    assert "task=digits_mlp" in msg and "method=rigl" in msg and "seed=0" in msg
    assert "column 'test_acc' = 1.5" in msg
    assert "<= 1" in msg
    assert err.rows == [1]


def test_unknown_status(good) -> None:
    good[2]["status"] = "crashed"
    msg = str(rejected(good))
    assert "row 2 (" in msg and "method=set" in msg
    assert "column 'status' = 'crashed'" in msg
    assert "one of" in msg and "'diverged'" in msg


def test_ok_row_without_test_acc(good) -> None:
    good[1]["test_acc"] = None
    err = rejected(good)
    assert "row 1 (" in str(err)
    assert "column 'test_acc' is null but status is 'ok'" in str(err)
    assert err.rows == [1]


def test_failed_row_without_error(good) -> None:
    good[3]["error"] = None
    msg = str(rejected(good))
    assert "row 3 (" in msg and "seed=2" in msg
    assert "column 'error' is empty but status is 'failed'" in msg


def test_ok_row_with_error(good) -> None:
    good[0]["error"] = "leftover"
    msg = str(rejected(good))
    assert "row 0 (" in msg and "column 'error' = 'leftover'" in msg


def test_failed_row_with_metrics_names_the_columns(good) -> None:
    good[4]["test_acc"] = 0.5
    good[4]["train_wall_s"] = 3.0
    msg = str(rejected(good))
    assert "row 4 (" in msg
    assert "'test_acc'" in msg and "'train_wall_s'" in msg and "'diverged'" in msg


@pytest.mark.parametrize(
    ("column", "value", "words"),
    [
        ("target_sparsity", 1.0, "< 1"),
        ("actual_sparsity", -0.1, ">= 0"),
        ("val_acc", 2.0, "<= 1"),
        ("train_flops", -5.0, ">= 0"),
        ("train_flops", float("nan"), "finite"),
        ("test_loss", float("inf"), "finite"),
        ("seed", -1, ">= 0"),
        ("threads", 0, ">= 1"),
        ("parallel_jobs", 0, ">= 1"),
    ],
)
def test_value_checks(good, column: str, value: Any, words: str) -> None:
    good[1][column] = value
    msg = str(rejected(good))
    assert "row 1 (" in msg and f"column '{column}'" in msg and words in msg


def test_dense_must_sit_at_zero_sparsity(good) -> None:
    good[0]["target_sparsity"] = 0.5
    msg = str(rejected(good))
    assert "row 0 (" in msg and "column 'target_sparsity'" in msg and "'dense'" in msg


def test_sparse_method_needs_positive_sparsity(good) -> None:
    good[1]["target_sparsity"] = 0.0
    assert "column 'target_sparsity'" in str(rejected(good))


def test_nonzero_cannot_exceed_total(good) -> None:
    good[1]["params_nonzero"] = 5000
    assert "'params_nonzero' = 5000 exceeds" in str(rejected(good))


def test_duplicate_run_rejected(good) -> None:
    err = rejected([*good, dict(good[1])])
    assert "duplicate run" in str(err)
    assert err.rows == [1, 5]


def test_null_identity_column(good) -> None:
    good[2]["task"] = None
    msg = str(rejected(good))
    assert "row 2 (" in msg and "column 'task'" in msg and "must not be null" in msg


def test_wrong_dtype_names_column(good) -> None:
    df = frame(good).with_columns(pl.col("seed").cast(pl.String))
    with pytest.raises(TableError, match=r"column 'seed' has dtype String, expected Int64"):
        validate_runs(df)


def test_missing_column(good) -> None:
    df = frame(good).drop("threads")
    with pytest.raises(TableError, match="lacks column.*threads"):
        validate_runs(df)


def test_sources_are_quoted(good) -> None:
    good[1]["test_acc"] = -0.2
    paths = [f"runs/r{i}/record.json" for i in range(len(good))]
    assert "file runs/r1/record.json" in str(rejected(good, sources=paths))


def test_all_problems_reported_at_once(good) -> None:
    good[1]["test_acc"] = 1.5
    good[2]["status"] = "crashed"
    err = rejected(good)
    assert err.rows == [1, 2]
    assert err.failure_cases is not None and err.failure_cases.height >= 2


def test_a_pattern_other_than_unstructured_or_n_m_is_refused(good) -> None:
    good[1]["pattern"] = "2:4"
    validate_runs(frame(good))
    good[1]["pattern"] = "blocks"
    assert "column 'pattern'" in str(rejected(good))

"""What the suite's tables need besides their pandera schemas: the polars dtype of each record
column type and the error every table function raises. Kept apart from :mod:`suite.schemas` so
that reading a table (the summary, the run's ending) does not import pandera and pandas."""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

_DTYPES: dict[type, pl.DataType] = {
    str: pl.String(),
    float: pl.Float64(),
    int: pl.Int64(),
    bool: pl.Boolean(),
}


def polars_dtype(py_type: type) -> pl.DataType:
    """The polars dtype a column of :data:`COMMON_COLUMNS` python type ``py_type`` has."""
    return _DTYPES[py_type]


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

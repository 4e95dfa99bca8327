"""What the suite's tables need besides their pandera schemas: the polars dtype of each record
column type and the error every table function raises. Kept apart from :mod:`suite.schemas` so
that reading a table (the summary, the run's ending) does not import pandera and pandas."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

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


@contextmanager
def without_hypothesis() -> Iterator[None]:
    """Import pandera inside this block without importing hypothesis: pandera imports it, when
    installed, for its data-synthesis strategies, which the suite never uses (0.3 s of every
    job that validates a table). Where hypothesis is imported already (a test session), this
    changes nothing; otherwise pandera's strategies in this process act as if hypothesis were
    not installed."""
    if "hypothesis" in sys.modules:
        yield
        return
    sys.modules["hypothesis"] = None  # type: ignore[assignment]  # `import hypothesis` fails
    try:
        yield
    finally:
        if sys.modules.get("hypothesis", 0) is None:
            del sys.modules["hypothesis"]


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

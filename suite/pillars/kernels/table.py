"""The runs table of the kernels pillar: its columns and pandera model."""

from __future__ import annotations

import polars as pl

from sparsebench.suite.schemas import CommonSchema, pa

from .columns import KERNEL_COLUMNS, OPS, STATUSES  # noqa: F401 - re-exported


class KernelRunsSchema(CommonSchema):
    """Runs table of the kernels pillar: one row per (cell, backend, op)."""

    pillar: str = pa.Field(isin=["kernels"])
    backend: str
    op: str = pa.Field(isin=[*OPS, "all"])
    batch: int = pa.Field(ge=1)
    in_features: int = pa.Field(ge=1)
    out_features: int = pa.Field(ge=1)
    sparsity: float = pa.Field(ge=0.0, lt=1.0)
    # null only in a table cached before trials existed (its rows are trial 0)
    trial: int = pa.Field(ge=0, nullable=True)
    nnz: int = pa.Field(ge=0, nullable=True)
    status: str = pa.Field(isin=list(STATUSES))
    ms_median: float = pa.Field(gt=0.0, nullable=True)
    ms_p10: float = pa.Field(gt=0.0, nullable=True)
    ms_p90: float = pa.Field(gt=0.0, nullable=True)
    speedup_vs_dense: float = pa.Field(gt=0.0, nullable=True)
    speedup_vs_dense_mask: float = pa.Field(gt=0.0, nullable=True)
    max_abs_err: float = pa.Field(ge=0.0, nullable=True)

    @pa.dataframe_check
    def percentiles_ordered(cls, data: pa.PolarsData) -> pl.LazyFrame:
        good = (pl.col("ms_p10") <= pl.col("ms_median")) & (pl.col("ms_median") <= pl.col("ms_p90"))
        return data.lazyframe.select(good.fill_null(True))

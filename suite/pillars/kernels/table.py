"""The runs table of the kernels pillar: its columns and pandera model."""

from __future__ import annotations

import pandera.polars as pa
import polars as pl

from sparsebench.suite.schemas import CommonSchema

OPS = ("forward", "backward", "fwd_bwd")
STATUSES = ("ok", "skipped", "failed")

# Columns of the kernels table besides the common ones: one row per (backend, op) of a cell
# (the record holds them as its ``rows``); units in the names.
KERNEL_COLUMNS: dict[str, type] = {
    "backend": str,  # dense (nn.Linear) | dense_mask | torch_csr | cpu | triton | semi_structured
    "op": str,  # forward | backward | fwd_bwd
    "batch": int,
    "in_features": int,
    "out_features": int,
    "sparsity": float,  # target fraction of zeros in W
    "pattern": str,  # sparsity pattern of W (patterns.PATTERNS): random | haste
    "nnz": int,  # nonzeros of W actually kept
    "dtype": str,
    "trial": int,  # which of the section's trials (independent jobs of the same cell): 0, 1, ...
    "ms_median": float,
    "ms_p10": float,
    "ms_p90": float,
    "repeats": int,
    "dense_ms": float,  # median of dense nn.Linear, same op, same rounds
    "dense_mask_ms": float,
    "torch_csr_ms": float,  # null when torch_csr was not measured
    "speedup_vs_dense": float,  # dense_ms / ms_median
    "speedup_vs_dense_mask": float,
    "speedup_vs_torch_csr": float,
    "useful_flops": float,  # 2·nnz·B per product: 1 product forward, 2 backward, 3 fwd_bwd
    "gflops_effective": float,  # useful_flops / ms_median / 1e6 (GFLOP/s)
    "max_abs_err": float,  # vs dense_mask: forward y; backward grad_x and grad_W on pattern
}


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

"""The runs table of the classification pillar (dst, pruning): common columns + its own."""

from __future__ import annotations

from typing import Any

import polars as pl

from sparsebench.suite.schemas import CommonSchema, finite_check, pa

from .columns import COLUMNS, FAILED_NULL_COLUMNS, FINITE_COLUMNS, IDENT  # noqa: F401 - re-exported


class ClassificationSchema(CommonSchema):
    """One row per (task, method setting, sparsity, seed) record.

    Metric and cost columns are nullable since a failed or diverged job leaves them null; the
    dataframe checks tie nullness to ``status``."""

    family: str = pa.Field(isin=["dst", "pruning"])
    task: str
    dataset: str
    model: str
    execution: str = pa.Field(nullable=True)
    status: str = pa.Field(isin=["ok", "failed", "diverged"])
    target_sparsity: float = pa.Field(ge=0.0, lt=1.0)
    actual_sparsity: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    seed: int = pa.Field(ge=0)
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
    distribution: str = pa.Field(isin=["erk", "uniform", "global"], nullable=True)
    allocation: str = pa.Field(isin=["erk", "uniform", "global", "redistributed"], nullable=True)
    allocation_shift: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    pattern: str = pa.Field(
        str_matches=r"^(unstructured|activation|[1-9][0-9]*:[1-9][0-9]*)$", nullable=True
    )
    activation_density: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    init: str = pa.Field(isin=["default", "swi", "scaled"], nullable=True)
    mask_updates: int = pa.Field(ge=0, nullable=True)
    trained_density: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    reachable_outputs_init: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    reachable_outputs: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    effective_density_init: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    effective_density: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    regrowth_s: float = pa.Field(ge=0.0, nullable=True)
    regrowth_updates: int = pa.Field(ge=0, nullable=True)

    _finite = finite_check(*FINITE_COLUMNS)

    @pa.dataframe_check
    def failed_has_no_metrics(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("status") == "ok"
        all_null = pl.all_horizontal([pl.col(c).is_null() for c in FAILED_NULL_COLUMNS])
        return data.lazyframe.select((ok | all_null).fill_null(True))

    @pa.dataframe_check
    def dense_at_zero_sparsity(cls, data: pa.PolarsData) -> pl.LazyFrame:
        # dense weights: the dense method, and a finished run of an activation-sparsity method
        dense = (pl.col("method") == "dense") | (pl.col("pattern") == "activation").fill_null(False)
        zero = pl.col("target_sparsity") == 0.0
        failed_other = (pl.col("status") != "ok") & (pl.col("method") != "dense")
        return data.lazyframe.select(((dense == zero) | failed_other).fill_null(True))

    @pa.dataframe_check
    def nonzero_at_most_total(cls, data: pa.PolarsData) -> pl.LazyFrame:
        ok = pl.col("params_nonzero") <= pl.col("params_total")
        return data.lazyframe.select(ok.fill_null(True))


def _failed_metrics(row: dict[str, Any]) -> str:
    bad = [c for c in FAILED_NULL_COLUMNS if row.get(c) is not None]
    cols = ", ".join(f"'{c}'" for c in bad) or "(metrics)"
    return (
        f"column(s) {cols} set but status is {row.get('status')!r} (failed rows have null metrics)"
    )


ROW_PROBLEMS = {
    "failed_has_no_metrics": _failed_metrics,
    "dense_at_zero_sparsity": lambda row: (
        f"column 'target_sparsity' = {row.get('target_sparsity')!r} with method "
        f"{row.get('method')!r} (dense and activation-sparsity runs at 0.0, weight-sparse "
        "methods in (0, 1))"
    ),
    "nonzero_at_most_total": lambda row: (
        f"column 'params_nonzero' = {row.get('params_nonzero')!r} exceeds "
        f"'params_total' = {row.get('params_total')!r}"
    ),
    "multiple_fields_uniqueness": lambda row: (
        "duplicate run: another row has the same cell (task, method, setting, sparsity, seed)"
    ),
}

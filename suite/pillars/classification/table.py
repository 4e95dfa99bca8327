"""The runs table of the classification pillar (dst, pruning): common columns + its own."""

from __future__ import annotations

from typing import Any

import pandera.polars as pa
import polars as pl

from sparsebench.suite.schemas import CommonSchema, finite_check

# Columns of a classification record besides the common ones; units in the comments.
COLUMNS: dict[str, type] = {
    "family": str,  # dst | pruning: the method family
    "task": str,
    "dataset": str,
    "model": str,
    "execution": str,  # how sparse layers run: dense_mask (dense x mask) or a kernel backend
    "target_sparsity": float,
    "actual_sparsity": float,  # from the masks, over prunable weights
    "test_acc": float,  # fraction in [0, 1]
    "test_loss": float,
    "val_acc": float,
    "val_loss": float,
    "epochs": int,
    "steps": int,
    "train_flops": float,  # FLOPs (2 x MACs) over all training steps
    "inference_flops": float,  # FLOPs of one forward pass of one example
    "train_flops_rel_dense": float,
    "inference_flops_rel_dense": float,
    "params_total": int,  # all parameters (weights, biases, norms)
    "params_nonzero": int,  # parameters not removed by a mask
    "train_wall_s": float,  # seconds of Trainer.fit
    "infer_ms": float,  # median milliseconds of one forward pass of infer_batch examples
    "infer_batch": int,
    "layer_densities_json": str,  # layer name -> density at the end of training
    # The layer-wise allocation the method STARTS from (erk | uniform | global); null for dense.
    "distribution": str,
    # How its layer densities are set at the END (MaskMethod.final_allocation): the start's
    # (erk | uniform), global (ranked jointly, e.g. GraNet's pruning) or redistributed (SNFS);
    # and the largest |final layer density - the start distribution's at the target density|
    # (0: kept; null for a global start or dense). The layers' final densities are in
    # layer_densities_json.
    "allocation": str,
    "allocation_shift": float,
    # The initial-weight rule applied to the initial masks (default | swi | scaled, init.py).
    "init": str,
    # Distinct optimizer steps at which some mask changed during training (all methods,
    # measured by the mask store; one-shot pruning counts 1, static 0).
    "mask_updates": int,
    # Share of prunable weights active at the end AND active for at least the last 10 % of the
    # run's steps: the nominal density (1 - actual_sparsity) also counts connections grown at
    # the last update, which were barely trained (SET evolving until the last epochs).
    "trained_density": float,
    # Share of output units reachable from the input through active weights, after the
    # method's initial masks and at the end (connectivity.py); null where the test does
    # not apply (LayerNorm/attention models). Below 1: part of the network is disconnected.
    "reachable_outputs_init": float,
    "reachable_outputs": float,
    # Effective density (Vysogorets & Kempe 2023): share of prunable weights that are active
    # AND on some input-to-output path of active weights, at the start and at the end; null
    # where the test does not apply (as reach). Below 1 - actual_sparsity: dead weights.
    "effective_density_init": float,
    "effective_density": float,
    # Wall-clock seconds spent in the method's mask updates over the whole run (choosing what
    # to drop and grow and installing the new masks and initial values; FLOPs bookkeeping
    # excluded; MaskMethod.timed_update), and how many updates there were. Null for methods
    # that never change their masks during training (dense, static, the pruning methods).
    "regrowth_s": float,
    "regrowth_updates": int,
}

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
    "trained_density",
    "mask_updates",
    "effective_density",
    "regrowth_s",
    "regrowth_updates",
)

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

# What names a row in error messages (besides its cell id).
IDENT: tuple[str, ...] = ("task", "method", "setting_id", "target_sparsity", "seed")


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
        dense = pl.col("method") == "dense"
        zero = pl.col("target_sparsity") == 0.0
        return data.lazyframe.select((dense == zero).fill_null(True))

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
        f"{row.get('method')!r} (dense runs at 0.0, sparse methods in (0, 1))"
    ),
    "nonzero_at_most_total": lambda row: (
        f"column 'params_nonzero' = {row.get('params_nonzero')!r} exceeds "
        f"'params_total' = {row.get('params_total')!r}"
    ),
    "multiple_fields_uniqueness": lambda row: (
        "duplicate run: another row has the same cell (task, method, setting, sparsity, seed)"
    ),
}

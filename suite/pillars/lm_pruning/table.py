"""The runs table of the lm_pruning pillar: its columns and pandera model."""

from __future__ import annotations

from sparsebench.suite.schemas import CommonSchema, pa

from .columns import COLUMNS  # noqa: F401 - re-exported


class LMPruningRunsSchema(CommonSchema):
    """Runs table of the lm_pruning pillar: one row per (method, setting, pattern, sparsity,
    calibration seed)."""

    pillar: str = pa.Field(isin=["lm_pruning"])
    model: str
    setting: str
    pattern: str = pa.Field(str_matches=r"^(dense|unstructured|[1-9][0-9]*:[1-9][0-9]*)$")
    target_sparsity: float = pa.Field(ge=0, lt=1)
    actual_sparsity: float = pa.Field(ge=0, le=1, nullable=True)
    calib_sequences: int = pa.Field(ge=0, nullable=True)
    calib_tokens: int = pa.Field(ge=0, nullable=True)
    eval_tokens: int = pa.Field(ge=1, nullable=True)
    test_loss: float = pa.Field(ge=0, nullable=True)
    perplexity: float = pa.Field(ge=1, nullable=True)
    dense_perplexity: float = pa.Field(ge=1, nullable=True)
    ppl_ratio: float = pa.Field(gt=0, nullable=True)
    flops_rel_dense: float = pa.Field(ge=0, le=1, nullable=True)
    prune_s: float = pa.Field(ge=0, nullable=True)

"""The runs table of the merging pillar: its columns and pandera model."""

from __future__ import annotations

from sparsebench.suite.schemas import CommonSchema, pa

from .columns import COLUMNS  # noqa: F401 - re-exported


class MergingSchema(CommonSchema):
    """Runs table of the merging pillar: one row per (model, method setting, seed)."""

    pillar: str = pa.Field(isin=["merging"])
    model: str
    kind: str = pa.Field(isin=["merge", "reference"])
    status: str = pa.Field(isin=["ok", "failed", "diverged"])
    n_tasks: int = pa.Field(ge=2)
    head_shots: int = pa.Field(ge=1, nullable=True)
    avg_acc: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    norm_acc: float = pa.Field(ge=0.0, nullable=True)
    min_norm_acc: float = pa.Field(ge=0.0, nullable=True)
    avg_loss: float = pa.Field(ge=0.0, nullable=True)
    density: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    sign_conflict: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    sign_conflict_chance: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    tau_rel_norm: float = pa.Field(ge=0.0, nullable=True)
    tau_cosine: float = pa.Field(ge=-1.0, le=1.0, nullable=True)
    own_gain: float = pa.Field(ge=-1.0, le=1.0, nullable=True)
    others_cost: float = pa.Field(ge=-1.0, le=1.0, nullable=True)
    merge_s: float = pa.Field(ge=0.0, nullable=True)
    examples: int = pa.Field(ge=0, nullable=True)
    peak_mem_mb: float = pa.Field(ge=0.0, nullable=True)

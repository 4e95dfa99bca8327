"""The runs table of the SAE pillar: its columns and pandera model."""

from __future__ import annotations

from sparsebench.suite.schemas import CommonSchema, pa

from .columns import COLUMNS  # noqa: F401 - re-exported


class SAESchema(CommonSchema):
    """Runs table of the SAE pillar: one row per (activations, width, method setting, seed)."""

    pillar: str = pa.Field(isin=["sae"])
    activations: str
    status: str = pa.Field(isin=["ok", "failed", "diverged"])
    width: int = pa.Field(ge=1)
    fvu: float = pa.Field(nullable=True)
    l0: float = pa.Field(ge=0.0, nullable=True)
    l0_train: float = pa.Field(ge=0.0, nullable=True)
    dead_fraction: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    loss_recovered: float = pa.Field(nullable=True)  # < 0 when worse than zero-ablation
    kl_recovered: float = pa.Field(nullable=True)
    probe_acc_k1: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    probe_acc_k2: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    probe_acc_k5: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    mcc: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    recovery_rate: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    pair_recovery: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    pair_recovery_any: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    train_flops: float = pa.Field(ge=0.0, nullable=True)
    train_s: float = pa.Field(ge=0.0, nullable=True)

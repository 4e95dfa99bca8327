"""The runs table of the hessian pillar: its columns and pandera model."""

from __future__ import annotations

from sparsebench.suite.schemas import CommonSchema, pa

from .columns import HESSIAN_COLUMNS  # noqa: F401 - re-exported


class HessianRunsSchema(CommonSchema):
    """Runs table of the hessian pillar: one row per (system, size, potential, method, trial)."""

    pillar: str = pa.Field(isin=["hessian"])
    system: str
    size: int = pa.Field(ge=1)
    n_atoms: int = pa.Field(ge=1, nullable=True)
    potential: str
    method: str
    # null only in a table cached before trials existed (its rows are trial 0)
    trial: int = pa.Field(ge=0, nullable=True)
    status: str = pa.Field(isin=["ok", "failed"])
    n_colors: int = pa.Field(ge=1, nullable=True)
    max_row_atoms: int = pa.Field(ge=1, nullable=True)
    n_hvps: int = pa.Field(ge=1, nullable=True)
    nnz: int = pa.Field(ge=0, nullable=True)
    fill: float = pa.Field(ge=0.0, le=1.0, nullable=True)
    wall_s: float = pa.Field(ge=0.0, nullable=True)
    dense_wall_s: float = pa.Field(ge=0.0, nullable=True)
    rel_err: float = pa.Field(ge=0.0, nullable=True)
    peak_mem_mb: float = pa.Field(ge=0.0, nullable=True)

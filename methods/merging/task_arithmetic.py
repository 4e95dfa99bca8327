"""Task Arithmetic: θ = θ0 + λ Σ_t τ_t."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.suite.registry import register

from .base import MergeInputs, MergeResult, MergingMethod, TaskVectorStats, sum_task_vectors

# Ilharco et al. 2023, Sec. 2: λ chosen on held-out validation data from {0, 0.05, ..., 1.0}.
# We search 0.05..1.0 in steps of 0.05 (λ = 0 is the zero-shot model, a reference row) and,
# ours, 0.01..0.04 below it: TA adds the *sum* of T task vectors where TIES adds their disjoint
# *mean*, so with our large task vectors the optimum of the 8-task sum lies at or below 0.05
# (the edge of the paper's grid), where TIES' grid (0.1, ...) already reaches.
PAPER_LAMBDA_GRID = tuple(round(0.05 * i, 2) for i in range(1, 21))
LAMBDA_GRID = (0.01, 0.02, 0.03, 0.04) + PAPER_LAMBDA_GRID


@register("task_arithmetic", family="merging")
class TaskArithmetic(MergingMethod):
    """Task Arithmetic: add the sum of the task vectors τ_t = θ_t − θ0 to the base with one
    scaling coefficient, θ = θ0 + λ Σ_t τ_t (Eq. 1 and Sec. 3, "adding task vectors").

    Defaults: λ chosen on validation over 0.01, ..., 0.04 (ours) and 0.05, 0.10, ..., 1.00
    (the paper's grid without 0); see ``LAMBDA_GRID``.

    Source: Ilharco, Ribeiro, Wortsman, Gururangan, Schmidt, Hajishirzi, Farhadi, "Editing
    Models with Task Arithmetic", ICLR 2023, Eq. 1 and Sec. 3.
    """

    search = {"lam": LAMBDA_GRID}
    scale = "lam"

    @dataclass
    class Params:
        lam: float | None = None  # None: chosen on validation over LAMBDA_GRID

        def validate(self) -> None:
            if self.lam is not None and self.lam < 0:
                raise ValueError(f"lam must be >= 0, got {self.lam}")

    def merge_vector(self, inputs: MergeInputs, params: Params) -> MergeResult:
        """τ_m = Σ_t τ_t, summed parameter by parameter (the record's statistics: of the raw
        τ_t, counted in a pass of their own)."""
        base, experts = inputs.base, inputs.experts
        return MergeResult(
            vector=sum_task_vectors(base, experts),
            stats=lambda: TaskVectorStats.stream(base, experts),
        )

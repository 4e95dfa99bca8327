"""TIES-Merging: trim, elect sign, disjoint merge (Yadav et al. 2023, Alg. 1)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from sparsebench.suite.registry import register

from .base import MergeInputs, MergeResult, MergingMethod, StateDict, density

# The official code's TIES command (README of github.com/prateeky2806/ties-merging) scales the
# merged vector over `linear+0.8+2.51+0.1`, i.e. λ in 0.8, 0.9, ..., 2.5, on validation.
PAPER_LAMBDA_GRID = tuple(round(0.8 + 0.1 * i, 1) for i in range(18))
# Ours: extended below the paper's range, first with 0.1, ..., 0.7 (with our small trunks the
# task vectors are large next to θ0 and the validation optimum of the 8-task merge lies below
# 0.8: measured, 0.2 beats 0.8 by 10 points of normalized accuracy on the MLP trunk), then,
# since TIES still chose 0.1, the lower edge of that grid, with 0.01, 0.02, 0.03, 0.05, 0.07:
# down to Task Arithmetic's lowest value (0.01, task_arithmetic.py) in roughly geometric steps
# (ratios 1.4 to 2, about as fine as 0.1 -> 0.2 above). A grid whose edge is the optimum
# would make TIES lose to Task Arithmetic by its grid alone (a mis-scaled default).
LOW_LAMBDA_GRID = (0.01, 0.02, 0.03, 0.05, 0.07)
TIES_LAMBDA_GRID = (
    LOW_LAMBDA_GRID + tuple(round(0.1 * i, 1) for i in range(1, 8)) + PAPER_LAMBDA_GRID
)
# The trim fraction k. The official code's commands fix it (`topk20`: keep 20%, the paper's
# default) and scan λ only; we found no documented validation grid for k, so this one is ours:
# 10%, 20%, 30% around the default, searched after λ (see ties_stages).
K_DEFAULT = 0.2
K_GRID = (0.1, 0.2, 0.3)


def ties_stages(
    grid: dict[str, tuple[Any, ...]],
) -> list[tuple[dict[str, tuple[Any, ...]], dict[str, Any]]]:
    """TIES' selection as stages (ours; the official code tunes λ only, at k = 20%): the other
    searched fields (λ, and CASS's keep) at k = :data:`K_DEFAULT` first, then k over
    ``grid["k"]`` at the values they chose: |λ grid| + |k grid| merges instead of their
    product. A grid without a k axis, or whose k axis is ``(None,)`` (a CASS host that does
    not trim), is one stage."""
    if grid.get("k", (None,)) == (None,):
        return [(grid, {})]
    first = {name: values for name, values in grid.items() if name != "k"}
    return [(first, {"k": K_DEFAULT}), ({"k": grid["k"]}, {})]


def trim(vectors: Sequence[Mapping[str, torch.Tensor]], k: float) -> list[StateDict]:
    """Alg. 1 step 1 (Trim): per task, keep the ``n = round(k·d)`` largest-magnitude entries
    of τ_t over the whole flattened task vector (d entries over all parameters, not per
    tensor, as the official code does), zero the rest; entries tied with the n-th largest
    magnitude are kept too (the official code's ``|τ| >= kth value``). ``k >= 1`` keeps
    everything. New tensors, same keys and shapes as each vector."""
    out: list[StateDict] = []
    for tv in vectors:
        if k >= 1.0:
            out.append({key: v.clone() for key, v in tv.items()})
            continue
        flat = torch.cat([v.detach().abs().flatten() for v in tv.values()])
        n = int(round(k * flat.numel()))
        if n <= 0:
            out.append({key: torch.zeros_like(v) for key, v in tv.items()})
            continue
        thr = torch.topk(flat, n, sorted=False).values.min()
        out.append(
            {key: torch.where(v.abs() >= thr, v, torch.zeros_like(v)) for key, v in tv.items()}
        )
    return out


def elect_sign(trimmed: Sequence[Mapping[str, torch.Tensor]]) -> StateDict:
    """Alg. 1 step 2 (Elect): γ = sgn(Σ_t τ̂_t), the sign of the larger total mass. Where the
    sum is exactly 0, γ is the majority sign sgn(Σ_p γ_p) over the whole vector (the official
    code's ``resolve_zero_signs(..., "majority")``); the paper leaves that case open."""
    gamma = {k: torch.sign(torch.stack([t[k] for t in trimmed]).sum(0)) for k in trimmed[0]}
    majority = torch.sign(sum(g.sum() for g in gamma.values()))
    return {k: torch.where(g == 0, majority.to(g.dtype), g) for k, g in gamma.items()}


def disjoint_merge(
    trimmed: Sequence[Mapping[str, torch.Tensor]],
    gamma: Mapping[str, torch.Tensor],
    agg: Literal["mean", "sum"] = "mean",
) -> StateDict:
    """Alg. 1 step 3 (Disjoint merge): per entry p, A_p = {t : τ̂_t^p ≠ 0, sgn(τ̂_t^p) = γ^p};
    τ_m^p = (1/|A_p|) Σ_{t∈A_p} τ̂_t^p (``agg="mean"``, the paper) or the sum over A_p
    (``agg="sum"``, used by the Consensus/TALL code's TIES variant); 0 where A_p is empty."""
    out: StateDict = {}
    for k, g in gamma.items():
        s = torch.stack([t[k] for t in trimmed])  # (T, *shape)
        agree = ((g > 0) & (s > 0)) | ((g < 0) & (s < 0))
        sel = torch.where(agree, s, torch.zeros_like(s)).sum(0)
        if agg == "mean":
            sel = sel / agree.sum(0).clamp(min=1).to(sel.dtype)
        out[k] = sel
    return out


def ties_vector(
    vectors: Sequence[Mapping[str, torch.Tensor]], k: float, agg: Literal["mean", "sum"] = "mean"
) -> tuple[StateDict, list[StateDict]]:
    """τ_m of Alg. 1 (trim, elect, disjoint merge) and the trimmed vectors τ̂_t."""
    trimmed = trim(vectors, k)
    return disjoint_merge(trimmed, elect_sign(trimmed), agg), trimmed


@register("ties", family="merging")
class Ties(MergingMethod):
    """TIES-Merging (Alg. 1): trim each τ_t to its top-k% magnitudes, elect the sign of each
    entry by total mass, average only the entries that agree with it (disjoint mean), and add
    the result to the base with one coefficient: θ = θ0 + λ τ_m.

    Defaults: λ and k chosen on validation in two stages (:func:`ties_stages`, ours): λ over
    0.01, ..., 2.5 at k = 0.2, then k over {0.1, 0.2, 0.3} at that λ. λ's grid is the official
    code's scale grid 0.8, ..., 2.5 (``linear+0.8+2.51+0.1``; the paper recommends λ = 1
    without validation) extended below by us with 0.1, ..., 0.7 and 0.01, 0.02, 0.03, 0.05,
    0.07, where the optimum lies at our scale (see ``TIES_LAMBDA_GRID``); k's grid is ours
    (the official commands fix k = 20%, the paper's default; see ``K_GRID``). An explicit k
    (e.g. ``ties: {k: 0.2}``) is used as is and not searched. Trimming is over the
    whole flattened task vector (as in the official code; FusionBench does the same,
    mergekit trims per tensor), keeping round(k·d) entries (the official code keeps
    int(k·d)+1). Zero elected signs take the vector's majority sign (official code). Task
    vectors: the trimmed τ̂_t.

    Source: Yadav, Tam, Choshen, Raffel, Bansal, "TIES-Merging: Resolving Interference When
    Merging Models", NeurIPS 2023, Alg. 1; code github.com/prateeky2806/ties-merging.
    """

    search = {"k": K_GRID, "lam": TIES_LAMBDA_GRID}
    scale = "lam"

    @classmethod
    def search_stages(cls, params: Any):
        return ties_stages(cls.grid_for(params))

    @dataclass
    class Params:
        # fraction of each task vector's entries kept by the trim step; None: chosen on
        # validation over K_GRID after λ (ties_stages)
        k: float | None = None
        lam: float | None = None  # None: chosen on validation over TIES_LAMBDA_GRID

        def validate(self) -> None:
            if self.k is not None and not 0.0 < self.k <= 1.0:
                raise ValueError(f"k must be in (0, 1], got {self.k}")
            if self.lam is not None and self.lam < 0:
                raise ValueError(f"lam must be >= 0, got {self.lam}")

    def merge_vector(self, inputs: MergeInputs, params: Params) -> MergeResult:
        merged, trimmed = ties_vector(inputs.task_vectors(), params.k)
        return MergeResult(
            vector=merged, task_vectors=trimmed, info={"trimmed_density": density(trimmed)}
        )

"""Consensus Merging: drop the weights that fewer than k tasks' TALL masks select
(Wang et al. 2024)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from sparsebench.suite.registry import register

from ._data import memo, require_data
from .base import MergeInputs, MergeResult, MergingMethod, StateDict, add_scaled
from .tall_masks import (
    Host,
    apply_mask,
    mask_density,
    multitask_vector,
    select_tall_masks,
    validate_tall_fields,
)
from .task_arithmetic import LAMBDA_GRID
from .ties import trim


@register("consensus", family="merging")
class Consensus(MergingMethod):
    """Consensus Merging: build the TALL masks m_t of every task (see ``tall_masks``), keep
    only the weights selected by at least k tasks, m_cons = 1{Σ_t m_t >= k}, which removes the
    "catastrophic" (selected by no task) and "selfish" (selected by one task) weights, and
    merge with the host: θ = θ0 + α (m_cons ∘ τ_MTL).

    Host: ``task_arithmetic`` (Consensus TA, τ_MTL = Σ_t τ_t) or ``ties`` (Consensus TIES,
    τ_MTL = TIES with 20% trim and disjoint *sum*, as the official code's consensus-TIES);
    the TALL masks are built from the same τ_MTL, as in the official code.

    Defaults: k = 2 (the paper's and official code's ``prun_thre_k``), α chosen on validation
    over Task Arithmetic's grid 0.01, ..., 1.00 (the official code uses 0.1, ..., 1.0 for both
    hosts), λ_t of the TALL masks chosen per task on its validation split among
    {0.2, ..., 0.6} (as TALL; a numeric ``lam`` fixes it for every task, and with it the
    method needs no data). Ours: ``n_examples`` = 1024 validation examples per task for λ_t;
    the TALL masks are computed once per ``MergeInputs`` (memoised across the α grid).
    Task vectors: m_cons ∘ τ_t (TA) or m_cons ∘ τ̂_t (TIES, trimmed); ``info``: the consensus
    mask density and the λ_t.

    Source: Wang, Dimitriadis, Ortiz-Jimenez, Fleuret, Frossard, "Localizing Task Information
    for Improved Model Merging and Compression", ICML 2024, Consensus Merging
    (m_consensus = 1{Σ_t m_t ≥ k}, Fig. 1); code github.com/nik-dim/tall_masks.
    """

    data_free = False  # with the default lam="val"
    search = {"alpha": LAMBDA_GRID}

    @dataclass
    class Params:
        alpha: float | None = None  # host scaling; None: chosen on validation over LAMBDA_GRID
        k: int = 2  # minimum number of tasks whose TALL mask selects a weight
        lam: float | Literal["val"] = "val"  # TALL λ_t ("val": per task on validation)
        host: Host = "task_arithmetic"
        n_examples: int = 1024  # validation examples per task for choosing λ_t

        def validate(self) -> None:
            if self.alpha is not None and self.alpha < 0:
                raise ValueError(f"alpha must be >= 0, got {self.alpha}")
            if self.k < 1:  # k = 0 would keep every entry: Task Arithmetic
                raise ValueError(f"k must be >= 1 (tasks that must agree), got {self.k}")
            validate_tall_fields(self)

    @classmethod
    def check(cls, params: Params, section: Mapping[str, Any]) -> None:
        """k tasks must agree: at most the number of tasks the spec merges."""
        n = len(section["tasks"])
        if params.k > n:
            raise ValueError(
                f"k: {params.k} tasks must agree but the spec merges {n}; allowed: 1 to {n}"
            )

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        data = inputs.data
        if isinstance(params.lam, str):
            data = require_data(inputs, "consensus")
        tvs = inputs.task_vectors()
        mtl = multitask_vector(tvs, params.host)
        masks, lams, read_n = memo(  # independent of the searched parameters
            inputs,
            ("tall_masks", params.host, params.lam, params.n_examples),
            lambda: select_tall_masks(inputs, mtl, params.lam, params.n_examples, data),
        )
        cons = consensus_mask(masks, params.k)
        merged = apply_mask(mtl, cons)
        parts = trim(tvs, 0.2) if params.host == "ties" else tvs
        return MergeResult(
            state=add_scaled(inputs.base, merged, params.alpha),
            task_vectors=[apply_mask(v, cons) for v in parts],
            examples=read_n,
            info={"consensus_density": mask_density(cons), "lambdas": lams},
        )


def consensus_mask(masks: Sequence[Mapping[str, torch.Tensor]], k: int) -> StateDict:
    """m_cons = 1{Σ_t m_t >= k} per entry (boolean, trunk keys)."""
    return {
        key: torch.stack([m[key] for m in masks]).sum(0, dtype=torch.int64) >= k for key in masks[0]
    }

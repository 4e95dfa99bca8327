"""TALL masks: per-task binary masks that localise each task's information inside the
multi-task vector (Wang et al. 2024)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.suite.registry import register

from ._data import accuracy, memo, read, require_data
from .base import MergeData, MergeInputs, MergeResult, MergingMethod, StateDict, add_scaled
from .ties import ties_vector

# The official code (github.com/nik-dim/tall_masks, construct_tall_mask) builds masks for
# λ in {0.2, 0.3, 0.4, 0.5, 0.6} and keeps, per task, the one of best validation accuracy.
TALL_LAMBDA_GRID = (0.2, 0.3, 0.4, 0.5, 0.6)

Host = Literal["task_arithmetic", "ties"]


def multitask_vector(
    vectors: Sequence[Mapping[str, torch.Tensor]], host: Host = "task_arithmetic"
) -> StateDict:
    """τ_MTL: the Task Arithmetic sum Σ_t τ_t (unscaled, as in the official code), or with
    ``host="ties"`` the TIES vector (trim to 20%, elect, disjoint *sum*: the official code's
    ``ties_agg: sum``)."""
    if host == "ties":
        return ties_vector(vectors, 0.2, agg="sum")[0]
    return {k: torch.stack([v[k] for v in vectors]).sum(0) for k in vectors[0]}


def tall_mask(
    tv: Mapping[str, torch.Tensor], mtl: Mapping[str, torch.Tensor], lam: float
) -> StateDict:
    """m_t = 1{|τ_t| > λ · |τ_MTL − τ_t|} (the paper writes ≥; the strict ">" is the official
    code's ``diff_pt_ft > diff_multi_ft * lambda``: the two differ only on exact ties, e.g. an
    entry where both sides are 0 is off). Boolean, trunk keys."""
    return {k: tv[k].abs() > lam * (mtl[k] - tv[k]).abs() for k in tv}


def apply_mask(vector: Mapping[str, torch.Tensor], mask: Mapping[str, torch.Tensor]) -> StateDict:
    """m ∘ τ (new tensors)."""
    return {k: torch.where(mask[k], v, torch.zeros_like(v)) for k, v in vector.items()}


def mask_density(mask: Mapping[str, torch.Tensor]) -> float:
    total = sum(m.numel() for m in mask.values())
    return sum(int(m.sum()) for m in mask.values()) / total if total else 0.0


def select_tall_masks(
    inputs: MergeInputs,
    mtl: Mapping[str, torch.Tensor],
    lam: float | str,
    n_examples: int,
    data: MergeData | None,
) -> tuple[list[StateDict], list[float], int]:
    """Per task t: the TALL mask at λ_t (``lam`` a number: the same λ for every task, no data;
    ``"val"``: λ_t in :data:`TALL_LAMBDA_GRID` maximising the accuracy of θ0 + m_t ∘ τ_MTL on
    the first ``n_examples`` validation examples of task t, ties to the smaller λ as in the
    official code). Returns (masks, λ_t, examples read)."""
    tvs = inputs.task_vectors()
    if not isinstance(lam, str):
        return [tall_mask(tv, mtl, float(lam)) for tv in tvs], [float(lam)] * len(tvs), 0
    if data is None:
        raise ValueError('TALL masks with lam="val" need MergeData (or give a numeric lam)')
    masks, lams, read_n = [], [], 0
    for t, tv in enumerate(tvs):
        x, y = read(data, t, "val", n_examples)
        read_n += x.shape[0]
        best = None
        for cand in TALL_LAMBDA_GRID:
            m = tall_mask(tv, mtl, cand)
            acc = accuracy(data, add_scaled(inputs.base, apply_mask(mtl, m)), t, x, y)
            if best is None or acc > best[0]:
                best = (acc, cand, m)
        masks.append(best[2])
        lams.append(best[1])
    return masks, lams, read_n


@register("tall_masks", family="merging")
class TallMasks(MergingMethod):
    """TALL masks (Task-specific ALL-in-one masks): from the multi-task vector τ_MTL = Σ_t τ_t,
    task t's mask m_t = 1{|τ_t| > λ_t |τ_MTL − τ_t|} keeps the entries where task t's own
    update dominates the other tasks' contribution, and task t is served by its own trunk
    θ_t = θ0 + m_t ∘ τ_MTL (one trunk per task: ``MergeResult.per_task``; storage is θ0, τ_MTL
    and T binary masks).

    λ_t: by default chosen per task among {0.2, 0.3, 0.4, 0.5, 0.6} by the accuracy of θ_t on
    the first ``n_examples`` validation examples of task t (the paper's and official code's
    protocol); a numeric ``lam`` fixes λ_t = lam for every task and needs no data.

    Defaults (official code): τ_MTL is the unscaled sum (α = 1: the official code builds both
    the masks and θ_t with scaling coefficient 1.0); ``host="ties"`` builds τ_MTL with TIES
    (20%, disjoint sum) instead. Ours: n_examples = 1024 (officially the whole validation
    split); the strict ">" of the official code. Task vectors: the masked m_t ∘ τ_MTL (their
    density is the mean mask density); ``info``: λ_t and the mask density per task.

    Source: Wang, Dimitriadis, Ortiz-Jimenez, Fleuret, Frossard, "Localizing Task Information
    for Improved Model Merging and Compression", ICML 2024, the TALL-mask construction
    (m_t = 1{|τ_t| ≥ λ_t |τ_MTL − τ_t|}, Fig. 1); code github.com/nik-dim/tall_masks.
    """

    data_free = False  # with the default lam="val"; a numeric lam is data-free

    @dataclass
    class Params:
        lam: float | Literal["val"] = "val"  # "val": λ_t per task on its validation split
        host: Host = "task_arithmetic"  # how τ_MTL is built
        n_examples: int = 1024  # validation examples per task for choosing λ_t

        def validate(self) -> None:
            validate_tall_fields(self)

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        data = inputs.data
        if isinstance(params.lam, str):
            data = require_data(inputs, "tall_masks")
        mtl = multitask_vector(inputs.task_vectors(), params.host)
        masks, lams, read_n = memo(  # independent of the searched parameters
            inputs,
            ("tall_masks", params.host, params.lam, params.n_examples),
            lambda: select_tall_masks(inputs, mtl, params.lam, params.n_examples, data),
        )
        masked = [apply_mask(mtl, m) for m in masks]
        return MergeResult(
            per_task=[add_scaled(inputs.base, v) for v in masked],
            task_vectors=masked,
            examples=read_n,
            info={"lambdas": lams, "mask_density": [mask_density(m) for m in masks]},
        )


def validate_tall_fields(p) -> None:
    """The checks of the TALL-mask fields ``lam`` and ``n_examples`` (TALL masks, Consensus)."""
    if not isinstance(p.lam, str) and p.lam < 0:
        raise ValueError(f"lam must be >= 0 or 'val', got {p.lam}")
    if p.n_examples < 1:
        raise ValueError(f"n_examples must be >= 1, got {p.n_examples}")

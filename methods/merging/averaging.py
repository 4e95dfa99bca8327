"""Weight averaging: θ = (1/T) Σ_t θ_t."""

from __future__ import annotations

import torch

from sparsebench.suite.registry import NoParams, register

from .base import MergeInputs, MergeResult, MergingMethod


@register("averaging", family="merging")
class Averaging(MergingMethod):
    """Uniform weight averaging of the experts, θ = (1/T) Σ_t θ_t (the "uniform soup"), which
    equals Task Arithmetic with λ = 1/T: θ0 + (1/T) Σ_t τ_t.

    Defaults: none (no parameters). Every trunk parameter is averaged, the task heads are not
    (each task keeps its own, as for every merging method here). Task vectors: the raw τ_t.

    Source: Wortsman et al., "Model soups: averaging weights of multiple fine-tuned models
    improves accuracy without increasing inference time", ICML 2022, Sec. 2 (uniform soup);
    Choshen et al., "Fusing finetuned models for better pretraining", arXiv:2204.03044, 2022.
    """

    Params = NoParams

    def merge(self, inputs: MergeInputs, params: NoParams) -> MergeResult:
        state = {k: torch.stack([e[k] for e in inputs.experts]).mean(0) for k in inputs.base}
        return MergeResult(state=state, task_vectors=inputs.task_vectors())

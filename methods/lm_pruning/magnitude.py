"""Layer-wise magnitude pruning of a trained language model: the baseline of Wanda's and
SparseGPT's tables."""

from __future__ import annotations

import torch

from sparsebench.suite.method import NoParams
from sparsebench.suite.registry import register

from .base import LayerStats, LMPruningMethod, Target, keep_lowest_out


@register("magnitude", family="lm_pruning")
class Magnitude(LMPruningMethod):
    """Magnitude pruning, each linear layer on its own: score |W_ij|; unstructured removes the
    lowest-scoring fraction of the whole layer, N:M the M − N smallest of every group of M
    consecutive inputs of a row. No calibration data.

    Source: the magnitude baseline of Sun et al. 2024 ("A Simple and Effective Pruning Approach
    for Large Language Models", Table 2/3; their code's ``prune_magnitude``: a per-layer
    threshold, every decoder linear layer at the same sparsity), after Han et al. 2015.
    Ours: exactly ⌊sparsity · numel⌋ weights removed (their threshold ``W <= sorted[k]``
    removes k + 1 and any ties); ties broken by a stable sort (lower flat index first); an
    "N:M" pattern keeps N of every M (as in Wanda's code for 2:4 and 4:8, the only patterns
    it takes).
    """

    Params = NoParams
    statistics = "none"

    def prune(self, weight: torch.Tensor, stats: LayerStats | None, target: Target) -> torch.Tensor:
        return weight * keep_lowest_out(weight.abs(), target, per_row=False)

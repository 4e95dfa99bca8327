"""Wanda: pruning by weights and activations (Sun et al. 2024)."""

from __future__ import annotations

import torch

from sparsebench.suite.method import NoParams
from sparsebench.suite.registry import register

from .base import LayerStats, LMPruningMethod, Target, keep_lowest_out


@register("wanda", family="lm_pruning")
class Wanda(LMPruningMethod):
    """Wanda: score S_ij = |W_ij| · ‖X_j‖₂, the weight's magnitude times the ℓ2 norm of its
    input feature over every calibration token, compared within each output row: unstructured
    removes the ⌊sparsity · d_in⌋ lowest scores of every row, N:M the M − N lowest of every
    group of M consecutive inputs of a row. The kept weights are not updated.

    Source: Sun, Liu, Bair & Kolter 2024, "A Simple and Effective Pruning Approach for Large
    Language Models" (ICLR), Eq. 1 and Sec. 3 (per-output comparison group), Algorithm 1; the
    authors' code (``prune_wanda``): blocks pruned in order with the calibration inputs passed
    through the blocks already pruned, every linear layer of a block scored from one forward
    pass, 128 calibration sequences. Theirs are C4 sequences of the model's context length
    (2,048 tokens for LLaMA-1); ours are the suite's calibration windows of the stdlib corpus
    (the pillar's ``calibration`` section). Ours: an "N:M" pattern keeps N of every M (their
    code's "2:4" names the count pruned, N; the two agree for 2:4 and 4:8, the only patterns
    their code takes); on exactly equal N:M scores ours keeps the later inputs (``topk`` of the
    largest), theirs removes the earlier ones.
    """

    Params = NoParams
    statistics = "norms"

    def prune(self, weight: torch.Tensor, stats: LayerStats | None, target: Target) -> torch.Tensor:
        if stats is None:
            raise ValueError("wanda needs the calibration inputs' norms of every layer")
        scores = weight.abs() * stats.sq_norms.sqrt().reshape(1, -1)
        return weight * keep_lowest_out(scores, target, per_row=True)

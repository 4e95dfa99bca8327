"""What every post-training language-model pruning method shares: one linear layer at a time,
its weight and the statistics of its inputs on calibration text in, the pruned weight out.

The job (suite/pillars/lm_pruning/job.py) walks the model block by block as the reference code
of Wanda and SparseGPT does (``prune_wanda``, ``llama_sequential``): it runs the calibration
sequences through the block with the earlier blocks already pruned, gathers the statistics
each of the block's linear layers needs (:attr:`LMPruningMethod.statistics`) from one forward
pass in which none of the block's own layers is pruned yet, prunes every linear layer of the
block, and feeds the pruned block's outputs to the next block. Embeddings, LayerNorms and the
unembedding stay dense (both papers prune the decoder layers' linear maps only).

A target is a sparsity with a pattern: ``unstructured`` (that fraction of each layer's weights
is zero) or N:M (at most N nonzeros in every group of M consecutive input weights of a row, the
pattern sparse tensor cores run; sparsity 1 − N/M).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparsebench.suite.method import Method


@dataclass(frozen=True)
class Target:
    """What a layer is pruned to.

    Attributes:
        sparsity: the fraction of the layer's weights that are zero afterwards.
        nm: (N, M) for an N:M pattern (then ``sparsity`` is 1 − N/M), None for unstructured.
    """

    sparsity: float
    nm: tuple[int, int] | None = None

    @property
    def pattern(self) -> str:
        return "unstructured" if self.nm is None else f"{self.nm[0]}:{self.nm[1]}"


@dataclass
class LayerStats:
    """Statistics of one linear layer's inputs x (d_in,) over the calibration tokens.

    Attributes:
        tokens: how many tokens were seen.
        sq_norms: Σ_tokens x_j² per input feature j (d_in,): ‖X_j‖₂², Wanda's statistic (its
            code's ``scaler_row`` times the number of calibration sequences: a constant factor
            no within-row comparison depends on).
        hessian: H = (2 / tokens) Σ_tokens x xᵀ (d_in, d_in), float64, SparseGPT's layer-wise
            Hessian of the squared reconstruction error (its code divides by the number of
            sequences, in float32; the method's result does not depend on H's scale); None
            unless a method asks for it.
    """

    tokens: int
    sq_norms: torch.Tensor
    hessian: torch.Tensor | None = None


class LMPruningMethod(Method):
    """Base of the language-model pruning methods.

    Class attributes:
        statistics: what the method reads of the calibration inputs: ``"none"`` (magnitude:
            no calibration), ``"norms"`` (:attr:`LayerStats.sq_norms`) or ``"hessian"``
            (also :attr:`LayerStats.hessian`).
    """

    statistics: ClassVar[str] = "none"

    def __init__(self, params: Any) -> None:
        self.params = params

    def prune(self, weight: torch.Tensor, stats: LayerStats | None, target: Target) -> torch.Tensor:
        """The pruned weight (out, in): zeros where pruned, the kept weights as they are or
        updated (SparseGPT). ``weight`` is not modified."""
        raise NotImplementedError


def keep_lowest_out(scores: torch.Tensor, target: Target, per_row: bool) -> torch.Tensor:
    """Boolean keep-mask (out, in) from ``scores`` (higher: more important): N:M keeps the N
    largest of every M consecutive inputs of a row; unstructured removes the
    ⌊sparsity · count⌋ lowest scores of each row (``per_row``, Wanda's comparison group) or of
    the whole layer (magnitude). Ties: unstructured, the stable sort's order (lower index
    removed first); N:M, ``topk``'s order of the largest (:func:`nm_mask`)."""
    from sparsebench.suite.pillars.classification.nm import nm_mask

    if target.nm is not None:
        mask = nm_mask(scores, *target.nm)
        if mask is None:
            raise ValueError(
                f"a layer of {scores.shape[1]} inputs does not split into groups of {target.nm[1]}"
            )
        return mask
    keep = torch.ones_like(scores, dtype=torch.bool)
    if per_row:
        k = int(scores.shape[1] * target.sparsity)
        order = torch.sort(scores, dim=1, stable=True).indices[:, :k]
        keep.scatter_(1, order, False)
    else:
        k = int(scores.numel() * target.sparsity)
        order = torch.sort(scores.flatten(), stable=True).indices[:k]
        keep.view(-1)[order] = False
    return keep

"""Random pruning of a trained network: the baseline every pruning criterion must beat."""

from __future__ import annotations

import torch

from sparsebench.methods.pruning.magnitude import MagnitudeOneShot
from sparsebench.suite.registry import register


@register("random_oneshot", family="pruning")
class RandomOneShot(MagnitudeOneShot):
    """Train dense, remove weights chosen uniformly at random, fine-tune: one-shot magnitude
    pruning's schedule and budget (``dense_fraction`` of the epochs dense, then the fixed
    mask) with a random criterion, so that the two differ only in what is removed.

    ``distribution: global`` (the default) draws one random ranking over all prunable weights
    (every layer keeps about the target density); ``uniform`` keeps exactly the target density
    in every layer and ``erk`` each layer's ERK density. ShrinkBench's ``RandomPruning`` keeps
    each weight with probability d independently: the same in expectation. Unlike ShrinkBench
    (ours, as for every method here): kernels only, biases never pruned, the classifier
    pruned too. Random pruning at initialization with ERK or uniform
    densities is the ``static`` method of the dst family (a random mask, fixed, trained from
    the start). The draw uses the job's seed (ours).

    Training FLOPs: as one-shot magnitude pruning (``3 f_D`` per example before pruning,
    ``3 f_S`` after).

    Source: Blalock, Gonzalez Ortiz, Frankle, Guttag 2020, "What is the State of Neural Network
    Pruning?" (arXiv:2003.03033), MLSys, Sec. 4 and Appendix (the random and magnitude baselines,
    global and layer-wise, that every pruning method should be compared with).
    """

    def scores(self, store) -> dict:
        return {
            n: torch.rand(store.weight(n).shape, generator=self.ctx.generator).to(
                store.weight(n).device
            )
            for n in store.layers
        }

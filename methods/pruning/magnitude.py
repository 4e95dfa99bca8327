"""One-shot global magnitude pruning with fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.pillars.classification.masks import check_allocation
from sparsebench.suite.registry import register


@register("magnitude_oneshot", family="pruning")
class MagnitudeOneShot(MaskMethod):
    """Train dense, prune once by global weight magnitude, fine-tune the sparse network.

    The run's epoch budget is split: the first ``dense_fraction`` of the epochs (default 0.5)
    train the dense network; at the start of the next epoch the weights with the smallest
    |w| across all prunable layers (one global threshold) are removed, leaving the target
    density; the remaining epochs fine-tune with the mask fixed. The learning-rate schedule runs
    on unchanged over the whole budget (fine-tuning continues the decayed schedule). Total
    epochs equal the dense baseline's, so the comparison is at equal budget. ``distribution``
    (default ``global``, the published ranking) may instead prune each layer to its ERK or
    uniform density, so that a board can compare every method at one layer-wise allocation.

    Training FLOPs: ``3 f_D`` per example before pruning, ``3 f_S`` after.

    Source: Han, Pool, Tran, Dally 2015, "Learning both Weights and Connections for Efficient
    Neural Networks", NeurIPS, Sec. 3 (train, prune by magnitude, retrain; one iteration);
    global magnitude ranking as in Frankle & Carbin 2019 and Blalock et al. 2020 ("What is the
    State of Neural Network Pruning?", the ``Global Magnitude`` baseline).
    """

    @dataclass
    class Params:
        dense_fraction: float = 0.5
        distribution: Literal["global", "erk", "uniform"] = "global"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if not 0.0 < self.dense_fraction < 1.0:
                raise ValueError(f"dense_fraction must be in (0, 1), got {self.dense_fraction}")
            check_allocation(self.distribution, self.dense_first_layer)
            check_dense_start(
                self.init, "one-shot pruning of a trained network trains dense until it prunes"
            )

    @property
    def prune_epoch(self) -> int:
        return max(1, min(self.ctx.epochs - 1, round(self.params.dense_fraction * self.ctx.epochs)))

    def scores(self, store) -> dict:
        """What is kept: the largest of these (|w|)."""
        return {n: store.weight(n).detach().abs() for n in store.layers}

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.prune_epoch:
            store = pl_module.masks
            scores = self.scores(store)
            store.allocate(
                self.density, scores, self.params.distribution, self.params.dense_first_layer
            )

"""One-shot global magnitude pruning with fine-tuning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.pillars.classification.masks import check_allocation
from sparsebench.suite.registry import register


def refuse_single_epoch(name: str, total_steps: int, steps_per_epoch: int) -> None:
    """One-shot pruning prunes at an epoch's start after at least one dense epoch and
    fine-tunes after it: a one-epoch run would never prune (a dense run recorded as sparse)."""
    if total_steps // max(steps_per_epoch, 1) < 2:
        raise ValueError(
            f"{name} prunes at the start of an epoch after dense training and fine-tunes "
            f"after it: it needs at least 2 epochs, the recipe has {total_steps} steps of "
            f"{steps_per_epoch} per epoch"
        )


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

    Source: Han, Pool, Tran, Dally 2015, "Learning both Weights and Connections for Efficient Neural
    Networks" (arXiv:1506.02626), NeurIPS, Sec. 3 (train, prune by magnitude, retrain; one
    iteration); global magnitude ranking as in Frankle & Carbin 2019 and Blalock et al. 2020 ("What
    is the State of Neural Network Pruning?", the ``Global Magnitude`` baseline).
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

    @classmethod
    def check_budget(cls, params, total_steps: int, steps_per_epoch: int) -> None:
        refuse_single_epoch(cls.method_name, total_steps, steps_per_epoch)

    @property
    def prune_epoch(self) -> int:
        return max(1, min(self.ctx.epochs - 1, round(self.params.dense_fraction * self.ctx.epochs)))

    def scores(self, store) -> dict:
        """What is kept: the largest of these (|w|)."""
        return {n: store.weight(n).detach().abs() for n in store.layers}

    def prune(self, store) -> None:
        """The one pruning step: keep the largest :meth:`scores` at the target density."""
        store.allocate(
            self.density,
            self.scores(store),
            self.params.distribution,
            self.params.dense_first_layer,
        )

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        if trainer.current_epoch == self.prune_epoch:
            self.prune(pl_module.masks)

"""Lightning pieces of the classification pillar (dst, pruning): the module and the FLOPs
callback (the methods' base class and run context are the family contract, in
``methods/dst/base.py``)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from torch import nn
from torchmetrics.classification import MulticlassAccuracy

from sparsebench.methods.dst.base import MaskMethod, RunContext
from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter
from sparsebench.suite.pillars.classification.masks import MaskStore
from sparsebench.suite.record import Diverged

__all__ = ["DivergedError", "FlopsCallback", "MaskMethod", "RunContext"]


class DivergedError(Diverged):
    """Training produced a non-finite loss."""


class FlopsCallback(pl.Callback):
    """Counts 3 x sparse forward FLOPs per training example at each step's masks, and keeps
    the mask store's step counter (``MaskStore.step``, for connection ages) current."""

    def __init__(self, counter: TrainFlopsCounter):
        self.counter = counter
        self._densities: dict[str, float] = {}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        pl_module.masks.step = trainer.global_step
        self._densities = pl_module.masks.densities()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.counter.step(int(batch[0].shape[0]), self._densities)
        # Current before the next batch's method hooks run (methods are earlier callbacks).
        pl_module.masks.step = trainer.global_step


class InitCallback(pl.Callback):
    """Applies the method's ``init`` rule (:mod:`~sparsebench.suite.pillars.classification.init`)
    once its initial masks are installed: placed right after the method among the callbacks,
    so its ``on_fit_start`` follows the method's."""

    def __init__(self, rule: str, generator: torch.Generator):
        self.rule, self.generator = rule, generator

    def on_fit_start(self, trainer, pl_module) -> None:
        from sparsebench.suite.pillars.classification.init import apply_init

        apply_init(pl_module.masks, self.rule, self.generator)


class ValuesOnlyCallback(pl.Callback):
    """``execution: sparse``: once the method's first masks and their ``init`` are in place,
    the masked linear layers become values-only (:func:`.execution.to_values_only`); placed
    right after the init rule among the callbacks."""

    def on_fit_start(self, trainer, pl_module) -> None:
        from sparsebench.suite.pillars.classification.execution import to_values_only

        to_values_only(pl_module.masks)


class ConnectivityCallback(pl.Callback):
    """Fraction of outputs reachable from the input and effective density at the start of
    training (after the method's initial masks), see
    :mod:`sparsebench.suite.pillars.classification.connectivity`; from then on the mask store
    counts mask updates."""

    def __init__(self, input_shape: tuple[int, ...]):
        self.input_shape = tuple(input_shape)
        self.at_start: float | None = None
        self.effective_at_start: float | None = None

    def on_train_start(self, trainer, pl_module) -> None:
        from sparsebench.suite.pillars.classification.connectivity import (
            effective_density,
            reachable_output_fraction,
        )

        model, store = pl_module.model, pl_module.masks
        self.at_start = reachable_output_fraction(model, store, self.input_shape)
        self.effective_at_start = effective_density(model, store, self.input_shape)
        store.begin_training()


def run_callbacks(
    method: MaskMethod,
    ctx: RunContext,
    input_shape: tuple[int, ...],
    execution: str = "dense_mask",
) -> tuple[list[pl.Callback], ConnectivityCallback]:
    """The callbacks of one classification run, in the order that matters: the method first
    (its initial masks), then its ``init`` rule on them, then (``execution: sparse``) the
    switch to values-only layers, then the FLOPs counter and the connectivity probe, which
    see its masks. Returns (callbacks, the connectivity callback)."""
    from sparsebench.methods.dst.base import as_callback
    from sparsebench.suite.pillars.classification.execution import VALUES_ONLY

    connectivity = ConnectivityCallback(input_shape)
    init = InitCallback(getattr(method.params, "init", "default"), ctx.generator)
    values_only = [ValuesOnlyCallback()] if execution == VALUES_ONLY else []
    callbacks = [as_callback(method), init, *values_only, FlopsCallback(ctx.flops), connectivity]
    return callbacks, connectivity


def lr_lambda(recipe: dict[str, Any], total_steps: int):
    """Per-step learning-rate multiplier for ``recipe['schedule']``:
    ``constant``; ``cosine`` (to 0 at the last step, Loshchilov & Hutter 2017);
    ``step`` (times ``gamma`` at each fraction in ``milestones``)."""
    schedule = recipe.get("schedule", "cosine")
    if schedule == "constant":
        return lambda step: 1.0
    if schedule == "cosine":
        return lambda step: 0.5 * (1.0 + math.cos(math.pi * min(step, total_steps) / total_steps))
    if schedule == "step":
        marks = sorted(int(m * total_steps) for m in recipe.get("milestones", [0.5, 0.75]))
        gamma = recipe.get("gamma", 0.1)
        return lambda step: gamma ** sum(step >= m for m in marks)
    raise ValueError(f"unknown schedule {schedule!r}; allowed: constant, cosine, step")


def _composed(factor: Callable[[int], float], position: Callable[[int], int]):
    return lambda step: factor(position(step))


class ClassificationModule(pl.LightningModule):
    """Supervised classification with cross-entropy; the model's masks live in ``self.masks``.

    Args:
        model: maps ``(B, *input_shape)`` to logits ``(B, num_classes)``.
        num_classes: number of classes.
        recipe: the spec's training recipe (optimizer, lr, momentum, weight_decay, schedule).
        total_steps: optimizer steps of the recipe (the lr schedule's length).
        schedule_position: global step -> step of that schedule, for a method that trains
            several rounds (IMP); None: the global step itself.
    Raises (during fit): DivergedError when a training loss is NaN or infinite.
    """

    def __init__(
        self,
        model: nn.Module,
        num_classes: int,
        recipe: dict[str, Any],
        total_steps: int,
        schedule_position: Callable[[int], int] | None = None,
    ):
        super().__init__()
        self.model = model
        self.masks = MaskStore(model)
        self.recipe = recipe
        # module -> optimizer, set by a method that brings its own (None: the recipe's)
        self.optimizer_factory = None
        self.total_steps = total_steps
        self.schedule_position = schedule_position
        self.metrics = nn.ModuleDict(
            {s: MulticlassAccuracy(num_classes, average="micro") for s in ("val", "test")}
        )
        self._loss_sum = {"val": 0.0, "test": 0.0, "train": 0.0}
        self._count = {"val": 0, "test": 0, "train": 0}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.masks.forward(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.masks.forward(x), y)
        if not torch.isfinite(loss):
            raise DivergedError(
                f"training loss is {loss.item()} at step {self.global_step} "
                f"(epoch {self.current_epoch}); lower the learning rate in the recipe"
            )
        # the epoch's mean training loss for the learning curve (the check above has already
        # read the value, so this adds no synchronisation)
        self._loss_sum["train"] += float(loss) * int(y.numel())
        self._count["train"] += int(y.numel())
        return loss

    def on_train_epoch_end(self):
        n = max(self._count["train"], 1)
        self.log("train_loss", self._loss_sum["train"] / n)
        self._loss_sum["train"], self._count["train"] = 0.0, 0

    def _eval_step(self, batch, stage: str) -> None:
        x, y = batch
        logits = self.masks.forward(x)
        self._loss_sum[stage] += F.cross_entropy(logits, y, reduction="sum").item()
        self._count[stage] += int(y.numel())
        self.metrics[stage].update(logits, y)

    def _eval_epoch_end(self, stage: str) -> None:
        n = max(self._count[stage], 1)
        self.log(f"{stage}_loss", self._loss_sum[stage] / n)
        self.log(f"{stage}_acc", self.metrics[stage].compute())
        self.metrics[stage].reset()
        self._loss_sum[stage], self._count[stage] = 0.0, 0

    def validation_step(self, batch, batch_idx):
        self._eval_step(batch, "val")

    def on_validation_epoch_end(self):
        self._eval_epoch_end("val")

    def test_step(self, batch, batch_idx):
        self._eval_step(batch, "test")

    def on_test_epoch_end(self):
        self._eval_epoch_end("test")

    def configure_optimizers(self):
        r = self.recipe
        own = self.optimizer_factory(self) if self.optimizer_factory is not None else None
        if own is not None:  # a method whose optimizer is the method (Bregman iterations)
            opt = own
        elif r.get("optimizer", "sgd") == "sgd":
            opt = torch.optim.SGD(
                self.parameters(),
                lr=r["lr"],
                momentum=r.get("momentum", 0.9),
                nesterov=r.get("nesterov", False),
                weight_decay=r.get("weight_decay", 0.0),
            )
        elif r.get("optimizer") == "adamw":  # decoupled weight decay (Loshchilov & Hutter 2019)
            opt = torch.optim.AdamW(
                self.parameters(), lr=r["lr"], weight_decay=r.get("weight_decay", 0.0)
            )
        else:
            opt = torch.optim.Adam(
                self.parameters(), lr=r["lr"], weight_decay=r.get("weight_decay", 0.0)
            )
        self.masks.attach(opt)
        factor = lr_lambda(r, self.total_steps)
        if self.schedule_position is not None:
            factor = _composed(factor, self.schedule_position)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

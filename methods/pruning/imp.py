"""Iterative magnitude pruning with rewinding: lottery tickets."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.masks import n_keep
from sparsebench.suite.registry import register

#: Latest rewinding step, as a fraction of the recipe (ours: Frankle et al. 2020 rewind within
#: the first few percent of training; later, each level would retrain too little).
MAX_REWIND = 0.5
#: Most pruning levels a run may take (ours: 20 % per level reaches 99.9 % in 31; a tiny
#: ``pruning_fraction`` would retrain the recipe thousands of times).
MAX_LEVELS = 40


def levels_to(sparsity: float, fraction: float) -> int:
    """Pruning levels that remove ``fraction`` of the remaining weights each until the
    sparsity reaches ``sparsity`` (the last level removes less, to land on it exactly)."""
    if sparsity <= 0.0:
        return 0
    return max(1, math.ceil(math.log(1.0 - sparsity) / math.log(1.0 - fraction) - 1e-9))


@register("imp", family="pruning")
class IMP(MaskMethod):
    """Iterative magnitude pruning (IMP), the lottery-ticket procedure: train the dense
    network for the recipe's T steps; then, level after level, remove ``pruning_fraction`` of
    the remaining weights with the smallest |w| (one global ranking), rewind the surviving
    weights to their values at step k and train again from there for the rest of the
    schedule (T - k steps, the learning rate resuming at step k), until the target sparsity
    (the last level removes less, to land on it exactly). k = 0 rewinds to the initial
    weights (Frankle & Carbin 2019, Algorithm "Identifying winning tickets", strategy 2);
    k > 0 is rewinding to an early iteration (Frankle et al. 2020, Sec. 3),
    ``rewind_fraction`` of T. Each level starts with a fresh optimizer state, as open_lth
    trains every level anew.

    ``reinit: true`` is the papers' control: the same levels, but the last one trains the
    ticket's mask from new random weights (a fresh draw of the model's own init) instead of
    rewinding: the "random reinitialization" of Frankle & Carbin Sec. 2-3.

    Budget: IMP trains the whole recipe once per level; the run is T + L (T - k) steps for L
    levels, and its training FLOPs count every level (``train_flops_rel_dense`` is relative
    to one dense run of the recipe, so IMP shows its full cost: 4.4x at 80 % on LeNet-300-100,
    L = 8 levels, the later ones training sparse).

    Layers, as open_lth (not Frankle & Carbin, who prune LeNet layer by layer at 20 % with the
    output layer at half that rate): one global ranking over every prunable layer but the
    output layer (the last prunable layer the model defines), which stays dense (open_lth's
    ``pruning_layers_to_ignore: fc.weight``); the target sparsity still counts every
    prunable weight, as open_lth's count does, so the others are pruned a little further.

    Ours besides: with k > 0 the first training is one continuous run (open_lth restarts its
    optimizer at k there too); the data order goes on from level to level (open_lth can
    replay it); each level keeps round(0.8^level) of the weights (open_lth removes
    ceil(0.2 x remaining)).

    Defaults from open_lth's ``mnist_lenet_300_100`` (``sparse_global``,
    ``pruning_fraction: 0.2``, ``pruning_layers_to_ignore: fc.weight``, rewinding to init);
    the recipe (epochs, learning rate) is the task's, as for every method of a board.

    Source: Frankle & Carbin 2019, "The Lottery Ticket Hypothesis: Finding Sparse, Trainable
    Neural Networks", ICLR, Sec. 2 (iterative pruning, p % per round, reset to θ_0) and Sec.
    3-4 (random reinitialization control); Frankle, Dziugaite, Roy, Carbin 2020, "Linear
    Mode Connectivity and the Lottery Ticket Hypothesis", ICML, Sec. 3 (rewinding to iteration
    k); defaults from github.com/facebookresearch/open_lth (``models/mnist_lenet.py``
    ``default_hparams``, ``pruning/sparse_global.py``).
    """

    @dataclass
    class Params:
        pruning_fraction: float = 0.2
        rewind_fraction: float = 0.0
        reinit: bool = False
        prune_output_layer: bool = False

        def validate(self) -> None:
            if not 0.0 < self.pruning_fraction < 1.0:
                raise ValueError(f"pruning_fraction must be in (0, 1), got {self.pruning_fraction}")
            if not 0.0 <= self.rewind_fraction <= MAX_REWIND:
                raise ValueError(
                    f"rewind_fraction must be in [0, {MAX_REWIND}], got {self.rewind_fraction}: "
                    "IMP rewinds to the start or to an early step, and every level retrains "
                    "from there"
                )

    @classmethod
    def final_allocation(cls, params: Params) -> str:
        return "global"

    @classmethod
    def check_sparsity(cls, params: Params, sparsity: float, layers: dict) -> None:
        levels = levels_to(sparsity, params.pruning_fraction)
        if levels > MAX_LEVELS:
            raise ValueError(
                f"pruning_fraction {params.pruning_fraction} needs {levels} levels (each a "
                f"training of the whole recipe) to reach sparsity {sparsity}; at most "
                f"MAX_LEVELS = {MAX_LEVELS} (methods/pruning/imp.py): raise pruning_fraction"
            )
        if params.prune_output_layer or not layers:
            return
        *rest, out = layers.values()
        total = sum(m.weight.numel() for m in layers.values())
        if n_keep(total, 1.0 - sparsity) <= out.weight.numel():
            raise ValueError(
                f"at sparsity {sparsity} the {n_keep(total, 1.0 - sparsity)} weights kept are "
                f"no more than the dense output layer's {out.weight.numel()}; set "
                "prune_output_layer: true or a lower sparsity"
            )

    @classmethod
    def training_steps(cls, params: Params, sparsity: float, recipe_steps: int) -> int:
        k = cls.rewind_step(params, recipe_steps)
        return recipe_steps + levels_to(sparsity, params.pruning_fraction) * (recipe_steps - k)

    @classmethod
    def schedule_position(
        cls, params: Params, sparsity: float, recipe_steps: int
    ) -> Callable[[int], int]:
        """Global step -> step of the recipe's learning-rate schedule: every level after the
        first resumes it at k."""
        k = cls.rewind_step(params, recipe_steps)

        def position(step: int) -> int:
            if step < recipe_steps:
                return step
            return k + (step - recipe_steps) % (recipe_steps - k)

        return position

    @staticmethod
    def rewind_step(params: Params, recipe_steps: int) -> int:
        return int(round(params.rewind_fraction * recipe_steps))

    # ---------------------------------------------------------------- the run
    @property
    def recipe_steps(self) -> int:
        return self.ctx.steps_per_epoch * self.ctx.epochs

    @property
    def levels(self) -> int:
        return levels_to(self.sparsity, self.params.pruning_fraction)

    def level_starting_at(self, step: int) -> int:
        """The level (1..L) whose training starts at ``step``; 0 if none does."""
        t, k = self.recipe_steps, self.rewind_step(self.params, self.recipe_steps)
        if step < t or (step - t) % (t - k):
            return 0
        level = (step - t) // (t - k) + 1
        return level if level <= self.levels else 0

    def density_at(self, level: int) -> float:
        if level >= self.levels:
            return self.density
        return (1.0 - self.params.pruning_fraction) ** level

    def on_fit_start(self, trainer, pl_module) -> None:
        self._rewind_to: dict[str, torch.Tensor] | None = None
        if self.rewind_step(self.params, self.recipe_steps) == 0:
            self._rewind_to = _snapshot(pl_module.model)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        if self._rewind_to is None and step == self.rewind_step(self.params, self.recipe_steps):
            self._rewind_to = _snapshot(pl_module.model)
        level = self.level_starting_at(step)
        if level:
            self._prune(pl_module.masks, self.density_at(level))
            self._restart(trainer, pl_module, last=level == self.levels)

    def _prune(self, store, density: float) -> None:
        """Keep the largest |w| of the active weights, ranked jointly over the pruned layers,
        so that ``density`` of all prunable weights stays (the output layer dense unless
        ``prune_output_layer``)."""
        names = list(store.layers)
        kept_dense = [] if self.params.prune_output_layer else names[-1:]
        ranked = [n for n in names if n not in kept_dense]
        k = n_keep(store.total, density) - sum(store.weight(n).numel() for n in kept_dense)
        scores = []
        for n in ranked:
            w, mask = store.weight(n).detach().abs().double(), store.masks[n]
            scores.append((w if mask is None else torch.where(mask, w, -math.inf)).reshape(-1))
        flat = torch.cat(scores)
        keep = torch.zeros_like(flat, dtype=torch.bool)
        keep[torch.topk(flat, k, sorted=False).indices] = True
        start = 0
        for n in ranked:
            numel = store.weight(n).numel()
            store.set_mask(n, keep[start : start + numel].view_as(store.weight(n)))
            start += numel
        for n in kept_dense:
            store.set_mask(n, None)

    def _restart(self, trainer, pl_module, last: bool) -> None:
        """Rewind every weight (and buffer) to step k, or draw new ones for the control,
        re-apply the masks and start the optimizer afresh."""
        model = pl_module.model
        if last and self.params.reinit:
            with torch.random.fork_rng():
                torch.manual_seed(1_000_003 + self.ctx.seed)  # not the run's own draw
                fresh = self.ctx.new_model()
            model.load_state_dict(fresh.state_dict())
        else:
            model.load_state_dict(self._rewind_to)
        pl_module.masks.apply()
        for opt in trainer.optimizers:
            opt.state.clear()


def _snapshot(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}

"""Movement pruning (hard): keep the weights moving away from zero."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.pruning.gmp import GMP
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.registry import register


@register("movement", family="pruning")
class Movement(GMP):
    """Hard movement pruning: every weight has a score S, S = -Σ_t (∂L/∂W')_t ⊙ W_t summed
    from the first step (W' = W ⊙ M the weight the forward uses: the straight-through
    gradient of the scores, Sanh et al. 2020, Sec. 4, Eq. 5 and the first-order view below
    it), and the mask keeps each layer's largest scores (TopK per weight matrix): the weights
    moving away from zero, whatever their size. The kept fraction follows the cubic schedule
    of Zhu & Gupta from 1 to the target, updated at every step, after a dense warm-up and
    with a final stretch at the target, where the mask is still chosen by the top scores at
    every step (the authors' ``initial_warmup: 1`` and ``final_warmup: 2``, in units of their
    ``--warmup_steps``, about one of their 10 SQuAD epochs: ``begin_fraction: 0.1``,
    ``end_fraction: 0.8``). Masked weights keep their values and their scores go on moving, so
    a weight can come back. At the end the weights are pruned to the last mask.

    Ours, where the source is silent or its setting differs: the scores take plain gradient
    steps (Eq. 5 as written; the authors' script gives them Adam at lr 1e-2, which changes
    the ranking's weighting over time; the TopK ranking does not depend on a plain step's
    size); the masked weights get no gradient but the recipe's weight decay (the same
    optimizer as every method of the board); every prunable layer is pruned, the first and
    the output layer too (the authors prune the encoder's linear layers and keep the
    embeddings and the task head dense); the kept count is rounded (``n_keep``; the authors
    floor it); the paper fine-tunes a pretrained BERT, here
    the network is trained from scratch, the regime where the paper reports magnitude
    pruning doing as well or better (Sec. 6). Soft movement pruning is
    :class:`~sparsebench.methods.pruning.soft_movement.SoftMovement`.

    Training FLOPs per example: sparse forward and activation gradient, and the dense
    gradient of W' that the scores need: ``2 f_S(t) + f_D``.

    Source: Sanh, Wolf, Rush 2020, "Movement Pruning: Adaptive Sparsity by Fine-Tuning", NeurIPS
    (arXiv:2005.07683), Sec. 4 (Eq. 5, TopK masks), Sec. 5 (cubic schedule with warm-up); defaults
    from huggingface/transformers research_projects/movement-pruning (``--pruning_method topK
    --initial_warmup 1 --final_warmup 2 --mask_init constant --mask_scale 0``).
    """

    straight_through = True

    @dataclass
    class Params(GMP.Params):
        pruning_frequency: int | None = 1
        begin_fraction: float = 0.1
        end_fraction: float = 0.8
        distribution: Literal["uniform", "erk", "global"] = "uniform"

        def validate(self) -> None:
            if self.init != "default":
                check_dense_start(self.init, "movement pruning starts dense")
            if self.pruning_steps is not None and self.pruning_frequency == 1:
                raise ValueError(
                    f"pruning_steps {self.pruning_steps} scales Δt to the run, but movement "
                    "pruning updates its mask every step by default (pruning_frequency: 1); "
                    "set pruning_frequency: null with it"
                )
            super().validate()

    def on_fit_start(self, trainer, pl_module) -> None:
        super().on_fit_start(trainer, pl_module)
        store = pl_module.masks
        self.scores = {n: torch.zeros_like(store.weight(n)) for n in store.layers}
        for name in store.layers:
            store.set_straight_through(name, self.moving_forward(self.scores[name], -1.0))

    @staticmethod
    def moving_forward(target: torch.Tensor, sign: float):
        """A forward W' = W ⊙ M whose gradient g adds ``sign`` · g ⊙ W to ``target`` (hard
        movement: the scores, S ← S − g ⊙ W; soft: the scores' gradient buffer)."""

        def forward(weight: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
            if not torch.is_grad_enabled():  # evaluation: nothing moves
                return weight if mask is None else weight * mask
            # W' is a new tensor of this forward's graph even without a mask (a view): a hook
            # on the weight itself would stay and fire again at every later backward
            used = weight.view_as(weight) if mask is None else weight * mask
            w = weight.detach()

            def move(grad: torch.Tensor) -> None:  # returns None: the gradient stays
                target.add_(grad * w, alpha=sign)

            used.register_hook(move)
            return used

        return forward

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        s_t = self.sparsity_at(step)
        t0, _, dt, n = self.schedule(self.params, self.ctx.total_steps)
        if s_t is None and step > t0 + n * dt:
            s_t = self.sparsity  # after the schedule the top scores still choose, at s_f
        if s_t is None or s_t <= 0.0:
            return
        store = pl_module.masks
        scores = {n: self.scores[n].clone() for n in store.layers}
        store.allocate(1.0 - s_t, scores, self.params.distribution, self.params.dense_first_layer)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        flops = self.ctx.flops
        flops.add(flops.dense_grad_extra(pl_module.masks.densities(), int(batch[0].shape[0])))

    def on_train_end(self, trainer, pl_module) -> None:
        pl_module.masks.end_straight_through()

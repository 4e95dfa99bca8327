"""N:M sparsity learned from scratch with the sparse-refined straight-through estimator."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.methods.pruning.nm_magnitude import NMPatternMethod
from sparsebench.suite.pillars.classification.nm import nm_mask, parse_nm, sr_ste_forward
from sparsebench.suite.registry import register


@register("sr_ste", family="pruning")
class SRSTE(NMPatternMethod):
    """SR-STE: train an N:M sparse network from scratch. The dense weights W are the
    parameters; every forward uses W̃ = W ⊙ M with M the N:M mask of the current |W| (the N
    largest of every M consecutive weights, recomputed at every step, so weights move in and
    out of the mask), and the backward passes the dense gradient through the mask with the
    sparse-refined term:

        W ← W - γ (∂L/∂W̃ + λ_W (1 - M) ⊙ W)        (Zhou et al. 2021, Eq. 4)

    with λ_W = ``decay`` = 2e-4 (the paper's and the authors' code's value). At the end of
    training the weights are pruned to the last mask, so what is evaluated and recorded is the
    N:M network. ``decay: 0`` is plain STE (the paper's baseline, Sec. 4.1). The optimizer and
    its weight decay act on the dense W, as in the authors' code.

    Ours: the N:M groups as in the authors' code (input channel fastest), every prunable layer
    that can be cut into groups of M (the authors keep ResNet's classifier dense and prune
    every convolution; our models are MLPs and LeNet-5, whose layers are all prunable), a
    layer whose size is not a multiple of M stays dense. The sparsity is the pattern's,
    1 - N/M, whatever the spec's list: the cells of this method run at that sparsity only.

    Training FLOPs per example: sparse forward and sparse activation gradient, dense weight
    gradient (every step is an update of W): ``2 f_S + f_D``; a FLOP count, not what hardware
    saves (sparse tensor cores speed up W̃ᵀ's product only with transposable masks).

    Source: Zhou et al. 2021, "Learning N:M Fine-grained Structured Sparse Neural Networks
    From Scratch", ICLR, Sec. 3-4 (Eq. 3-4, Algorithm 1); defaults from the paper and
    github.com/aojunzz/NM-sparsity (``devkit/sparse_ops``: decay 0.0002, the mask recomputed
    in every forward).
    """

    @dataclass
    class Params:
        pattern: str = "2:4"
        decay: float = 2e-4

        def validate(self) -> None:
            parse_nm(self.pattern)
            if self.decay < 0.0:
                raise ValueError(f"decay (λ_W) must be >= 0, got {self.decay}")

    straight_through = True

    def _refresh(self, store) -> None:
        for name in store.straight_through:
            w = store.weight(name).detach()
            store.set_mask(name, nm_mask(w.abs(), *self.nm))

    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        for name in store.layers:
            if nm_mask(store.weight(name).detach().abs(), *self.nm) is not None:
                store.set_straight_through(name, sr_ste_forward(self.params.decay))
        self._refresh(store)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step > 0:
            self._refresh(pl_module.masks)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        store = pl_module.masks
        self.ctx.flops.add(
            self.ctx.flops.dense_grad_extra(store.densities(), int(batch[0].shape[0]))
        )

    def on_validation_epoch_start(self, trainer, pl_module) -> None:
        if pl_module.masks.straight_through:  # the mask of the weights being validated
            self._refresh(pl_module.masks)

    def on_train_end(self, trainer, pl_module) -> None:
        store = pl_module.masks
        self._refresh(store)  # the mask of the final weights
        store.end_straight_through()

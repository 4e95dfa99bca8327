"""LOBSTER: loss-based sensitivity regularization, then magnitude thresholding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.pruning.gmp import GMP
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.registry import register


def insensitivity_shrink(param: torch.Tensor, sensitivity: torch.Tensor, lmbda: float) -> None:
    """``param -= λ · param · relu(1 - S)`` in place: the parameters the loss is insensitive to
    (S < 1) decay toward zero, the more the less sensitive; S ≥ 1 leaves a parameter alone.
    ``sensitivity`` broadcasts against ``param`` (per weight for LOBSTER, per neuron for
    SeReNe)."""
    param.sub_(lmbda * param * torch.relu(1.0 - sensitivity))


@register("lobster", family="pruning")
class Lobster(GMP):
    """LOBSTER (Tartaglione et al. 2022): after every optimizer step each parameter w with loss
    gradient g = ∂L/∂w of that step shrinks by its *insensitivity* to the loss,

        w ← w - λ w relu(1 - |g|),

    the paper's w^{t+1} = w^t - η ∂L/∂w - λ w^t S̄ P(S̄) with sensitivity S = |∂L/∂w|,
    insensitivity S̄ = 1 - S and P the step function (the product S̄ P(S̄) is relu(1 - |g|));
    λ multiplies the weight directly, not the learning rate, as the authors' code applies it
    after ``SGD.step()``. The regularizer drives the weights the loss does not need toward
    zero, and a magnitude threshold then removes them. λ = 1e-4 from the authors' code
    (github.com/EIDOSLAB/LOBSTER, ``args.py``); as there, every parameter of the pruned layers
    is regularized (their ``LAYERS``: Linear, Conv2d and BatchNorm2d; the suite's pruned layers
    are Linear and Conv2d), weights and biases; their threshold zeroes biases too, here only
    weights are pruned (the suite's sparsity counts weights).

    Ours, where the source's procedure reaches no given sparsity: the authors prune whenever
    the validation loss plateaus, with the largest global threshold T on |w| whose loss stays
    within ``twt`` of the plateau's (a bisection), so the final sparsity is whatever λ, twt
    and the epochs make it. Here the threshold is the global magnitude quantile that gives
    GMP's cubic schedule (methods/pruning/gmp.py: from 25 % to 75 % of the run, removed
    weights never return), so that the run ends exactly at the board's target sparsity;
    the threshold is global as theirs (``distribution: global``; a section's ``distribution``
    overrides it, as for every pruning method); the recipe's optimizer, momentum, weight decay
    and learning-rate schedule are the board's (theirs: SGD lr 0.1 without momentum or weight
    decay, λ being the only decay, with ReduceLROnPlateau for up to 1000 epochs). Since |g| is
    far below 1 for most weights, relu(1 - |g|) is near 1 and at λ = 1e-4 the shrink works
    as a mild extra decay (at most 7.6 % over 790 steps) whose strength falls where the loss
    is sensitive.

    Training FLOPs: GMP's ``3 f_S(t)`` per example; the regularizer is elementwise.

    Source: Tartaglione, Bragagnolo, Odierna, Fiandrotti, Grangetto 2022, "Loss-Based
    Sensitivity Regularization: Towards Deep Sparse Neural Networks", Neural Networks 146,
    Sec. 3 (the update with S̄ P(S̄)); arXiv:2011.09905; the authors' code for the defaults.
    """

    @dataclass
    class Params(GMP.Params):
        lmbda: float = 1e-4
        distribution: Literal["global", "erk", "uniform"] = "global"

        def validate(self) -> None:
            if not 0.0 < self.lmbda < 1.0:
                raise ValueError(
                    f"lmbda must be in (0, 1) (the shrink per step is λ·w), got {self.lmbda}"
                )
            if self.init != "default":
                check_dense_start(self.init, "LOBSTER and SeReNe start dense")
            super().validate()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with torch.no_grad():
            for param in self.regularized(pl_module):
                if param.grad is not None:
                    insensitivity_shrink(param, param.grad.abs(), self.params.lmbda)

    @staticmethod
    def regularized(pl_module) -> list[torch.Tensor]:
        """The weights and biases of the pruned layers."""
        out = []
        for module in pl_module.masks.layers.values():
            out.extend(p for p in (module.weight, getattr(module, "bias", None)) if p is not None)
        return out

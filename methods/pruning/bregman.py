"""Sparsity by the optimizer: linearized Bregman iterations (LinBreg) and their Adam variant
(AdaBreg), with a regularisation strength λ adapted to reach a target sparsity. The shared
optimizer and method base of methods/pruning/linbreg.py and adabreg.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sparsebench.suite.pillars.classification.nm import sr_ste_forward

from .base import MaskMethod


def shrink(v: torch.Tensor, lam: float) -> torch.Tensor:
    """Soft thresholding, the proximal map of λ‖·‖₁: sign(v) · max(|v| − λ, 0)."""
    return torch.sign(v) * torch.clamp(v.abs() - lam, min=0.0)


class BregmanOptimizer(torch.optim.Optimizer):
    """Linearized Bregman iterations on the subgradient variable v of each parameter:

        v ← v − τ ĝ,    θ ← prox_{δJ}(δ v) = δ · shrink(v, λ)    (J = λ‖·‖₁)

    with ĝ the stochastic gradient (LinBreg; with momentum β: a buffer m ← β m + (1 − β) τ g
    and v ← v − m), or Adam's step on v (AdaBreg: v ← v − τ m̂ / (√ŝ + ε), m the first
    moment without bias correction and ŝ the bias-corrected second, as the authors' code).
    A group with ``lam`` 0 is plain gradient descent on θ = δ v (the biases); ``regularised``
    marks the groups whose λ :meth:`set_lambda` moves. v starts at a
    subgradient of J_δ = J + ‖·‖²/(2δ) at θ₀: v₀ = θ₀/δ + λ sign(θ₀).

    Source: Bungert, Roith, Tenbrinck & Burger 2022, "A Bregman Learning Framework for Sparse
    Neural Networks" (JMLR), Algorithm 1 (LinBreg), the momentum and Adam variants (Sec. 3);
    the authors' code (github.com/TimRoith/BregmanLearning, ``optimizers.py``).
    """

    def __init__(self, groups: list[dict[str, Any]], lr: float, delta: float, adam: bool,
                 momentum: float = 0.0, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:  # fmt: skip
        defaults = dict(lr=lr, lam=0.0, regularised=False, delta=delta, adam=adam,
                        momentum=momentum, betas=betas, eps=eps)  # fmt: skip
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch's contract
        loss = None
        if closure is not None:  # the forward and backward (Lightning passes them this way)
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, lam, delta = group["lr"], group["lam"], group["delta"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if "v" not in state:
                    state["v"] = p / delta + lam * torch.sign(p)
                    state["step"] = 0
                v, g = state["v"], p.grad
                state["step"] += 1
                if group["adam"]:
                    b1, b2 = group["betas"]
                    m = state.setdefault("m", torch.zeros_like(p))
                    s = state.setdefault("s", torch.zeros_like(p))
                    m.mul_(b1).add_(g, alpha=1 - b1)
                    s.mul_(b2).addcmul_(g, g, value=1 - b2)
                    denom = s.sqrt() / math.sqrt(1 - b2 ** state["step"]) + group["eps"]
                    v.addcdiv_(m, denom, value=-lr)
                elif group["momentum"] > 0:
                    buf = state.setdefault("buf", torch.zeros_like(p))
                    buf.mul_(group["momentum"]).add_(g, alpha=(1 - group["momentum"]) * lr)
                    v.sub_(buf)
                else:
                    v.add_(g, alpha=-lr)
                p.copy_(delta * shrink(v, lam))
        return loss

    def set_lambda(self, lam: float) -> None:
        """λ of the regularised groups; v is kept, so the next step's shrink applies the new λ
        to every weight (a larger λ also removes active weights whose |v| falls below it)."""
        for group in self.param_groups:
            if group["regularised"]:
                group["lam"] = lam


class BregmanMethod(MaskMethod):
    """What LinBreg and AdaBreg share: a sparse initialisation, the optimizer, the mask that
    follows the weights' support at every step, and the adaptive λ.

    * **Sparse init** (the authors' ``sparse_init``): each prunable layer keeps a random
      ``init_density`` of its initial weights, scaled by 1/√init_density so that a layer's
      output keeps its scale (ours: the authors draw a normal init scaled by 0.7/√sparse_init).
    * **The mask** is the support θ ≠ 0 of each prunable weight after every step. The layers
      are straight-through (``MaskStore.set_straight_through``): the forward uses W ⊙ M = W and
      the dense gradient reaches every weight, which the iterations need (a zero weight enters
      the support once its v passes λ). Training FLOPs count that: ``2 f_S + f_D``.
    * **Adaptive λ** (the seed's regularisation from the sparsity gap; the rule is ours):
      after every optimizer step λ ← λ·(1 + γ) while the prunable weights' density is above
      the target and λ / (1 + γ) while below, γ = ``lambda_rate``, v kept. The authors' λ
      scheduler (``lamda_scheduler``: λ ± 0.05 per epoch, then v reset to the subgradient at
      the current θ) did not reach the target here: measured on LeNet-300-100 over 10 epochs
      it ended at 76 % sparsity for targets 90 % and 98 % alike, because the reset keeps
      every active weight active, so λ can only slow the support's growth, never shrink it;
      with v kept, a larger λ removes the weights whose |v| it passes. ``adaptive: false``
      keeps λ fixed (the paper's experiments). The record's ``actual_sparsity`` is what was
      reached, next to the cell's target.
    * Regularised: the prunable layers' weights; biases and norms are plain descent on
      θ = δ v (the authors' second group). The recipe's learning rate and schedule are τ's;
      its weight decay does not apply (the authors use none with these optimizers); ``lr``
      sets τ apart from the recipe's (null: the recipe's; AdaBreg's default is Adam's 1e-3).
    """

    adam = False

    @dataclass
    class Params:
        lam: float = 1e-3
        delta: float = 1.0
        momentum: float = 0.0
        init_density: float = 0.01
        adaptive: bool = True
        lambda_rate: float = 0.05
        lr: float | None = None

        def validate(self) -> None:
            if self.lam <= 0:
                raise ValueError(f"lam (λ) must be > 0, got {self.lam}")
            if self.delta <= 0:
                raise ValueError(f"delta (δ) must be > 0, got {self.delta}")
            if not 0 <= self.momentum < 1:
                raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")
            if not 0 < self.init_density <= 1:
                raise ValueError(f"init_density must be in (0, 1], got {self.init_density}")
            if self.lambda_rate <= 0:
                raise ValueError(f"lambda_rate must be > 0, got {self.lambda_rate}")
            if self.lr is not None and self.lr <= 0:
                raise ValueError(f"lr must be > 0 (or null: the recipe's), got {self.lr}")

    straight_through = True

    def __init__(self, params: Any, sparsity: float, ctx) -> None:
        super().__init__(params, sparsity, ctx)
        self.optimizer: BregmanOptimizer | None = None
        self.lam = params.lam

    def make_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        store = module.masks
        weights = [store.weight(n) for n in store.layers]
        ids = {id(w) for w in weights}
        rest = [p for p in module.parameters() if id(p) not in ids]
        p = self.params
        self.optimizer = BregmanOptimizer(
            [{"params": weights, "lam": self.lam, "regularised": True}, {"params": rest}],
            lr=module.recipe["lr"] if p.lr is None else p.lr, delta=p.delta, adam=self.adam,
            momentum=p.momentum,
        )  # fmt: skip
        return self.optimizer

    def _support(self, store) -> None:
        for name in store.layers:
            store.set_mask(name, store.weight(name).detach() != 0)

    @torch.no_grad()
    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        d = self.params.init_density
        for name in store.layers:
            w = store.weight(name)
            keep = torch.rand(w.shape, generator=self.ctx.generator) < d
            w.mul_(keep.to(w.device)).div_(math.sqrt(d))
            store.set_straight_through(name, sr_ste_forward(0.0))
        self._support(store)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        store = pl_module.masks
        self._support(store)
        if self.params.adaptive and self.optimizer is not None:
            above = 1.0 - store.sparsity() > self.density
            rate = 1.0 + self.params.lambda_rate
            self.lam = self.lam * rate if above else self.lam / rate
            self.optimizer.set_lambda(self.lam)
        self.ctx.flops.add(
            self.ctx.flops.dense_grad_extra(store.densities(), int(batch[0].shape[0]))
        )

    def on_train_end(self, trainer, pl_module) -> None:
        store = pl_module.masks
        self._support(store)
        store.end_straight_through()

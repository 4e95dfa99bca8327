"""HORST: an adaptive step composed with a hyperbolic mirror map (an ℓ1 bias), then magnitude
pruning to the target on GMP's schedule."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
from torch import nn

from sparsebench.methods.pruning.gmp import GMP
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.registry import register


class HorstOptimizer(torch.optim.Optimizer):
    """Adam's step taken in the dual space of the hypentropy mirror map.

    For a weight w of a group with a mirror scale ``beta`` (β > 0), the mirror map is
    φ_β(w) = w arcsinh(w/β) - √(w² + β²) (Ghai, Hazan & Singer 2020), with ∇φ_β(w) =
    arcsinh(w/β) and its inverse θ ↦ β sinh(θ). One step composes the two geometries:

        d = m̂ / (√v̂ + ε)                 Adam's direction (its ℓ∞ bias)
        w ← w (1 - η λ_wd)                AdamW's decoupled weight decay
        θ = arcsinh(w / β);  θ ← θ - (η / s) d;  w ← β sinh(θ)     the mirror step

    To first order w moves by -(η/s) √(w² + β²) d: a weight much larger than β moves in
    proportion to its size (multiplicative, exponentiated-gradient-like: the ℓ1 bias, small
    weights stay small) and one much smaller than β like Adam with step η β / s. ``s`` (the
    group's ``scale``) is √(w_rms² + β²) of the group at the start, so a weight of the initial
    scale takes Adam's step. Groups without ``beta`` take AdamW's step. θ is recomputed from w
    at every step (the map is a bijection), so masking w to zero keeps θ = 0 exactly.
    """

    def __init__(self, groups: list[dict[str, Any]], lr: float, betas=(0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 0.0) -> None:  # fmt: skip
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, beta=None,
                        scale=1.0)  # fmt: skip
        super().__init__(groups, defaults)

    @torch.no_grad()
    def step(self, closure=None):  # noqa: D102 - torch's contract
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            lr, (b1, b2), eps = group["lr"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)
                state["step"] += 1
                t = state["step"]
                m, v = state["exp_avg"], state["exp_avg_sq"]
                m.mul_(b1).add_(p.grad, alpha=1 - b1)
                v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                d = (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)
                if group["weight_decay"]:
                    p.mul_(1 - lr * group["weight_decay"])
                beta = group["beta"]
                if beta is None:
                    p.sub_(lr * d)
                else:
                    theta = torch.asinh(p / beta) - (lr / group["scale"]) * d
                    p.copy_(beta * torch.sinh(theta))
        return loss


@register("horst", family="pruning")
class Horst(GMP):
    """HORST: training with :class:`HorstOptimizer` (Adam's adaptive step composed with the
    hypentropy mirror map on the pruned layers' weights), pruned by magnitude to the target on
    GMP's cubic schedule; its board partner is GMP trained with AdamW (recipe ``optimizer:
    adamw``) at the same final sparsity.

    From the seed text (only its abstract is public): optimizer steps composed as operators;
    the ℓ∞ (stability) bias of adaptive methods kept; an ℓ1 bias added through a hyperbolic
    mirror map; compared with AdamW at every sparsity on transformers. Everything else is ours:
    the mirror map is hypentropy (the hyperbolic one of the literature: Ghai et al. 2020; Wu &
    Rebeschini 2020 on its sparsity bias); the composition order (Adam's direction, then the
    mirror step); the mirror scale β = ``beta_rel`` (0.1) × each layer's initial RMS weight, and
    the step normalised so a weight at the initial scale moves as under Adam (see the
    optimizer); AdamW's moments (0.9, 0.999), ε 1e-8 and decoupled weight decay from the
    recipe; every other parameter (biases, norms, a ViT's class token and position
    embeddings) takes plain AdamW steps, as under its partner; the learning rate and
    its schedule are the recipe's; reaching the target by GMP's magnitude schedule (25-75 % of
    the run, global ranking), as the optimizer alone reaches no given sparsity.

    Training FLOPs: GMP's ``3 f_S(t)`` per example (the mirror step is elementwise).

    Source: seed paper "Composing Optimizer Geometries for Sparse Transformer Training"
    (2026, arXiv 2605.21104, abstract); hypentropy: Ghai, Hazan & Singer 2020, "Exponentiated
    Gradient Meets Gradient Descent" (ALT), Sec. 3.
    """

    @dataclass
    class Params(GMP.Params):
        beta_rel: float = 0.1
        distribution: Literal["global", "erk", "uniform"] = "global"

        def validate(self) -> None:
            if not 0.0 < self.beta_rel <= 10.0:
                raise ValueError(
                    f"beta_rel must be in (0, 10] (β relative to a layer's initial RMS weight; "
                    f"a large β approaches AdamW), got {self.beta_rel}"
                )
            if self.init != "default":
                check_dense_start(self.init, "HORST starts dense")
            super().validate()

    @classmethod
    def check_recipe(cls, params: Params, recipe: dict[str, Any]) -> None:
        name = recipe.get("optimizer", "sgd")
        if name != "adamw":
            raise ValueError(
                f"HORST takes AdamW's step with its decoupled weight decay at the recipe's lr "
                f"({recipe['lr']}); this recipe's optimizer is {name}, so its AdamW partner "
                "(the same recipe without HORST) would not be AdamW; give the task "
                "optimizer: adamw (lr: 0.001), or leave horst out of its methods"
            )

    def make_optimizer(self, module: nn.Module) -> torch.optim.Optimizer:
        r = module.recipe
        store = module.masks
        groups: list[dict[str, Any]] = []
        ids = set()
        for name in store.layers:
            w = store.weight(name)
            ids.add(id(w))
            rms = max(float(w.detach().pow(2).mean().sqrt()), 1e-8)  # an all-zero layer
            beta = self.params.beta_rel * rms
            groups.append({"params": [w], "beta": beta, "scale": math.sqrt(rms**2 + beta**2)})
        groups.append({"params": [p for p in module.parameters() if id(p) not in ids]})
        return HorstOptimizer(groups, lr=r["lr"], weight_decay=r.get("weight_decay", 0.0))

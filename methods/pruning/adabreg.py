"""AdaBreg: linearized Bregman iterations with Adam's step (Bungert et al. 2022)."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.suite.registry import register

from .bregman import BregmanMethod


@register("adabreg", family="pruning")
class AdaBreg(BregmanMethod):
    """AdaBreg: LinBreg with Adam's moments on the subgradient update, v ← v − τ m / (√ŝ + ε)
    (β = (0.9, 0.999), ε = 1e-8; m without bias correction, ŝ with it, as the authors' code),
    θ = δ · shrink(v, λ) (see :class:`.bregman.BregmanOptimizer` and
    :class:`.bregman.BregmanMethod`).

    Source: Bungert, Roith, Tenbrinck & Burger 2022, "A Bregman Learning Framework for Sparse Neural
    Networks" (arXiv:2105.04319, JMLR), Sec. 3 (AdaBreg); the authors' code (``AdamBreg`` in
    ``optimizers.py``). Defaults as LinBreg's (λ = 1e-3, δ = 1, sparse init 1 %) and the code's Adam
    rate, lr = 1e-3 (not the recipe's SGD rate; the recipe's schedule still applies). Ours: the
    adaptive λ and the init scaling, as for LinBreg.
    """

    adam = True

    @dataclass
    class Params(BregmanMethod.Params):
        lr: float | None = 1e-3  # Adam's rate (the authors' AdamBreg default), not the recipe's

"""LinBreg: sparse training by linearized Bregman iterations (Bungert et al. 2022)."""

from __future__ import annotations

from sparsebench.suite.registry import register

from .bregman import BregmanMethod


@register("linbreg", family="pruning")
class LinBreg(BregmanMethod):
    """LinBreg: training starts from a sparse network and the optimizer adds weights as they
    become relevant (inverse scale space): stochastic gradient steps on the subgradient v of
    the elastic-net functional J_δ = λ‖θ‖₁ + ‖θ‖²/(2δ), θ = δ · shrink(v, λ) (see
    :class:`.bregman.BregmanOptimizer` and :class:`.bregman.BregmanMethod` for the sparse
    init, the mask and the adaptive λ).

    Source: Bungert, Roith, Tenbrinck & Burger 2022, "A Bregman Learning Framework for Sparse
    Neural Networks" (JMLR), Algorithm 1; defaults from the authors' MLP notebook
    (github.com/TimRoith/BregmanLearning): λ = 1e-3, δ = 1, momentum 0, sparse init 1 %; the
    learning rate is the recipe's (theirs 0.1 with ReduceLROnPlateau). Ours: the adaptive λ,
    on by default (the seed's target-sparsity regularisation), and its rule, and the init
    scaling (:class:`.bregman.BregmanMethod`).
    """

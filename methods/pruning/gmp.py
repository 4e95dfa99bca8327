"""Gradual magnitude pruning (GMP)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.registry import register


@register("gmp", family="pruning")
class GMP(MaskMethod):
    """Gradual magnitude pruning with the cubic schedule of Zhu & Gupta 2017, Eq. 1:

        s_t = s_f + (s_i - s_f) * (1 - (t - t_0) / (n Δt))^3,  t in {t_0, t_0 + Δt, ..., t_0 + nΔt}

    Every ``pruning_frequency`` (Δt) steps between ``t_0 = begin_fraction * total_steps`` and
    ``t_0 + nΔt <= end_fraction * total_steps``, each layer keeps its largest-|w| weights so
    that its sparsity is s_t (layer-wise pruning as in the paper, every layer to the same s_t,
    or the ERK share of it; ``distribution: global`` ranks all layers jointly instead), and
    removed weights never come back; the last pruning step reaches
    the target s_f exactly, then training continues with the mask fixed.

    Defaults: s_i = 0, Δt = 100 steps (the paper recommends 100 to 1000), pruning from 25% to
    75% of training (approximately the window used for gradual pruning by Gale et al. 2019,
    "The State of Sparsity in Deep Neural Networks", scaled to the run), uniform layer sparsity.

    Training FLOPs: ``3 f_S(t)`` per example at step t, the sparse forward FLOPs at that step's
    layer densities (``3 f_D (1 - s_t)`` for uniform sparsity; Evci et al. 2020, Appendix H).
    A window shorter than one pruning interval is refused with a ValueError.

    Source: Zhu & Gupta 2017, "To prune, or not to prune: exploring the efficacy of pruning for
    model compression", arXiv:1710.01878, Sec. 3, Eq. 1.
    """

    @dataclass
    class Params:
        initial_sparsity: float = 0.0
        pruning_frequency: int = 100
        begin_fraction: float = 0.25
        end_fraction: float = 0.75
        distribution: Literal["uniform", "erk", "global"] = "uniform"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if self.pruning_frequency < 1:
                raise ValueError(f"pruning_frequency must be >= 1, got {self.pruning_frequency}")
            if not 0.0 <= self.begin_fraction < self.end_fraction <= 1.0:
                raise ValueError(
                    "need 0 <= begin_fraction < end_fraction <= 1, got "
                    f"{self.begin_fraction}, {self.end_fraction}"
                )
            if not 0.0 <= self.initial_sparsity < 1.0:
                raise ValueError(f"initial_sparsity must be in [0, 1), got {self.initial_sparsity}")
            check_dense_start(
                self.init, "GMP trains dense until its first pruning step, after fit start"
            )

    @property
    def t0(self) -> int:
        return int(self.params.begin_fraction * self.ctx.total_steps)

    @property
    def n_prunes(self) -> int:
        """n of Eq. 1: pruning steps after t_0 that fit before end_fraction (at least 1)."""
        span = int(self.params.end_fraction * self.ctx.total_steps) - self.t0
        return max(1, span // self.params.pruning_frequency)

    def sparsity_at(self, step: int) -> float | None:
        """s_t of Eq. 1 at a pruning step, ``None`` if ``step`` is not a pruning step."""
        dt = self.params.pruning_frequency
        if step < self.t0 or (step - self.t0) % dt or step > self.t0 + self.n_prunes * dt:
            return None
        s_i, s_f = self.params.initial_sparsity, self.sparsity
        progress = (step - self.t0) / (self.n_prunes * dt)
        return s_f + (s_i - s_f) * (1.0 - progress) ** 3

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        span = int(params.end_fraction * total_steps) - int(params.begin_fraction * total_steps)
        if span < params.pruning_frequency:
            raise ValueError(
                f"gmp: the pruning window ({params.begin_fraction}-{params.end_fraction} of "
                f"{total_steps} steps = {span} steps) is shorter than pruning_frequency = "
                f"{params.pruning_frequency}, so the target sparsity would never be reached; "
                f"lower pruning_frequency or train longer"
            )

    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        s_t = self.sparsity_at(trainer.global_step)
        if s_t is None or s_t <= 0.0:
            return
        store = pl_module.masks
        # Removed weights never come back: they rank below every active one.
        scores = {}
        for name in store.layers:
            w, mask = store.weight(name).detach(), store.masks[name]
            scores[name] = w.abs() if mask is None else torch.where(mask, w.abs(), -math.inf)
        store.allocate(1.0 - s_t, scores, self.params.distribution, self.params.dense_first_layer)

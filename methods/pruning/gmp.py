"""Gradual magnitude pruning (GMP)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.pillars.classification.masks import check_allocation
from sparsebench.suite.registry import register

#: Fewest pruning steps (steps of the schedule that raise the sparsity) a GMP run may have.
#: Ours: Zhu & Gupta give no minimum, but their recommended Δt of 100-1000 steps is a small
#: fraction of their pruning windows, so their schedules prune many times. The first step of
#: the cubic schedule jumps to s_f (1 - (1 - 1/n)^3) of the target: 0.875 s_f for n = 2
#: (near one-shot), 0.271 s_f for n = 10, and every later step is smaller; below 10 steps the
#: run no longer tests *gradual* pruning.
MIN_PRUNING_STEPS = 10


@register("gmp", family="pruning")
class GMP(MaskMethod):
    """Gradual magnitude pruning with the cubic schedule of Zhu & Gupta 2017, Eq. 1:

        s_t = s_f + (s_i - s_f) * (1 - (t - t_0) / (n Δt))^3,  t in {t_0, t_0 + Δt, ..., t_0 + nΔt}

    At every pruning step between ``t_0 = begin_fraction * total_steps`` and
    ``t_0 + nΔt <= t_end = end_fraction * total_steps``, each layer keeps its largest-|w|
    weights so that its sparsity is s_t (layer-wise pruning as in the paper, every layer to the
    same s_t, or the ERK share of it; ``distribution: global`` ranks all layers jointly
    instead), and removed weights never come back; the last pruning step reaches the target
    s_f exactly, then training continues with the mask fixed.

    Δt, two ways:

    * budget-scaled (the default, ours): ``pruning_frequency: null`` and n = ``pruning_steps``
      (null: :data:`MIN_PRUNING_STEPS` = 10), Δt = floor((t_end - t_0) / n), so a short run
      gets as many pruning steps as a long one;
    * fixed, as in the paper: ``pruning_frequency: Δt`` steps (the paper recommends 100 to
      1000) and n = floor((t_end - t_0) / Δt).

    Either way a schedule with fewer than :data:`MIN_PRUNING_STEPS` pruning steps (n, plus t_0
    itself when s_i > 0) is refused with a ValueError at spec validation: on a 550-step run
    Δt = 100 prunes only twice (0.875 s_f, then s_f), near one-shot.

    Other defaults: s_i = 0, pruning from 25% to 75% of training (approximately the window used
    for gradual pruning by Gale et al. 2019, "The State of Sparsity in Deep Neural Networks",
    scaled to the run), uniform layer sparsity.

    Training FLOPs: ``3 f_S(t)`` per example at step t, the sparse forward FLOPs at that step's
    layer densities (``3 f_D (1 - s_t)`` for uniform sparsity; Evci et al. 2020, Appendix H).

    Source: Zhu & Gupta 2017, "To prune, or not to prune: exploring the efficacy of pruning for
    model compression", arXiv:1710.01878, Sec. 3, Eq. 1.
    """

    @dataclass
    class Params:
        initial_sparsity: float = 0.0
        pruning_frequency: int | None = None
        pruning_steps: int | None = None
        begin_fraction: float = 0.25
        end_fraction: float = 0.75
        distribution: Literal["uniform", "erk", "global"] = "uniform"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if self.pruning_frequency is not None and self.pruning_frequency < 1:
                raise ValueError(f"pruning_frequency must be >= 1, got {self.pruning_frequency}")
            check_allocation(self.distribution, self.dense_first_layer)
            if self.pruning_steps is not None:
                if self.pruning_frequency is not None:
                    raise ValueError(
                        f"set pruning_frequency (fixed Δt, got {self.pruning_frequency}) or "
                        f"pruning_steps (Δt scaled to the run, got {self.pruning_steps}), not both"
                    )
                if self.pruning_steps < MIN_PRUNING_STEPS:
                    raise ValueError(
                        f"pruning_steps must be >= MIN_PRUNING_STEPS = {MIN_PRUNING_STEPS} "
                        f"(methods/pruning/gmp.py), got {self.pruning_steps}"
                    )
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

    @staticmethod
    def schedule(params: Params, total_steps: int) -> tuple[int, int, int, int]:
        """(t_0, t_end, Δt, n) of Eq. 1 for a run of ``total_steps``. n is 0 if the window is
        shorter than a fixed Δt; a scaled Δt is at least 1 step, so a window of fewer steps
        than ``pruning_steps`` fits only that many."""
        t0 = int(params.begin_fraction * total_steps)
        t_end = int(params.end_fraction * total_steps)
        span = t_end - t0
        if params.pruning_frequency is None:
            n = min(params.pruning_steps or MIN_PRUNING_STEPS, span)
            return t0, t_end, max(1, span // max(n, 1)), n
        return t0, t_end, params.pruning_frequency, span // params.pruning_frequency

    @staticmethod
    def pruning_step_count(params: Params, n: int) -> int:
        """Steps that raise the sparsity: t_0 + Δt, ..., t_0 + nΔt, and t_0 when s_i > 0."""
        return n + (params.initial_sparsity > 0.0)

    @property
    def t0(self) -> int:
        return self.schedule(self.params, self.ctx.total_steps)[0]

    @property
    def dt(self) -> int:
        return self.schedule(self.params, self.ctx.total_steps)[2]

    @property
    def n_prunes(self) -> int:
        """n of Eq. 1: pruning intervals after t_0."""
        return self.schedule(self.params, self.ctx.total_steps)[3]

    def sparsity_at(self, step: int) -> float | None:
        """s_t of Eq. 1 at a pruning step, ``None`` if ``step`` is not a pruning step."""
        t0, _, dt, n = self.schedule(self.params, self.ctx.total_steps)
        if n < 1 or step < t0 or (step - t0) % dt or step > t0 + n * dt:
            return None
        s_i, s_f = self.params.initial_sparsity, self.sparsity
        progress = (step - t0) / (n * dt)
        return s_f + (s_i - s_f) * (1.0 - progress) ** 3

    @classmethod
    def check_sparsity(cls, params: Params, sparsity: float) -> None:
        if sparsity <= 0.0:
            raise ValueError(
                f"a target sparsity of {sparsity} leaves nothing to prune; give this method "
                "targets above 0 (the unpruned network is the dense method)"
            )
        if params.initial_sparsity >= sparsity:
            raise ValueError(
                f"initial_sparsity {params.initial_sparsity} must be below the target "
                f"sparsity {sparsity}: the schedule only prunes"
            )

    @classmethod
    def steps_needed(cls, params: Params, limit: int = 10**7) -> int | None:
        """The fewest training steps whose schedule has MIN_PRUNING_STEPS pruning steps with
        these parameters (None beyond ``limit``): searched from a lower bound, since the
        window's ends are floored."""
        width = params.end_fraction - params.begin_fraction
        if width <= 0:
            return None
        dt = params.pruning_frequency or 1
        # at least (MIN - 1) Δt window steps (one fewer with the step at t_0), and a window of
        # int(e T) - int(b T) steps is below (e - b) T + 1
        total = max(1, int(((MIN_PRUNING_STEPS - 1) * dt - 1) / width))
        while total <= limit:
            _, _, _, n = cls.schedule(params, total)
            if cls.pruning_step_count(params, n) >= MIN_PRUNING_STEPS:
                return total
            total += 1
        return None

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        t0, t_end, dt, n = cls.schedule(params, total_steps)
        count = cls.pruning_step_count(params, n)
        if count < MIN_PRUNING_STEPS:
            span = t_end - t0
            needed = cls.steps_needed(params)
            longer = (
                f"train at least {needed} steps (the recipe has {total_steps})"
                if needed
                else "train longer"
            )
            if span >= MIN_PRUNING_STEPS:
                fix = (
                    f"set pruning_frequency: null (Δt scaled to {MIN_PRUNING_STEPS} pruning "
                    f"steps) or a pruning_frequency <= {span // MIN_PRUNING_STEPS}, or {longer}"
                )
            elif total_steps >= MIN_PRUNING_STEPS:
                fix = f"widen the window (begin_fraction, end_fraction) or {longer} at this window"
            else:
                fix = f"{longer} at this window"
            kind = "fixed" if params.pruning_frequency is not None else "scaled"
            raise ValueError(
                f"{cls.method_name}: {count} pruning steps, fewer than MIN_PRUNING_STEPS = "
                f"{MIN_PRUNING_STEPS} (methods/pruning/gmp.py): {total_steps} steps, window "
                f"t_0 = {t0} to t_end = {t_end} ({params.begin_fraction}-"
                f"{params.end_fraction} of the run, {span} steps), {kind} "
                f"pruning_frequency Δt = {dt}, n = {n}; a schedule this coarse is near "
                f"one-shot pruning; {fix}"
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

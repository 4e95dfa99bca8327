"""Progressive magnitude pruning within one training cycle."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparsebench.methods.pruning.gmp import GMP
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.registry import register


@register("progressive_magnitude", family="pruning")
class ProgressiveMagnitude(GMP):
    """Progressive magnitude pruning: the sparsity rises linearly within the one training run
    (one learning-rate cycle), and at every pruning step the mask keeps the largest-|w| of the
    weights still active (removed weights never come back), so that the network ends at the
    target sparsity without a separate prune-retrain loop.

        s_t = s_i + (s_f - s_i) (t - t_0) / (n Δt),  t in {t_0 + Δt, ..., t_0 + nΔt}

    From the seed text (only its abstract is public): one training cycle, a linear schedule,
    masks from the magnitudes of the active weights. Ours, where the text is silent: the window
    from the start of training (t_0 = 0) to ``end_fraction`` = 0.75 of it, leaving at least the
    last quarter at the final mask to recover (as GMP's window does; the last pruning step is
    t_0 + nΔt ≤ t_end, earlier when Δt rounds down); n = ``pruning_steps`` = 20 steps scaled
    to the run (Δt = ⌊(t_end - t_0) / n⌋; a fixed ``pruning_frequency`` needs
    ``pruning_steps: null``), at
    least GMP's MIN_PRUNING_STEPS = 10; one global magnitude ranking (``distribution:
    global``; ``erk`` / ``uniform`` prune each layer to its share). Everything else, budget and
    refusals, is GMP's machinery (methods/pruning/gmp.py) with the cubic schedule replaced by
    the linear one.

    Training FLOPs: ``3 f_S(t)`` per example at step t, the sparse forward at that step's
    densities (dense until the first pruning step).

    Source: seed paper "Finding Sparse Subnetworks in One Training Cycle" (2026, abstract:
    progressive magnitude pruning with a linear sparsity schedule inside one training cycle).
    """

    @dataclass
    class Params(GMP.Params):
        pruning_steps: int | None = 20
        begin_fraction: float = 0.0
        end_fraction: float = 0.75
        distribution: Literal["global", "erk", "uniform"] = "global"

        def validate(self) -> None:
            if self.init != "default":  # GMP's message names GMP
                check_dense_start(self.init, "progressive magnitude pruning starts dense")
            super().validate()

    def sparsity_at(self, step: int) -> float | None:
        """s_t of the linear schedule at a pruning step, ``None`` at any other step."""
        t0, _, dt, n = self.schedule(self.params, self.ctx.total_steps)
        if n < 1 or step < t0 or (step - t0) % dt or step > t0 + n * dt:
            return None
        s_i, s_f = self.params.initial_sparsity, self.sparsity
        return s_i + (s_f - s_i) * (step - t0) / (n * dt)

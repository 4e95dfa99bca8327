"""MEST: Memory-Economic Sparse Training with Elastic Mutation and a Soft Memory Bound."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register


@register("mest", family="dst")
class MEST(Static):
    """Memory-Economic Sparse Training, MEST+EM and MEST+EM&S (Yuan et al. 2021).

    Each sparse layer keeps ``n`` active weights, ``n`` set by the spec's density (uniform
    per layer, first layer dense, by default). On a mutation iteration ``t`` (every ΔT
    iterations from iteration 0 while ``t < T_end``), each layer mutates ``k = floor(p(t) * n)``
    connections:

    * importance of an active weight: ``S = |w| + λ |∂L/∂w|`` (λ = ``grad_coef``), the gradient
      being that of iteration ``t``'s batch;
    * growth: ``k`` positions drawn uniformly at random, no gradient needed (this is what makes
      MEST memory-economic). Grown weights start at zero with zeroed optimizer state;
    * hard bound (MEST+EM, ``soft_bound=False``): drop the ``k`` active weights with the lowest
      ``S``, then grow ``k`` among the inactive positions, just-dropped ones included (as in the
      authors' code; one that is regrown restarts at zero). The layer holds exactly ``n``
      weights at all times;
    * soft bound (MEST+EM&S, default): grow the ``k`` first. The layer then holds ``n + k``
      weights (the bound is exceeded) for ``w = round(soft_window * ΔT)`` iterations, and at
      iteration ``t + w`` the ``k`` active weights with the lowest ``S``, the grown ones
      competing, are dropped. The update ends there with exactly ``n`` weights. With the
      default ``soft_window = 1`` this prune falls on the next mutation iteration and precedes
      its growth, which is the authors' code (prune to the target sparsity, then grow to the
      "upper bound"); the layer holds ``n`` weights only between that prune and growth, so it
      trains at ``(1 + p) n`` until the last prune at or after ``T_end``. Set ``soft_window < 1``
      for exact-density gaps, or ``soft_bound=False`` to train at the spec's density throughout.

    Elastic mutation: ``p(t) = mutation_rate`` for ``t < decay_fraction * T``, then
    ``mutation_rate * mutation_decay``, and no mutation from ``T_end = end_fraction * T`` on.

    Defaults, from the authors' code (boone891214/MEST: README and scripts/resnet32, ResNet-32 on
    CIFAR-10, 160 epochs): ΔT = 5 epochs = 1/32 of training (``update_fraction``); the
    mutation ratio is 2 % then 1 % of all weights of a 90 %-sparse layer, i.e. 20 % then 10 % of
    its active weights (``mutation_rate`` 0.2, ``mutation_decay`` 0.5; the 95 % scripts give the
    same relative rates), decaying at epoch 90 = 0.5625 of training and stopping at epoch 120 =
    0.75; EM&S uses the README's bounds (grow-to 88 %/89 %, same rates as EM; its scripts use
    85 %/87.5 %); growth initialisation "zero"; uniform sparsity per layer with the first conv
    layer left dense (the code's profiles).

    Choices of ours, and departures (the paper's body was not available to us, only its
    abstract and the authors' code, so no section or equation numbers are cited and the
    paper's own λ is unconfirmed):

    * λ = 0.5. The paper's score uses λ|∇w|, but the released MEST code defaults ``--sp-lmd`` to
      0, no released script sets it, and it scores at the start of an epoch right after
      ``optimizer.zero_grad()``, so its gradient term is zero there. We take the gradient of
      the update iteration's batch (captured before the optimizer step) and λ = 0.5, the default
      of the same group's follow-up code with this criterion (neu-spiral/SparCL,
      ``--sp-lmd 0.5``). ``grad_coef=0`` gives the released code's magnitude-only criterion.
    * ΔT and the stage boundaries are fractions of the run (ΔT = max(1, round(update_fraction
      * T)) iterations), so they stay proportionate on runs of any length; the code counts epochs.
    * The mutation ratio is relative to each layer's active weights, so it means the same at
      every sparsity. The code counts sparsity points, so 2 % would double a 98 %-sparse layer.
    * Updates happen in ``on_before_optimizer_step`` of the mutation iteration, and that
      iteration's optimizer step still runs, with the gradient zeroed at dropped and grown
      positions (so grown weights leave it at zero). The code updates between epochs.
    * Initial mask: the largest-magnitude ``n`` weights of each layer's random initialisation,
      as the code's ``--sp-prune-before-retrain``. The code also leaves the classifier dense,
      which ``dense_first_layer`` cannot express: here the last layer is sparse like the others.
    * ``dense_first_layer`` defaults to false. The code keeps the first conv of ResNet-32
      dense, under 0.2 % of its weights; on LeNet-300-100 the first layer holds 88 % of the
      weights, so a dense first layer would train MEST at about 9x the density of every other
      method of the board. ``dense_first_layer: true`` gives the code's profile.
    * The score and the top-k are computed per layer, O(numel), not counted as FLOPs.

    Training FLOPs: ``3 f_S`` per example at the masks of each iteration, nothing else. The
    score needs the gradient only at active positions, which the sparse backward computes
    anyway: no dense gradient, so nothing like RigL's ``f_D - f_S`` term. The soft bound's
    extra weights are counted by ``FlopsCallback``, which reads the masks at each batch start:
    the ``w`` iterations after a growth cost ``3 f_S`` at ``n + k`` weights per layer.

    Raises ValueError (``check_budget``) when a run is too short for the schedule: no mutation
    iteration in one of the two stages, or (soft bound) a growth whose prune would fall after
    the last iteration, which would leave the final model above the spec's density.

    Source: Yuan, Ma, Niu, Li, Kong, Liu, Gong, Zhan, He, Jin, Wang, Qin, Ren, Wang, Liu, Lin
    2021, "MEST: Accurate and Fast Memory-Economic Sparse Training Framework on the Edge",
    NeurIPS 34 (MEST+EM, MEST+EM&S; importance |w| + λ|∇w|, random growth); schedule defaults
    from the authors' code github.com/boone891214/MEST (README, scripts/resnet32).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        distribution: Literal["erk", "uniform"] = "uniform"
        dense_first_layer: bool = False
        mutation_rate: float = 0.2
        mutation_decay: float = 0.5
        decay_fraction: float = 0.5625
        end_fraction: float = 0.75
        update_fraction: float = 0.03125
        grad_coef: float = 0.5
        soft_bound: bool = True
        soft_window: float = 1.0

        def validate(self) -> None:
            if not 0.0 < self.mutation_rate < 1.0:
                raise ValueError(f"mutation_rate must be in (0, 1), got {self.mutation_rate}")
            if not 0.0 < self.mutation_decay <= 1.0:
                raise ValueError(f"mutation_decay must be in (0, 1], got {self.mutation_decay}")
            if not 0.0 < self.decay_fraction < self.end_fraction <= 1.0:
                raise ValueError(
                    "need 0 < decay_fraction < end_fraction <= 1, got "
                    f"decay_fraction={self.decay_fraction}, end_fraction={self.end_fraction}"
                )
            if not 0.0 < self.update_fraction <= 1.0:
                raise ValueError(f"update_fraction must be in (0, 1], got {self.update_fraction}")
            if self.grad_coef < 0.0:
                raise ValueError(f"grad_coef must be >= 0, got {self.grad_coef}")
            if not 0.0 < self.soft_window <= 1.0:
                raise ValueError(f"soft_window must be in (0, 1], got {self.soft_window}")

    #: (iteration, "mutate" | "grow" | "prune", {layer: nnz after that phase}) per phase done.
    history: list[tuple[int, str, dict[str, int]]]

    # -- schedule ------------------------------------------------------------------------
    @staticmethod
    def schedule(params: Params, total_steps: int) -> dict[str, int]:
        """Iteration counts of the schedule for a run of ``total_steps`` iterations:
        ``interval`` (ΔT), ``decay_step`` (first iteration at the decayed rate), ``end_step``
        (T_end: no mutation from here on), ``window`` (soft bound: iterations from a growth to
        its prune)."""
        interval = max(1, int(round(params.update_fraction * total_steps)))
        return {
            "interval": interval,
            "decay_step": int(params.decay_fraction * total_steps),
            "end_step": int(params.end_fraction * total_steps),
            "window": max(1, int(round(params.soft_window * interval))),
        }

    @property
    def _sched(self) -> dict[str, int]:
        return self.schedule(self.params, self.ctx.total_steps)

    def is_mutation_step(self, step: int) -> bool:
        """Whether iteration ``step`` (0-based) mutates (hard bound) or grows (soft bound)."""
        s = self._sched
        return 0 <= step < s["end_step"] and step % s["interval"] == 0

    def is_prune_step(self, step: int) -> bool:
        """Soft bound: whether iteration ``step`` prunes the growth of iteration step - w."""
        return self.params.soft_bound and self.is_mutation_step(step - self._sched["window"])

    def mutation_rate_at(self, step: int) -> float:
        """p(t): share of a layer's target nnz mutated at iteration ``step``, 0 after T_end."""
        s = self._sched
        if step >= s["end_step"]:
            return 0.0
        p = self.params
        return p.mutation_rate * (p.mutation_decay if step >= s["decay_step"] else 1.0)

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        s = cls.schedule(params, total_steps)
        dt, decay, end = s["interval"], s["decay_step"], s["end_step"]
        where = (
            f"total_steps = {total_steps}, mutation interval = round(update_fraction x "
            f"total_steps) = {dt}, decay at int(decay_fraction x total_steps) = {decay}, "
            f"T_end = int(end_fraction x total_steps) = {end}"
        )
        if decay < 1:
            raise ValueError(
                f"mest: the first mutation stage is empty ({where}); train longer or raise "
                f"decay_fraction"
            )
        first_decayed = math.ceil(decay / dt) * dt
        if first_decayed >= end:
            raise ValueError(
                f"mest: no mutation iteration in the decayed stage [{decay}, {end}) ({where}); "
                f"lower update_fraction or train longer"
            )
        last = (end - 1) // dt * dt
        if params.soft_bound and last + s["window"] > total_steps - 1:
            raise ValueError(
                f"mest: the soft bound's last growth at iteration {last} would be pruned at "
                f"{last + s['window']}, after the last iteration {total_steps - 1}, leaving the "
                f"model above the spec's density ({where}); lower end_fraction or soft_window"
            )

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        store = pl_module.masks
        densities = layer_densities(
            store.shapes, self.density, self.params.distribution, self.params.dense_first_layer
        )
        for name, d in densities.items():
            w = store.weight(name)
            if d >= 1.0:
                store.set_mask(name, None)
            else:  # largest magnitudes of the random initialisation, as the authors' code
                store.set_mask(name, top_mask(w.detach().abs(), n_keep(w.numel(), d)))
        self.targets = {n: store.nnz(n) for n, m in store.masks.items() if m is not None}
        self.history = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """After the backward pass of iteration ``global_step``, before its optimizer step."""
        step = trainer.global_step
        prune = self.is_prune_step(step)
        rate = self.mutation_rate_at(step) if self.is_mutation_step(step) else 0.0
        if not prune and rate == 0.0:
            return
        store = pl_module.masks
        with self.timed_update(store):
            self._update(step, store, prune, rate)

    def _update(self, step: int, store, prune: bool, rate: float) -> None:
        """The prune (``prune``) and/or growth / mutation (``rate`` > 0) of iteration
        ``step``, then the masking of this iteration's gradients."""
        lam, gen = self.params.grad_coef, self.ctx.generator
        fresh: dict[str, torch.Tensor] = {}
        if prune:
            for name, n in self.targets.items():
                w = store.weight(name)
                store.set_mask(name, self.prune_to(w, w.grad, store.masks[name], n, lam))
            self._log(step, "prune", store)
        if rate > 0.0:
            for name, n in self.targets.items():
                w, mask = store.weight(name), store.masks[name]
                k = int(rate * n)
                if self.params.soft_bound:
                    new, grown = self.grow_random(mask, k, gen)
                else:
                    new, grown = self.mutate(w, w.grad, mask, k, lam, gen)
                with torch.no_grad():
                    w[grown] = 0.0  # zero init (a just-dropped, regrown weight restarts at 0)
                store.set_mask(name, new, reset=grown)
                fresh[name] = grown
            self._log(step, "grow" if self.params.soft_bound else "mutate", store)
        # This iteration's optimizer step sees the new masks; grown weights get no gradient
        # from it, so they leave it at zero with zero optimizer state.
        for name in self.targets:
            w = store.weight(name)
            if w.grad is not None:
                keep = store.masks[name]
                w.grad.mul_(keep & ~fresh[name] if name in fresh else keep)

    def _log(self, step: int, phase: str, store) -> None:
        self.history.append((step, phase, {n: store.nnz(n) for n in self.targets}))

    # -- one layer -----------------------------------------------------------------------
    @staticmethod
    def importance(
        weight: torch.Tensor, grad: torch.Tensor | None, grad_coef: float
    ) -> torch.Tensor:
        """MEST's importance ``|w| + λ |∂L/∂w|`` (same shape as ``weight``); ``|w|`` alone
        when ``grad`` is None or λ = 0."""
        score = weight.detach().abs()
        if grad is not None and grad_coef:
            score = score + grad_coef * grad.detach().abs()
        return score

    @classmethod
    @torch.no_grad()
    def prune_to(
        cls,
        weight: torch.Tensor,
        grad: torch.Tensor | None,
        mask: torch.Tensor,
        n: int,
        grad_coef: float,
    ) -> torch.Tensor:
        """Keep the ``n`` active weights of highest importance.

        Args:
            weight, grad: the layer's weight and its gradient (any shape, e.g. Linear
                ``(out, in)`` or Conv2d ``(out, in, kh, kw)``; ``grad`` may be None).
            mask: bool tensor of ``weight``'s shape with at least ``n`` ones.
            n: number of weights to keep.
        Returns: the bool mask with exactly ``n`` ones, a subset of ``mask``.
        """
        score = cls.importance(weight, grad, grad_coef)
        return top_mask(torch.where(mask, score, torch.full_like(score, -math.inf)), n)

    @staticmethod
    def grow_random(
        mask: torch.Tensor, k: int, generator: torch.Generator
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Activate ``k`` positions drawn uniformly among those off in ``mask`` (bool, any
        shape); ``k`` is capped at their number. Returns (new mask, grown positions)."""
        scores = torch.rand(mask.shape, generator=generator).to(mask.device)
        k = min(k, int((~mask).sum()))
        grown = top_mask(torch.where(mask, torch.full_like(scores, -math.inf), scores), k)
        return mask | grown, grown

    @classmethod
    def mutate(
        cls,
        weight: torch.Tensor,
        grad: torch.Tensor | None,
        mask: torch.Tensor,
        k: int,
        grad_coef: float,
        generator: torch.Generator,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Hard-bound mutation (MEST+EM) on one layer: drop the ``k`` active weights of lowest
        importance, then grow ``k`` uniformly at random among all inactive positions, the
        just-dropped ones included. Returns (new mask with as many ones as ``mask``, grown
        positions); the caller zeroes the grown weights."""
        kept = cls.prune_to(weight, grad, mask, int(mask.sum()) - k, grad_coef)
        return cls.grow_random(kept, k, generator)

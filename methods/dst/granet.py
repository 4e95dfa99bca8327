"""GraNet: gradual pruning with zero-cost neuroregeneration."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.pillars.classification.masks import (
    MaskStore,
    layer_densities,
    n_keep,
    top_mask,
)
from sparsebench.suite.registry import register


@register("granet", family="dst")
class GraNet(Static):
    """GraNet, sparse-to-sparse (Liu et al. 2021, Algorithm 1).

    Starts from a random ERK mask at ``initial_density`` d_i = 1 - s_i (0.5; set 1.0 for the
    dense-to-sparse GraNet, s_i = 0; ``null`` starts at the target density, so the pruning
    only re-ranks globally and the run costs what a sparse-from-the-start method costs: the
    cost-matched comparator of a claim against RigL, ours).
    Let ΔT = ``int(update_fraction * total_steps)``, t_0 = ``int(begin_fraction *
    total_steps)``, t_end = ``int(end_fraction * total_steps)`` and n = (t_end - t_0) // ΔT.
    After steps t = t_0 + kΔT, k = 1..n, it

    1. prunes globally by magnitude (one |w| ranking across all sparse layers) to the density of
       the cubic schedule (GraNet Eq. 1, Zhu & Gupta 2017): ``d_k = d_f + (d_i - d_f) *
       (1 - k/n)^3``, i.e. exactly ``n_keep(N, d_k)`` nonzeros over the N prunable weights, so the
       last step (k = n, t = t_0 + nΔT <= t_end) reaches the target d_f exactly;
    2. regenerates at zero cost: in each sparse layer with a active weights it drops the
       ``ceil(r(t) * a)`` active weights of smallest |w| and regrows as many, among those not
       kept, with the largest dense-gradient magnitude of step t's batch, so each layer keeps its
       count. r(t) = r_min + (r - r_min)/2 * (1 + cos(π t / T)) (cosine annealing over the whole
       run T, as the reference code's ``CosineDecay`` with eta_min = 0.005).

    Newly grown connections start at zero and so does their optimizer state (weights removed by
    the pruning of step 1 are zeroed first, so regrowing them restarts them at zero); a weight
    dropped and regrown in the same regeneration keeps its value and state, as in the reference
    code. The update runs after step t's optimizer step, with that step's weights and dense
    gradient, as the reference ``Masking.step`` (optimizer step, then ``pruning`` and
    ``truncate_weights``); no optimizer step is skipped.

    When regeneration stops (our default, our reading): the paper performs neuroregeneration
    "after each gradual pruning step" (Fig. 1; Algorithm 1), so by default it stops with the
    pruning at t_0 + nΔT and the mask is fixed afterwards. The published tables come from the
    released code, which regenerates until the end of training (31 % of a CIFAR run, 70 % of
    an ImageNet run), so reproduce them with ``regenerate_after_pruning: true``. The pruning
    window's 110/160 is the README's command (argparse: ``--final-prune-epoch 110`` of
    ``--epochs 250``); its shipped CIFAR script uses 80/160.
    ``regenerate_after_pruning: true`` keeps calling regeneration every ΔT (only
    regeneration, at the final per-layer counts, at every t_0 + kΔT < T) as that code does.
    No update runs at t = T (a weight grown after the last step would never train).

    Choices and departures (documented): the paper's ΔT and window are in iterations/epochs;
    here they are fractions of the run, from the CIFAR setting of the paper and its README and
    script (160 epochs, batch 128 as the script passes it, on 45,000 training images = 352
    iterations per epoch, 56,320 in all; ΔT = 1000 iterations, the README's and script's
    ``--update-frequency`` (argparse's default is 100) -> ``update_fraction`` = 1000 / 56320;
    pruning from epoch 0 to epoch 110 -> ``begin_fraction`` 0, ``end_fraction`` 110/160;
    ImageNet uses ΔT = 4000 and epochs 0-30 of 100). Pruning steps are t_0 + kΔT (the code uses
    multiples of ΔT, the same when t_0 = 0). The reference loop stops pruning one step before
    t_0 + nΔT (``curr_prune_iter <= final_iter - 1``) and never quite reaches d_f; we include k
    = n as Eq. 1 does. Global pruning keeps at least one weight per layer (the reference may
    empty a layer); with ``dense_first_layer`` the first layer stays dense and outside the
    global ranking and budget (the code's ``--rm-first``). ``distribution`` sets only the
    initial mask (ERK in the paper); the pruning is always global. A target density above d_i is
    refused (ValueError).

    Training FLOPs: ``3 f_S(t)`` per example at each step's masks (the density falls during the
    pruning window) plus ``f_D - f_S`` per example on regeneration iterations, whose backward
    pass needs the dense weight gradient (Evci et al. 2020, Appendix H). Pruning and the
    drop/grow selection are O(N) and not counted.

    Source: Liu, Chen, Chen, Atashgahi, Yin, Kou, Shen, Pechenizkiy, Wang, Mocanu 2021,
    "Sparse Training via Boosting Pruning Plasticity with Neuroregeneration", NeurIPS,
    Algorithm 1, Eq. 1; defaults s_i = 0.5, ΔT = 1000, t_0 = 0, t_f = 110 of 160 epochs,
    regeneration rate 0.5 with cosine decay, ERK (paper, and the README command and CIFAR script
    of github.com/Shiweiliuiiiiiii/GraNet at commit f338a247, 2023-02-10).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        initial_density: float | None = 0.5
        update_fraction: float = 1000 / 56320
        begin_fraction: float = 0.0
        end_fraction: float = 110 / 160
        regeneration_rate: float = 0.5
        regeneration_rate_min: float = 0.005
        regenerate_after_pruning: bool = False

        def validate(self) -> None:
            if self.initial_density is not None and not 0.0 < self.initial_density <= 1.0:
                raise ValueError(f"initial_density must be in (0, 1], got {self.initial_density}")
            if self.initial_density == 1.0:
                check_dense_start(
                    self.init,
                    "at initial_density = 1.0 GraNet starts dense and its masks "
                    "come from its first pruning step, after fit start",
                )
            if not 0.0 < self.update_fraction < 1.0:
                raise ValueError(f"update_fraction must be in (0, 1), got {self.update_fraction}")
            if not 0.0 <= self.begin_fraction < self.end_fraction <= 1.0:
                raise ValueError(
                    "need 0 <= begin_fraction < end_fraction <= 1, got "
                    f"{self.begin_fraction}, {self.end_fraction}"
                )
            if not 0.0 < self.regeneration_rate < 1.0:
                raise ValueError(
                    f"regeneration_rate must be in (0, 1), got {self.regeneration_rate}"
                )
            if not 0.0 < self.regeneration_rate_min <= self.regeneration_rate:
                raise ValueError(
                    "regeneration_rate_min must be in (0, regeneration_rate], got "
                    f"{self.regeneration_rate_min}"
                )

    _batch_size = 0

    @property
    def initial_density(self) -> float:
        """d_i: ``initial_density``, or the target density when it is null."""
        d_i = self.params.initial_density
        return self.density if d_i is None else d_i

    @classmethod
    def final_allocation(cls, params: Params) -> str:
        # Every pruning step ranks all sparse layers jointly; from the target density it
        # removes nothing, and the start's allocation stays.
        return params.distribution if params.initial_density is None else "global"

    # -- schedule ------------------------------------------------------------------------
    @staticmethod
    def _schedule(params: Params, total_steps: int) -> tuple[int, int, int]:
        """(ΔT, t_0, n) for a run of ``total_steps`` optimizer steps."""
        dt = int(params.update_fraction * total_steps)
        t0 = int(params.begin_fraction * total_steps)
        span = int(params.end_fraction * total_steps) - t0
        return dt, t0, span // dt if dt > 0 else 0

    @property
    def update_interval(self) -> int:
        """ΔT in optimizer steps."""
        return self._schedule(self.params, self.ctx.total_steps)[0]

    @property
    def t0(self) -> int:
        return self._schedule(self.params, self.ctx.total_steps)[1]

    @property
    def n_prunes(self) -> int:
        """n of Eq. 1: pruning steps after t_0."""
        return self._schedule(self.params, self.ctx.total_steps)[2]

    def _k(self, step: int) -> int | None:
        """k with step = t_0 + kΔT, k >= 1, step < T; None otherwise."""
        dt, t0, _ = self._schedule(self.params, self.ctx.total_steps)
        if step <= t0 or (step - t0) % dt or step > self.ctx.total_steps:
            return None
        return (step - t0) // dt

    def density_at(self, step: int) -> float | None:
        """Global density d_k of Eq. 1 after the pruning at ``step``; None if none prunes."""
        k = self._k(step)
        if k is None or k > self.n_prunes:
            return None
        d_i, d_f = self.initial_density, self.density
        return d_f + (d_i - d_f) * (1.0 - k / self.n_prunes) ** 3

    def regenerates_at(self, step: int) -> bool:
        k = self._k(step)
        if k is None or step >= self.ctx.total_steps:
            return False
        return k <= self.n_prunes or self.params.regenerate_after_pruning

    def is_update_step(self, step: int) -> bool:
        return self.density_at(step) is not None or self.regenerates_at(step)

    def regeneration_rate_at(self, step: int) -> float:
        """r(t): cosine annealing from ``regeneration_rate`` to ``regeneration_rate_min`` at T."""
        r0, r_min = self.params.regeneration_rate, self.params.regeneration_rate_min
        progress = min(step, self.ctx.total_steps) / self.ctx.total_steps
        return r_min + (r0 - r_min) / 2.0 * (1.0 + math.cos(math.pi * progress))

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        dt, t0, n = cls._schedule(params, total_steps)
        if dt < 1:
            raise ValueError(
                f"granet: ΔT = int(update_fraction x total_steps) = "
                f"int({params.update_fraction:.4g} x {total_steps}) = 0 steps; raise "
                f"update_fraction or train longer "
                f"(at least {math.ceil(1 / params.update_fraction)} steps at this update_fraction)"
            )
        if n < 1:
            span = int(params.end_fraction * total_steps) - t0
            raise ValueError(
                f"granet: the pruning window ({params.begin_fraction}-{params.end_fraction} of "
                f"{total_steps} steps = {span} steps) is shorter than ΔT = {dt} steps, so the "
                f"target density would never be reached; widen the window, lower "
                f"update_fraction or train longer"
            )

    @classmethod
    def check_sparsity(cls, params: Params, sparsity: float) -> None:
        density = 1.0 - float(sparsity)
        if params.initial_density is not None and density > params.initial_density:
            raise ValueError(
                f"granet: target density {density:.4g} (sparsity {sparsity:.4g}) is "
                f"above initial_density = {params.initial_density}; GraNet only prunes, "
                f"so raise initial_density (1.0 = dense start) or the target sparsity"
            )

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        self.check_sparsity(self.params, self.sparsity)
        store = pl_module.masks
        densities = layer_densities(
            store.shapes,
            self.initial_density,
            self.params.distribution,
            self.params.dense_first_layer,
        )
        store.random_masks(densities, self.ctx.generator)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Iteration global_step + 1 regenerates: capture its dense gradient.
        pl_module.masks.capture_dense_grads = self.regenerates_at(trainer.global_step + 1)
        self._batch_size = int(batch[0].shape[0])

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        """After step t's optimizer step: prune and/or regenerate if t is an update step."""
        store = pl_module.masks
        store.capture_dense_grads = False
        step = trainer.global_step
        if self.is_update_step(step):
            self.update(store, step, store.dense_grads, self._batch_size)
        store.dense_grads.clear()

    # -- the update ----------------------------------------------------------------------
    def _pruned_layers(self, store: MaskStore) -> list[str]:
        names = list(store.layers)
        return names[1:] if self.params.dense_first_layer else names

    @torch.no_grad()
    def update(
        self, store: MaskStore, step: int, grads: dict[str, torch.Tensor], batch_size: int
    ) -> None:
        """The update after step ``step``: global pruning to ``density_at(step)`` (if any),
        then per-layer regeneration (if ``regenerates_at(step)``) from ``grads`` (layer name ->
        dense gradient of the weight's shape), adding the dense-gradient FLOPs of ``batch_size``
        examples. Layers missing from ``grads`` are not regenerated."""
        regen = self.regenerates_at(step)
        if regen:  # this iteration's backward produced the dense weight gradient
            self.ctx.flops.add(self.ctx.flops.dense_grad_extra(store.densities(), batch_size))
        with self.timed_update(store):
            self._prune_regenerate(store, step, grads, regen)

    def _prune_regenerate(
        self, store: MaskStore, step: int, grads: dict[str, torch.Tensor], regen: bool
    ) -> None:
        """The masks' part of :meth:`update`: pruning, then regeneration if ``regen``."""
        names = self._pruned_layers(store)
        density = self.density_at(step)
        if density is not None:
            self.prune_global(store, names, density)
        if not regen:
            return
        rate = self.regeneration_rate_at(step)
        for name in names:
            mask = store.masks[name]
            if mask is not None and name in grads:
                new = self.regenerate(store.weight(name), mask, grads[name], rate)
                store.set_mask(name, new)

    @staticmethod
    @torch.no_grad()
    def prune_global(store: MaskStore, names: list[str], density: float) -> None:
        """Keep the ``n_keep(N, density)`` active weights of largest |w| ranked jointly over the
        layers ``names`` (N = their number of weights); every layer keeps at least its largest
        active weight. Never re-activates a masked weight: keeps at most the current count.
        Removed weights and their optimizer state are zeroed (``MaskStore.set_mask``)."""
        scores = []
        for name in names:
            w, mask = store.weight(name).detach(), store.masks[name]
            s = w.abs().float().reshape(-1)
            if mask is not None:
                s = torch.where(mask.reshape(-1), s, torch.full_like(s, -math.inf))
            s[torch.argmax(s)] = math.inf  # at least one weight per layer survives
            scores.append(s)
        flat = torch.cat(scores)
        total = flat.numel()
        active = sum(store.nnz(n) for n in names)
        keep = top_mask(flat, max(len(names), min(n_keep(total, density), active)))
        start = 0
        for name in names:
            w = store.weight(name)
            m = keep[start : start + w.numel()].view_as(w)
            store.set_mask(name, None if bool(m.all()) else m)
            start += w.numel()

    @staticmethod
    @torch.no_grad()
    def regenerate(
        weight: torch.Tensor, mask: torch.Tensor, grad: torch.Tensor, rate: float
    ) -> torch.Tensor:
        """Zero-cost neuroregeneration on one layer.

        Args:
            weight, grad: the layer's weight and dense gradient (same shape, any rank).
            mask: bool mask of active connections.
            rate: share r of the active connections to drop; ``ceil(r * nnz)`` of smallest |w|
                are dropped (reference ``magnitude_death``) and as many regrown, among those not
                kept, with the largest |grad|.
        Returns: the new bool mask, with exactly as many ones as ``mask``.
        """
        n_active = int(mask.sum())
        k = min(n_active, math.ceil(rate * n_active))
        if k == 0:
            return mask
        inf = torch.full_like(weight, math.inf, dtype=torch.float32)
        kept = top_mask(torch.where(mask, weight.abs().float(), -inf), n_active - k)
        grow = top_mask(torch.where(kept, -inf, grad.abs().float()), k)
        return kept | grow

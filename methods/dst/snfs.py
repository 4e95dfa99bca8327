"""SNFS: Sparse Networks From Scratch (sparse momentum)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.masks import top_mask
from sparsebench.suite.registry import register


@register("snfs", family="dst")
class SNFS(Static):
    """Sparse momentum (Dettmers & Zettlemoyer 2019, Algorithm 1).

    Every training step the dense gradient ``g`` (unmasked, captured by the mask store) of
    every sparse layer updates an exponentially smoothed gradient, its "momentum",
    ``M <- momentum * M + g`` (same tensor shape as the weight), at all positions, active or
    not, as the momentum buffer of the reference implementation's SGD (dampening 0)
    accumulates the unmasked gradients. At the end of every epoch but the last (Algorithm 1;
    the reference ``main.py`` skips the last epoch), with the prune rate ``p`` of that step:

    1. each sparse layer ``i`` gets the share ``s_i = m_i / sum_j m_j`` of the regrowth budget,
       with ``m_i`` the mean ``|M|`` over its active weights (momentum redistribution);
    2. each layer drops its ``ceil(p * nnz_i)`` active weights of smallest magnitude
       (magnitude pruning); ``K`` = the total number dropped;
    3. layer ``i`` regrows ``r_i ~ s_i * K`` connections at the inactive positions (just
       dropped ones included) with the largest ``|M|`` (momentum growth).

    Exactness (our addition; the reference keeps the count only approximately, with a
    smoothed correction term): the ``r_i`` are integers summing to exactly ``K``, so the
    network's total number of nonzeros over sparse layers never changes; a layer never gets
    more than its free positions (``numel_i - nnz_i + dropped_i``): layers over their
    capacity are capped and the overflow goes to the other layers in proportion to their
    shares, repeatedly (water-filling), then the shares are rounded by largest remainder.
    The per-layer densities therefore move under redistribution (a layer can even become
    fully dense, which the reference prevents by capping regrowth at 0.99 of a layer's free
    positions); only the global density is exact. Layers that start dense (no mask, e.g.
    ``dense_first_layer``) take no part.

    The prune rate follows the reference's ``CosineDecay`` stepped every optimizer step:
    ``p(t) = p_min + (p_0 - p_min) / 2 * (1 + cos(pi t / T))`` with ``T`` the total number of
    steps, ``p_0 = prune_rate = 0.5`` and ``p_min = prune_rate_min = 0.005``
    (``CosineAnnealingLR``'s ``eta_min`` in the reference). Magnitude pruning keeps at least
    one weight per layer (ours; the reference can empty a one-weight layer).

    New connections start at zero (as in the reference, where a grown weight was masked to
    zero). Their optimizer state: in Algorithm 1 the momentum is the optimizer's own momentum
    and is dense, so a regrown weight carries its accumulated momentum into its first update;
    with ``regrow_momentum="carry"`` (default) an SGD optimizer's ``momentum_buffer`` at the
    grown positions is set to ``M`` (the reference's buffer, up to its weight-decay term, when
    the recipe's SGD momentum equals ``momentum``); other state (Adam moments) starts at zero. With
    ``"zero"`` all their optimizer state starts at zero, as in Evci et al.'s re-implementation.
    A weight dropped and regrown in the same update keeps its value and optimizer state.

    Departures from the reference code, documented: ``M`` smooths the loss gradient only (the
    reference's SGD buffer also holds the weight-decay term ``wd * w`` of active weights; the
    two agree on the zero weights that growth ranks); growth ranks ``M`` also for Adam (the
    reference uses ``exp_avg / sqrt(exp_avg_sq)``); the reference's heuristic lowering the
    prune rate of nearly dense (< 20 % sparse) growing layers is left out (not in the paper);
    the overflow of capped layers is split by momentum share, not evenly.

    Initial masks: a random mask at the same density in every layer by default (the
    reference's default ``sparse_init='constant'``), ERK on request.

    Training FLOPs (Evci et al. 2020, Appendix H): the momentum needs the dense gradient every
    step, so each step costs ``2 f_S + f_D`` per example (sparse forward, sparse backward to
    the activations, dense weight gradient), i.e. ``(f_D - f_S) * batch`` is added every step
    on top of the ``3 f_S`` counted by the FLOPs callback, with ``f_S`` at that step's masks.
    The epoch-end update (sorts, O(numel)) is not counted, as in that accounting.

    Raises (``on_fit_start``): ValueError when the run has fewer than 2 epochs (no update).

    Source: Dettmers & Zettlemoyer 2019, "Sparse Networks from Scratch: Faster Training
    without Losing Performance", arXiv:1907.04840, Algorithm 1; defaults prune rate 0.5 with
    cosine decay, momentum 0.9, updates at the end of every epoch, from the reference
    sparse_learning code (``--prune-rate 0.5``, ``CosineDecay``, ``--momentum 0.9``,
    ``mask.at_end_of_epoch()``).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        distribution: Literal["erk", "uniform"] = "uniform"
        prune_rate: float = 0.5
        prune_rate_min: float = 0.005
        momentum: float = 0.9
        regrow_momentum: Literal["carry", "zero"] = "carry"

        def validate(self) -> None:
            if not 0.0 < self.prune_rate < 1.0:
                raise ValueError(f"prune_rate must be in (0, 1), got {self.prune_rate}")
            if not 0.0 <= self.prune_rate_min <= self.prune_rate:
                raise ValueError(
                    f"prune_rate_min must be in [0, prune_rate = {self.prune_rate}], "
                    f"got {self.prune_rate_min}"
                )
            if not 0.0 <= self.momentum < 1.0:
                raise ValueError(f"momentum must be in [0, 1), got {self.momentum}")

    _batch_extra = 0.0
    _capturing = False

    @classmethod
    def final_allocation(cls, params: Params) -> str:
        return "redistributed"  # momentum redistribution moves weights between layers

    # -- schedule ------------------------------------------------------------------------
    def prune_rate_at(self, step: int) -> float:
        """p(t) of the cosine decay over the whole run, at optimizer step ``step``."""
        p0, p_min = self.params.prune_rate, self.params.prune_rate_min
        t = min(step, self.ctx.total_steps) / self.ctx.total_steps
        return p_min + (p0 - p_min) / 2.0 * (1.0 + math.cos(math.pi * t))

    def is_update_epoch(self, epoch: int) -> bool:
        """Whether the masks change after 0-based epoch ``epoch`` (every epoch but the last)."""
        return epoch + 1 < self.ctx.epochs

    @classmethod
    def check_budget(cls, params: Params, total_steps: int, steps_per_epoch: int | None = None):
        """Refuse a run without any mask update. Spec validation passes only ``total_steps``
        (then a run needs at least 2 steps); at fit start the epoch length is known and the
        run needs at least 2 full epochs, since the masks change after every epoch but the
        last."""
        if total_steps < 2:
            raise ValueError(
                f"snfs: no mask update would happen in {total_steps} step(s): SNFS updates the "
                f"masks at the end of every epoch but the last; train at least 2 epochs"
            )
        if steps_per_epoch:
            epochs = total_steps // steps_per_epoch
            if epochs < 2:
                raise ValueError(
                    f"snfs: no mask update would happen: {total_steps} steps of "
                    f"{steps_per_epoch} per epoch make {epochs} epoch(s), and SNFS updates the "
                    f"masks at the end of every epoch but the last; train at least 2 epochs"
                )

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps, self.ctx.steps_per_epoch)
        self.check_model(self.params, pl_module.masks.layers)
        super().on_fit_start(trainer, pl_module)
        store = pl_module.masks
        self.momenta = {
            n: torch.zeros_like(store.weight(n).detach())
            for n, m in store.masks.items()
            if m is not None
        }
        self.updates: list[tuple[int, float]] = []  # (step, prune rate) of each update

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        store = pl_module.masks
        store.capture_dense_grads = True  # the momentum needs the dense gradient every step
        self._capturing = True
        self._batch_extra = self.ctx.flops.dense_grad_extra(store.densities(), len(batch[0]))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """After the backward pass: fold this batch's dense gradient into the momentum."""
        if not self._capturing:
            return
        self._capturing = False
        store = pl_module.masks
        store.capture_dense_grads = False
        self.accumulate(store.dense_grads)
        store.dense_grads.clear()
        # Extra cost of the dense weight gradient: f_D instead of f_S per example.
        self.ctx.flops.add(self._batch_extra)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if not self.is_update_epoch(trainer.current_epoch):
            return
        step = trainer.global_step
        rate = self.prune_rate_at(step)
        with self.timed_update(pl_module.masks):
            self.apply_update(pl_module.masks, rate, trainer.optimizers)
        self.updates.append((step, rate))

    # -- the algorithm -------------------------------------------------------------------
    @torch.no_grad()
    def accumulate(self, grads: Mapping[str, torch.Tensor]) -> None:
        """``M <- momentum * M + g`` for every sparse layer with a captured dense gradient."""
        for name, m in self.momenta.items():
            g = grads.get(name)
            if g is not None:
                m.mul_(self.params.momentum).add_(g.to(m.dtype))

    @torch.no_grad()
    def apply_update(self, store, rate: float, optimizers=()) -> dict[str, torch.Tensor]:
        """One SNFS update of all sparse layers of ``store`` at prune rate ``rate``, through
        ``store.set_mask``; with ``regrow_momentum="carry"`` writes ``M`` into the SGD momentum
        buffers of ``optimizers`` at the newly grown positions. Returns name -> grown mask."""
        names = [n for n in self.momenta if store.masks[n] is not None]
        weights = {n: store.weight(n).detach() for n in names}
        old = {n: store.masks[n] for n in names}
        new = self.update_masks(weights, old, {n: self.momenta[n] for n in names}, rate)
        grown = {}
        for n in names:
            grown[n] = new[n] & ~old[n]
            store.set_mask(n, new[n])
            if self.params.regrow_momentum == "carry" and grown[n].any():
                w = store.weight(n)
                for opt in optimizers:
                    buf = opt.state.get(w, {}).get("momentum_buffer")
                    if torch.is_tensor(buf) and buf.shape == w.shape:
                        buf[grown[n]] = self.momenta[n][grown[n]].to(buf.dtype)
        return grown

    @staticmethod
    @torch.no_grad()
    def update_masks(
        weights: Mapping[str, torch.Tensor],
        masks: Mapping[str, torch.Tensor],
        momenta: Mapping[str, torch.Tensor],
        rate: float,
    ) -> dict[str, torch.Tensor]:
        """Sparse momentum's epoch-end prune / redistribute / regrow step (Algorithm 1).

        Args:
            weights, momenta: name -> the layer's weight and momentum ``M`` (same shape:
                ``(out, in)`` or ``(out, in, kh, kw)``).
            masks: name -> bool mask of the layer's active weights (at least one active).
            rate: prune rate ``p`` in [0, 1).
        Returns: name -> new bool mask; the total number of ones over all layers is
            unchanged, each layer keeps at least one active weight.
        """
        inf = math.inf
        shares, kept, capacity = {}, {}, {}
        total_removed = 0
        for n, mask in masks.items():
            nnz = int(mask.sum())
            m_abs = momenta[n].abs()
            shares[n] = float(m_abs[mask].mean()) if nnz else 0.0
            n_remove = min(math.ceil(rate * nnz), max(nnz - 1, 0))
            w_abs = weights[n].abs().float()
            w_abs = torch.where(mask, w_abs, torch.full_like(w_abs, -inf))
            kept[n] = top_mask(w_abs, nnz - n_remove)
            capacity[n] = mask.numel() - (nnz - n_remove)
            total_removed += n_remove
        regrow = SNFS.allocate(shares, total_removed, capacity)
        new = {}
        for n in masks:
            score = momenta[n].abs().float()
            score = torch.where(kept[n], torch.full_like(score, -inf), score)
            new[n] = kept[n] | top_mask(score, regrow[n])
        return new

    @staticmethod
    def allocate(
        shares: Mapping[str, float], total: int, capacity: Mapping[str, int]
    ) -> dict[str, int]:
        """Split ``total`` regrowth slots over layers in proportion to ``shares``, with no layer
        above its ``capacity``: capped layers' overflow goes to the others in proportion to
        their shares (repeated until nothing overflows); the real-valued result is rounded by
        largest remainder (ties to the earlier layer). Layers with zero share get nothing
        unless the others are full; if all uncapped shares are zero the rest is split in
        proportion to capacity.

        Returns: name -> integer count, ``0 <= count <= capacity``, summing to ``total``.
        Raises: ValueError if ``total`` exceeds the summed capacity.
        """
        names = list(shares)
        if total > sum(capacity[n] for n in names):
            raise ValueError(
                f"cannot regrow {total} connections into {sum(capacity.values())} free positions"
            )
        real = dict.fromkeys(names, 0.0)
        free = [n for n in names if capacity[n] > 0]
        budget = float(total)
        while free and budget > 0:
            weight = {n: max(shares[n], 0.0) for n in free}
            if sum(weight.values()) <= 0.0:
                weight = {n: float(capacity[n]) for n in free}
            s = sum(weight.values())
            proposal = {n: budget * weight[n] / s for n in free}
            over = [n for n in free if proposal[n] >= capacity[n]]
            if not over:
                real.update(proposal)
                break
            for n in over:
                real[n] = float(capacity[n])
                budget -= capacity[n]
                free.remove(n)
        counts = {n: min(int(math.floor(real[n] + 1e-9)), capacity[n]) for n in names}
        left = total - sum(counts.values())
        # Largest remainder first, then any layer with room (guards float round-off).
        order = sorted(names, key=lambda n: -(real[n] - counts[n]))
        while left > 0:
            for n in order:
                if left == 0:
                    break
                if counts[n] < capacity[n]:
                    counts[n] += 1
                    left -= 1
        return counts

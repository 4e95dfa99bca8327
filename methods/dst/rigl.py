"""RigL: Rigging the Lottery."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.masks import top_mask
from sparsebench.suite.registry import register


@register("rigl", family="dst")
class RigL(Static):
    """Rigged Lottery (Evci et al. 2020, Algorithm 1).

    Starts from a random ERK mask. Every ``update_interval`` (ΔT = 100) steps, while
    ``t < T_end = end_fraction * total_steps`` (end_fraction = 0.75), each sparse layer drops
    ``k = floor(f(t) * nnz)`` of its active weights with the smallest magnitude and regrows the
    ``k`` connections, among those not kept, with the largest dense-gradient magnitude |∇L_t|
    (Algorithm 1), so each layer keeps its exact number of nonzeros. The drop fraction decays
    by the cosine schedule f(t) = α/2 · (1 + cos(π t / T_end)) with α = ``drop_fraction`` = 0.3
    (Eq. 1). Newly grown connections start at zero, and so does their optimizer state (Sec. 3);
    a connection dropped and regrown in the same update keeps its value, as in the reference
    implementation.

    As in the reference implementation (``SparseRigLOptimizer.apply_gradients``), an update
    iteration replaces that iteration's optimizer step: the masks change from the pre-step
    weights and the dense gradient of that iteration's batch (captured in its backward pass),
    and no weight moves. Departure, documented: the update iteration still counts as a training
    step (the lr schedule and step counter advance), so RigL sees exactly the batches dense sees.
    Update iterations are t = 0, ΔT, 2ΔT, ... < T_end (0-based iteration index, as the
    reference's ``is_mask_update_iter`` with ``begin_step = 0``: the first iteration updates the
    random mask from the init's magnitudes and the first batch's gradient);
    ``update_at_start: false`` skips t = 0 (this suite's behaviour before 2026-12-01). A run
    whose T_end does not pass ΔT would update at most at t = 0: it is refused with a
    ValueError.

    Training FLOPs (Appendix H): ``3 f_S`` per example on regular iterations and ``2 f_S + f_D``
    on update iterations (sparse forward, sparse activation gradients, dense weight gradient),
    i.e. (3 f_S (ΔT - 1) + 2 f_S + f_D) / ΔT per step on average while updates run.

    Source: Evci, Gale, Menick, Castro, Elsen 2020, "Rigging the Lottery: Making All Tickets
    Winners", ICML, Algorithm 1 and Eq. 1; defaults ΔT = 100, α = 0.3, cosine decay,
    T_end = 0.75 of training, ERK: the paper's (reference code google-research/rigl at
    d39fc7d4, 2023-01-26: ΔT = 100 and α = 0.3 are its flag defaults, cosine only in its MNIST
    script, ERK in its README's commands, T_end as absolute steps, 75,000 of 97,656 on CIFAR).
    Ours: the last update is at t < T_end (the reference's ``global_step <= end_step`` also
    updates at t = T_end when ΔT divides it).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates
    values_only = True  # update_values on execution: sparse

    @dataclass
    class Params(Static.Params):
        update_interval: int = 100
        drop_fraction: float = 0.3
        drop_fraction_anneal: Literal["cosine", "constant"] = "cosine"
        end_fraction: float = 0.75
        update_at_start: bool = True

        def validate(self) -> None:
            if self.update_interval < 2:
                # every iteration before T_end would be an update iteration, which replaces
                # the optimizer step: no weight would move until T_end
                raise ValueError(
                    f"update_interval must be >= 2, got {self.update_interval} (with 1 every "
                    "iteration before T_end is an update iteration, which replaces the "
                    "optimizer step, so nothing trains until T_end)"
                )
            if not 0.0 < self.drop_fraction < 1.0:
                raise ValueError(f"drop_fraction must be in (0, 1), got {self.drop_fraction}")
            if not 0.0 < self.end_fraction <= 1.0:
                raise ValueError(f"end_fraction must be in (0, 1], got {self.end_fraction}")

    _batch_size = 0

    @property
    def t_end(self) -> int:
        return int(self.params.end_fraction * self.ctx.total_steps)

    def drop_fraction_at(self, step: int) -> float:
        """f(t) of Eq. 1 (cosine) or the constant α."""
        alpha = self.params.drop_fraction
        if self.params.drop_fraction_anneal == "constant":
            return alpha
        return alpha / 2.0 * (1.0 + math.cos(math.pi * step / self.t_end))

    def is_update_step(self, step: int) -> bool:
        """Whether iteration ``step`` (0-based: the optimizer steps done before it) updates."""
        if step == 0 and not self.params.update_at_start:
            return False
        return step % self.params.update_interval == 0 and step < self.t_end

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        t_end = int(params.end_fraction * total_steps)
        if t_end <= params.update_interval:
            raise ValueError(
                f"rigl: no mask update would happen: T_end = end_fraction x total_steps = "
                f"{t_end} of {total_steps} steps <= update_interval = {params.update_interval} "
                f"(at most the update at step 0); lower update_interval or train longer"
            )

    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        self._operands: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        super().on_fit_start(trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # An update iteration: capture its dense gradient (a values-only layer: the operands
        # of grad_yᵀ x, handed over by its backward; the product is never formed whole).
        store = pl_module.masks
        update = self.is_update_step(trainer.global_step)
        store.capture_dense_grads = update
        self._operands = {}
        for name, layer in store.sparse.items():
            layer.backward_observer = self._observer(name) if update else None
        self._batch_size = int(batch[0].shape[0])

    def _observer(self, name: str):
        def keep(grad_y: torch.Tensor, x: torch.Tensor) -> None:
            self._operands[name] = (grad_y.detach(), x.detach())

        return keep

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """After the backward pass, before the optimizer moves any weight."""
        store = pl_module.masks
        if not store.capture_dense_grads:
            return
        store.capture_dense_grads = False
        fraction = self.drop_fraction_at(trainer.global_step)
        with self.timed_update(store):
            for name in store.layers:
                if name in self._operands:  # values-only
                    grad_y, x = self._operands.pop(name)
                    apply = functools.partial(store.set_pattern, name)
                    self.update_values(store.sparse[name], fraction, grad_y, x, apply=apply)
                elif name in store.dense_grads and (mask := store.masks[name]) is not None:
                    grad = store.dense_grads[name]
                    new = self.update_mask(store.weight(name), mask, grad, fraction)
                    store.set_mask(name, new)
        store.dense_grads.clear()
        for layer in store.sparse.values():
            layer.backward_observer = None
        # The update replaces the optimizer step: torch optimizers skip parameters without a
        # gradient (no momentum, no weight decay).
        for p in pl_module.parameters():
            p.grad = None
        # Extra cost of the update iteration: the dense weight gradient, f_D instead of f_S.
        self.ctx.flops.add(self.ctx.flops.dense_grad_extra(store.densities(), self._batch_size))

    @staticmethod
    @torch.no_grad()
    def update_mask(
        weight: torch.Tensor, mask: torch.Tensor, grad: torch.Tensor, fraction: float
    ) -> torch.Tensor:
        """RigL's drop/grow on one layer.

        Args:
            weight, grad: the layer's weight and dense gradient (same shape).
            mask: bool mask of active connections.
            fraction: share of the active connections to drop and regrow.
        Returns: the new bool mask, with exactly as many ones as ``mask``.
        """
        n_active = int(mask.sum())
        k = int(fraction * n_active)
        if k == 0:
            return mask
        inf = torch.full_like(weight, math.inf)
        kept = top_mask(torch.where(mask, weight.abs(), -inf), n_active - k)
        grow = top_mask(torch.where(kept, -inf, grad.abs()), k)
        return kept | grow

    @staticmethod
    @torch.no_grad()
    def update_values(
        layer: torch.nn.Module,
        fraction: float,
        grad_y: torch.Tensor,
        x: torch.Tensor,
        optimizer: torch.optim.Optimizer | None = None,
        chunk_rows: int | None = None,
        apply: Callable[..., torch.Tensor] | None = None,
    ) -> int:
        """RigL's drop/grow on a values-only layer (a ``SparseLinear``), without any (out, in)
        tensor: drop the ``fraction`` of its values smallest in magnitude, grow as many where
        |grad_yᵀ x| is largest among the positions not kept (formed a few rows at a time),
        new ones at zero with zero optimizer state. Given grad = grad_yᵀ x it chooses what
        :meth:`update_mask` chooses, except how ties at the drop or growth boundary are broken
        (here: the lower flat index first, ``kernels.topology.smallest``; there:
        ``torch.topk``'s order). The new pattern is installed by
        ``apply(new_flat, new_values)`` (a mask store's ``set_pattern``), by default
        ``kernels.topology.set_pattern`` with ``optimizer``. Returns how many were regrown.
        """
        from sparsebench.kernels.topology import set_pattern, smallest, top_outer_abs

        k = int(fraction * layer.nnz)
        if k == 0:
            return 0
        kept = layer.flat_index[~smallest(layer.values.detach().abs(), k)]  # still sorted
        grown = top_outer_abs(grad_y, x, k, kept, chunk_rows)
        new_flat = torch.sort(torch.cat([kept, grown])).values
        if apply is None:
            set_pattern(layer, new_flat, 0.0, optimizer)
        else:
            apply(new_flat, 0.0)
        return k

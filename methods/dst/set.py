"""SET: Sparse Evolutionary Training."""

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


@register("set", family="dst")
class SET(Static):
    """Sparse Evolutionary Training (Mocanu et al. 2018, Algorithm 1).

    Starts from a random Erdős–Rényi mask (ERK, which equals Erdős–Rényi for Linear layers).
    At each topology update, in each sparse layer it removes the fraction ``zeta`` of the
    positive weights closest to zero and the fraction ``zeta`` of the negative weights closest
    to zero (Algorithm 1, step 11), then adds the same number of new connections at uniformly
    random inactive positions (step 12), so each layer keeps its exact number of connections.

    When: with ``update_interval: null`` (default) at the end of every epoch, as Algorithm 1,
    while the epoch ends before ``T_end = end_fraction x total_steps``. The authors' sparse-Python
    code evolves until the second-to-last epoch (``end_fraction: 1.0``; their Keras code after
    every epoch, the last included; dcmocanu/sparse-evolutionary-artificial-neural-networks at
    62ac9748); under a cosine learning rate that leaves
    the connections grown in the last epochs barely trained while the nominal density counts
    them, so the default stops at ``end_fraction = 0.75`` as Evci et al.'s SET baseline does
    (the record's ``trained_density`` shows the difference). With an integer
    ``update_interval`` the update happens after iterations 0, ΔT, 2ΔT, ... < T_end instead
    (as the reference's ``SparseSETOptimizer``), dropping ``int(ζ(t) nnz)`` weights of
    smallest magnitude with both signs pooled, ζ decayed by ``drop_fraction_anneal`` (RigL's
    Eq. 1 cosine): ``{update_interval: 100, drop_fraction_anneal: cosine, regrowth_init:
    zero}`` is Evci et al. 2020's SET baseline (their Sec. 4: RigL's schedule with random
    growth at zero).

    Algorithm 1 adds "new random weights"; ``regrowth_init`` says how: ``"init"`` (default)
    draws N(0, σ_l²) with σ_l the standard deviation of layer l's weights at initialization
    (measured before masking), so regrown weights start at the scale of the layer's own init,
    as in the authors' code, where the init and the regrowth share one scale; ``"normal"`` is
    the authors' literal constant, N(0, ``regrowth_std``²) with std 0.1 (``np.random.randn() /
    10`` in their sparse-Python code), which is 2-5x the scale of PyTorch's default init on
    LeNet-300-100; ``"uniform"`` draws U(±1/sqrt(fan_in)), PyTorch's default Linear/Conv init
    bound; ``"zero"`` starts them at zero (the authors' Keras code, Evci et al.'s baseline).
    Regrown weights' optimizer state starts at zero.

    Training FLOPs: ``3 * f_S`` per example; the topology update is O(nnz) and not counted
    (Evci et al. 2020, Appendix H).

    Source: Mocanu et al. 2018, "Scalable training of artificial neural networks with adaptive
    sparse connectivity inspired by network science", Nature Communications 9:2383, Algorithm 1;
    zeta = 0.3 as in the paper's experiments. End fraction and step schedule: Evci et al. 2020,
    "Rigging the Lottery", Sec. 4 and Eq. 1.
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates
    values_only = True  # evolve_values on execution: sparse

    @dataclass
    class Params(Static.Params):
        zeta: float = 0.3
        regrowth_init: Literal["init", "normal", "uniform", "zero"] = "init"
        regrowth_std: float = 0.1
        end_fraction: float = 0.75
        update_interval: int | None = None
        drop_fraction_anneal: Literal["constant", "cosine"] = "constant"

        def validate(self) -> None:
            if not 0.0 < self.zeta < 1.0:
                raise ValueError(f"zeta must be in (0, 1), got {self.zeta}")
            if self.regrowth_std <= 0.0:
                raise ValueError(f"regrowth_std must be > 0, got {self.regrowth_std}")
            if not 0.0 < self.end_fraction <= 1.0:
                raise ValueError(f"end_fraction must be in (0, 1], got {self.end_fraction}")
            if self.update_interval is not None and self.update_interval < 1:
                raise ValueError(
                    f"update_interval must be >= 1 or null, got {self.update_interval}"
                )

    @classmethod
    def check_budget(
        cls, params: Params, total_steps: int, steps_per_epoch: int | None = None
    ) -> None:
        t_end = int(params.end_fraction * total_steps)
        interval = params.update_interval
        if interval is None and steps_per_epoch is not None:
            # Epoch mode: the first update is at the end of epoch 1, never after the last one.
            if total_steps <= steps_per_epoch or steps_per_epoch > t_end:
                raise ValueError(
                    f"set: no topology update would happen: updates come at epoch ends before "
                    f"T_end = {t_end} of {total_steps} steps and never after the last epoch, "
                    f"and an epoch is {steps_per_epoch} steps; train at least 2 epochs (with "
                    f"end_fraction x epochs >= 1) or set update_interval"
                )
        if interval is not None and t_end <= interval:
            raise ValueError(
                f"set: no topology update would happen: T_end = end_fraction x total_steps = "
                f"{t_end} of {total_steps} steps <= update_interval = {interval}; lower "
                f"update_interval or train longer"
            )

    @property
    def t_end(self) -> int:
        return int(self.params.end_fraction * self.ctx.total_steps)

    def zeta_at(self, step: int) -> float:
        """ζ at optimizer step ``step``: constant, or RigL's cosine decay to 0 at T_end."""
        if self.params.drop_fraction_anneal == "constant":
            return self.params.zeta
        return self.params.zeta / 2.0 * (1.0 + math.cos(math.pi * step / self.t_end))

    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps, self.ctx.steps_per_epoch)
        store = pl_module.masks
        # The layer's init scale, before the masks zero most of it.
        self.init_std = {n: float(store.weight(n).detach().std()) for n in store.layers}
        super().on_fit_start(trainer, pl_module)

    def _evolve_all(self, pl_module, step: int) -> None:
        store = pl_module.masks
        zeta = self.zeta_at(step)
        with self.timed_update(store):
            for name in store.layers:
                if name in store.sparse:  # values-only: O(nnz), no dense tensor
                    apply = functools.partial(store.set_pattern, name)
                    self.evolve_values(store.sparse[name], zeta, name, apply=apply)
                elif (mask := store.masks[name]) is not None:
                    new_mask, grown = self.evolve(store.weight(name), mask, zeta, name)
                    store.set_mask(name, new_mask, reset=grown)

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.params.update_interval is not None:
            return
        epoch_end = (trainer.current_epoch + 1) * self.ctx.steps_per_epoch
        last = trainer.current_epoch + 1 >= self.ctx.epochs
        if last or epoch_end > self.t_end:
            return  # no topology change after the last epoch, nor after T_end
        self._evolve_all(pl_module, trainer.global_step)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        interval = self.params.update_interval
        it = trainer.global_step - 1  # 0-based index of the iteration that just stepped
        if interval is not None and it % interval == 0 and it < self.t_end:
            # As the reference's SET (last_update_step = -ΔT): iterations 0, ΔT, 2ΔT, ...
            self._evolve_all(pl_module, it)

    @torch.no_grad()
    def evolve(
        self, weight: torch.Tensor, mask: torch.Tensor, zeta: float | None = None, name: str = ""
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One SET step on one layer: returns (new mask with the same number of ones, grown
        positions) and writes the regrown weights' initial values into ``weight``.

        Args:
            weight: the layer's weight (any shape); masked entries are zero.
            mask: bool tensor of ``weight``'s shape.
            zeta: removal fraction (default ``params.zeta``).
            name: the layer's name (for ``regrowth_init: init``, its init scale).
        """
        zeta = self.params.zeta if zeta is None else zeta
        w = weight.detach()
        inf = torch.full_like(w, math.inf)
        if self.params.update_interval is None:
            pos = mask & (w >= 0)
            neg = mask & (w < 0)
            # Closest to zero first: smallest positives, largest (least negative) negatives.
            drop_pos = top_mask(torch.where(pos, -w, -inf), int(zeta * int(pos.sum())))
            drop_neg = top_mask(torch.where(neg, w, -inf), int(zeta * int(neg.sum())))
            kept = mask & ~drop_pos & ~drop_neg
        else:
            # Evci et al.'s SET: drop int(zeta * nnz) by plain magnitude, signs pooled.
            n_active = int(mask.sum())
            kept = top_mask(torch.where(mask, w.abs(), -inf), n_active - int(zeta * n_active))
        n_grow = int(mask.sum()) - int(kept.sum())
        scores = torch.rand(w.shape, generator=self.ctx.generator).to(w.device)
        grow = top_mask(torch.where(kept, -inf, scores), n_grow)
        # fan_in of a Linear row / Conv filter
        init = self._init_values(w.shape, name, w[0].numel())
        weight.data[grow] = init.to(device=w.device, dtype=weight.dtype)[grow]
        return kept | grow, grow

    def _init_values(self, shape: tuple[int, ...] | int, name: str, fan_in: int) -> torch.Tensor:
        """Initial values of regrown connections, by ``regrowth_init``, drawn in ``shape``
        from the job's generator."""
        gen, how = self.ctx.generator, self.params.regrowth_init
        if how in ("normal", "init"):
            std = self.params.regrowth_std if how == "normal" else self.init_std[name]
            return torch.randn(shape, generator=gen) * std
        if how == "uniform":
            bound = 1.0 / math.sqrt(fan_in)
            return (torch.rand(shape, generator=gen) * 2 - 1) * bound
        return torch.zeros(shape)

    @torch.no_grad()
    def evolve_values(
        self,
        layer: torch.nn.Module,
        zeta: float | None = None,
        name: str = "",
        optimizer: torch.optim.Optimizer | None = None,
        apply: Callable[..., torch.Tensor] | None = None,
    ) -> int:
        """One SET step on a values-only layer (a ``SparseLinear``) without any (out, in)
        tensor: the connections :meth:`evolve` drops (the same rule, on the values), then as
        many grown at positions drawn uniformly among those not kept by rejection sampling
        (``grow_random``), started at ``regrowth_init`` with zero optimizer state (a
        connection dropped and regrown at once restarts too, as in :meth:`evolve`). The new
        pattern is installed by ``apply(new_flat, new_values, fresh)`` (a mask store's
        ``set_pattern``, which also keeps its bookkeeping), by default
        ``kernels.topology.set_pattern`` with ``optimizer``. Returns how many were regrown."""
        from sparsebench.kernels.topology import grow_random, set_pattern, smallest

        zeta = self.params.zeta if zeta is None else zeta
        v, flat = layer.values.detach(), layer.flat_index
        if self.params.update_interval is None:
            drop = torch.zeros(v.numel(), dtype=torch.bool, device=v.device)
            for side in (v >= 0, v < 0):  # closest to zero on each side of it
                idx = side.nonzero().squeeze(1)
                drop[idx[smallest(v[idx].abs(), int(zeta * idx.numel()))]] = True
        else:
            drop = smallest(v.abs(), int(zeta * v.numel()))
        kept = flat[~drop]  # still sorted
        grown = grow_random(kept, layer.out_features * layer.in_features, int(drop.sum()),
                            self.ctx.generator)  # fmt: skip
        new_flat = torch.sort(torch.cat([kept, grown])).values
        values = torch.zeros(new_flat.numel(), dtype=v.dtype, device=v.device)
        init = self._init_values(grown.numel(), name, layer.in_features)
        values[torch.searchsorted(new_flat, grown)] = init.to(device=v.device, dtype=v.dtype)
        if apply is None:
            set_pattern(layer, new_flat, values, optimizer, fresh=grown)
        else:
            apply(new_flat, values, grown)
        return grown.numel()

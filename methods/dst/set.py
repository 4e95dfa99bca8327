"""SET: Sparse Evolutionary Training."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.dst.static import Static
from sparsebench.suite.masks import topk_mask
from sparsebench.suite.registry import register


@register("set", pillar="dst")
class SET(Static):
    """Sparse Evolutionary Training (Mocanu et al. 2018, Algorithm 1).

    Starts from a random Erdős–Rényi mask (ERK, which equals Erdős–Rényi for Linear layers).
    At the end of every training epoch but the last, in each sparse layer it removes the
    fraction ``zeta`` of the positive weights closest to zero and the fraction ``zeta`` of the
    negative weights closest to zero (Algorithm 1, step 11), then adds the same number of new
    connections at uniformly random inactive positions (step 12), so each layer keeps its exact
    number of connections. Algorithm 1 adds "new random weights"; ``regrowth_init`` says how:
    ``"normal"`` (default) draws N(0, ``regrowth_std``²) with std 0.1, as the authors'
    sparse-Python implementation (``np.random.randn() / 10``); ``"uniform"`` draws
    U(±1/sqrt(fan_in)), PyTorch's default Linear/Conv init; ``"zero"`` starts them at zero, as
    the authors' Keras code and Evci et al.'s SET baseline. Their optimizer state starts at zero.

    Training FLOPs: ``3 * f_S`` per example; the topology update is O(nnz) and not counted
    (Evci et al. 2020, Appendix H).

    Source: Mocanu et al. 2018, "Scalable training of artificial neural networks with adaptive
    sparse connectivity inspired by network science", Nature Communications 9:2383, Algorithm 1;
    zeta = 0.3 as in the paper's experiments.
    """

    @dataclass
    class Params(Static.Params):
        zeta: float = 0.3
        regrowth_init: Literal["normal", "uniform", "zero"] = "normal"
        regrowth_std: float = 0.1

        def validate(self) -> None:
            if not 0.0 < self.zeta < 1.0:
                raise ValueError(f"zeta must be in (0, 1), got {self.zeta}")
            if self.regrowth_std <= 0.0:
                raise ValueError(f"regrowth_std must be > 0, got {self.regrowth_std}")

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if trainer.current_epoch + 1 >= self.ctx.epochs:
            return  # no topology change after the last epoch
        store = pl_module.masks
        for name, mask in store.masks.items():
            if mask is not None:
                new_mask, grown = self.evolve(store.weight(name), mask)
                store.set_mask(name, new_mask, reset=grown)

    @torch.no_grad()
    def evolve(self, weight: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One SET step on one layer: returns (new mask with the same number of ones, grown
        positions) and writes the regrown weights' initial values into ``weight``.

        Args:
            weight: the layer's weight (any shape); masked entries are zero.
            mask: bool tensor of ``weight``'s shape.
        """
        w = weight.detach()
        pos = mask & (w >= 0)
        neg = mask & (w < 0)
        inf = torch.full_like(w, math.inf)
        # Closest to zero first: smallest positives, largest (least negative) negatives.
        drop_pos = topk_mask(torch.where(pos, -w, -inf), int(self.params.zeta * int(pos.sum())))
        drop_neg = topk_mask(torch.where(neg, w, -inf), int(self.params.zeta * int(neg.sum())))
        kept = mask & ~drop_pos & ~drop_neg
        n_grow = int(mask.sum()) - int(kept.sum())
        scores = torch.rand(w.shape, generator=self.ctx.generator).to(w.device)
        grow = topk_mask(torch.where(kept, -inf, scores), n_grow)
        gen = self.ctx.generator
        if self.params.regrowth_init == "normal":
            init = torch.randn(w.shape, generator=gen) * self.params.regrowth_std
        elif self.params.regrowth_init == "uniform":
            bound = 1.0 / math.sqrt(w[0].numel())  # fan_in of a Linear row / Conv filter
            init = (torch.rand(w.shape, generator=gen) * 2 - 1) * bound
        else:
            init = torch.zeros(w.shape)
        weight.data[grow] = init.to(device=w.device, dtype=weight.dtype)[grow]
        return kept | grow, grow

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
    number of connections. New weights get random values (``regrowth_init="random"``, drawn
    from U(-1/sqrt(fan_in), 1/sqrt(fan_in)), PyTorch's default Linear/Conv init, as Algorithm 1
    "adds new random weights"), or zero (``"zero"``, the variant used as SET baseline by
    Evci et al. 2020). Their optimizer state starts at zero.

    Training FLOPs: ``3 * f_S`` per example; the topology update is O(nnz) and not counted
    (Evci et al. 2020, Appendix H).

    Source: Mocanu et al. 2018, "Scalable training of artificial neural networks with adaptive
    sparse connectivity inspired by network science", Nature Communications 9:2383, Algorithm 1;
    zeta = 0.3 as in the paper's experiments.
    """

    @dataclass
    class Params(Static.Params):
        zeta: float = 0.3
        regrowth_init: Literal["random", "zero"] = "random"

        def validate(self) -> None:
            if not 0.0 < self.zeta < 1.0:
                raise ValueError(f"zeta must be in (0, 1), got {self.zeta}")

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
        if self.params.regrowth_init == "random":
            fan_in = w[0].numel()
            bound = 1.0 / math.sqrt(fan_in)
            init = (torch.rand(w.shape, generator=self.ctx.generator) * 2 - 1).to(w.device)
            weight.data[grow] = (bound * init)[grow].to(weight.dtype)
        else:
            weight.data[grow] = 0.0
        return kept | grow, grow

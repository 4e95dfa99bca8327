"""SNIP: single-shot network pruning at initialization."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.masks import check_allocation
from sparsebench.suite.registry import register


@register("snip", family="pruning")
class SNIP(MaskMethod):
    """Single-shot Network Pruning based on connection sensitivity (Lee et al. 2019).

    Before training, on one mini-batch of training data, the connection sensitivity of every
    prunable weight is s_j = |g_j · w_j| / Σ_k |g_k · w_k| (Eq. 6, with g the gradient of the
    loss w.r.t. the weight at initialization). The top-κ weights by s_j across all layers are
    kept (κ = density × number of prunable weights; one global ranking), the mask is then fixed
    and the sparse network trained as usual. ``distribution: erk|uniform`` ranks within each
    layer at that allocation's layer densities instead (our option, so that a board can compare
    every method at one layer-wise allocation; the paper's ranking is global).

    Defaults: one batch of the training batch size (``batch_size: null``), drawn with the job's
    seed; saliency computed in eval mode (BatchNorm running statistics, no dropout), as in the
    reference code. Biases stay dense (the reference also prunes them): sparsity here counts
    conv/linear kernels only, as for every method of the suite. The paper's variance-scaling
    initialization is not imposed: the task's model uses its own initialization, so all methods
    start from the same weights.

    Training FLOPs: ``3 f_D`` per example of the saliency batch, then ``3 f_S`` per example.

    Source: Lee, Ajanthan, Torr 2019, "SNIP: Single-shot Network Pruning based on Connection
    Sensitivity" (arXiv:1810.02340), ICLR, Algorithm 1 and Eq. 6.
    """

    @dataclass
    class Params:
        batch_size: int | None = None
        distribution: Literal["global", "erk", "uniform"] = "global"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if self.batch_size is not None and self.batch_size < 1:
                raise ValueError(f"batch_size must be >= 1 or null, got {self.batch_size}")
            check_allocation(self.distribution, self.dense_first_layer)

    def saliency_batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        data = self.ctx.train_data
        size = min(self.params.batch_size or self.ctx.batch_size, len(data))
        idx = torch.randperm(len(data), generator=self.ctx.generator)[:size]
        x, y = data[idx]
        return x, y

    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        x, y = self.saliency_batch()
        x, y = x.to(pl_module.device), y.to(pl_module.device)
        model = pl_module.model
        was_training = model.training
        model.eval()  # the reference computes saliency with is_train=False (BatchNorm, dropout)
        model.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        model.train(was_training)
        scores = {n: (store.weight(n).grad * store.weight(n)).abs().detach() for n in store.layers}
        model.zero_grad(set_to_none=True)
        # The normalization of Eq. 6 does not change the ranking, so rank |g * w| directly.
        params = self.params
        store.allocate(self.density, scores, params.distribution, params.dense_first_layer)
        self.ctx.flops.add(3.0 * self.ctx.flops.f_dense * x.shape[0])

"""SynFlow: iterative synaptic-flow pruning at initialization, without data."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.masks import (
    check_allocation,
    layer_densities,
    n_keep,
    top_mask,
)
from sparsebench.suite.registry import register


def synflow_scores(
    model: nn.Module,
    layers: dict[str, nn.Module],
    masks: dict[str, torch.Tensor],
    input_shape: tuple[int, ...],
) -> dict[str, torch.Tensor]:
    """Synaptic saliency S = (dR/dθ) ⊙ θ of every weight of ``layers`` in a copy of ``model``
    whose parameters and buffers are replaced by their absolute values, the weights of
    ``layers`` also multiplied by ``masks``, in float64 and eval mode; R = 1ᵀ f(1), the summed
    output for an all-ones input of ``input_shape`` (Tanaka et al. 2020, Eq. 2 and Sec. 6).
    Returns layer name -> |S| (float64, the weight's shape)."""
    twin = copy.deepcopy(model).double().eval()
    named = dict(twin.named_modules())
    with torch.no_grad():
        for tensor in [*twin.parameters(), *twin.buffers()]:
            if tensor.is_floating_point():
                tensor.abs_()
        for name in layers:
            weight = named[name].weight
            weight.mul_(masks[name].to(device=weight.device, dtype=torch.float64))
    weights = {name: named[name].weight.requires_grad_(True) for name in layers}
    device = next(twin.parameters()).device
    out = twin(torch.ones((1, *input_shape), dtype=torch.float64, device=device))
    grads = torch.autograd.grad(out.sum(), list(weights.values()))
    return {n: (g * w).detach().abs() for (n, w), g in zip(weights.items(), grads)}


@register("synflow", family="pruning")
class SynFlow(MaskMethod):
    """Iterative Synaptic Flow Pruning (Tanaka, Kunin, Yamins, Ganguli 2020, Algorithm 1).

    Before training and without looking at the data: starting from the dense mask, repeat for
    k = 1..n (n = ``iterations``, default 100): compute the synaptic saliency of every weight,
    S = (∂R/∂θ) ⊙ θ with R = 1ᵀ (∏_l |θ^[l]| ⊙ μ^[l]) 1, i.e. the network with every parameter
    replaced by its absolute value, masked, evaluated on an all-ones input and summed
    (:func:`synflow_scores`); then keep the weights with the largest scores, ranked jointly
    over all layers, at density d^(k/n) (the exponential schedule of the paper: the target
    density d is reached at k = n). The mask is then fixed and the network trained as usual,
    from its own (signed) initial weights.

    The score is conserved layer by layer (the paper's Theorem 2), so no layer is pruned away
    before another: this is its answer to layer collapse, which it is compared on
    (``claims/tanaka2020_synflow.yaml``).

    Ours where the paper leaves it open: the scores are computed in float64 on a copy of the
    model (products of absolute weights over many layers overflow float32 in deep networks;
    the ranking of a shallow one is the same), in eval mode (BatchNorm with its running
    statistics, themselves made absolute, as every buffer; no dropout), biases included in
    the flow but never pruned (sparsity counts the kernels of linear and convolutional
    layers, as for every method here). ``distribution: erk|uniform`` ranks within each layer
    at that allocation's layer densities for d^(k/n) instead of globally (our option, so that
    a board can compare methods at one layer-wise allocation; the paper ranks globally).

    Training FLOPs: the n score passes (each a forward and backward of one example, ``3 f_D``
    each, dense: ours, an upper bound) are added to the sparse training's ``3 f_S`` per example.

    Source: Tanaka, Kunin, Yamins, Ganguli 2020, "Pruning neural networks without any data by
    iteratively conserving synaptic flow" (arXiv:2006.05467), NeurIPS, Algorithm 1 (100 iterations,
    exponential schedule, global masking) and Eq. 2.
    """

    @dataclass
    class Params:
        iterations: int = 100
        distribution: Literal["global", "erk", "uniform"] = "global"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if self.iterations < 1:
                raise ValueError(f"iterations must be >= 1, got {self.iterations}")
            check_allocation(self.distribution, self.dense_first_layer)

    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example (the only thing SynFlow reads from the data)."""
        return tuple(self.ctx.train_data[0][0].shape)

    def masks_at_init(self, store) -> dict[str, torch.Tensor]:
        """The mask after ``iterations`` rounds of scoring and pruning."""
        params = self.params
        shapes = store.shapes
        masks = {n: torch.ones(s, dtype=torch.bool) for n, s in shapes.items()}
        shape = self.input_shape()
        total = sum(m.numel() for m in masks.values())
        for k in range(1, params.iterations + 1):
            density = self.density ** (k / params.iterations)
            scores = synflow_scores(store.model, store.layers, masks, shape)
            scores = {n: s.cpu() for n, s in scores.items()}
            if params.distribution == "global":
                flat = torch.cat([scores[n].reshape(-1) for n in shapes])
                keep = top_mask(flat, n_keep(total, density))
                start = 0
                for n, s in shapes.items():
                    size = masks[n].numel()
                    masks[n] = keep[start : start + size].view(s)
                    start += size
            else:
                per_layer = layer_densities(
                    shapes, density, params.distribution, params.dense_first_layer
                )
                for n, d in per_layer.items():
                    masks[n] = top_mask(scores[n], n_keep(masks[n].numel(), d))
        self.ctx.flops.add(3.0 * self.ctx.flops.f_dense * params.iterations)
        return masks

    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        masks = self.masks_at_init(store)
        store.set_masks({n: None if bool(m.all()) else m for n, m in masks.items()})

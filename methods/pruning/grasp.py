"""GraSP: gradient signal preservation, pruning at initialization."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from sparsebench.methods.pruning.base import MaskMethod
from sparsebench.suite.pillars.classification.masks import check_allocation
from sparsebench.suite.registry import register


def hessian_gradient_product(
    model: torch.nn.Module, weights: list[torch.Tensor], x: torch.Tensor, y: torch.Tensor, T: float
) -> list[torch.Tensor]:
    """Hg for the loss L = CE(f(x) / T, y): g = ∇L (held constant), then ∇(gᵀ ∇L) = H g by
    double back-propagation (Wang et al. 2020, Algorithm 1, lines 3-5)."""
    loss = F.cross_entropy(model(x) / T, y)
    g = [t.detach() for t in torch.autograd.grad(loss, weights)]
    loss = F.cross_entropy(model(x) / T, y)
    grads = torch.autograd.grad(loss, weights, create_graph=True)
    z = sum((gi * fi).sum() for gi, fi in zip(g, grads))
    return [t.detach() for t in torch.autograd.grad(z, weights)]


@register("grasp", family="pruning")
class GraSP(MaskMethod):
    """Gradient Signal Preservation (Wang, Zhang, Grosse 2020, Algorithm 1).

    Before training, on a class-balanced sample of the training set (``samples_per_class``
    examples of every class), with the logits divided by a temperature T (``temperature``,
    200): g = ∇_θ L and the Hessian-gradient product Hg (:func:`hessian_gradient_product`);
    every weight's score is S(-θ) = -θ ⊙ Hg (Eq. 8), the change of the gradient norm ‖g‖²
    to first order when the weight is removed. The weights with the largest scores are removed
    (their removal reduces the gradient flow least, or increases it), ranked jointly over all
    layers; the mask is then fixed and the network trained as usual.

    Defaults: T = 200, one iteration, 10 examples per class (the authors' configurations for
    10-class data; their function's own default is 25), train mode on a copy of the model as
    in their code (its ``.eval()`` is commented out). Ours: the scores are computed on the
    task's own initial weights, the θ0 of the paper (the authors' code scores a copy whose
    linear layers are redrawn with Xavier-normal and then trains differently initialised
    weights); g and Hg from one batch (the authors split it into two
    halves for memory; the sum over halves scales both by constants, so the ranking is the
    same); examples drawn with the job's seed; biases stay dense (sparsity counts kernels, as for
    every method here). ``distribution: erk|uniform`` ranks within each layer at that
    allocation's layer densities instead (our option, as for SNIP).

    Training FLOPs: the two forward-backward passes and the double backward of the sample are
    counted as ``3 f_D`` per example, three times (ours, an estimate), then ``3 f_S`` per
    example of training.

    Source: Wang, Zhang, Grosse 2020, "Picking Winning Tickets Before Training by Preserving
    Gradient Flow" (arXiv:2002.07376), ICLR, Algorithm 1 and Eq. 8.
    """

    @dataclass
    class Params:
        samples_per_class: int = 10
        temperature: float = 200.0
        distribution: Literal["global", "erk", "uniform"] = "global"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

        def validate(self) -> None:
            if self.samples_per_class < 1:
                raise ValueError(f"samples_per_class must be >= 1, got {self.samples_per_class}")
            if not self.temperature > 0:
                raise ValueError(f"temperature must be > 0, got {self.temperature}")
            check_allocation(self.distribution, self.dense_first_layer)

    def sample(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``samples_per_class`` examples of every class, in a random order of the job's seed
        (fewer for a class that has fewer)."""
        data = self.ctx.train_data
        order = torch.randperm(len(data), generator=self.ctx.generator)
        taken: dict[int, list[int]] = {}
        want = self.params.samples_per_class
        for i in order.tolist():
            label = int(data[i][1])
            picked = taken.setdefault(label, [])
            if len(picked) < want:
                picked.append(i)
        idx = torch.tensor(sorted(i for picked in taken.values() for i in picked))
        x, y = data[idx]
        return x, y

    def scores(self, store) -> dict[str, torch.Tensor]:
        """-θ ⊙ Hg of every prunable weight (larger: removed first), computed on a copy of
        the model in train mode, as the authors do: the model's own BatchNorm statistics and
        gradients are untouched."""
        twin = copy.deepcopy(store.model).train()
        weights = [twin.get_submodule(n).weight for n in store.layers]
        device = weights[0].device
        x, y = self.sample()
        x, y = x.to(device), y.to(device)
        hg = hessian_gradient_product(twin, weights, x, y, self.params.temperature)
        self.ctx.flops.add(3 * 3.0 * self.ctx.flops.f_dense * x.shape[0])
        return {n: -(w.detach() * h) for n, w, h in zip(store.layers, weights, hg)}

    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        removal = self.scores(store)
        # keep the smallest -θ⊙Hg: the largest of its negation
        keep = {n: -s for n, s in removal.items()}
        p = self.params
        store.allocate(self.density, keep, p.distribution, p.dense_first_layer)

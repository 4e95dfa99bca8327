"""SeReNe: neuron-sensitivity regularization, then magnitude thresholding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sparsebench.methods.pruning.lobster import Lobster, insensitivity_shrink
from sparsebench.suite.pillars.classification.flops import sparse_forward_flops
from sparsebench.suite.registry import register


@register("serene", family="pruning")
class Serene(Lobster):
    """SeReNe (Tartaglione et al. 2021): the LOBSTER scheme with the sensitivity of a *neuron*
    rather than of a weight. A neuron n of a pruned layer (its pre-activation z_n, the layer's
    output unit or channel) has sensitivity S_n, the mean over the batch of how much the
    network's outputs y_1..y_C move with it; after every optimizer step all of the neuron's
    incoming weights shrink by its insensitivity,

        W[n, :] ← W[n, :] - λ W[n, :] relu(1 - S_n),

    so a neuron the outputs do not need decays as a whole (structured sparsity), and a
    magnitude threshold then removes its weights. The sensitivity is the code's
    ``lower-bound`` variant (the paper's bounded, one-backward form):

        S_n = α · mean_batch |∂(Σ_k y_k) / ∂z_n|,   α = 1 / C,

    one extra backward of Σ_k y_k to the layers' outputs per step (a convolution's channel
    averages over its map too, a linear layer on a token sequence over the tokens); biases are
    not regularized. λ = 1e-4 as LOBSTER's default; the variant and α are required arguments
    of the authors' code (github.com/EIDOSLAB/SeReNe, ``-serene_type``, ``-serene_alpha``,
    whose help text gives α = 1/C): ``lower-bound`` and α = 1/C are ours from it. Their
    lower-bound path reduces a convolution's sensitivity to its first channel's (a bug that
    breaks their update); here each channel keeps its own mean, as their ``full`` path does.

    Ours, as for LOBSTER (methods/pruning/lobster.py): the authors prune at validation-loss
    plateaus with the largest |w| threshold that keeps the loss within ``twt`` (a bisection)
    and report the sparsity that comes out; here the threshold is the global magnitude
    quantile of GMP's cubic schedule (25-75 % of the run), so the run ends at the board's
    target; the ``full`` variant (one backward per class) and the ``local`` one are not
    built; their optional removal of neurons left with no weight changes no weight count and
    is not done.

    Training FLOPs: GMP's ``3 f_S(t)`` per example plus the extra backward to the layers'
    outputs, which propagates through the sparse weights: ``f_S(t)`` more.

    Source: Tartaglione, Bragagnolo, Fiandrotti, Grangetto 2021, "SeReNe: Sensitivity-based
    Regularization of Neurons for Structured Sparsity in Neural Networks", IEEE TNNLS,
    arXiv:2102.03773, Sec. III (neuron sensitivity, its bounded form, the update); the
    authors' code for the defaults and the variant.
    """

    hooks_layers = True  # forward hooks on the pruned layers: execution dense_mask only

    @dataclass
    class Params(Lobster.Params):
        pass

    def on_fit_start(self, trainer, pl_module) -> None:
        super().on_fit_start(trainer, pl_module)
        self._outputs: dict[str, torch.Tensor] = {}
        self._sensitivity: dict[str, torch.Tensor] = {}
        self._hooks = [
            module.register_forward_hook(self._keeper(name))
            for name, module in [("", pl_module.model), *pl_module.masks.layers.items()]
        ]

    def _keeper(self, name: str):
        def keep(module: nn.Module, inputs: Any, out: torch.Tensor) -> None:
            if module.training and torch.is_grad_enabled():
                self._outputs[name] = out

        return keep

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        y = self._outputs.pop("")
        names = [n for n in pl_module.masks.layers if n in self._outputs]
        zs = [self._outputs.pop(n) for n in names]
        grads = torch.autograd.grad(y.sum(), zs, retain_graph=True)
        alpha = 1.0 / y.shape[-1]
        layers = pl_module.masks.layers
        for name, g in zip(names, grads, strict=True):
            # a neuron's axis: a linear layer's last (its input may be a token sequence), a
            # convolution's channel; the mean is over the batch, tokens and the channel's map
            axis = g.dim() - 1 if isinstance(layers[name], nn.Linear) else 1
            dims = [d for d in range(g.dim()) if d != axis]
            self._sensitivity[name] = alpha * g.abs().mean(dim=dims)
        self._outputs.clear()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        store = pl_module.masks
        with torch.no_grad():
            for name, s in self._sensitivity.items():
                w = store.weight(name)
                insensitivity_shrink(w, s.view(-1, *([1] * (w.dim() - 1))), self.params.lmbda)
        self._sensitivity.clear()
        flops = self.ctx.flops
        extra = sparse_forward_flops(flops.dense_flops, store.densities())
        flops.add(extra * int(batch[0].shape[0]))

    def on_train_end(self, trainer, pl_module) -> None:
        for hook in self._hooks:
            hook.remove()
        self._hooks = []

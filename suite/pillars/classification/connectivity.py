"""Connectivity of a masked network: which output units can still be reached from the input.

At high sparsity a layer-wise allocation can leave no path from the input to some (or all)
outputs: sparselearning's LeNet-5 at 98 % trains to chance that way, and nothing in a record
said why. :func:`reachable_output_fraction` answers it from the masks alone: the network is run
once on an all-ones input with every prunable weight replaced by its 0/1 mask (dense layers by
ones), every bias at zero and every normalization as the identity, in float64. All values stay
non-negative through ReLU, max/avg pooling, flattening and residual additions, so an output is
positive exactly when some input-to-output path of active connections reaches it.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from sparsebench.suite.pillars.classification.masks import MaskStore

# Layers whose output is not a monotone function of non-negative inputs (LayerNorm subtracts the
# mean, attention's softmax mixes tokens): the all-ones test does not apply to them.
_UNSUPPORTED = (nn.LayerNorm, nn.MultiheadAttention, nn.GroupNorm)


@torch.no_grad()
def reachable_output_fraction(
    model: nn.Module, store: MaskStore, input_shape: tuple[int, ...]
) -> float | None:
    """Share of the model's outputs (logits) reachable from the input through active weights.

    Args:
        model: the network (not modified: a float64 copy is run in eval mode).
        store: the model's mask store (``None`` mask = dense layer).
        input_shape: per-example input shape, e.g. ``(1, 28, 28)``.
    Returns: a fraction in [0, 1] (1.0 = every output connected), or None for a model with a
        layer the test does not cover (LayerNorm, attention: the ViT).
    """
    if any(isinstance(m, _UNSUPPORTED) for m in model.modules()):
        return None
    probe = copy.deepcopy(model).double().eval()
    for module in probe.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm):
            module.reset_parameters()  # weight 1, bias 0, running mean 0, variance 1
        elif getattr(module, "bias", None) is not None and isinstance(module.bias, nn.Parameter):
            module.bias.zero_()
    probe_layers = dict(probe.named_modules())
    for name in store.layers:
        mask = store.masks[name]
        w = probe_layers[name].weight
        w.copy_(torch.ones_like(w) if mask is None else mask.to(w.device, torch.float64))
    device = next(probe.parameters()).device
    out = probe(torch.ones((1, *input_shape), dtype=torch.float64, device=device))
    return float((out > 0).double().mean())

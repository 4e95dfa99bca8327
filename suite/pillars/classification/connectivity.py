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


def _probe(model: nn.Module, store: MaskStore) -> tuple[nn.Module, dict[str, nn.Parameter]]:
    """A float64 eval-mode copy of ``model`` with biases zero, normalizations the identity and
    every prunable weight replaced by its 0/1 mask (dense layers by ones); returns it and its
    prunable weights by layer name."""
    probe = copy.deepcopy(model, _plain_linears(model)).double().eval()
    with torch.no_grad():
        for module in probe.modules():
            if isinstance(module, nn.modules.batchnorm._BatchNorm):
                module.reset_parameters()  # weight 1, bias 0, running mean 0, variance 1
            elif getattr(module, "bias", None) is not None and isinstance(
                module.bias, nn.Parameter
            ):
                module.bias.zero_()
        probe_layers = dict(probe.named_modules())
        weights = {}
        for name in store.layers:
            mask = store.masks[name]
            w = probe_layers[name].weight
            w.copy_(torch.ones_like(w) if mask is None else mask.to(w.device, torch.float64))
            weights[name] = w
    return probe, weights


def _plain_linears(model: nn.Module) -> dict[int, nn.Module]:
    """A deepcopy memo that copies every kernel-backed linear layer as a plain ``nn.Linear``
    with the same values: the probe needs dense float64 weights, and a backend's cached
    sparse pattern (a CSR tensor) cannot be deep-copied."""
    from sparsebench.kernels import SparseLinear
    from sparsebench.suite.pillars.classification.execution import KernelLinear

    memo: dict[int, nn.Module] = {}
    for module in model.modules():
        if isinstance(module, SparseLinear):  # values-only: its dense twin (O(out · in))
            memo[id(module)] = module.to_dense()
        elif isinstance(module, KernelLinear):
            w = module.weight
            plain = nn.Linear(
                module.in_features,
                module.out_features,
                bias=module.bias is not None,
                device=w.device,
                dtype=w.dtype,
            )
            with torch.no_grad():
                plain.weight.copy_(w)
                if module.bias is not None:
                    plain.bias.copy_(module.bias)
            memo[id(module)] = plain
    return memo


def _supported(model: nn.Module) -> bool:
    return not any(isinstance(m, _UNSUPPORTED) for m in model.modules())


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
    if not _supported(model):
        return None
    probe, _ = _probe(model, store)
    device = next(probe.parameters()).device
    out = probe(torch.ones((1, *input_shape), dtype=torch.float64, device=device))
    return float((out > 0).double().mean())


def effective_density(
    model: nn.Module, store: MaskStore, input_shape: tuple[int, ...]
) -> float | None:
    """Effective density (Vysogorets & Kempe 2023, "Connectivity Matters: Neural Network
    Pruning Through the Lens of Effective Sparsity", JMLR, Sec. 3): the share of prunable
    weights that are active AND lie on some input-to-output path of active connections. A
    weight that no input reaches, or that reaches no output, is as good as pruned, so at high
    sparsity the nominal density overstates what the network can use.

    Computed as in that paper, from the all-ones probe of :func:`reachable_output_fraction`:
    with non-negative weights and input, ``d sum(out) / d w`` of an active weight is positive
    exactly when its input unit is reachable from the input and its output unit reaches some
    output. Max pooling, whose gradient reaches one input of a window, is replaced in the probe
    by average pooling, which has the same support and passes gradient to every input (ours).

    Returns: a fraction in [0, 1 - sparsity], or None for a model the probe does not cover.
    """
    from unittest import mock

    import torch.nn.functional as F

    if not _supported(model) or not store.total:
        return None
    probe, weights = _probe(model, store)
    for w in probe.parameters():
        w.requires_grad_(False)
    for w in weights.values():
        w.requires_grad_(True)
    device = next(probe.parameters()).device
    x = torch.ones((1, *input_shape), dtype=torch.float64, device=device)

    def avg_pool(x, kernel_size, stride=None, padding=0, *_, **__):
        return F.avg_pool2d(x, kernel_size, stride, padding)

    with mock.patch.object(F, "max_pool2d", avg_pool), torch.enable_grad():
        probe(x).sum().backward()
    on_path = 0
    for w in weights.values():
        active = w.detach() > 0
        on_path += int((active & (w.grad > 0)).sum())
    return on_path / store.total

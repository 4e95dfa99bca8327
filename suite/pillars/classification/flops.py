"""FLOPs accounting.

Dense forward FLOPs come from ``torch.utils.flop_counter.FlopCounterMode`` (which counts
2 x MACs for matmuls and convolutions), per module. A sparse layer's FLOPs are its dense FLOPs
scaled by its density; other operations (bias adds, activations, pooling, norms) are not
counted. This is NOT the RigL paper's count: its MicroNet counter also counts bias adds and
activations, so our absolute FLOPs are somewhat lower than theirs for the same network, and our
sparse/dense ratios somewhat lower too (the uncounted terms do not shrink with density). What
we take from Evci et al. is the training-step rule below, not parity of absolute numbers.

Training FLOPs follow Evci et al. 2020 ("Rigging the Lottery", Sec. 4 and Appendix H): one
training step on one example costs the forward pass plus twice it for the backward pass,
``3 * f_S``, where ``f_S`` is the sparse forward FLOPs at the current masks. Methods add their
extra costs (RigL's dense gradient every ΔT steps, SNIP's saliency pass, ...) through
``TrainFlopsCounter.add``.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from sparsebench.suite.pillars.classification.masks import prunable_layers


def layer_flops(model: nn.Module, input_shape: tuple[int, ...]) -> dict[str, int]:
    """Dense forward FLOPs of each prunable layer for ONE example of ``input_shape``.

    Args:
        model: the network (its parameters are not changed; it runs once in eval mode).
        input_shape: per-example shape, e.g. ``(1, 28, 28)``.
    Returns: layer name -> FLOPs (2 x multiply-accumulates), biases not counted.
    """
    layers = prunable_layers(model)
    was_training = model.training
    model.eval()
    param = next(model.parameters())
    x = torch.zeros((1, *input_shape), dtype=param.dtype, device=param.device)
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(x)
    model.train(was_training)
    per_module = counter.get_flop_counts()
    # FlopCounterMode keys modules by their fully qualified name prefixed with the root class.
    root = type(model).__name__
    out = {}
    for name in layers:
        counts = per_module.get(f"{root}.{name}", {})
        out[name] = int(sum(counts.values()))
    return out


def sparse_forward_flops(dense_flops: Mapping[str, int], densities: Mapping[str, float]) -> float:
    """Forward FLOPs of one example with each layer's dense FLOPs scaled by its density."""
    return float(sum(f * densities.get(n, 1.0) for n, f in dense_flops.items()))


class TrainFlopsCounter:
    """Accumulates training FLOPs step by step (RigL accounting: 3 x sparse forward per example).

    Attributes:
        total: FLOPs so far.
        dense_total: what dense training of the same examples would cost (3 x f_D each).
    """

    def __init__(self, dense_flops: Mapping[str, int]):
        self.dense_flops = dict(dense_flops)
        self.f_dense = float(sum(self.dense_flops.values()))
        self.total = 0.0
        self.dense_total = 0.0

    def step(self, batch_size: int, densities: Mapping[str, float]) -> None:
        """One optimizer step on ``batch_size`` examples at the given layer densities."""
        self.total += 3.0 * sparse_forward_flops(self.dense_flops, densities) * batch_size
        self.dense_total += 3.0 * self.f_dense * batch_size

    def add(self, flops: float) -> None:
        """A method's extra cost (e.g. a dense backward pass for RigL's regrowth)."""
        self.total += float(flops)

    def dense_grad_extra(self, densities: Mapping[str, float], batch_size: int) -> float:
        """What a step's dense weight gradient costs beyond the sparse one, at the given layer
        densities: ``(f_D - f_S) x batch_size`` (Evci et al. 2020, Appendix H: an update
        iteration's backward pass computes the dense weight gradient)."""
        return (self.f_dense - sparse_forward_flops(self.dense_flops, densities)) * batch_size

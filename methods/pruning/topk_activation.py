"""Top-k activation sparsity: only the k largest hidden units of each MLP layer are active for
each input (the seed "lazy neuron" paper's Top-k Transformer)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from sparsebench.suite.registry import register

from .base import MaskMethod


@dataclass
class TopKActivationParams:
    """Attributes:
    k_fraction: active units per input as a fraction of each hidden layer's width, k =
        max(1, round(k_fraction · width)) (ours: one fraction for layers of different widths;
        the paper states k per model).
    """

    k_fraction: float = 0.1


def mlp_hidden_layers(layers: dict[str, nn.Module]) -> list[str]:
    """The layers whose outputs are MLP hidden units (ours): a transformer's FFN input layers
    (names ending in ``mlp.fc1``) where the model has them, else every ``nn.Linear`` but the
    last (the classifier head), each followed by its ReLU in the suite's MLP and CNN heads."""
    linear = [n for n, m in layers.items() if isinstance(m, nn.Linear)]
    ffn = [n for n in linear if n.endswith("mlp.fc1")]
    return ffn or linear[:-1]


@register("topk_activation", family="pruning", sparse=False)
class TopKActivation(MaskMethod):
    """Top-k activation sparsity: in every forward pass, training and inference alike, each MLP
    hidden layer keeps the k largest of its units for each input (each token in a
    transformer) and sets the others to zero before the activation function; the weights stay
    dense. The record's ``activation_density`` is the measured share of hidden units with a
    positive pre-activation over the test set (after ReLU: the nonzero ones), at most
    k / width: a kept unit may itself be negative.

    Source: the seed paper "The Lazy Neuron Phenomenon: On Emergence of Activation Sparsity in
    Transformers" (Li et al. 2023, ICLR; arXiv:2210.06313), the Top-k Transformer (top-k
    thresholding: the k largest entries of the MLP's activation map kept, the rest zeroed, in
    training and inference). Ours: units
    ranked by their pre-activation (the same order as after ReLU, and as after GELU for the
    positive units that top-k keeps), zeroed before the activation (ReLU(0) = GELU(0) = 0);
    k as a fraction of the width (``k_fraction``); which layers are MLP hidden layers
    (``mlp_hidden_layers``); FLOPs counted dense (the skipped products of the next layer
    are not subtracted).
    """

    Params = TopKActivationParams

    @classmethod
    def check_sparsity(cls, params: TopKActivationParams, sparsity: float) -> None:
        if not 0 < params.k_fraction <= 1:
            raise ValueError(f"k_fraction must be in (0, 1], got {params.k_fraction}")

    @classmethod
    def check_model(cls, params: TopKActivationParams, layers: dict[str, nn.Module]) -> None:
        cls.check_sparsity(params, 0.0)
        if not mlp_hidden_layers(layers):
            raise ValueError(
                "top-k activation sparsity needs MLP hidden layers (a linear layer before the "
                "classifier head, or transformer FFNs); this model has none"
            )

    @classmethod
    def pattern(cls, params: Any) -> str:
        return "activation"

    def __init__(self, params: TopKActivationParams, sparsity: float, ctx) -> None:
        super().__init__(params, sparsity, ctx)
        self._hooks: list[Any] = []
        self._off = False
        self._active = 0
        self._units = 0

    def on_fit_start(self, trainer, pl_module) -> None:
        if self._hooks:
            return
        modules = dict(pl_module.model.named_modules())
        names = mlp_hidden_layers({n: pl_module.masks.layers[n] for n in pl_module.masks.layers})
        for name in names:
            self._hooks.append(modules[name].register_forward_hook(self._keep_top_k))

    @contextmanager
    def plain_network(self) -> Iterator[None]:
        self._off = True
        try:
            yield
        finally:
            self._off = False

    def _keep_top_k(self, module: nn.Module, inputs: Any, out: torch.Tensor) -> torch.Tensor:
        if self._off:
            return out
        width = out.shape[-1]
        k = max(1, round(self.params.k_fraction * width))
        if k < width:
            keep = torch.zeros_like(out, dtype=torch.bool)
            keep.scatter_(-1, out.topk(k, dim=-1).indices, True)
            out = out * keep
        if not module.training:  # the test set's: units the activation leaves positive
            self._active += int((out > 0).sum())
            self._units += out.numel()
        return out

    def on_test_start(self, trainer, pl_module) -> None:
        self._active = self._units = 0  # only the test pass counts

    def activation_density(self) -> float | None:
        return self._active / self._units if self._units else None

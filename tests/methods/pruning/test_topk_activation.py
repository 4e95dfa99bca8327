"""Top-k activation sparsity: the k largest units of each MLP hidden layer per input, by hand;
which layers are MLP hidden layers; the measured activation density."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.topk_activation import (
    TopKActivation,
    TopKActivationParams,
    mlp_hidden_layers,
)
from sparsebench.suite.models import build_model
from sparsebench.suite.pillars.classification.masks import prunable_layers


def _method(k_fraction: float) -> TopKActivation:
    return TopKActivation(TopKActivationParams(k_fraction), 0.0, None)


def test_each_input_keeps_its_k_largest_units_and_density_counts_the_positive_ones():
    m = _method(0.5)
    layer = nn.Linear(1, 4).eval()
    out = torch.tensor([[1.0, 3.0, -2.0, 5.0], [-1.0, -3.0, -2.0, 0.5]])
    kept = m._keep_top_k(layer, (), out)
    # row 0: 5 and 3 kept; row 1: 0.5 and -1 kept (the -1 then fails ReLU)
    assert kept.tolist() == [[0.0, 3.0, 0.0, 5.0], [-1.0, 0.0, 0.0, 0.5]]
    assert m.activation_density() == 3 / 8
    # training passes are not counted; k = max(1, round(k_fraction · width))
    layer.train()
    assert _method(0.01)._keep_top_k(layer, (), out).ne(0).sum(1).tolist() == [1, 1]


def test_mlp_hidden_layers_of_the_suites_models():
    def hidden(name: str) -> list[str]:
        model = build_model(name, (1, 28, 28), 10)
        return mlp_hidden_layers(prunable_layers(model))

    assert hidden("lenet300_100") == ["fc1", "fc2"]
    assert hidden("lenet5") == ["fc1"]
    vit = hidden("vit_tiny")
    assert vit and all(n.endswith("mlp.fc1") for n in vit)
    assert mlp_hidden_layers({"fc": nn.Linear(4, 2)}) == []
    with pytest.raises(ValueError, match="needs MLP hidden layers"):
        TopKActivation.check_model(TopKActivationParams(), {"fc": nn.Linear(4, 2)})
    with pytest.raises(ValueError, match=r"k_fraction must be in \(0, 1\]"):
        TopKActivation.check_model(TopKActivationParams(0.0), {"a": nn.Linear(4, 4)})


def test_the_plain_network_switches_top_k_off_for_the_masks_structural_measures():
    m = _method(0.25)
    out = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    with m.plain_network():
        assert torch.equal(m._keep_top_k(nn.Linear(1, 4), (), out), out)
    assert m._keep_top_k(nn.Linear(1, 4), (), out).tolist() == [[0.0, 0.0, 0.0, 4.0]]

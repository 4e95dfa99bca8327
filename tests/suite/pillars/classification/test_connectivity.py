"""Reachable outputs from the masks alone, on hand-made masks."""

import torch
from torch import nn

from sparsebench.suite.models import build_model
from sparsebench.suite.pillars.classification.connectivity import reachable_output_fraction
from sparsebench.suite.pillars.classification.masks import MaskStore


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 3))


def test_an_output_without_incoming_paths_is_unreachable():
    model = _mlp()
    store = MaskStore(model)
    assert reachable_output_fraction(model, store, (4,)) == 1.0  # dense
    # Hidden unit 0 gets input 1; hidden units 1 and 2 get nothing. Output 0 reads hidden 0,
    # output 1 reads hidden 1 (dead), output 2 reads hidden 0 and 2.
    store.set_mask("0", torch.tensor([[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool))
    store.set_mask("2", torch.tensor([[1, 0, 0], [0, 1, 0], [1, 0, 1]], dtype=torch.bool))
    assert reachable_output_fraction(model, store, (4,)) == 2 / 3
    # Negative weights and biases do not matter: only the masks do.
    with torch.no_grad():
        model[0].weight.mul_(-1)
        model[0].bias.fill_(-100.0)
    assert reachable_output_fraction(model, store, (4,)) == 2 / 3
    store.set_mask("0", torch.zeros(3, 4, dtype=torch.bool))
    assert reachable_output_fraction(model, store, (4,)) == 0.0


def test_lenet5_with_an_empty_conv_layer_is_disconnected():
    model = build_model("lenet5", (1, 28, 28), 10)
    store = MaskStore(model)
    assert reachable_output_fraction(model, store, (1, 28, 28)) == 1.0
    store.set_mask("conv2", torch.zeros_like(model.conv2.weight, dtype=torch.bool))
    assert reachable_output_fraction(model, store, (1, 28, 28)) == 0.0
    # One kernel tap of conv2 from channel 0 to channel 3 reconnects every output through fc1.
    mask = torch.zeros_like(model.conv2.weight, dtype=torch.bool)
    mask[3, 0, 2, 2] = True
    store.set_mask("conv2", mask)
    assert reachable_output_fraction(model, store, (1, 28, 28)) == 1.0
    # The model itself is untouched.
    assert model.conv1.weight.dtype == torch.float32 and model.conv1.bias.abs().sum() > 0


def test_effective_density_counts_active_weights_on_an_input_output_path():
    from sparsebench.suite.pillars.classification.connectivity import effective_density

    model = _mlp()
    store = MaskStore(model)
    assert effective_density(model, store, (4,)) == 1.0  # dense: every weight on a path
    # Layer 0: h0 <- in1 (on a path), h1 <- in3 (h1 feeds nothing: a dead end).
    # Layer 2: out0 <- h0 and out2 <- h0 (on paths), out2 <- h2 (h2 gets no input).
    store.set_mask("0", torch.tensor([[0, 1, 0, 0], [0, 0, 0, 1], [0, 0, 0, 0]], dtype=torch.bool))
    store.set_mask("2", torch.tensor([[1, 0, 0], [0, 0, 0], [1, 0, 1]], dtype=torch.bool))
    # 5 active of 21 weights, 3 of them effective.
    assert store.total_nnz == 5 and store.total == 21
    assert effective_density(model, store, (4,)) == 3 / 21
    assert reachable_output_fraction(model, store, (4,)) == 2 / 3


def test_effective_density_of_lenet5_sees_through_max_pooling():
    from sparsebench.suite.pillars.classification.connectivity import effective_density

    model = build_model("lenet5", (1, 28, 28), 10)
    store = MaskStore(model)
    assert effective_density(model, store, (1, 28, 28)) == 1.0
    # conv1 writes only channel 0, conv2 reads only channel 1: nothing reaches past conv2.
    m1 = torch.zeros_like(model.conv1.weight, dtype=torch.bool)
    m1[0] = True
    m2 = torch.zeros_like(model.conv2.weight, dtype=torch.bool)
    m2[:, 1] = True
    store.set_mask("conv1", m1)
    store.set_mask("conv2", m2)
    assert 1 - store.sparsity() > 0.9  # the fc layers are dense
    assert effective_density(model, store, (1, 28, 28)) == 0.0
    assert reachable_output_fraction(model, store, (1, 28, 28)) == 0.0


def test_effective_density_is_none_for_the_vit():
    from sparsebench.suite.pillars.classification.connectivity import effective_density

    model = build_model("vit_tiny", (1, 28, 28), 10)
    assert effective_density(model, MaskStore(model), (1, 28, 28)) is None

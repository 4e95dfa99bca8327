import pytest
import torch
from torch import nn

from sparsebench.suite.pillars.classification.masks import (
    MaskStore,
    erk_densities,
    layer_densities,
    n_keep,
    prunable_layers,
    top_mask,
    uniform_densities,
)


def test_erk_hand_calculation():
    # raw ERK scores: A (10x10) 20/100 = 0.2; B (10x40) 50/400 = 0.125.
    # density 0.5 -> 250 nonzeros = eps * (0.2*100 + 0.125*400) -> eps = 250/70.
    d = erk_densities({"A": (10, 10), "B": (10, 40)}, 0.5)
    assert d["A"] == pytest.approx(0.2 * 250 / 70)
    assert d["B"] == pytest.approx(0.125 * 250 / 70)
    assert 100 * d["A"] + 400 * d["B"] == pytest.approx(250)


def test_erk_overflow_layer_made_dense_and_eps_resolved():
    # density 0.9: eps = 450/70 gives A a density of 1.29 > 1, so A is dense (100 weights) and
    # B gets the remaining 350 of its 400 weights: eps = 350/50 = 7, density 0.875.
    d = erk_densities({"A": (10, 10), "B": (10, 40)}, 0.9)
    assert d == {"A": 1.0, "B": pytest.approx(0.875)}


def test_erk_conv_uses_kernel_dims():
    # conv (n_out, n_in, kh, kw) = (4, 2, 3, 3): raw = (4+2+3+3)/72; linear (5, 8): 13/40.
    d = erk_densities({"conv": (4, 2, 3, 3), "fc": (5, 8)}, 0.3)
    total = 72 * d["conv"] + 40 * d["fc"]
    assert total == pytest.approx(0.3 * 112)
    assert d["conv"] / d["fc"] == pytest.approx((12 / 72) / (13 / 40))


def test_uniform_and_dense_first_layer():
    shapes = {"a": (4, 4), "b": (4, 4)}
    assert uniform_densities(shapes, 0.25) == {"a": 0.25, "b": 0.25}
    assert uniform_densities(shapes, 0.25, dense_first_layer=True) == {"a": 1.0, "b": 0.25}
    with pytest.raises(ValueError, match="unknown sparsity distribution 'foo'"):
        layer_densities(shapes, 0.5, "foo")
    with pytest.raises(ValueError, match="density must be in"):
        erk_densities(shapes, 0.0)


def test_erk_dense_first_layer_is_outside_the_budget():
    d = layer_densities({"A": (10, 10), "B": (10, 40)}, 0.5, "erk", dense_first_layer=True)
    assert d == {"A": 1.0, "B": 0.5}  # B alone gets the target density, as RigL's custom map


def test_topk_and_n_keep():
    m = top_mask(torch.tensor([[0.1, 5.0], [3.0, -1.0]]), 2)
    assert m.tolist() == [[False, True], [True, False]]
    assert n_keep(100, 0.054) == 5
    assert n_keep(100, 0.0001) == 1  # a layer never loses every weight


def _net():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3), nn.ReLU(), nn.Flatten(), nn.BatchNorm1d(64), nn.Linear(64, 10)
    )


def test_prunable_layers_are_conv_and_linear_only():
    assert list(prunable_layers(_net())) == ["0", "4"]


@pytest.mark.parametrize("opt_name", ["sgd", "adam"])
def test_masked_weights_stay_zero_after_optimizer_steps(opt_name):
    net = _net()
    store = MaskStore(net)
    if opt_name == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=0.1)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=0.1, weight_decay=0.1)
    store.attach(opt)
    gen = torch.Generator().manual_seed(0)
    store.random_masks({"0": 0.5, "4": 0.2}, gen)
    x = torch.randn(16, 1, 6, 6)
    for step in range(5):
        opt.zero_grad()
        net(x).pow(2).mean().backward()
        opt.step()
        if step == 2:  # change the masks mid-run: momentum of dropped weights must not leak
            store.random_masks({"0": 0.5, "4": 0.2}, gen)
        for name, mask in store.masks.items():
            w = store.weight(name)
            assert torch.all(w[~mask] == 0), f"layer {name} step {step}"
    assert store.nnz("4") == n_keep(640, 0.2)
    assert store.sparsity() == pytest.approx(1 - (18 + 128) / (36 + 640))


def test_set_mask_resets_optimizer_state_of_changed_positions():
    lin = nn.Linear(3, 2, bias=False)
    store = MaskStore(lin)
    opt = torch.optim.SGD(lin.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    lin(torch.ones(1, 3)).sum().backward()
    opt.step()
    buf = opt.state[lin.weight]["momentum_buffer"]
    assert torch.all(buf != 0)
    mask = torch.tensor([[True, False, True], [True, True, False]])
    store.set_mask("", mask)
    assert torch.all(buf[~mask] == 0) and torch.all(buf[mask] != 0)


def test_dense_gradient_capture_sees_masked_positions():
    lin = nn.Linear(4, 1, bias=False)
    store = MaskStore(lin)
    store.set_mask("", torch.tensor([[True, False, False, False]]))
    store.capture_dense_grads = True
    lin(torch.ones(1, 4)).sum().backward()
    assert torch.all(store.dense_grads[""] == 1.0)  # dense gradient, every position
    assert lin.weight.grad.tolist() == [[1.0, 0.0, 0.0, 0.0]]  # masked gradient


def test_global_topk_masks_rank_across_layers():
    net = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    store = MaskStore(net)
    scores = {
        "0": torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
        "1": torch.tensor([[10.0, 20.0], [0.5, 0.6]]),
    }
    store.global_top_masks(0.5, scores)
    assert store.masks["0"].tolist() == [[False, False], [True, True]]
    assert store.masks["1"].tolist() == [[True, True], [False, False]]


def test_mask_updates_count_the_steps_with_a_change_after_training_begins():
    store = MaskStore(nn.Sequential(nn.Linear(4, 3)))
    full = torch.ones(3, 4, dtype=torch.bool)
    one_off = full.clone()
    one_off[0, 0] = False
    store.set_mask("0", one_off)  # the initial mask: not an update
    store.begin_training()
    store.step = 5
    store.set_mask("0", one_off)  # unchanged: not an update
    assert store.mask_updates == 0
    other = full.clone()
    other[1, 1] = False
    store.set_mask("0", other)
    store.set_mask("0", one_off)  # a second change at the same step: one update
    store.step = 9
    store.set_mask("0", other)
    assert store.mask_updates == 2

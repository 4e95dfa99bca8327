"""HORST's optimizer: the mirror step by hand, AdamW as its large-β limit (torch's AdamW as the
reference), the ℓ1 bias (small weights move less), and the recipe it refuses."""

import math

import pytest
import torch

from sparsebench.methods.pruning.horst import Horst, HorstOptimizer


def test_one_step_by_hand():
    w = torch.nn.Parameter(torch.tensor([0.5, -0.02]))
    opt = HorstOptimizer([{"params": [w], "beta": 0.1, "scale": 2.0}], lr=0.01)
    w.grad = torch.tensor([0.3, -4.0])
    opt.step()
    # first Adam step: m̂ = g, v̂ = g², d = g / (|g| + ε) ≈ sign(g)
    d = torch.tensor([0.3 / (0.3 + 1e-8), -4.0 / (4.0 + 1e-8)])
    expected = [0.1 * math.sinh(math.asinh(x / 0.1) - 0.01 / 2.0 * float(di))
                for x, di in zip([0.5, -0.02], d)]  # fmt: skip
    assert torch.allclose(w.detach(), torch.tensor(expected), atol=1e-7)


def test_a_large_mirror_scale_is_adamw():
    torch.manual_seed(0)
    a = torch.nn.Parameter(torch.randn(5, 3) * 0.1)
    b = torch.nn.Parameter(a.detach().clone())
    big = 1e4
    ours = HorstOptimizer([{"params": [a], "beta": big, "scale": big}], lr=1e-2, weight_decay=0.1)
    ref = torch.optim.AdamW([b], lr=1e-2, weight_decay=0.1)
    for _ in range(5):
        g = torch.randn(5, 3)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert torch.allclose(a.detach(), b.detach(), atol=1e-6)


def test_groups_without_a_mirror_scale_take_adamw_steps():
    torch.manual_seed(1)
    a = torch.nn.Parameter(torch.randn(4))
    b = torch.nn.Parameter(a.detach().clone())
    ours = HorstOptimizer([{"params": [a]}], lr=1e-2, weight_decay=0.01)
    ref = torch.optim.AdamW([b], lr=1e-2, weight_decay=0.01)
    for _ in range(3):
        g = torch.randn(4)
        a.grad, b.grad = g.clone(), g.clone()
        ours.step()
        ref.step()
    assert torch.allclose(a.detach(), b.detach(), atol=1e-6)


def test_small_weights_move_less_than_large_ones():
    w = torch.nn.Parameter(torch.tensor([1.0, 0.001]))
    opt = HorstOptimizer([{"params": [w], "beta": 0.01, "scale": 1.0}], lr=1e-3)
    w.grad = torch.tensor([1.0, 1.0])  # the same Adam direction
    before = w.detach().clone()
    opt.step()
    moved = (before - w.detach()).abs()
    # to first order √(w² + β²): 1.00005 against 0.01005
    assert moved[0] / moved[1] == pytest.approx(
        math.sqrt(1 + 1e-4) / math.sqrt(1e-6 + 1e-4), rel=1e-3
    )


def test_only_an_adamw_recipe_is_taken_and_beta_is_bounded():
    with pytest.raises(ValueError, match="adamw"):
        Horst.check_recipe(Horst.Params(), {"optimizer": "sgd", "lr": 0.05})
    with pytest.raises(ValueError, match="adamw"):  # coupled decay: its partner not AdamW
        Horst.check_recipe(Horst.Params(), {"optimizer": "adam", "lr": 0.001})
    Horst.check_recipe(Horst.Params(), {"optimizer": "adamw", "lr": 0.001})
    with pytest.raises(ValueError, match="beta_rel"):
        Horst.Params(beta_rel=0.0).validate()

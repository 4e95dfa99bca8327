"""LOBSTER and SeReNe: the insensitivity shrink by hand, per weight (the loss gradient) and per
neuron (the outputs' gradient to the neuron's pre-activation), and their refusals."""

import pytest
import torch
from torch import nn

from sparsebench.methods.pruning.lobster import Lobster, insensitivity_shrink
from sparsebench.methods.pruning.serene import Serene
from sparsebench.suite.pillars.classification.masks import MaskStore


class _Flops:
    def __init__(self, dense_flops):
        self.dense_flops, self.total = dense_flops, 0.0

    def add(self, flops):
        self.total += flops


def _setup(cls, seed=0):
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    store = MaskStore(model)
    ctx = type("C", (), {"total_steps": 100, "flops": _Flops({"0": 12, "2": 6})})()
    method = cls(cls.Params(), 0.5, ctx)
    module = type("M", (), {"masks": store, "model": model})()
    method.on_fit_start(None, module)
    return model, store, method, module


def test_the_shrink_by_hand():
    w = torch.tensor([1.0, 2.0, -3.0, 0.0])
    insensitivity_shrink(w, torch.tensor([0.5, 2.0, 0.0, 0.3]), 0.1)
    # w - 0.1 w relu(1 - S): S = 0.5 -> x0.95; S >= 1 -> unchanged; S = 0 -> x0.9; 0 stays 0
    assert torch.allclose(w, torch.tensor([0.95, 2.0, -2.7, 0.0]))


def test_lobster_shrinks_each_weight_and_bias_by_its_own_loss_gradient():
    model, store, method, module = _setup(Lobster)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[0] = False
    store.set_mask("0", mask)
    x = torch.randn(5, 4)
    nn.functional.cross_entropy(store.forward(x), torch.tensor([0, 1, 0, 1, 1])).backward()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    method.on_train_batch_end(None, module, None, (x,), 0)
    lam = Lobster.Params().lmbda
    for n, p in model.named_parameters():
        expected = before[n] * (1 - lam * torch.clamp(1 - grads[n].abs(), min=0))
        assert torch.allclose(p.detach(), expected, atol=1e-7), n
    assert bool((model[0].weight[0] == 0).all())  # a pruned weight stays pruned


def test_serene_sensitivity_is_the_outputs_gradient_to_each_neuron_by_hand():
    model, store, method, module = _setup(Serene, 1)
    x = torch.randn(6, 4)
    w1, b1, w2 = (t.detach().clone() for t in (model[0].weight, model[0].bias, model[2].weight))
    loss = nn.functional.cross_entropy(store.forward(x), torch.tensor([0, 1, 0, 1, 1, 0]))
    method.on_before_backward(None, module, loss)
    loss.backward()
    # by hand: z1 = x W1ᵀ + b1, y = relu(z1) W2ᵀ + b2; ∂Σ_k y_k/∂z1 = (1ᵀ W2) ⊙ [z1 > 0]
    z1 = x @ w1.T + b1
    d1 = w2.sum(0) * (z1 > 0)
    s1 = d1.abs().mean(0) / 2  # α = 1/C, C = 2 outputs
    assert torch.allclose(method._sensitivity["0"], s1, atol=1e-6)
    assert torch.allclose(method._sensitivity["2"], torch.full((2,), 0.5))  # ∂Σy/∂y = 1
    method.on_train_batch_end(None, module, None, (x,), 0)
    lam = Serene.Params().lmbda
    assert torch.allclose(model[0].weight, w1 * (1 - lam * (1 - s1)).view(3, 1), atol=1e-7)
    assert torch.equal(model[0].bias.detach(), b1)  # biases are not regularized
    # the extra backward through the (dense) layers: f_S per example
    assert method.ctx.flops.total == pytest.approx((12 + 6) * 6)


def test_serene_ignores_evaluation_forwards():
    model, store, method, module = _setup(Serene, 2)
    model.eval()
    store.forward(torch.randn(3, 4))
    with torch.no_grad():
        model.train()
        store.forward(torch.randn(3, 4))
    assert method._outputs == {}
    method.on_train_end(None, module)
    assert not model[0]._forward_hooks


@pytest.mark.parametrize("lmbda", [0.0, -1e-4, 1.0])
def test_lambda_out_of_range_is_refused(lmbda):
    with pytest.raises(ValueError, match="lmbda"):
        Lobster.Params(lmbda=lmbda).validate()


def test_serene_on_token_sequences_takes_a_neuron_per_output_feature():
    model, store, method, module = _setup(Serene, 3)
    x = torch.randn(5, 7, 4)  # 5 sequences of 7 tokens
    out = store.forward(x)
    method.on_before_backward(None, module, out.sum())
    w1, b1, w2 = (t.detach() for t in (model[0].weight, model[0].bias, model[2].weight))
    d1 = w2.sum(0) * ((x @ w1.T + b1) > 0)  # per token
    assert torch.allclose(method._sensitivity["0"], d1.abs().mean(dim=(0, 1)) / 2, atol=1e-6)

import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from sparsebench.methods.pruning.synflow import SynFlow, synflow_scores
from sparsebench.suite.pillars.classification.lit import ClassificationModule
from sparsebench.suite.pillars.classification.masks import top_mask
from tests.methods.conftest import RECIPE, make_ctx


def _linear_net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(5, 4, bias=False), nn.ReLU(), nn.Linear(4, 3, bias=False))


def _ones(model):
    return {n: torch.ones_like(m.weight, dtype=torch.bool) for n, m in _layers(model).items()}


def _layers(model):
    return {"0": model[0], "2": model[2]}


def test_scores_of_a_two_layer_net_by_hand():
    # R = 1ᵀ|W2||W1|1: dR/dW1[i,j] = Σ_k |W2[k,i]|, dR/dW2[k,i] = Σ_j |W1[i,j]|
    model = _linear_net()
    w1, w2 = model[0].weight.detach().double(), model[2].weight.detach().double()
    s = synflow_scores(model, _layers(model), _ones(model), (5,))
    assert torch.allclose(s["0"], w1.abs() * w2.abs().sum(0)[:, None])
    assert torch.allclose(s["2"], w2.abs() * w1.abs().sum(1)[None, :])
    # conservation (Theorem 2): every layer's scores sum to R
    r = (w2.abs() @ w1.abs()).sum()
    assert float(s["0"].sum()) == pytest.approx(float(r)) == pytest.approx(float(s["2"].sum()))
    # a masked weight carries no flow, and the model itself is untouched
    masks = _ones(model)
    masks["0"][0, 0] = False
    assert synflow_scores(model, _layers(model), masks, (5,))["0"][0, 0] == 0
    assert torch.equal(model[0].weight.detach().double(), w1)


def _prune(params, sparsity, data=None):
    model = _linear_net()
    data = data or TensorDataset(torch.randn(8, 5), torch.randint(0, 3, (8,)))
    ctx = make_ctx(model, data=data, input_shape=(5,))
    module = ClassificationModule(model, 3, RECIPE, 10)
    method = SynFlow(SynFlow.Params(**params), sparsity, ctx)
    method.on_fit_start(None, module)
    return model, module, ctx


def test_one_iteration_is_one_shot_global_top_k_of_the_scores():
    model = _linear_net()
    s = synflow_scores(model, _layers(model), _ones(model), (5,))
    expected = top_mask(torch.cat([s["0"].reshape(-1), s["2"].reshape(-1)]), 8)  # 25 % of 32
    _, module, _ = _prune({"iterations": 1}, 0.75)
    got = torch.cat([module.masks.masks[n].reshape(-1) for n in ("0", "2")])
    assert torch.equal(got, expected)


def test_the_exponential_schedule_rescores_after_each_round_and_ends_at_the_target():
    # two rounds by hand: density 0.25^(1/2) = 0.5 (16 of 32), rescore, then 0.25 (8)
    model = _linear_net()
    masks = _ones(model)
    for keep in (16, 8):
        s = synflow_scores(model, _layers(model), masks, (5,))
        flat = top_mask(torch.cat([s["0"].reshape(-1), s["2"].reshape(-1)]), keep)
        masks = {"0": flat[:20].view(4, 5), "2": flat[20:].view(3, 4)}
    _, module, ctx = _prune({"iterations": 2}, 0.75)
    assert all(torch.equal(module.masks.masks[n], masks[n]) for n in ("0", "2"))
    assert module.masks.sparsity() == pytest.approx(0.75)
    assert ctx.flops.total == pytest.approx(2 * 3.0 * ctx.flops.f_dense)  # two score passes


def test_no_data_is_read_and_the_default_reaches_exact_density():
    a = _prune({}, 0.9, TensorDataset(torch.randn(8, 5), torch.zeros(8, dtype=torch.long)))[1]
    b = _prune({}, 0.9, TensorDataset(torch.randn(8, 5) * 9, torch.ones(8, dtype=torch.long)))[1]
    assert all(torch.equal(a.masks.masks[n], b.masks.masks[n]) for n in ("0", "2"))
    assert a.masks.total_nnz == 3  # round(0.1 × 32)
    assert SynFlow.Params().iterations == 100 and SynFlow.Params().distribution == "global"


def test_per_layer_allocation_keeps_each_layers_share():
    _, module, _ = _prune({"distribution": "uniform", "iterations": 3}, 0.5)
    assert module.masks.density("0") == pytest.approx(0.5)
    assert module.masks.density("2") == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dense_first_layer"):
        SynFlow.Params(dense_first_layer=True).validate()

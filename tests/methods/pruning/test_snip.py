import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import TensorDataset

from sparsebench.methods.pruning.snip import SNIP
from sparsebench.suite.pillars.classification.lit import ClassificationModule
from sparsebench.suite.pillars.classification.masks import top_mask
from tests.methods.conftest import RECIPE, make_ctx


def test_snip_keeps_top_abs_grad_times_weight():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 4, bias=False), nn.ReLU(), nn.Linear(4, 3, bias=False))
    x, y = torch.randn(32, 12), torch.randint(0, 3, (32,))
    data = TensorDataset(x, y)
    ctx = make_ctx(model, data=data)
    snip = SNIP(SNIP.Params(batch_size=8), 0.75, ctx)
    # The saliency batch SNIP will draw, computed with a copy of its generator.
    idx = torch.randperm(32, generator=torch.Generator().manual_seed(0))[:8]
    xb, yb = x[idx], y[idx]
    grads = torch.autograd.grad(F.cross_entropy(model(xb), yb), [model[0].weight, model[2].weight])
    sal = torch.cat(
        [(g * w).abs().reshape(-1) for g, w in zip(grads, [model[0].weight, model[2].weight])]
    )
    expected = top_mask(sal, 15)  # 25% of 60 weights

    module = ClassificationModule(model, 3, RECIPE, 10)
    snip.on_fit_start(None, module)
    got = torch.cat([module.masks.masks[n].reshape(-1) for n in ("0", "2")])
    assert torch.equal(got, expected)
    assert module.masks.sparsity() == pytest.approx(0.75)


def test_snip_ranks_by_gradient_times_weight_not_by_magnitude():
    # The second input is always 0, so its weights get no gradient: saliency 0 despite |w| = 5, 6.
    model = nn.Sequential(nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.1, 5.0], [-0.2, 6.0]]))
    x = torch.tensor([[1.0, 0.0]]).repeat(4, 1)
    data = TensorDataset(x, torch.tensor([0, 1, 0, 1]))
    ctx = make_ctx(model, data=data, input_shape=(2,))
    module = ClassificationModule(model, 2, RECIPE, 10)
    SNIP(SNIP.Params(), 0.5, ctx).on_fit_start(None, module)
    assert module.masks.masks["0"].tolist() == [[True, False], [True, False]]


def _snip_on_a_two_layer_model(**params):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 4, bias=False), nn.ReLU(), nn.Linear(4, 3, bias=False))
    data = TensorDataset(torch.randn(32, 12), torch.randint(0, 3, (32,)))
    ctx = make_ctx(model, data=data)
    module = ClassificationModule(model, 3, RECIPE, 10)
    SNIP(SNIP.Params(batch_size=8, **params), 0.75, ctx).on_fit_start(None, module)
    return ctx, module


def test_snip_charges_one_forward_backward_of_its_batch():
    # forward + backward of the 8-example saliency batch: 3 × the dense forward per example × 8
    ctx, _ = _snip_on_a_two_layer_model()
    assert ctx.flops.total == pytest.approx(3.0 * ctx.flops.f_dense * 8)


def test_snip_dense_first_layer_keeps_the_first_layer_whole():
    _, module = _snip_on_a_two_layer_model(distribution="uniform", dense_first_layer=True)
    first = module.masks.masks["0"]
    assert first is None or bool(first.all())
    assert module.masks.masks["2"] is not None and not bool(module.masks.masks["2"].all())

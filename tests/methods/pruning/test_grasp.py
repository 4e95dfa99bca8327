import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call
from torch.utils.data import TensorDataset

from sparsebench.methods.pruning.grasp import GraSP
from sparsebench.suite.pillars.classification.lit import ClassificationModule
from sparsebench.suite.pillars.classification.masks import top_mask
from tests.methods.conftest import RECIPE, make_ctx


def _setup(samples_per_class=3, **params):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3, bias=True), nn.Tanh(), nn.Linear(3, 2, bias=False))
    x = torch.randn(10, 4)
    y = torch.tensor([0, 1] * 5)
    data = TensorDataset(x, y)
    ctx = make_ctx(model, data=data, input_shape=(4,))
    grasp = GraSP(GraSP.Params(samples_per_class=samples_per_class, **params), 0.6, ctx)
    return model, data, ctx, grasp


def test_scores_are_minus_theta_times_the_hessian_gradient_product_of_the_full_hessian():
    model, data, ctx, grasp = _setup()
    x, y = grasp.sample()  # the draw, then a fresh generator for the method's own draw
    ctx.generator.manual_seed(0)
    names = ["0.weight", "2.weight"]
    shapes = [model.get_parameter(n).shape for n in names]
    theta = torch.cat([model.get_parameter(n).detach().reshape(-1) for n in names])

    def loss(flat):
        parts = torch.split(flat, [s.numel() for s in shapes])
        ws = {n: p.view(s) for n, p, s in zip(names, parts, shapes)}
        return F.cross_entropy(functional_call(model, ws, (x,)) / 200.0, y)

    g = torch.autograd.functional.jacobian(loss, theta)
    hg = torch.autograd.functional.hessian(loss, theta) @ g  # the 18 x 18 Hessian, explicitly
    expected = top_mask(theta * hg, 7)  # keep 40 % of 18 = 7: the smallest -θ⊙Hg
    module = ClassificationModule(model, 2, RECIPE, 10)
    grasp.on_fit_start(None, module)
    got = torch.cat([module.masks.masks[n].reshape(-1) for n in ("0", "2")])
    assert torch.equal(got, expected)
    assert module.masks.total_nnz == 7


def test_the_sample_is_class_balanced_and_drawn_with_the_jobs_seed():
    _, data, ctx, grasp = _setup(samples_per_class=2)
    x, y = grasp.sample()
    assert sorted(y.tolist()) == [0, 0, 1, 1]
    ctx.generator.manual_seed(0)
    assert torch.equal(grasp.sample()[0], x)
    ctx.generator.manual_seed(1)
    assert not torch.equal(grasp.sample()[0], x)


def test_flops_and_defaults():
    model, _, ctx, grasp = _setup(samples_per_class=3)
    grasp.on_fit_start(None, ClassificationModule(model, 2, RECIPE, 10))
    assert ctx.flops.total == pytest.approx(9.0 * ctx.flops.f_dense * 6)
    assert (GraSP.Params().samples_per_class, GraSP.Params().temperature) == (10, 200.0)
    with pytest.raises(ValueError, match="temperature"):
        GraSP.Params(temperature=0).validate()


def test_the_live_models_batchnorm_statistics_and_gradients_are_untouched():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Tanh(), nn.Linear(6, 2))
    data = TensorDataset(torch.randn(20, 4), torch.tensor([0, 1] * 10))
    ctx = make_ctx(model, data=data, input_shape=(4,))
    bn = {k: v.clone() for k, v in model[1].state_dict().items()}
    module = ClassificationModule(model, 2, RECIPE, 10)
    model.eval()
    GraSP(GraSP.Params(samples_per_class=4), 0.5, ctx).on_fit_start(None, module)
    assert all(torch.equal(model[1].state_dict()[k], v) for k, v in bn.items())
    assert not model.training  # its mode is its own
    assert all(p.grad is None for p in model.parameters())
    assert module.masks.total_nnz == 18  # half of 24 + 12
    with pytest.raises(ValueError, match="dense_first_layer"):
        GraSP.Params(dense_first_layer=True).validate()

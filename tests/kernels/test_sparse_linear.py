"""sparse_linear (autograd), SparseLinear and convert_model."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsebench.kernels import SparseLinear, SparsityPattern, convert_model, sparse_linear
from tests.kernels.conftest import cpu_backend_params, make_case


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_gradcheck_float64(backend) -> None:
    c = make_case(6, 7, 3, 0.4, torch.float64, seed=2, empty_rows=(1,), empty_cols=(4,))
    x = c.x.clone().requires_grad_()
    values = c.values.clone().requires_grad_()
    bias = c.bias.clone().requires_grad_()
    assert torch.autograd.gradcheck(
        lambda x, v, b: sparse_linear(x, v, c.pattern, b, backend), (x, values, bias)
    )
    assert torch.autograd.gradcheck(
        lambda x, v: sparse_linear(x, v, c.pattern, None, backend), (x, values)
    )


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_leading_dims_and_gradients_match_dense(backend) -> None:
    c = make_case(10, 12, 6, 0.3, torch.float32, seed=4)
    x = c.x.reshape(2, 3, 12).requires_grad_()
    values = c.values.clone().requires_grad_()
    bias = c.bias.clone().requires_grad_()
    y = sparse_linear(x, values, c.pattern, bias, backend)
    assert y.shape == (2, 3, 10)
    (y.square().sum()).backward()

    xd = c.x.reshape(2, 3, 12).clone().requires_grad_()
    wd = c.weight.clone().requires_grad_()
    bd = c.bias.clone().requires_grad_()
    yd = nn.functional.linear(xd, wd, bd)
    (yd.square().sum()).backward()
    torch.testing.assert_close(y, yd)
    torch.testing.assert_close(x.grad, xd.grad)
    torch.testing.assert_close(values.grad, c.pattern.gather(wd.grad))
    torch.testing.assert_close(bias.grad, bd.grad)
    # a single vector (in,) gives (out,), as F.linear does
    assert sparse_linear(c.x[0], c.values, c.pattern, None, backend).shape == (10,)


def test_sparse_linear_rejects_wrong_width() -> None:
    c = make_case(4, 5, 2, 0.5)
    with pytest.raises(ValueError, match=r"\(\.\.\., 5\)"):
        sparse_linear(torch.zeros(2, 4, dtype=torch.float64), c.values, c.pattern)


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_from_dense_to_dense_round_trip(backend) -> None:
    torch.manual_seed(0)
    linear = nn.Linear(20, 9)
    mask = torch.rand(9, 20) < 0.3
    mask[3] = False
    sparse = SparseLinear.from_dense(linear, mask, backend)
    assert sparse.nnz == int(mask.sum()) and sparse.backend == backend
    back = sparse.to_dense()
    assert isinstance(back, nn.Linear)
    torch.testing.assert_close(back.weight, linear.weight * mask)
    torch.testing.assert_close(back.bias, linear.bias)
    x = torch.randn(4, 20)
    torch.testing.assert_close(sparse(x), back(x))
    assert f"backend={backend}" in repr(sparse) and "density=" in repr(sparse)
    # mask=None keeps the weight's nonzeros
    again = SparseLinear.from_dense(back, None, backend)
    assert torch.equal(again.pattern.mask(), mask)


def test_module_parameters_buffers_state_dict_and_dtype() -> None:
    mask = torch.eye(6, 8, dtype=torch.bool)
    layer = SparseLinear(mask, bias=False, dtype=torch.float64)
    assert [n for n, _ in layer.named_parameters()] == ["values"]
    assert layer.values.shape == (6,) and layer.values.dtype == torch.float64
    assert layer.density == pytest.approx(6 / 48)
    clone = SparseLinear(SparsityPattern.from_mask(mask), bias=False, dtype=torch.float64)
    clone.load_state_dict(layer.state_dict())
    x = torch.randn(3, 8, dtype=torch.float64)
    torch.testing.assert_close(clone(x), layer(x))
    layer.float()
    assert layer(x.float()).dtype == torch.float32
    layer.backend = "torch_csr"
    torch.testing.assert_close(layer(x.float()), x.float() @ layer.dense_weight().t())
    with pytest.raises(ValueError, match="allowed"):
        layer.backend = "nope"


def test_deepcopy_and_pickle_keep_the_layer(tmp_path) -> None:
    import copy
    import pickle

    layer = SparseLinear(torch.rand(4, 6) < 0.5, backend="torch_csr")
    x = torch.randn(3, 6)
    y = layer(x)  # fills the pattern's backend cache
    torch.testing.assert_close(copy.deepcopy(layer)(x), y)
    torch.testing.assert_close(pickle.loads(pickle.dumps(layer))(x), y)
    # A checkpoint holds tensors only: it loads with weights_only=True into a fresh layer of
    # the same pattern.
    torch.save(layer.state_dict(), tmp_path / "layer.pt")
    fresh = SparseLinear(layer.pattern.mask(), backend="torch_csr")
    fresh.load_state_dict(torch.load(tmp_path / "layer.pt", weights_only=True))
    torch.testing.assert_close(fresh(x), y)


def test_training_step_changes_only_values() -> None:
    torch.manual_seed(1)
    layer = SparseLinear(torch.rand(5, 7) < 0.5, backend="dense_mask")
    opt = torch.optim.SGD(layer.parameters(), lr=0.1)
    before = layer.dense_weight().detach().clone()
    layer(torch.randn(4, 7)).sum().backward()
    opt.step()
    after = layer.dense_weight().detach()
    assert not torch.equal(before, after)
    assert torch.all(after[~layer.pattern.mask()] == 0)


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(12, 16),
        nn.ReLU(),
        nn.Sequential(nn.Linear(16, 8), nn.Tanh()),
        nn.Linear(8, 3),
    )


@pytest.mark.parametrize("backend", cpu_backend_params())
def test_convert_model_keeps_outputs(backend) -> None:
    model = _mlp()
    g = torch.Generator().manual_seed(5)
    masks = {
        "0": torch.rand(16, 12, generator=g) < 0.4,
        "2.0": torch.rand(8, 16, generator=g) < 0.4,
    }
    with torch.no_grad():  # masked weights are zero, as the suite's MaskStore keeps them
        model[0].weight.mul_(masks["0"])
        model[2][0].weight.mul_(masks["2.0"])
    x = torch.randn(5, 12, generator=g)
    expected = model(x)
    expected.square().sum().backward()
    dense_grads = {n: model.get_submodule(n).weight.grad.clone() for n in masks}
    out = convert_model(model, {**masks, "3": None}, backend)
    assert out is model
    assert isinstance(model[0], SparseLinear) and isinstance(model[2][0], SparseLinear)
    assert type(model[3]) is nn.Linear
    torch.testing.assert_close(model(x), expected)
    # Gradients: the sparse layers' values get the dense gradient on the pattern.
    model(x).square().sum().backward()
    for name, grad in dense_grads.items():
        layer = model.get_submodule(name)
        torch.testing.assert_close(layer.values.grad, layer.pattern.gather(grad))


def test_convert_model_leaves_the_model_intact_on_error() -> None:
    model = _mlp()
    good = torch.ones(16, 12, dtype=torch.bool)
    with pytest.raises(ValueError, match="mask shape"):
        convert_model(model, {"0": good, "2.0": torch.ones(3, 3, dtype=torch.bool)})
    assert type(model[0]) is nn.Linear  # nothing swapped before the bad entry was found


def test_convert_model_errors() -> None:
    model = _mlp()
    with pytest.raises(TypeError, match="ReLU"):
        convert_model(model, {"1": None})
    with pytest.raises(ValueError, match="no submodule 'fc9'.*'0'"):
        convert_model(model, {"fc9": None})
    with pytest.raises(ValueError, match="mask shape"):
        convert_model(model, {"0": torch.ones(3, 3, dtype=torch.bool)})
    with pytest.raises(ValueError, match="allowed"):
        convert_model(model, {"0": None}, backend="nope")

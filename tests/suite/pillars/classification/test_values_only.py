"""``execution: sparse``: values-only layers in DST jobs (the nnz values are the only Parameter).

Static and RigL must train exactly what their dense x mask runs train (same masks, weights to
float tolerance); SET draws its growth differently (rejection sampling), so it is checked by
its invariants: exact nnz per layer after every step, the same number of mask updates.
"""

from __future__ import annotations

import json

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from sparsebench.kernels import SparseLinear
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.classification.execution import to_values_only, use_backend
from sparsebench.suite.pillars.classification.masks import MaskStore
from sparsebench.suite.spec import SpecError, validate
from tests.methods.conftest import tiny_fit  # noqa: F401 - the fixture
from tests.suite.pillars.classification.test_job import spec_data


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))


def _dense_weight(store: MaskStore, name: str) -> torch.Tensor:
    if name in store.sparse:
        return store.sparse[name].dense_weight().detach()
    return store.weight(name).detach()


@pytest.mark.parametrize("method,params", [("static", {}), ("rigl", {"update_interval": 3})])
def test_static_and_rigl_train_what_dense_mask_trains(tiny_fit, method, params):  # noqa: F811
    ref, _ = tiny_fit(method, 0.8, params, epochs=3)
    run, _ = tiny_fit(method, 0.8, params, epochs=3, execution="sparse")
    assert [type(m) for m in run.model] == [SparseLinear, nn.ReLU] * 2 + [SparseLinear]
    assert run.masks.mask_updates == ref.masks.mask_updates
    if method == "rigl":
        assert ref.masks.mask_updates >= 5
    for name in ref.masks.layers:
        assert torch.equal(run.masks.masks[name], ref.masks.masks[name]), name
        torch.testing.assert_close(
            _dense_weight(run.masks, name), _dense_weight(ref.masks, name), rtol=1e-4, atol=1e-5
        )
    assert run.masks.trained_density(7) == ref.masks.trained_density(7)
    assert run.masks.densities() == ref.masks.densities()


class _NnzWatcher(pl.Callback):
    def __init__(self):
        self.nnz: list[dict[str, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        store = pl_module.masks
        for name, layer in store.sparse.items():
            assert layer.values.shape == layer.flat_index.shape
            assert bool((layer.flat_index[1:] > layer.flat_index[:-1]).all()), name
            assert store.born[name].shape == layer.values.shape
        self.nnz.append({n: store.nnz(n) for n in store.layers})


@pytest.mark.parametrize("params", [{}, {"update_interval": 3}])
def test_set_keeps_every_layers_nnz_exactly(tiny_fit, params):  # noqa: F811
    ref, _ = tiny_fit("set", 0.8, params, epochs=3)
    watcher = _NnzWatcher()
    run, _ = tiny_fit("set", 0.8, params, epochs=3, extra_callbacks=[watcher], execution="sparse")
    first = watcher.nnz[0]
    assert all(step == first for step in watcher.nnz)
    assert first == {n: ref.masks.nnz(n) for n in ref.masks.layers}
    assert run.masks.mask_updates == ref.masks.mask_updates >= 2
    # Growth differs from the dense run's draws (same distribution, other random numbers).
    assert not all(torch.equal(run.masks.masks[n], ref.masks.masks[n]) for n in ref.masks.layers)


def test_optimizer_holds_only_the_values(tiny_fit):  # noqa: F811
    run, _ = tiny_fit("rigl", 0.8, {"update_interval": 3}, epochs=2, execution="sparse")
    opt = run.trainer.optimizers[0]
    params = [p for g in opt.param_groups for p in g["params"]]
    assert {id(p) for p in params} == {id(p) for p in run.parameters()}
    for layer in run.masks.sparse.values():
        assert any(p is layer.values for p in params)
        for value in opt.state[layer.values].values():
            if torch.is_tensor(value) and value.dim():
                assert value.shape == layer.values.shape  # never (out, in)


def test_conversion_carries_values_state_and_bias():
    model = _model()
    store = MaskStore(model)
    mask = torch.rand(32, 12, generator=torch.Generator().manual_seed(0)) < 0.3
    store.set_mask("0", mask)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    x = torch.randn(5, 12)
    model(x).sum().backward()
    opt.step()
    weight, bias = model[0].weight.detach().clone(), model[0].bias
    momentum = opt.state[model[0].weight]["momentum_buffer"].clone()
    ref = model(x)
    assert to_values_only(store) == ["0"]  # "2" is dense: it stays an nn.Linear
    assert type(model[2]) is nn.Linear
    layer = model[0]
    assert isinstance(layer, SparseLinear) and layer.backend == "cpu"
    assert layer.bias is bias  # shared: the optimizer's reference holds
    torch.testing.assert_close(layer.values.detach(), weight[mask])  # row-major = CSR order
    torch.testing.assert_close(opt.state[layer.values]["momentum_buffer"], momentum[mask])
    torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-6)
    assert torch.equal(store.masks["0"], mask)  # built from the pattern on request
    assert store.nnz("0") == int(mask.sum()) and "0" in store.born
    with pytest.raises(ValueError, match="'0' runs values-only.*set_pattern"):
        store.masks["0"] = mask
    with pytest.raises(ValueError, match="'0' runs values-only.*no dense weight"):
        store.weight("0")


def test_only_a_masked_linear_converts():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.Flatten(), nn.Linear(8, 3))
    store = MaskStore(model)
    store.set_mask("0", torch.rand(2, 1, 3, 3) < 0.5)
    assert to_values_only(store) == []  # a convolution stays dense x mask; "2" is dense
    with pytest.raises(ValueError, match="'2' cannot run values-only.*dense"):
        store.to_values_only("2", "cpu")


def test_set_pattern_keeps_ages_and_counts_updates():
    model = _model()
    store = MaskStore(model)
    mask = torch.zeros(32, 12, dtype=torch.bool)
    mask[0, :4] = True  # flat 0, 1, 2, 3
    store.set_mask("0", mask)
    store.attach(torch.optim.SGD(model.parameters(), lr=0.1))
    to_values_only(store)
    store.begin_training()
    store.step = 7
    store.set_pattern("0", torch.tensor([0, 1, 2, 3]))  # nothing changed: no update
    assert store.mask_updates == 0
    kept = store.set_pattern("0", torch.tensor([1, 3, 20, 40]))
    assert kept.tolist() == [True, True, False, False]
    assert store.born["0"].tolist() == [-1, -1, 7, 7] and store.mask_updates == 1
    store.step = 9
    # min_steps 2: born at 7 counts at step 9; min_steps 3 does not ("2", dense: all 96)
    assert store.trained_density(2) == pytest.approx((4 + 96) / (384 + 96))
    assert store.trained_density(3) == pytest.approx((2 + 3 * 32) / (384 + 96))


def test_use_backend_sparse_swaps_nothing_before_fit():
    model = _model()
    assert use_backend(model, MaskStore(model), "sparse") == []
    assert all(type(m) is not SparseLinear for m in model.modules())


def _data(tmp_path, execution: str = "sparse") -> dict:
    data = spec_data(tmp_path)
    data["classification"]["methods"]["dense"] = {}
    data["classification"]["execution"] = execution
    return data


def test_validation_refuses_a_method_without_a_values_only_update(tmp_path):
    data = _data(tmp_path)
    data["classification"]["methods"]["mest"] = {}
    with pytest.raises(SpecError, match=r"execution: 'sparse'.*cannot run mest.*rigl, set"):
        validate(data, source="t.yaml")
    del data["classification"]["methods"]["mest"]
    validate(data, source="t.yaml")


def test_validation_refuses_a_model_with_convolutions(tmp_path):
    data = _data(tmp_path)
    data["classification"]["tasks"]["d"]["model"] = "lenet5"
    data["classification"]["tasks"]["d"]["dataset"] = "mnist5k"
    with pytest.raises(SpecError, match=r"tasks\.d\.model: execution: 'sparse'.*lenet5 has "
                       r"convolutions \(conv1, conv2\).*execution: cpu"):  # fmt: skip
        validate(data, source="t.yaml")


def test_a_convolutional_task_with_only_dense_may_share_the_section(tmp_path):
    data = _data(tmp_path)
    data["classification"]["tasks"]["c"] = {
        "dataset": "mnist5k",
        "model": "lenet5",
        "methods": ["dense"],  # no masks: nothing would run as dense x mask
        "recipe": {"epochs": 1, "batch_size": 64, "lr": 0.05},
    }
    validate(data, source="t.yaml")


def test_conversion_draws_no_random_number():
    model = _model()
    store = MaskStore(model)
    store.set_mask("0", torch.rand(32, 12) < 0.3)
    state = torch.random.get_rng_state()
    to_values_only(store)
    assert torch.equal(torch.random.get_rng_state(), state)


def test_a_sparse_job_records_what_its_dense_mask_twin_records(tmp_path):
    from sparsebench.suite.job import run_one

    pillar = get_pillar("classification")
    records = {}
    for execution in ("sparse", "dense_mask"):
        spec = validate(_data(tmp_path, execution), source="t.yaml")
        cell = next(c for c in pillar.cells(spec) if c.method == "rigl" and c.seed == 0)
        out = tmp_path / f"{execution}.json"
        records[execution] = run_one(spec, pillar, cell, state=None, out=out, parallel_jobs=1)
    a, b = records["sparse"], records["dense_mask"]
    assert a["status"] == "ok", a["error"]
    assert a["execution"] == "sparse" and a["device"] == "cpu"
    for key in ("params_total", "params_nonzero", "actual_sparsity", "mask_updates",
                "train_flops", "layer_densities_json", "trained_density", "steps"):  # fmt: skip
        assert a[key] == b[key], key
    assert a["test_loss"] == pytest.approx(b["test_loss"], rel=1e-4)
    assert json.loads((tmp_path / "sparse.json").read_text())["status"] == "ok"

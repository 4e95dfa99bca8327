"""The spec's `execution` key: masked layers of DST / pruning jobs on a sparse-kernel backend."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from sparsebench.kernels import BackendUnavailableError
from sparsebench.suite.pillars.classification.execution import KernelLinear, use_backend
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.conftest import tiny_fit  # noqa: F401 - the fixture

CPU_BACKENDS = ["cpu", "torch_csr"]


def _model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 3))


def test_dense_mask_changes_nothing():
    model = _model()
    store = MaskStore(model)
    assert use_backend(model, store, "dense_mask") == []
    assert all(type(m) is not KernelLinear for m in model.modules())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_swap_shares_parameters_and_follows_mask_changes(backend):
    model = _model()
    store = MaskStore(model)
    params_before = [id(p) for p in model.parameters()]
    x = torch.randn(5, 12)
    store.set_mask("0", torch.rand(32, 12) < 0.3)
    ref = model(x)
    assert use_backend(model, store, backend) == ["0", "2"]
    assert isinstance(model[0], KernelLinear) and model[0].backend == backend
    assert [id(p) for p in model.parameters()] == params_before  # optimizer state unchanged
    torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-6)
    # A new mask (as a DST update installs) is used at the next call.
    store.set_mask("0", torch.rand(32, 12) < 0.5)
    with torch.no_grad():
        model[0].weight.add_(0.1).mul_(store.masks["0"])
    dense = nn.functional.linear(
        nn.functional.relu(nn.functional.linear(x, model[0].weight, model[0].bias)),
        model[2].weight,
        model[2].bias,
    )
    torch.testing.assert_close(model(x), dense, rtol=1e-5, atol=1e-6)
    # Gradients reach the dense weight only on the mask.
    model(x).sum().backward()
    assert torch.all(model[0].weight.grad[~store.masks["0"]] == 0)


def test_dense_gradient_capture_uses_the_dense_product():
    model = _model()
    store = MaskStore(model)
    store.set_mask("0", torch.rand(32, 12) < 0.3)
    use_backend(model, store, "cpu")
    store.capture_dense_grads = True
    model(torch.randn(4, 12)).sum().backward()
    # RigL reads the gradient at masked positions: it must not be structurally zero there.
    assert store.dense_grads["0"][~store.masks["0"]].abs().sum() > 0


@pytest.mark.parametrize("method,params", [("static", {}), ("rigl", {"update_interval": 3})])
def test_dst_run_on_cpu_kernel_matches_dense_mask(tiny_fit, method, params):  # noqa: F811
    ref, _ = tiny_fit(method, 0.8, params, epochs=3)
    run, _ = tiny_fit(method, 0.8, params, epochs=3, execution="cpu")
    assert any(isinstance(m, KernelLinear) for m in run.model.modules())
    for name in ref.masks.layers:
        a, b = ref.masks.masks[name], run.masks.masks[name]
        assert (a is None) == (b is None)
        if a is not None:
            assert torch.equal(a, b)
        torch.testing.assert_close(
            run.masks.weight(name), ref.masks.weight(name), rtol=1e-4, atol=1e-5
        )
    x = torch.randn(64, 12, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(run.model(x).argmax(1), ref.model(x).argmax(1))


def test_bad_backend_names_the_allowed_ones():
    model = _model()
    with pytest.raises(
        ValueError, match="allowed: dense_mask, cpu, semi_structured, torch_csr, triton"
    ):
        use_backend(model, MaskStore(model), "cuda_magic")


def test_unavailable_backend_says_why(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if torch.cuda.is_available():
        pytest.skip("triton runs on this machine")
    model = _model()
    with pytest.raises(BackendUnavailableError, match="GPU"):
        use_backend(model, MaskStore(model), "triton")


def test_pattern_built_in_inference_mode_still_trains():
    # Lightning validates under inference mode; a mask changed by a DST update at an epoch's
    # last batch is first seen there, and training must still backprop through it after.
    model = _model()
    store = MaskStore(model)
    use_backend(model, store, "cpu")
    store.set_mask("0", torch.rand(32, 12) < 0.3)
    x = torch.randn(4, 12)
    with torch.inference_mode():
        model(x)
    model(x).sum().backward()
    assert model[0].weight.grad is not None


def test_mask_changed_in_place_is_seen():
    model = _model()
    store = MaskStore(model)
    store.set_mask("0", torch.ones(32, 12, dtype=torch.bool))
    use_backend(model, store, "cpu")
    x = torch.randn(4, 12)
    model(x)
    nnz_before = model[0]._pattern.nnz
    with torch.no_grad():
        store.masks["0"][:, :6] = False  # same tensor object, new version
        model[0].weight.mul_(store.masks["0"])
    model(x)
    assert model[0]._pattern.nnz == nnz_before // 2


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_connectivity_probes_a_kernel_backed_model_as_its_dense_mask_twin(backend):
    from sparsebench.suite.pillars.classification.connectivity import (
        effective_density,
        reachable_output_fraction,
    )

    model = _model()
    store = MaskStore(model)
    mask = torch.zeros(32, 12, dtype=torch.bool)
    mask[:4, :] = True  # 4 of 32 hidden units reachable
    store.set_mask("0", mask)
    last = torch.zeros(3, 32, dtype=torch.bool)
    last[:2, 2:6] = True  # 2 outputs, fed by hidden units 2, 3 (reachable) and 4, 5 (not)
    store.set_mask("2", last)
    model(torch.randn(2, 12))  # a forward: the backend caches its sparse pattern
    use_backend(model, store, backend)
    model(torch.randn(2, 12))
    assert reachable_output_fraction(model, store, (12,)) == pytest.approx(2 / 3)
    # active: 48 + 8 of 444; on a path: hidden units 2, 3's inputs (24) and their 4 outputs
    assert effective_density(model, store, (12,)) == pytest.approx((24 + 4) / (384 + 96))
    assert isinstance(model[0], KernelLinear)  # the model itself is untouched

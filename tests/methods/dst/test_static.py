import pytest
import torch

from tests.methods.conftest import MaskWatcher


@pytest.mark.parametrize("distribution", ["erk", "uniform"])
def test_static_mask_never_changes_and_hits_density(tiny_fit, distribution):
    watcher = MaskWatcher()
    module, _ = tiny_fit(
        "static", 0.9, {"distribution": distribution}, epochs=2, extra_callbacks=[watcher]
    )
    assert all(torch.equal(watcher.masks[0]["0"], m["0"]) for m in watcher.masks)
    assert module.masks.sparsity() == pytest.approx(0.9, abs=0.01)


def test_dense_has_no_mask(tiny_fit):
    module, _ = tiny_fit("dense", 0.0, epochs=1)
    assert not module.masks.is_sparse and module.masks.sparsity() == 0.0


def test_final_allocation_is_the_start_distribution():
    from types import SimpleNamespace

    from sparsebench.methods.dst.static import Static

    # Static never moves weights between layers: the record says the start's allocation.
    assert Static.final_allocation(Static.Params(distribution="uniform")) == "uniform"
    assert Static.final_allocation(SimpleNamespace()) is None  # params without a distribution

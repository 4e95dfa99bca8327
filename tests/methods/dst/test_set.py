import pytest
import torch

from sparsebench.methods.dst.set import SET
from tests.methods.conftest import MaskWatcher


def _set(zeta=0.5, init="zero"):
    ctx = type("C", (), {"generator": torch.Generator().manual_seed(0), "epochs": 3})()
    return SET(SET.Params(zeta=zeta, regrowth_init=init), 0.5, ctx)


def test_set_removes_zeta_of_positive_and_negative_weights_closest_to_zero():
    w = torch.tensor([-3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 0, 0, 0, 0]).reshape(3, 4)
    mask = w != 0
    new, grown = _set().evolve(w, mask)
    assert int(new.sum()) == 8  # exact count kept
    big = torch.tensor([-3.0, -2.0, 2.0, 3.0])
    assert all(bool(new.reshape(-1)[(w.reshape(-1) == v)].all()) for v in big)
    assert int(grown.sum()) == 4
    assert torch.all(w[grown] == 0)  # zero regrowth init


def test_set_random_regrowth_init_is_bounded():
    w = torch.tensor([[-3.0, -2.0, 1.0, 2.0, 0.0, 0.0, 0.0, 0.0]])
    new, grown = _set(init="random").evolve(w, w != 0)
    bound = 1 / 8**0.5
    assert torch.all(w[grown].abs() <= bound)


def test_set_keeps_exact_layer_nnz_and_changes_topology_each_epoch(tiny_fit):
    watcher = MaskWatcher()
    module, _ = tiny_fit("set", 0.8, epochs=3, extra_callbacks=[watcher])
    assert all(n == watcher.nnz[0] for n in watcher.nnz)
    per_epoch = watcher.masks[9::10]  # last batch of each epoch (10 batches per epoch)
    assert not torch.equal(per_epoch[0]["0"], per_epoch[1]["0"])
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)


def test_zeta_out_of_range_is_refused():
    from sparsebench.suite.registry import RegistryError, build_params

    with pytest.raises(RegistryError, match="zeta must be in"):
        build_params("set", {"zeta": 1.5})

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


@pytest.mark.parametrize("init", ["normal", "uniform"])
def test_set_random_regrowth_init(init):
    w = torch.zeros(1, 400)
    w[0, :100] = torch.linspace(1, 2, 100)
    w[0, 100:200] = -torch.linspace(1, 2, 100)
    new, grown = _set(zeta=0.3, init=init).evolve(w, w != 0)
    vals = w[grown]
    assert vals.numel() == 60 and torch.all(vals != 0)  # random, not zero
    if init == "uniform":
        assert torch.all(vals.abs() <= 1 / 400**0.5)
    else:
        assert 0.05 < float(vals.std()) < 0.15  # N(0, 0.1^2)


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

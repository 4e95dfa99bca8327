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
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="zeta must be in"):
        build_params("set", {"zeta": 1.5})


def test_default_regrowth_matches_the_layers_init_scale():
    s = _set(zeta=0.3, init="init")
    s.init_std = {"fc": 0.02}
    w = torch.zeros(1, 4000)
    w[0, :1000] = torch.linspace(1, 2, 1000)
    new, grown = s.evolve(w, w != 0, name="fc")
    assert int(grown.sum()) == 300 and float(w[grown].std()) == pytest.approx(0.02, rel=0.2)


def test_default_stops_evolving_at_the_end_fraction_and_records_it(tiny_fit):
    """10 steps per epoch, 8 epochs: T_end = 0.75 x 80 = 60, so updates after epochs 1-6."""
    watcher = MaskWatcher()
    module, m = tiny_fit("set", 0.8, epochs=8, extra_callbacks=[watcher])
    ends = watcher.masks[9::10]
    changed = [not torch.equal(a["0"], b["0"]) for a, b in zip(ends, ends[1:])]
    assert changed == [True] * 6 + [False]  # no update after epoch 7: 70 steps > T_end
    assert module.masks.trained_density(15) == pytest.approx(1 - module.masks.sparsity())
    # The authors' schedule evolves until the second-to-last epoch: 7 updates, and the
    # connections grown after epoch 7 are 10 steps old (< 15) at the end.
    watcher = MaskWatcher()
    module, m = tiny_fit("set", 0.8, {"end_fraction": 1.0}, epochs=8, extra_callbacks=[watcher])
    ends = watcher.masks[9::10]
    assert all(not torch.equal(a["0"], b["0"]) for a, b in zip(ends, ends[1:]))
    assert module.masks.trained_density(15) < 1 - module.masks.sparsity() - 0.02


def test_step_schedule_is_evci_et_al_set_baseline(tiny_fit):
    import lightning.pytorch as pl

    class First(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            self.mask = pl_module.masks.masks["0"].clone()

    params = {"update_interval": 5, "drop_fraction_anneal": "cosine", "regrowth_init": "zero"}
    watcher, first = MaskWatcher(), First()
    module, m = tiny_fit("set", 0.8, params, epochs=4, extra_callbacks=[watcher, first])
    # T_end = 30 of 40 steps: updates after iterations 0, 5, ..., 25 (masks[j]: after
    # iteration j; a change between masks[i] and masks[i + 1] happened at iteration i + 1).
    changes = [i + 1 for i, (a, b) in enumerate(zip(watcher.masks, watcher.masks[1:]))
               if not torch.equal(a["0"], b["0"])]  # fmt: skip
    assert changes == [5, 10, 15, 20, 25]
    assert not torch.equal(first.mask, watcher.masks[0]["0"])  # the update at iteration 0
    assert m.zeta_at(0) == pytest.approx(0.3) and m.zeta_at(15) == pytest.approx(0.15)
    assert all(n == watcher.nnz[0] for n in watcher.nnz)


def test_step_schedule_drops_by_plain_magnitude():
    s = _set(zeta=0.5)
    s.params.update_interval = 100
    w = torch.tensor([[-3.0, -0.1, 0.2, 4.0, 0.0, 0.0]])
    new, grown = s.evolve(w, w != 0)
    # 2 of 4 dropped by |w| (-0.1 and 0.2), signs pooled; per-sign SET would drop one of each
    # sign too, so also check a case where they differ: all small weights negative.
    assert new[0, 0] and new[0, 3] and int(new.sum()) == 4
    w = torch.tensor([[-0.1, -0.2, 3.0, 4.0, 0.0, 0.0]])
    new, _ = s.evolve(w, w != 0)
    assert new[0, 2] and new[0, 3]  # both large positives kept


def test_init_scale_is_measured_before_the_masks(tiny_fit):
    _, m = tiny_fit("set", 0.8, epochs=2)
    # nn.Linear(12, 32)'s default init: U(±1/sqrt(12)), std 1/sqrt(36) = 0.1667 (dense weights)
    assert m.init_std["0"] == pytest.approx(1 / 6, rel=0.15)


def test_a_step_schedule_past_t_end_is_refused():
    from sparsebench.methods.dst.set import SET

    with pytest.raises(ValueError, match="no topology update would happen"):
        SET.check_budget(SET.Params(update_interval=100), total_steps=120)


def test_a_one_epoch_run_is_refused_in_epoch_mode():
    from sparsebench.methods.dst.set import SET

    with pytest.raises(ValueError, match="train at least 2 epochs"):
        SET.check_budget(SET.Params(), total_steps=55, steps_per_epoch=55)
    SET.check_budget(SET.Params(), total_steps=110, steps_per_epoch=55)  # 82 >= 55: one update


def _store(values):
    from torch import nn

    from sparsebench.suite.pillars.classification.masks import MaskStore

    model = nn.Sequential(nn.Linear(len(values[0]), len(values), bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor(values))
    store = MaskStore(model)
    store.set_mask("0", model[0].weight != 0)
    return store


def _ctx(total_steps, steps_per_epoch):
    from types import SimpleNamespace

    return SimpleNamespace(
        generator=torch.Generator().manual_seed(0),
        total_steps=total_steps,
        steps_per_epoch=steps_per_epoch,
        epochs=total_steps // steps_per_epoch,
    )


def test_cosine_anneal_sets_the_removed_fraction_of_the_step():
    from types import SimpleNamespace

    store = _store([[-4.0, -3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0]])
    params = SET.Params(
        zeta=0.5,
        end_fraction=1.0,
        update_interval=10,
        drop_fraction_anneal="cosine",
        regrowth_init="zero",
    )
    s = SET(params, 0.5, _ctx(100, 10))
    # zeta(50) = 0.5 / 2 x (1 + cos(pi x 50 / 100)) = 0.25; signs pooled: int(0.25 x 8) = 2
    # removed, 2 regrown at zero (the constant 0.5 would move 4).
    s._evolve_all(SimpleNamespace(masks=store), 50)
    w, mask = store.weight("0").detach(), store.masks["0"]
    assert int(mask.sum()) == 8 and int((mask & (w == 0)).sum()) == 2


def test_no_topology_change_after_the_last_epoch():
    from types import SimpleNamespace

    values = [[-4.0, -3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0, 0.0, 0.0]]
    store = _store(values)
    s = SET(SET.Params(end_fraction=1.0, regrowth_init="zero"), 0.5, _ctx(30, 10))
    module = SimpleNamespace(masks=store)
    s.on_train_epoch_end(SimpleNamespace(current_epoch=2, global_step=30), module)  # epoch 3 of 3
    assert store.weight("0").tolist() == values
    # The end of epoch 2 does evolve: int(0.3 x 4) = 1 of each sign removed, regrown at zero.
    s.on_train_epoch_end(SimpleNamespace(current_epoch=1, global_step=20), module)
    assert int((store.masks["0"] & (store.weight("0") == 0)).sum()) == 2


def test_budget_boundaries_of_set():
    with pytest.raises(ValueError, match="<= update_interval = 75"):
        SET.check_budget(SET.Params(update_interval=75), total_steps=100)  # T_end = 75
    SET.check_budget(SET.Params(update_interval=74), total_steps=100)
    # on_fit_start checks the run's epochs: one epoch of 55 steps is too short.
    s = SET(SET.Params(), 0.5, _ctx(55, 55))
    with pytest.raises(ValueError, match="train at least 2 epochs"):
        s.on_fit_start(None, None)


@pytest.mark.parametrize("update_interval", [None, 10])
def test_set_on_values_drops_what_evolve_drops_and_grows_fresh_connections(update_interval):
    from sparsebench.kernels import SparseLinear

    g = torch.Generator().manual_seed(4)
    mask = torch.rand(12, 30, generator=g) < 0.3
    layer = SparseLinear(mask, bias=False)
    opt = torch.optim.SGD(layer.parameters(), lr=0.1, momentum=0.9)
    layer(torch.randn(4, 30, generator=g)).sum().backward()
    opt.step()
    weight = layer.dense_weight().detach().clone()
    params = SET.Params(zeta=0.3, regrowth_init="normal", update_interval=update_interval)
    ctx = type("C", (), {"generator": torch.Generator().manual_seed(0), "epochs": 3})()
    dense_new, dense_grown = SET(params, 0.5, ctx).evolve(weight.clone(), mask)
    dense_kept = dense_new & ~dense_grown
    before = dict(zip(layer.flat_index.tolist(), layer.values.detach().tolist(), strict=True))
    s = SET(params, 0.5, type("C", (), {"generator": torch.Generator().manual_seed(1)})())
    n = s.evolve_values(layer, optimizer=opt)
    new = layer.pattern.mask()
    assert int(new.sum()) == int(mask.sum()) and n == int(dense_grown.sum())  # exact nnz
    buf = opt.state[layer.values]["momentum_buffer"]
    kept_here = torch.zeros_like(new)
    for pos, v, m in zip(layer.flat_index.tolist(), layer.values.detach().tolist(),
                         buf.tolist(), strict=True):  # fmt: skip
        if pos in before and v == before[pos] and m != 0.0:
            kept_here.view(-1)[pos] = True
        else:  # grown (or dropped and regrown): a fresh N(0, 0.1²) value, no momentum
            assert m == 0.0 and abs(v) < 0.6
    assert torch.equal(kept_here, dense_kept)  # the same connections survive the drop

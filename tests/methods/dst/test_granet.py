import lightning.pytorch as pl
import pytest
import torch
from torch import nn

import sparsebench.methods.dst.granet  # noqa: F401  (registers "granet")
from sparsebench.methods.dst.granet import GraNet
from sparsebench.suite.pillars.classification.flops import (
    TrainFlopsCounter,
    layer_flops,
    sparse_forward_flops,
)
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep
from tests.methods.conftest import MaskWatcher

# tiny_fit: 160 examples, batch 16 -> 10 steps per epoch; 4 epochs = 40 steps.
# update_fraction 0.05 -> ΔT = 2; end_fraction 0.5 -> t_end = 20, n = 10 pruning steps.
FIT = {"update_fraction": 0.05, "end_fraction": 0.5}


def _granet(total=1000, sparsity=0.9, **kw):
    ctx = type("C", (), {"total_steps": total})()
    return GraNet(GraNet.Params(**kw), sparsity, ctx)


def test_regenerate_drops_smallest_magnitude_and_grows_largest_gradient():
    w = torch.tensor([[0.5, -3.0, 0.0, 0.0], [0.1, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, False], [True, True, False, False]])
    g = torch.tensor([[9.0, 0.0, 1.0, 5.0], [0.0, 0.0, 7.0, 0.2]])
    # r = 0.3 -> ceil(0.3 * 4) = 2 dropped (0.5 and 0.1), 2 grown among the rest by |g|: 9 (the
    # just-dropped 0.5 comes back) and 7.
    new = GraNet.regenerate(w, mask, g, rate=0.3)
    assert new.tolist() == [[True, True, False, False], [False, True, True, False]]
    assert int(new.sum()) == int(mask.sum())


def test_update_prunes_then_regrows_with_zero_init_and_reset_optimizer_state():
    model = nn.Linear(4, 2, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[0.5, -3.0, 0.2, 0.9], [0.1, 2.0, 0.4, 0.05]]))
    store = MaskStore(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    opt.state[model.weight]["momentum_buffer"] = torch.ones(2, 4)
    store.set_mask("", torch.tensor([[True, True, False, True], [True, True, False, False]]))
    ctx = type("C", (), {"total_steps": 100})()
    ctx.flops = TrainFlopsCounter(layer_flops(model, (4,)))
    # ΔT = 10, n = 1: step 10 prunes to the target 4 of 8; r(10) = 0.005 + 0.695 * 0.9755.
    params = GraNet.Params(update_fraction=0.1, end_fraction=0.1, regeneration_rate=0.7)
    g = GraNet(params, 0.5, ctx)
    grad = torch.tensor([[8.0, 0.0, 1.0, 0.0], [9.0, 0.0, 0.5, 8.5]])
    g.update(store, 10, {"": grad}, batch_size=1)
    # Pruning drops 0.1 (smallest of 5 active). Regeneration drops ceil(0.683 * 4) = 3 of
    # 0.5, 0.9, 2, -3 (all but -3) and grows by |grad|: 9 (the weight pruned just before),
    # 8.5 (inactive before) and 8 (0.5, dropped and regrown: keeps its value and state).
    assert store.masks[""].tolist() == [[True, True, False, False], [True, False, False, True]]
    assert model.weight.tolist() == [[0.5, -3.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    mom = opt.state[model.weight]["momentum_buffer"]
    assert mom.tolist() == [[1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]


def test_global_pruning_ranks_across_layers_and_keeps_one_per_layer():
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.1, 0.2], [0.3, 0.05]]))
        model[1].weight.copy_(torch.tensor([[5.0, -4.0], [3.0, 0.0]]))
    store = MaskStore(model)
    store.set_mask("1", torch.tensor([[True, True], [True, False]]))
    GraNet.prune_global(store, ["0", "1"], density=3 / 8)  # keep 3 of 8
    # Global top-3 by |w| would be 5, -4, 3 (all in layer 1); layer 0 keeps its largest, 0.3,
    # which takes the slot of the globally third-largest, 3.
    assert store.masks["0"].tolist() == [[False, False], [True, False]]
    assert store.masks["1"].tolist() == [[True, True], [False, False]]
    assert store.total_nnz == 3
    assert model[1].weight[1, 0] == 0  # pruned weights are zeroed


def test_schedule_at_known_steps():
    g = _granet(total=1000, update_fraction=0.1, end_fraction=0.65)
    assert (g.update_interval, g.t0, g.n_prunes) == (100, 0, 6)
    d_i, d_f = 0.5, 0.1
    assert g.density_at(100) == pytest.approx(d_f + (d_i - d_f) * (5 / 6) ** 3)
    assert g.density_at(300) == pytest.approx(d_f + (d_i - d_f) * 0.5**3)
    assert g.density_at(600) == pytest.approx(d_f)
    assert g.density_at(0) is None and g.density_at(150) is None and g.density_at(700) is None
    assert [s for s in range(1001) if g.regenerates_at(s)] == [100, 200, 300, 400, 500, 600]
    kw = {"update_fraction": 0.1, "end_fraction": 0.65}
    after = _granet(total=1000, regenerate_after_pruning=True, **kw)
    assert [s for s in range(1001) if after.regenerates_at(s)] == [100 * k for k in range(1, 10)]
    assert g.regeneration_rate_at(0) == pytest.approx(0.5)
    assert g.regeneration_rate_at(500) == pytest.approx(0.005 + 0.495 / 2)
    assert g.regeneration_rate_at(1000) == pytest.approx(0.005)


def test_published_defaults():
    p = GraNet.Params()
    assert p.initial_density == 0.5 and p.regeneration_rate == 0.5
    assert p.distribution == "erk" and (p.begin_fraction, p.end_fraction) == (0.0, 0.6875)
    # The paper's CIFAR run: 56,320 iterations, ΔT = 1000, pruning until epoch 110 of 160.
    g = _granet(total=56320)
    assert (g.update_interval, g.n_prunes) == (1000, 38)


class _Densities(pl.Callback):
    """Layer densities at the start of each step (the masks the step trains with)."""

    def __init__(self):
        self.start = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.start.append(pl_module.masks.densities())


def test_density_follows_cubic_schedule_and_regeneration_keeps_layer_counts(tiny_fit):
    watcher = MaskWatcher()
    module, m = tiny_fit("granet", 0.9, FIT, epochs=4, extra_callbacks=[watcher])
    assert (m.update_interval, m.n_prunes, m.ctx.total_steps) == (2, 10, 40)
    total = module.masks.total
    # Eq. 1 by hand: ΔT = 0.05 x 40 = 2, t_0 = 0, n = 10, d_i = 0.5, d_f = 0.1.
    by_hand = {2 * k: 0.1 + 0.4 * (1 - k / 10) ** 3 for k in range(1, 11)}
    assert by_hand[2] == pytest.approx(0.3916) and by_hand[20] == pytest.approx(0.1)
    for i, nnz in enumerate(watcher.nnz):
        step = i + 1  # watcher.nnz[i] is after step i + 1's update
        d = by_hand.get(step)
        if d is not None:
            assert sum(nnz.values()) == n_keep(total, d), step  # exactly Eq. 1, rounded
        elif step > 1:
            assert nnz == watcher.nnz[i - 1], step  # no change between updates
    # The target is hit exactly at the end of the window (t_0 + nΔT = 20), then fixed per layer.
    assert sum(watcher.nnz[19].values()) == n_keep(total, 0.1)
    assert all(n == watcher.nnz[19] for n in watcher.nnz[19:])
    assert module.masks.sparsity() == pytest.approx(0.9, abs=1e-3)
    # Regeneration moves connections: some weight becomes active that was not before.
    grown = sum(bool(torch.any(b["0"] & ~a["0"])) for a, b in zip(watcher.masks, watcher.masks[1:]))
    assert grown >= 3
    # Default: mask fixed after the pruning window.
    assert all(torch.equal(watcher.masks[19]["0"], x["0"]) for x in watcher.masks[19:])


def test_regeneration_after_pruning_keeps_counts_and_changes_topology(tiny_fit):
    watcher = MaskWatcher()
    params = {**FIT, "regenerate_after_pruning": True}
    _, m = tiny_fit("granet", 0.9, params, epochs=4, extra_callbacks=[watcher])
    assert all(n == watcher.nnz[19] for n in watcher.nnz[19:])
    changes = sum(
        not torch.equal(a["0"], b["0"]) for a, b in zip(watcher.masks[19:], watcher.masks[20:])
    )
    assert changes >= 5  # regeneration steps 22, 24, ..., 38


def test_flops_count_dense_gradient_on_regeneration_steps(tiny_fit):
    dens = _Densities()
    module, m = tiny_fit("granet", 0.9, FIT, epochs=4, extra_callbacks=[dens])
    flops = m.ctx.flops
    f_s = [sparse_forward_flops(flops.dense_flops, d) for d in dens.start]
    regen = [t for t in range(1, 41) if m.regenerates_at(t)]
    assert regen == list(range(2, 21, 2))
    expected = sum(3 * f * 16 for f in f_s) + sum((flops.f_dense - f_s[t - 1]) * 16 for t in regen)
    assert flops.total == pytest.approx(expected)
    assert f_s[0] > f_s[-1]  # the density falls during training


def test_too_short_run_is_refused():
    with pytest.raises(ValueError, match=r"ΔT = int\(update_fraction x total_steps\)"):
        _granet(total=40).on_fit_start(None, None)
    # window int(0.55 x 100) - int(0.5 x 100) = 5 steps
    with pytest.raises(ValueError, match=r"= 5 steps\) is shorter than ΔT = 10 steps"):
        _granet(total=100, update_fraction=0.1, begin_fraction=0.5, end_fraction=0.55).on_fit_start(
            None, None
        )


def test_target_denser_than_initial_density_is_refused():
    with pytest.raises(ValueError, match="above initial_density = 0.5"):
        _granet(total=1000, sparsity=0.3).on_fit_start(None, None)


def test_conv_update_keeps_exact_counts():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 5))
    store = MaskStore(model)
    ctx = type("C", (), {})()
    ctx.total_steps, ctx.generator = 100, torch.Generator().manual_seed(0)
    ctx.flops = TrainFlopsCounter(layer_flops(model, (3, 6, 6)))
    g = GraNet(GraNet.Params(update_fraction=0.1, end_fraction=0.5), 0.8, ctx)
    g.on_fit_start(None, type("M", (), {"masks": store})())
    grads = {n: torch.randn(store.weight(n).shape) for n in store.layers}
    before, dens0 = dict(store.masks), store.densities()
    g.update(store, 10, grads, batch_size=4)  # k = 1 of n = 5
    # d_1 = 0.2 + (0.5 - 0.2) x 0.8^3 = 0.3536 of 216 + 640 = 856 weights: 302.7 -> 303
    assert store.total == 856 and store.total_nnz == 303
    counts = {n: store.nnz(n) for n in store.layers}
    assert store.masks["0"].shape == (8, 3, 3, 3)
    g.update(store, 60, grads, batch_size=4)  # after the window: nothing happens by default
    assert {n: store.nnz(n) for n in store.layers} == counts
    assert not torch.equal(before["0"], store.masks["0"])
    f_s0 = sparse_forward_flops(ctx.flops.dense_flops, dens0)  # masks of the step's backward
    assert ctx.flops.total == pytest.approx((ctx.flops.f_dense - f_s0) * 4)


def test_out_of_range_params_are_refused():
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="initial_density must be in"):
        build_params("granet", {"initial_density": 1.5})
    with pytest.raises(RegistryError, match="regeneration_rate must be in"):
        build_params("granet", {"regeneration_rate": 1.0})


def test_started_at_the_target_density_it_keeps_the_count_and_the_start_allocation(tiny_fit):
    watcher = MaskWatcher()
    params = {**FIT, "initial_density": None}
    GraNet.check_sparsity(GraNet.Params(initial_density=None), 0.05)  # any target is reachable
    module, m = tiny_fit("granet", 0.9, params, epochs=4, extra_callbacks=[watcher])
    assert m.initial_density == pytest.approx(0.1)
    # ERK at density 0.1 from the first step on: every step has the target's count (up to
    # the per-layer rounding of ERK against one global count).
    total = module.masks.total
    assert all(abs(sum(n.values()) - n_keep(total, 0.1)) <= 3 for n in watcher.nnz)
    assert GraNet.final_allocation(m.params) == "erk"
    assert GraNet.final_allocation(GraNet.Params()) == "global"
    assert module.masks.mask_updates >= 5  # regeneration still moves connections


def test_a_dense_first_layer_is_left_out_of_the_global_pruning():
    model = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.01, 0.02], [0.03, 0.04]]))
        model[1].weight.copy_(torch.tensor([[1.0, -4.0], [3.0, 2.0]]))
    store = MaskStore(model)
    store.set_mask("1", torch.ones(2, 2, dtype=torch.bool))
    ctx = type("C", (), {"total_steps": 100})()
    ctx.flops = TrainFlopsCounter(layer_flops(model, (2,)))
    # ΔT = 10, n = 1: step 10 prunes to the target 0.5 over layer "1" alone: 2 of 4 (-4, 3).
    params = GraNet.Params(update_fraction=0.1, end_fraction=0.1, dense_first_layer=True)
    GraNet(params, 0.5, ctx).update(store, 10, {}, batch_size=1)
    assert store.masks["0"] is None
    assert store.masks["1"].tolist() == [[False, True], [True, False]]

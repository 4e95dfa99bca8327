from types import SimpleNamespace

import pytest
import torch
from torch import nn

import sparsebench.methods.dst.mest  # noqa: F401  (registers "mest")
from sparsebench.methods.dst.base import MaskMethod
from sparsebench.methods.dst.mest import MEST
from sparsebench.suite.pillars.classification.masks import MaskStore, n_keep
from tests.methods.conftest import MaskWatcher

BATCH, STEPS = 16, 40  # tiny_fit: 160 examples, batch 16, 4 epochs

# The authors' profile: first layer dense (the runs below check the others' exact counts).
CODE_PROFILE = {"dense_first_layer": True}


def _ctx(total_steps):
    return SimpleNamespace(total_steps=total_steps, generator=torch.Generator().manual_seed(0))


def test_hard_mutation_drops_lowest_magnitude_plus_gradient_and_grows_at_random():
    w = torch.tensor([[0.5, -0.05, 0.3, 0.0], [0.02, 0.0, 0.0, -0.4]])
    mask = w != 0
    g = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    # |w| + 0.5|g|: 0.5, 0.55, 0.3, 0.02, 0.4 -> drop 0.02 and 0.3 (magnitude alone: -0.05).
    new, grown = MEST.mutate(w, g, mask, 2, 0.5, torch.Generator().manual_seed(0))
    kept = mask & ~grown
    assert int(new.sum()) == 5 and int(grown.sum()) == 2
    assert kept[0, 0] and kept[0, 1] and kept[1, 3]  # 0.5, -0.05 (big gradient), -0.4 survive
    assert not (new & ~grown)[0, 2] and not (new & ~grown)[1, 0]  # 0.3 and 0.02 dropped
    # Magnitude only (grad_coef 0) drops the two smallest |w| instead.
    assert MEST.prune_to(w, g, mask, 3, 0.0).tolist() == [
        [True, False, True, False],
        [False, False, False, True],
    ]


def test_prune_to_on_a_conv_weight():
    w = torch.tensor([0.9, -0.1, 0.0, 0.4, 0.2, 0.0, -0.3, 0.05]).reshape(2, 1, 2, 2)
    g = torch.zeros_like(w)
    g.view(-1)[7] = 1.0  # 0.05 + 0.5 = 0.55
    keep = MEST.prune_to(w, g, w != 0, 3, 0.5)
    assert keep.shape == w.shape
    assert keep.view(-1).nonzero().view(-1).tolist() == [0, 3, 7]


def test_soft_bound_update_by_hand():
    """Grow first (zero init, zero momentum), train, prune back to exactly n by |w| + λ|g|."""
    model = nn.Sequential(nn.Linear(3, 2, bias=False))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[0.9, -0.1, 0.5], [0.05, -0.7, 0.3]]))
    store = MaskStore(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    params = MEST.Params(dense_first_layer=False, mutation_rate=0.5, update_fraction=0.1)
    m = MEST(params, sparsity=1 - 4 / 6, ctx=_ctx(100))  # ΔT = w = 10
    pl_module = SimpleNamespace(masks=store, parameters=model.parameters)
    m.on_fit_start(None, pl_module)
    w = model[0].weight
    # Initial mask: the 4 largest magnitudes of the initialisation.
    assert store.masks["0"].tolist() == [[True, False, True], [False, True, True]]
    w.grad = torch.full_like(w, 0.3) * store.masks["0"]
    opt.step()  # momentum buffer = 0.3 at active positions
    w.grad = torch.full_like(w, 0.2) * store.masks["0"]

    m.on_before_optimizer_step(SimpleNamespace(global_step=0), pl_module, opt)
    # k = int(0.5 * 4) = 2 = every inactive position: the layer holds n + k = 6 weights.
    assert store.masks["0"].all() and m.history == [(0, "grow", {"0": 6})]
    buf = opt.state[w]["momentum_buffer"]
    assert w[0, 1] == 0 and w[1, 0] == 0 and buf[0, 1] == 0 and buf[1, 0] == 0
    assert buf[0, 0] == pytest.approx(0.3)  # kept weights keep their state
    assert w.grad[0, 1] == 0 and w.grad[0, 0] == pytest.approx(0.2)

    # The grown weights train; at iteration ΔT the prune keeps the best 4 of 6.
    with torch.no_grad():
        w.copy_(torch.tensor([[0.9, 0.2, 0.5], [0.01, -0.7, 0.3]]))
    w.grad = torch.tensor([[0.0, 0.0, 0.0], [0.8, 0.0, 0.0]])  # 0.01 + 0.5 * 0.8 = 0.41 > 0.3
    m.on_before_optimizer_step(SimpleNamespace(global_step=10), pl_module, opt)
    assert m.history[1] == (10, "prune", {"0": 4})  # exact at the end of the update
    # Dropped: 0.2 and 0.3 (magnitude alone would drop 0.01). Iteration 10 also starts the
    # next mutation, which regrows exactly those two (the only inactive positions) at zero.
    assert m.history[2] == (10, "grow", {"0": 6})
    assert float(w[1, 0]) == pytest.approx(0.01) and w[0, 1] == 0 and w[1, 2] == 0


def test_schedule_at_known_steps():
    m = MEST(MEST.Params(), 0.9, ctx=_ctx(3200))  # 160 "epochs" of 20 iterations
    assert m.schedule(m.params, 3200) == {
        "interval": 100,  # 5 of 160 epochs
        "decay_step": 1800,  # epoch 90
        "end_step": 2400,  # epoch 120
        "window": 100,
    }
    steps = [s for s in range(3200) if m.is_mutation_step(s)]
    assert steps == list(range(0, 2400, 100))
    assert [s for s in range(3200) if m.is_prune_step(s)] == list(range(100, 2500, 100))
    assert m.mutation_rate_at(0) == pytest.approx(0.2)
    assert m.mutation_rate_at(1799) == pytest.approx(0.2)
    assert m.mutation_rate_at(1800) == pytest.approx(0.1)
    assert m.mutation_rate_at(2400) == 0.0
    hard = MEST(MEST.Params(soft_bound=False, soft_window=0.5), 0.9, ctx=_ctx(3200))
    assert not any(hard.is_prune_step(s) for s in range(3200))
    half = MEST(MEST.Params(soft_window=0.5), 0.9, ctx=_ctx(3200))
    assert [s for s in range(3200) if half.is_prune_step(s)][:2] == [50, 150]


def _targets():
    return {"2": n_keep(32 * 16, 0.2), "4": n_keep(16 * 3, 0.2)}  # layer "0" dense


def _topology_changes(watcher, layer="2"):
    masks = [m[layer] for m in watcher.masks]
    return sum(not torch.equal(a, b) for a, b in zip(masks, masks[1:]))


def _f_s(flops, nnz):
    """Sparse forward FLOPs of one example at per-layer nnz (layers not given are dense)."""
    numel = {"0": 12 * 32, "2": 32 * 16, "4": 16 * 3}
    return sum(f * nnz.get(n, numel[n]) / numel[n] for n, f in flops.dense_flops.items())


def test_hard_bound_keeps_exact_nnz_after_every_step(tiny_fit):
    watcher = MaskWatcher()
    module, m = tiny_fit(
        "mest",
        0.8,
        {"soft_bound": False, "update_fraction": 0.1, **CODE_PROFILE},
        extra_callbacks=[watcher],
    )
    targets = _targets()
    assert module.masks.masks["0"] is None  # dense first layer (the authors' profiles)
    for nnz in watcher.nnz:
        assert {n: nnz[n] for n in targets} == targets
    assert _topology_changes(watcher) >= 5
    assert [s for s, phase, _ in m.history] == list(range(0, 30, 4))  # ΔT 4, T_end 30
    assert all(phase == "mutate" for _, phase, _ in m.history)
    # FLOPs: 3 f_S per example at the constant density, no dense-gradient term.
    assert m.ctx.flops.total == pytest.approx(3 * BATCH * STEPS * _f_s(m.ctx.flops, targets))


def test_soft_bound_exceeds_inside_an_update_and_ends_exact(tiny_fit):
    watcher = MaskWatcher()
    params = {"update_fraction": 0.1, "soft_window": 0.5, **CODE_PROFILE}  # ΔT 4, t, t + 2
    module, m = tiny_fit("mest", 0.8, params, extra_callbacks=[watcher])
    targets = _targets()
    assert len(watcher.nnz) == STEPS
    for step, nnz in enumerate(watcher.nnz):
        grow = step - step % 4
        open_window = step % 4 < 2 and grow < 30  # between a growth and its prune
        rate = 0.2 if grow < 22 else 0.1
        for name, n in targets.items():
            assert nnz[name] == (n + int(rate * n) if open_window else n), (step, name)
    assert all(nnz == targets for s, phase, nnz in m.history if phase == "prune")
    assert {n: module.masks.nnz(n) for n in targets} == targets
    assert _topology_changes(watcher) >= 10


def test_soft_bound_default_window_prunes_back_exactly_at_each_update(tiny_fit):
    watcher = MaskWatcher()
    module, m = tiny_fit(
        "mest", 0.8, {"update_fraction": 0.1, **CODE_PROFILE}, extra_callbacks=[watcher]
    )
    targets = _targets()
    prunes = [(s, nnz) for s, phase, nnz in m.history if phase == "prune"]
    grows = [(s, nnz) for s, phase, nnz in m.history if phase == "grow"]
    assert [s for s, _ in prunes] == list(range(4, 33, 4))  # the last at 28 + ΔT
    assert all(nnz == targets for _, nnz in prunes)
    assert grows[0] == (0, {n: v + int(0.2 * v) for n, v in targets.items()})
    assert grows[-1] == (28, {n: v + int(0.1 * v) for n, v in targets.items()})
    assert max(nnz["2"] for nnz in watcher.nnz) > targets["2"]  # the bound is soft
    assert {n: module.masks.nnz(n) for n in targets} == targets  # the final model is exact
    assert all(nnz["2"] == targets["2"] for nnz in watcher.nnz[32:])
    # FLOPs: 3 f_S per example at each iteration's masks; iterations t+1 .. t+ΔT after each
    # growth at t run with k extra weights per layer.
    flops = m.ctx.flops
    expected = 3 * BATCH * STEPS * _f_s(flops, targets)
    for t in range(0, 30, 4):
        rate = 0.2 if t < 22 else 0.1
        grown = {n: v + int(rate * v) for n, v in targets.items()}
        expected += 3 * BATCH * 4 * (_f_s(flops, grown) - _f_s(flops, targets))
    assert flops.total == pytest.approx(expected)
    assert flops.total > 3 * BATCH * STEPS * _f_s(flops, targets)


def test_too_short_runs_are_refused():
    with pytest.raises(ValueError, match="first mutation stage is empty"):
        MEST.check_budget(MEST.Params(), 1)
    with pytest.raises(ValueError, match=r"no mutation iteration in the decayed stage \[56, 75\)"):
        MEST.check_budget(MEST.Params(update_fraction=0.5), 100)
    with pytest.raises(ValueError, match="above the spec's density"):
        MEST.check_budget(MEST.Params(end_fraction=1.0), 3200)
    MEST.check_budget(MEST.Params(end_fraction=1.0, soft_bound=False), 3200)
    MEST.check_budget(MEST.Params(), 3200)
    m = MEST(MEST.Params(update_fraction=0.5), 0.9, ctx=_ctx(100))
    with pytest.raises(ValueError, match="lower update_fraction"):
        m.on_fit_start(None, None)


def test_bad_params_are_refused():
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="mutation_rate must be in"):
        build_params("mest", {"mutation_rate": 1.5})
    with pytest.raises(RegistryError, match="decay_fraction < end_fraction"):
        build_params("mest", {"decay_fraction": 0.8})


def test_registered_with_source():
    from tests.methods.mask_methods import get_method

    info = get_method("mest")
    assert info.cls is MEST and "MEST" in info.source and issubclass(MEST, MaskMethod)


def test_budget_boundaries_are_allowed():
    # decay_fraction x 100 = 1: a one-iteration first stage is not empty.
    MEST.check_budget(MEST.Params(decay_fraction=0.01, update_fraction=0.01), 100)
    # ΔT = w = 9, T_end = 95: the last growth at (94 // 9) x 9 = 90 is pruned at 99, the last
    # iteration of a 100-iteration run.
    MEST.check_budget(MEST.Params(update_fraction=0.09, end_fraction=0.95), 100)


def test_importance_without_a_gradient_is_the_magnitude():
    w = torch.tensor([-0.5, 0.25])  # exact in float32
    assert MEST.importance(w, None, 0.5).tolist() == [0.5, 0.25]


def _hard_update(global_seed):
    model = nn.Linear(10, 10, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.arange(1.0, 101.0).reshape(10, 10))  # distinct magnitudes
    store = MaskStore(model)
    store.set_mask("", torch.arange(100).reshape(10, 10) % 2 == 0)  # 50 active
    model.weight.grad = torch.zeros(10, 10)
    m = MEST(MEST.Params(soft_bound=False), 0.5, ctx=_ctx(100))
    m.targets, m.history = {"": 50}, []
    torch.manual_seed(global_seed)  # the global RNG must not matter
    m._update(0, store, prune=False, rate=0.2)  # k = 10 dropped and regrown
    return store.masks[""].clone()


def test_mutation_draws_from_the_run_generator():
    a, b = _hard_update(1), _hard_update(2)
    assert int(a.sum()) == 50 and torch.equal(a, b)
    mask = torch.zeros(100, dtype=torch.bool)
    torch.manual_seed(1)
    x = MEST.grow_random(mask, 10, torch.Generator().manual_seed(5))[1]
    torch.manual_seed(2)
    y = MEST.grow_random(mask, 10, torch.Generator().manual_seed(5))[1]
    assert int(x.sum()) == 10 and torch.equal(x, y)

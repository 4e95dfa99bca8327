import pytest
import torch
from torch import nn

import sparsebench.methods.dst.acdc  # noqa: F401  (registers "acdc")
import sparsebench.methods.dst.arc_acdc  # noqa: F401  (registers "arc_acdc")
from sparsebench.methods.dst.arc_acdc import ArcAcdc, mask_iou
from sparsebench.suite.pillars.classification.masks import MaskStore, layer_densities, n_keep
from tests.methods.conftest import MaskWatcher
from tests.methods.mask_methods import RegistryError, build_params

FAST = {"check_interval": 1, "rewire_interval": 1}


def _ctx(total_steps):
    return type("C", (), {"total_steps": total_steps})()


def test_rewire_mask_drops_smallest_and_grows_largest_gradient_outside_the_mask():
    w = torch.tensor([[0.5, -3.0, 0.0, 0.0], [0.1, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, False], [True, True, False, False]])
    g = torch.tensor([[9.0, 0.0, 1.0, 5.0], [0.0, 0.0, 7.0, 0.2]])
    new = ArcAcdc.rewire_mask(w, mask, g, fraction=0.5)  # k = 2 of 4 active
    # Dropped: 0.5 and 0.1. Grown among the weights outside the old mask by |g|: 7 and 5
    # (the 9 belongs to a weight just dropped, which cannot come back in the same update).
    assert new.tolist() == [[False, True, False, True], [False, True, True, False]]
    assert int(new.sum()) == int(mask.sum())
    # k = floor(0.3 x 4) = 1; capped by the free positions for a nearly dense layer.
    assert int((new ^ ArcAcdc.rewire_mask(w, new, g, 0.3)).sum()) == 2
    nearly = torch.ones(2, 4, dtype=torch.bool)
    nearly[0, 0] = False
    assert int((nearly ^ ArcAcdc.rewire_mask(torch.ones(2, 4), nearly, g, 0.5)).sum()) == 2


def test_mask_iou_pools_layers_and_skips_layers_dense_in_both():
    a = {"x": torch.tensor([True, True, False, False]), "d": None}
    b = {"x": torch.tensor([True, False, True, False]), "d": None}
    assert mask_iou(a, b) == pytest.approx(1 / 3)
    c = {"x": torch.tensor([True, True, False, False]), "y": torch.tensor([True, False])}
    d = {"x": torch.tensor([True, True, False, False]), "y": None}  # None = all ones
    assert mask_iou(c, d) == pytest.approx(3 / 4)


def _store():
    model = nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[4.0, 0.1, 3.0, 0.2], [0.3, 2.0, 0.4, 1.0]]))
        model[2].weight.copy_(torch.tensor([[0.5, -2.0], [0.1, 1.5]]))
    return MaskStore(model)


def test_dense_phase_is_truncated_when_the_mask_has_converged():
    store = _store()
    # 100 steps: compressed [10, 15), decompressed [15, 20), compressed [20, 25), ...
    m = ArcAcdc(ArcAcdc.Params(distribution="uniform", check_interval=2), 0.5, _ctx(100))
    m.compress(store)
    kept = {n: mk.clone() for n, mk in store.masks.items()}
    assert kept["0"].tolist() == [[True, False, True, False], [False, True, False, True]]
    m.decompress(store)
    assert not store.is_sparse and m.prev_masks["0"].tolist() == kept["0"].tolist()
    assert [s for s in range(15, 20) if m.is_check_step(s)] == [17, 19]
    # The reintroduced weights are back at zero: the top-k mask is the previous one.
    assert m.check_convergence(store, 17)
    assert m.last_iou == 1.0 and m.truncations == [(m.phase_index(17), 17)]
    assert store.is_sparse and all(torch.equal(store.masks[n], kept[n]) for n in kept)
    # The compressed stretch runs to the end of the next compressed phase.
    assert m._sparse_since == 17 and m._sparse_until == 25


def test_dense_phase_continues_while_the_mask_moves():
    store = _store()
    m = ArcAcdc(ArcAcdc.Params(distribution="uniform", check_interval=2), 0.5, _ctx(100))
    m.compress(store)
    m.decompress(store)
    with torch.no_grad():  # dense training moved the weights: 2 of 4 kept weights differ
        store.weight("0").copy_(torch.tensor([[0.1, 4.0, 0.2, 3.0], [0.3, 2.0, 0.4, 1.0]]))
    assert not m.check_convergence(store, 17)
    assert m.last_iou == pytest.approx(4 / 8) and not store.is_sparse and m.truncations == []


def test_reintroduced_weights_state_reset_only():
    store = _store()
    model = store.model
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    m = ArcAcdc(ArcAcdc.Params(distribution="uniform"), 0.5, _ctx(100))
    m.compress(store)
    pruned = ~store.masks["0"]
    # All-ones input: both hidden units are active (pre-activations 4 + 3 and 2 + 1, plus a
    # bias of |b| <= 1/2), so every kept weight of layer 0 gets a gradient; a random input
    # can leave a ReLU unit dead and the kept momentum at zero.
    model(torch.ones(3, 4)).sum().backward()
    opt.step()
    m.decompress(store, [opt])
    assert torch.all(store.weight("0")[pruned] == 0)
    buf = opt.state[store.weight("0")]["momentum_buffer"]
    assert torch.all(buf[pruned] == 0) and bool(buf[~pruned].ne(0).any())
    assert bool(opt.state[model[0].bias]["momentum_buffer"].ne(0).any())


def test_arc_acdc_tiny_run_truncates_rewires_keeps_density_and_costs_less_than_acdc(tiny_fit):
    watcher = MaskWatcher()
    module, m = tiny_fit("arc_acdc", 0.8, FAST, epochs=6, extra_callbacks=[watcher])
    _, acdc = tiny_fit("acdc", 0.8, epochs=6)
    store, phases, total = module.masks, m.schedule, m.ctx.total_steps
    assert phases == acdc.schedule and total == 60
    # 60 steps: warm-up 6, phases of 3, compressed from 6, 12, ..., 42, last dense 45-51.
    assert [p.start for p in phases if p.kind == "compressed"] == list(range(6, 43, 6))
    assert len(m.truncations) >= 3  # dense phases did end early
    truncated = {}
    for i, step in m.truncations:
        assert phases[i].kind == "decompressed" and phases[i].start < step < phases[i].end
        truncated.update(dict.fromkeys(range(step, phases[i].end)))
    # Exact per-layer nnz in every sparse step (scheduled or truncated), dense otherwise.
    densities = layer_densities(store.shapes, 0.2, "erk")
    want = {n: n_keep(store.weight(n).numel(), d) for n, d in densities.items()}
    full = {n: store.weight(n).numel() for n in store.layers}
    for step, nnz in enumerate(watcher.nnz):
        sparse = m.phase_at(step).sparse or step in truncated
        assert nnz == (want if sparse else full), step
    # Rewiring changed the topology inside compressed phases, at the scheduled steps.
    assert m.rewire_steps and all(m.phase_at(s).sparse or s in truncated for s in m.rewire_steps)
    for s in m.rewire_steps:
        before, after = watcher.masks[s - 1]["2"], watcher.masks[s]["2"]
        assert before is not None and after is not None
    changed = [
        s
        for s in m.rewire_steps
        if not torch.equal(watcher.masks[s - 1]["2"], watcher.masks[s]["2"])
    ]
    assert changed
    # FLOPs: AC/DC's 3 f_D / 3 f_S per example, truncated steps at 3 f_S, + (f_D - f_S) per
    # example on each rewiring iteration.
    flops = m.ctx.flops
    f_d = flops.f_dense
    f_s = sum(f * want[n] / full[n] for n, f in flops.dense_flops.items())
    n_sparse = sum(p.length for p in phases if p.sparse) + len(truncated)
    expected = 16 * (
        3 * ((total - n_sparse) * f_d + n_sparse * f_s) + len(m.rewire_steps) * (f_d - f_s)
    )
    assert flops.total == pytest.approx(expected)
    acdc_expected = (
        16 * 3 * ((total - n_sparse + len(truncated)) * f_d + (n_sparse - len(truncated)) * f_s)
    )
    assert acdc.ctx.flops.total == pytest.approx(acdc_expected)
    assert flops.total <= acdc.ctx.flops.total
    assert store.sparsity() == pytest.approx(0.8, abs=0.01)


def test_rewire_schedule_at_known_steps():
    m = ArcAcdc(ArcAcdc.Params(rewire_interval=10), 0.9, _ctx(1000))
    m.compressed = True
    m._start_sparse(100, 150)  # a scheduled 50-step compressed phase
    assert [s for s in range(90, 160) if m.is_rewire_step(s)] == [110, 120, 130]
    m._start_sparse(117, 250)  # early compression at 117, next phase ends at 250
    assert [s for s in range(100, 260) if m.is_rewire_step(s)][:2] == [127, 137]
    assert max(s for s in range(100, 260) if m.is_rewire_step(s)) == 237


def test_too_short_run_is_refused():
    with pytest.raises(ValueError, match="no convergence check would happen"):
        ArcAcdc.check_budget(ArcAcdc.Params(check_interval=100), 2000)  # 100-step phases
    with pytest.raises(ValueError, match="no rewiring would happen"):
        # 2 x 100 >= 100-step phases
        ArcAcdc.check_budget(ArcAcdc.Params(check_interval=10, rewire_interval=100), 4000)
    ArcAcdc.check_budget(ArcAcdc.Params(check_interval=100, rewire_interval=100), 4020)  # 201 steps
    # The defaults scale with the phase: ten checks and rewirings per phase.
    assert ArcAcdc.intervals(ArcAcdc.Params(), 2000) == (10, 10)
    ArcAcdc.check_budget(ArcAcdc.Params(), 2000)
    with pytest.raises(ValueError, match="too few"):
        ArcAcdc.check_budget(ArcAcdc.Params(**FAST), 9)
    with pytest.raises(RegistryError, match="rewire_fraction"):
        build_params("arc_acdc", {"rewire_fraction": 1.5})


def test_mask_iou_with_nothing_to_compare_is_one():
    assert mask_iou({}, {}) == 1.0
    assert mask_iou({"d": None}, {"d": None}) == 1.0  # dense in both: left out


def test_no_iou_before_the_first_check():
    assert ArcAcdc(ArcAcdc.Params(), 0.5, _ctx(100)).last_iou is None


def test_rewire_budget_message_gives_twice_the_interval():
    # 100 steps: 5-step compressed phases; 2 x 3 = 6 >= 5.
    params = ArcAcdc.Params(check_interval=1, rewire_interval=3)
    with pytest.raises(ValueError, match="2 x rewire_interval = 6 >= the 5-step"):
        ArcAcdc.check_budget(params, 100)


def _fake(step, store):
    from types import SimpleNamespace

    return SimpleNamespace(global_step=step, optimizers=[]), SimpleNamespace(masks=store)


def test_entering_a_compressed_phase_starts_the_stretch_at_that_step():
    store = _store()
    m = ArcAcdc(ArcAcdc.Params(distribution="uniform", **FAST), 0.5, _ctx(100))
    trainer, module = _fake(10, store)  # compressed [10, 15)
    m.on_train_batch_start(trainer, module, (torch.zeros(3, 4),), 0)
    assert m.compressed and (m._sparse_since, m._sparse_until) == (10, 15)


def test_a_phase_entered_already_compressed_keeps_its_stretch():
    # A convergence check compressed at step 17 of [15, 20) for the stretch up to 25; entering
    # the compressed phase [20, 25) must not restart the stretch at 20.
    store = _store()
    m = ArcAcdc(ArcAcdc.Params(distribution="uniform", **FAST), 0.5, _ctx(100))
    m.compress(store)
    m._start_sparse(17, 25)
    trainer, module = _fake(20, store)
    m.enter_phase(m.phase_index(20), 20, trainer, module)
    assert (m._sparse_since, m._sparse_until) == (17, 25)

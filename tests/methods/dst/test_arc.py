import lightning.pytorch as pl
import pytest
import torch
from torch import nn

import sparsebench.methods.dst.arc  # noqa: F401  (registers "arc")
from sparsebench.methods.dst.arc import Arc
from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.mask_methods import RegistryError, build_params


def _ctx(total_steps):
    return type("C", (), {"total_steps": total_steps})()


def test_growth_adds_the_out_of_mask_weights_of_largest_gradient():
    mask = torch.tensor([[True, True, False, False], [True, False, True, False]])
    g = torch.tensor([[9.0, 8.0, 1.0, -5.0], [0.0, 0.5, 7.0, 0.2]])
    # nnz 4, k = floor(0.5 x 4) = 2. Out of the mask: |g| = 1, 5, 0.5, 0.2 -> grow 5 and 1
    # (the 9, 8 and 7 are active already: nothing active is dropped).
    new = Arc.grow_mask(mask, g, 0.5)
    assert new.tolist() == [[True, True, True, True], [True, False, True, False]]
    # k = floor(0.3 x 4) = 1: only the -5.
    assert Arc.grow_mask(mask, g, 0.3).tolist() == [
        [True, True, False, True],
        [True, False, True, False],
    ]
    assert torch.equal(Arc.grow_mask(mask, g, 0.2), mask)  # floor(0.8) = 0
    nearly = torch.ones(2, 4, dtype=torch.bool)
    nearly[1, 3] = False  # nnz 7, k = min(floor(0.5 x 7), 8 - 7) = 1
    assert bool(Arc.grow_mask(nearly, g, 0.5).all())
    # floor(0.29 x 100) = 29 although 0.29 * 100 is 28.999999999999996 in floats.
    big = torch.arange(200) < 100
    grown = Arc.grow_mask(big, torch.arange(200.0), 0.29) & ~big
    assert grown.nonzero().flatten().tolist() == list(range(171, 200))


def _store():
    model = nn.Sequential(nn.Linear(4, 2), nn.ReLU(), nn.Linear(2, 2))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor([[4.0, 0.1, -3.0, 0.2], [0.3, 2.0, 0.4, 1.0]]))
        model[2].weight.copy_(torch.tensor([[0.5, -2.0], [0.1, 1.5]]))
    return MaskStore(model)


def test_compression_keeps_exactly_nnz_per_layer_by_magnitude_over_active_and_grown():
    store = _store()
    m = Arc(Arc.Params(distribution="uniform"), 0.5, _ctx(100))
    m.nnz = {"0": 4, "2": 2}
    # Layer 0: active {4, 0.1, 0.3, 2.0}, grown {-3.0, 1.0}; layer 2: active {0.5, 1.5},
    # grown {-2.0}. Outside the trainable set 0.2, 0.4 and 0.1 are zeroed by set_mask.
    store.set_mask("0", torch.tensor([[True, True, True, False], [True, True, False, True]]))
    store.set_mask("2", torch.tensor([[True, True], [False, True]]))
    m.compressed = False
    m.compress(store)
    # Layer 0 keeps the 4 largest |w| of {4, 0.1, -3, 0.3, 2, 1}: 4, -3, 2, 1.
    assert store.masks["0"].tolist() == [[True, False, True, False], [False, True, False, True]]
    # Layer 2 keeps the 2 largest of {0.5, -2, 1.5}: -2 and 1.5.
    assert store.masks["2"].tolist() == [[False, True], [False, True]]
    assert store.weight("0").tolist() == [[4.0, 0.0, -3.0, 0.0], [0.0, 2.0, 0.0, 1.0]]
    assert m.compressed and len(m.update_seconds) == 1


def test_grown_weights_start_at_zero_with_zero_momentum():
    store = _store()
    opt = torch.optim.SGD(store.model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    mask = torch.tensor([[True, False, True, False], [False, True, False, False]])
    store.set_mask("0", mask)
    store.model(torch.randn(3, 4)).sum().backward()
    opt.step()
    buf = opt.state[store.weight("0")]["momentum_buffer"]
    buf.fill_(0.7)  # stale state everywhere, as if these positions had trained before
    m = Arc(Arc.Params(distribution="uniform", rewire_fraction=0.5), 0.5, _ctx(100))
    m.ctx.flops = TrainFlopsCounter({"0": 16, "2": 8})
    m._batch_size = 3
    grad = torch.tensor([[0.0, 3.0, 0.0, 1.0], [2.0, 0.0, 0.1, 0.0]])
    m.grow(store, {"0": grad})  # nnz 3, k = 1: the 3.0 at (0, 1)
    want = mask.clone()
    want[0, 1] = True
    assert store.masks["0"].tolist() == want.tolist()
    assert store.weight("0")[0, 1] == 0.0 and buf[0, 1] == 0.0
    # Only the grown position's state is reset; the active ones keep theirs.
    assert buf[0, 0] == pytest.approx(0.7) and buf[1, 1] == pytest.approx(0.7)
    assert m.grown == [{"0": 1}]
    # The dense gradient's extra cost: (f_D - f_S) x 3 examples, f_S = 16 x 3/8 + 8 (layer "2"
    # is dense) = 14, f_D = 24.
    assert m.ctx.flops.total == pytest.approx((24 - 14) * 3)


def test_rewiring_phase_ends_early_when_the_compressed_mask_has_converged():
    store = _store()
    # 100 steps: warm-up [0, 10), compressed [10, 15), rewiring [15, 20), ...
    m = Arc(Arc.Params(distribution="uniform", check_interval=2), 0.5, _ctx(100))
    m.nnz = {"0": 4, "2": 2}
    prev = torch.tensor([[True, False, True, False], [False, True, False, True]])
    store.set_mask("0", prev)
    store.set_mask("2", torch.tensor([[False, True], [False, True]]))
    m.prev_masks = {n: mk.clone() for n, mk in store.masks.items()}
    m.compressed = False
    grown = prev.clone()
    grown[0, 1] = grown[1, 0] = True
    store.set_mask("0", grown)  # the grown weights at zero: compression gives the old mask
    assert [s for s in range(15, 20) if m.is_check_step(s)] == [17, 19]
    assert m.check_convergence(store, 17)
    assert m.last_iou == 1.0 and m.truncations == [(m.phase_index(17), 17)]
    assert m.compressed and store.masks["0"].tolist() == prev.tolist()
    # A grown weight overtaking an active one: layer 0 swaps 1 of 4 (pooled with layer 2's
    # 2 unchanged): intersection 3 + 2, union 5 + 2 -> IoU 5/7 <= 0.9, the phase goes on.
    m.compressed = False
    store.set_mask("0", grown)
    with torch.no_grad():
        store.weight("0")[0, 1] = 5.0  # overtakes the 1.0 at (1, 3)
    assert not m.check_convergence(store, 19)
    assert m.last_iou == pytest.approx(5 / 7) and not m.compressed and len(m.truncations) == 1


class DensityRecorder(pl.Callback):
    """Per step: each layer's nnz as the step trains (after the method's batch-start hook);
    at each growth, the grown weights and their momentum right after it."""

    def __init__(self):
        self.nnz: list[dict[str, int]] = []
        self.dense: list[bool] = []
        self.after_growth: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._before: dict[str, torch.Tensor] = {}
        self.first_masks: dict[str, torch.Tensor] | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        store = pl_module.masks
        self.nnz.append({n: store.nnz(n) for n in store.layers})
        self.dense.append(any(m is None for m in store.masks.values()))
        self._before = {n: m.clone() for n, m in store.masks.items() if m is not None}
        if self.first_masks is None:
            self.first_masks = self._before

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        store = pl_module.masks
        name = "2"
        new = store.masks[name] & ~self._before[name]
        if new.any():
            opt = trainer.optimizers[0]
            buf = opt.state[store.weight(name)]["momentum_buffer"]
            self.after_growth.append((store.weight(name)[new].clone(), buf[new].clone()))


def test_tiny_fit_never_runs_dense_and_its_flops_match_the_hand_count(tiny_fit):
    rec = DensityRecorder()
    module, m = tiny_fit("arc", 0.5, {"distribution": "uniform"}, 10, extra_callbacks=[rec])
    _, acdc = tiny_fit("acdc", 0.5, {"distribution": "uniform"}, 10)
    assert m.ctx.total_steps == 100
    # 12-32-16-3 at uniform density 0.5: nnz 192, 256, 24; growth floor(0.1 nnz): 19, 25, 2.
    nnz = {"0": 192, "2": 256, "4": 24}
    k = {"0": 19, "2": 25, "4": 2}
    # AC/DC's schedule for 100 steps (warm-up 10, phases 5, last dense >= 10, final 15):
    # the phases AC/DC runs dense, which ARC runs as rewiring phases.
    rewiring = [(0, 10), (15, 20), (25, 30), (35, 40), (45, 50), (55, 60), (65, 70), (75, 85)]
    assert [(p.start, p.end) for p in acdc.schedule if not p.sparse] == rewiring
    assert m.grow_steps == [r for r, _ in rewiring]
    assert m.grown == [k] * len(rewiring)
    end = {r: e for r, e in rewiring}
    for i, step in m.truncations:
        start = m.schedule[i].start
        assert start < step < end[start]
        end[start] = step
    assert m.truncations, "the tiny run ends some rewiring phase early"
    grown_steps = {t for r, e in end.items() for t in range(r + 1, e)}
    for t in range(100):
        want = {n: nnz[n] + (k[n] if t in grown_steps else 0) for n in nnz}
        assert rec.nnz[t] == want, t
        assert not rec.dense[t], t
    assert max(sum(s.values()) for s in rec.nnz) <= 1.1 * sum(nnz.values())
    assert module.masks.nnz("0") == 192 and module.masks.nnz("2") == 256
    # FLOPs by hand: f_D = 2 (12 x 32 + 32 x 16 + 16 x 3) = 1888 per example, f_S = 944 at
    # the active sets, 2 (211 + 281 + 26) = 1036 with the grown ones; each growth adds
    # f_D - f_S = 944 per example; 16 examples per step.
    n_grown = len(grown_steps)
    want_flops = 16 * (3 * (n_grown * 1036 + (100 - n_grown) * 944) + 8 * 944)
    assert m.ctx.flops.total == pytest.approx(want_flops)
    # AC/DC: 50 dense and 50 sparse steps.
    assert acdc.ctx.flops.total == pytest.approx(16 * 3 * (50 * 1888 + 50 * 944))
    assert m.ctx.flops.total < 0.8 * acdc.ctx.flops.total
    # Grown weights of layer "2" start at zero with zero momentum, right after each growth.
    assert len(rec.after_growth) == 8
    for w, buf in rec.after_growth:
        assert w.numel() == 25 and torch.all(w == 0) and torch.all(buf == 0)
    assert m.update_timing()[1] == 8 + 8  # one growth and one compression per phase


def test_the_start_mask_is_statics_random_mask(tiny_fit):
    arc, static = DensityRecorder(), DensityRecorder()
    tiny_fit("arc", 0.8, {}, 10, extra_callbacks=[arc])
    tiny_fit("static", 0.8, {}, 1, extra_callbacks=[static])
    assert set(arc.first_masks) == set(static.first_masks) == {"0", "2", "4"}
    for name, mask in static.first_masks.items():
        assert torch.equal(arc.first_masks[name], mask), name


def test_too_short_runs_and_bad_params_are_refused():
    with pytest.raises(ValueError, match="no convergence check would happen"):
        Arc.check_budget(Arc.Params(check_interval=5), 100)  # 5-step phases
    Arc.check_budget(Arc.Params(check_interval=4), 100)
    assert Arc.interval(Arc.Params(), 100) == 2  # max(2, 5 // 10)
    assert Arc.interval(Arc.Params(), 2000) == 10  # 100-step phases
    with pytest.raises(ValueError, match="no convergence check"):
        Arc.check_budget(Arc.Params(), 40)  # 2-step phases: the check at 2 is the phase's end
    msg = "warm-up rewiring phase of a 100-step run is 1 step: its grown weights would never train"
    with pytest.raises(ValueError, match=msg):
        Arc.check_budget(Arc.Params(warmup_fraction=0.01, check_interval=2), 100)  # 1 step
    Arc.check_budget(Arc.Params(warmup_fraction=0.0, check_interval=2), 100)
    with pytest.raises(ValueError, match="too few"):
        Arc.check_budget(Arc.Params(), 9)
    with pytest.raises(RegistryError, match="check_interval"):
        build_params("arc", {"check_interval": 1})
    with pytest.raises(RegistryError, match="rewire_fraction"):
        build_params("arc", {"rewire_fraction": 1.5})
    with pytest.raises(RegistryError, match="distribution"):
        build_params("arc", {"distribution": "global"})


def test_a_setting_whose_convergence_test_cannot_fail_is_refused():
    # IoU >= (1 - f) / (1 + f): 0.95 / 1.05 = 0.905 > 0.9, so every phase would end at once
    with pytest.raises(RegistryError, match=r"rewire_fraction = 0.05 .*= 0.904762 > .*= 0.05263"):
        build_params("arc", {"rewire_fraction": 0.05})
    build_params("arc", {"rewire_fraction": 0.06})  # 0.94 / 1.06 = 0.887 < 0.9
    # the default f = 0.1 at threshold 0.5: 0.9 / 1.1 = 0.818 > 0.5
    with pytest.raises(RegistryError, match=r"convergence_threshold to at least 0.818182"):
        build_params("arc", {"convergence_threshold": 0.5})
    build_params("arc", {"convergence_threshold": 0.5, "rewire_fraction": 0.34})  # 0.4925


def test_a_run_too_short_at_the_minimum_check_interval_says_to_train_longer():
    # 40 steps: 2-step rewiring phases; check_interval (null -> 2) cannot go lower
    with pytest.raises(ValueError, match=r"minimum of 2.*at least 3 steps: train longer"):
        Arc.check_budget(Arc.Params(), 40)
    with pytest.raises(ValueError, match=r"lower check_interval \(>= 2\) or train longer"):
        Arc.check_budget(Arc.Params(check_interval=5), 100)


def test_check_interval_is_a_whole_tenth_of_the_phase():
    # 700 steps x 0.05 = 35-step phases: 35 // 10 = 3 steps between checks.
    assert Arc.interval(Arc.Params(), 700) == 3
    assert Arc.interval(Arc.Params(), 100) == 2  # 5 // 10 = 0, raised to the minimum of 2


def test_no_check_while_compressed_and_no_iou_before_the_first():
    store = _store()
    m = Arc(Arc.Params(distribution="uniform"), 0.5, _ctx(100))
    assert m.last_iou is None
    m.compressed = True
    assert m.check_convergence(store, 17) is False and m.truncations == []


def test_entering_a_compressed_phase_uncompressed_compresses_to_nnz():
    from types import SimpleNamespace

    store = _store()
    m = Arc(Arc.Params(distribution="uniform"), 0.5, _ctx(100))
    m.nnz = {"0": 4, "2": 2}
    m.compressed = False  # a rewiring phase that no check truncated
    module = SimpleNamespace(masks=store)
    store.set_mask("0", torch.ones(2, 4, dtype=torch.bool))
    store.set_mask("2", torch.ones(2, 2, dtype=torch.bool))
    m.enter_phase(m.phase_index(20), 20, SimpleNamespace(optimizers=[]), module)
    # The 4 largest |w| of layer 0 (4, -3, 2, 1) and the 2 of layer 2 (-2, 1.5).
    assert store.masks["0"].tolist() == [[True, False, True, False], [False, True, False, True]]
    assert store.masks["2"].tolist() == [[False, True], [False, True]]
    assert m.compressed


def test_fit_start_keeps_the_first_layer_dense_when_asked():
    from types import SimpleNamespace

    store = _store()
    ctx = SimpleNamespace(total_steps=100, generator=torch.Generator().manual_seed(0))
    m = Arc(Arc.Params(distribution="uniform", dense_first_layer=True), 0.5, ctx)
    m.on_fit_start(None, SimpleNamespace(masks=store))
    # Layer "0" dense, outside the budget; uniform: layer "2" keeps 0.5 x 4 = 2 weights.
    assert store.masks["0"] is None and m.nnz["0"] is None
    assert store.nnz("2") == 2 and m.nnz["2"] == 2

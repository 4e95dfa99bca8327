import math

import lightning.pytorch as pl
import pytest
import torch

from sparsebench.methods.dst.rigl import RigL
from tests.methods.conftest import MaskWatcher


def test_update_mask_drops_smallest_magnitude_and_grows_largest_gradient():
    w = torch.tensor([[0.5, -3.0, 0.0, 0.0], [0.1, 2.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, False], [True, True, False, False]])
    g = torch.tensor([[9.0, 0.0, 1.0, 5.0], [0.0, 0.0, 7.0, 0.2]])
    new = RigL.update_mask(w, mask, g, fraction=0.5)  # drop 2 of 4 active, grow 2
    # Kept: |-3| and |2|. Dropped: 0.5, 0.1. Grown among the rest by |g|: 9 (just dropped) and 7.
    assert new.tolist() == [[True, True, False, False], [False, True, True, False]]
    assert int(new.sum()) == int(mask.sum())


def test_cosine_drop_fraction_schedule():
    r = RigL(RigL.Params(), 0.9, ctx=type("C", (), {"total_steps": 1000})())
    assert r.t_end == 750
    assert r.drop_fraction_at(0) == pytest.approx(0.3)
    assert r.drop_fraction_at(375) == pytest.approx(0.15)
    assert r.drop_fraction_at(750) == pytest.approx(0.0)


def _updates(total_steps: int, **params) -> list[int]:
    r = RigL(RigL.Params(**params), 0.9, ctx=type("C", (), {"total_steps": total_steps})())
    return [s for s in range(total_steps) if r.is_update_step(s)]


def test_update_steps_listed_by_hand():
    # ΔT = 100, T_end = 0.75 x 1000 = 750: t = 0, 100, ..., 700 (750 is not < T_end).
    assert _updates(1000) == [0, 100, 200, 300, 400, 500, 600, 700]
    # ΔT = 30, T_end = int(0.75 x 200) = 150: 150 itself is excluded.
    assert _updates(200, update_interval=30) == [0, 30, 60, 90, 120]
    # T_end = int(0.75 x 204) = 153 > 150: now 150 updates.
    assert _updates(204, update_interval=30) == [0, 30, 60, 90, 120, 150]
    # ΔT = 7, T_end = int(0.5 x 40) = 20.
    assert _updates(40, update_interval=7, end_fraction=0.5) == [0, 7, 14]
    assert _updates(200, update_interval=30, update_at_start=False) == [30, 60, 90, 120]


def test_rigl_keeps_exact_layer_nnz_after_every_update(tiny_fit):
    watcher = MaskWatcher()
    module, method = tiny_fit(
        "rigl", 0.8, {"update_interval": 3}, epochs=4, extra_callbacks=[watcher]
    )
    first = watcher.nnz[0]
    assert all(n == first for n in watcher.nnz)
    # The topology did change (otherwise the test could not tell RigL from static).
    changes = sum(not torch.equal(a["2"], b["2"]) for a, b in zip(watcher.masks, watcher.masks[1:]))
    assert changes >= 3
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)


def test_rigl_counts_dense_gradient_flops(tiny_fit):
    module, m = tiny_fit("rigl", 0.8, {"update_interval": 3}, epochs=4)
    flops = m.ctx.flops
    f_s = sum(f * d for f, d in zip(flops.dense_flops.values(), module.masks.densities().values()))
    # 40 steps, ΔT = 3, T_end = 30: updates at 0, 3, ..., 27, ten of them.
    n_updates = 10
    expected = 3 * f_s * 160 * 4 + n_updates * 16 * (flops.f_dense - f_s)
    assert flops.total == pytest.approx(expected)
    assert not math.isclose(flops.total, 3 * f_s * 160 * 4)


class _StepWatcher(pl.Callback):
    """Weights before and after each iteration, with the step it completed."""

    def __init__(self):
        self.steps = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._before = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        after = {n: p.detach().clone() for n, p in pl_module.model.named_parameters()}
        self.steps.append((trainer.global_step, self._before, after))


def test_update_iteration_replaces_the_optimizer_step(tiny_fit):
    watcher = _StepWatcher()
    _, m = tiny_fit("rigl", 0.8, {"update_interval": 3}, epochs=4, extra_callbacks=[watcher])
    # s[0] is the global step after the iteration: the iteration's index is s[0] - 1.
    hand = set(range(0, 30, 3))  # 40 steps, ΔT = 3, T_end = 30
    updates = [s for s in watcher.steps if s[0] - 1 in hand]
    regular = [s for s in watcher.steps if s[0] - 1 not in hand]
    assert len(updates) == 10
    for _, before, after in updates:
        # Biases and every weight that stays active keep their values: no optimizer step.
        for name in before:
            both = (before[name] != 0) & (after[name] != 0)
            assert torch.equal(before[name][both], after[name][both]), name
    assert any(not torch.equal(b["0.bias"], a["0.bias"]) for _, b, a in regular)


def test_too_short_run_is_refused():
    r = RigL(RigL.Params(), 0.9, ctx=type("C", (), {"total_steps": 120})())
    with pytest.raises(ValueError, match="no mask update would happen"):
        r.on_fit_start(None, None)


def test_update_at_start_false_skips_step_zero():
    assert _updates(1000, update_at_start=False) == [100, 200, 300, 400, 500, 600, 700]


class _MomentumWatcher(pl.Callback):
    """At each iteration: masks, weights and SGD momentum buffers before it and after it."""

    def __init__(self):
        self.records = []

    def _snap(self, trainer, pl_module):
        store = pl_module.masks
        opt = trainer.optimizers[0]
        out = {}
        for name in store.layers:
            w = store.weight(name)
            buf = opt.state.get(w, {}).get("momentum_buffer")
            mask = store.masks[name]
            out[name] = (
                torch.ones_like(w, dtype=torch.bool) if mask is None else mask.clone(),
                w.detach().clone(),
                None if buf is None else buf.clone(),
            )
        return out

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self._before = self._snap(trainer, pl_module)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.records.append((trainer.global_step - 1, self._before, self._snap(trainer, pl_module)))


def test_grown_weights_start_at_zero_with_zero_momentum_in_a_real_fit(tiny_fit):
    # SGD with momentum 0.9 (the tiny fit's recipe), 40 steps, ΔT = 3: updates at 0, 3, ..., 27.
    watcher = _MomentumWatcher()
    tiny_fit("rigl", 0.8, {"update_interval": 3}, epochs=4, extra_callbacks=[watcher])
    ever_active = {}
    checked = regrown = n_grown = 0
    for step, before, after in watcher.records:
        for name, (m0, _w0, b0) in before.items():
            m1, w1, b1 = after[name]
            was = ever_active.get(name, torch.zeros_like(m0))
            if step in range(3, 30, 3) and b0 is not None:
                grown, kept = m1 & ~m0, m1 & m0
                n_grown += int(grown.sum())
                assert torch.all(w1[grown] == 0), (step, name)
                assert torch.all(b1[grown] == 0), (step, name)
                # no optimizer step on the update iteration: surviving momentum untouched
                assert torch.equal(b1[kept], b0[kept]), (step, name)
                assert b0[kept].abs().sum() > 0
                checked += 1
                regrown += int((grown & was).sum())  # active once, dropped, now back
            ever_active[name] = was | m0 | m1
    assert checked == 9 * 3  # updates 3..27 on the three layers
    assert n_grown > 50
    assert regrown > 0  # some grown positions had momentum before they were dropped


def test_one_update_per_captured_gradient():
    from types import SimpleNamespace

    from torch import nn

    from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter, layer_flops
    from sparsebench.suite.pillars.classification.masks import MaskStore

    model = nn.Sequential(nn.Linear(4, 2, bias=False))
    store = MaskStore(model)
    store.set_mask("0", torch.tensor([[True, True, False, False], [True, True, False, False]]))
    ctx = SimpleNamespace(total_steps=1000, flops=TrainFlopsCounter(layer_flops(model, (4,))))
    r = RigL(RigL.Params(), 0.5, ctx)
    module = SimpleNamespace(masks=store, parameters=model.parameters)
    trainer = SimpleNamespace(global_step=0)
    r.on_train_batch_start(trainer, module, (torch.zeros(2, 4),), 0)  # step 0 updates
    assert store.capture_dense_grads
    store.dense_grads["0"] = torch.ones(2, 4)
    r.on_before_optimizer_step(trainer, module, None)
    # A second hook call in the same iteration (a second optimizer) must not update again.
    assert not store.capture_dense_grads
    r.on_before_optimizer_step(trainer, module, None)
    assert len(r.update_seconds) == 1


def test_an_update_every_iteration_is_refused():
    # every iteration before T_end would replace its optimizer step: nothing would train
    from sparsebench.methods.dst.rigl import RigL

    with pytest.raises(ValueError, match="update_interval must be >= 2, got 1.*nothing trains"):
        RigL.Params(update_interval=1).validate()
    RigL.Params(update_interval=2).validate()

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
    assert [s for s in range(0, 1001, 100) if r.is_update_step(s)] == [
        0,
        100,
        200,
        300,
        400,
        500,
        600,
        700,
    ]


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
    n_updates = sum(m.is_update_step(s) for s in range(m.ctx.total_steps))
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
    updates = [s for s in watcher.steps if m.is_update_step(s[0] - 1)]
    regular = [s for s in watcher.steps if not m.is_update_step(s[0] - 1)]
    assert len(updates) >= 3
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
    r = RigL(RigL.Params(update_at_start=False), 0.9, ctx=type("C", (), {"total_steps": 1000})())
    assert not r.is_update_step(0) and r.is_update_step(100)

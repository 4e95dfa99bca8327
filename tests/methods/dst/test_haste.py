import math

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

from sparsebench.methods.dst.haste import HASTE
from sparsebench.methods.dst.rigl import RigL
from sparsebench.suite.models import build_model
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep
from tests.methods.conftest import MaskWatcher

OUT = "4"  # the tiny_fit model's output layer: Linear(16, 3)
TINY_SHAPES = {"0": (32, 12), "2": (16, 32), "4": (3, 16)}
LENET_WIDE1K = {"fc1": (300, 256), "fc2": (100, 300), "fc3": (1000, 100)}


def _haste(sparsity=0.8, total_steps=1000, **params):
    ctx = type("C", (), {"total_steps": total_steps, "generator": torch.Generator().manual_seed(0)})
    return HASTE(HASTE.Params(**params), sparsity, ctx=ctx())


def _assert_group_shared(mask: torch.Tensor, group_size: int, fan_in: int) -> None:
    n_out = mask.shape[0]
    for start in range(0, n_out, group_size):
        block = mask[start : start + group_size]
        assert torch.equal(block, block[:1].expand_as(block)), f"group at {start} not shared"
    assert mask.sum(1).tolist() == [fan_in] * n_out


def test_update_group_mask_drops_smallest_group_magnitude_grows_largest_group_gradient():
    # Two groups of two units over 6 inputs, fan-in 3; fraction 0.34 -> k = 1 per group.
    mask = torch.tensor([[1, 1, 1, 0, 0, 0]] * 2 + [[0, 0, 0, 1, 1, 1]] * 2, dtype=torch.bool)
    w = torch.tensor(
        [
            [0.9, -0.1, 0.5, 0, 0, 0],
            [-0.2, 0.05, -0.6, 0, 0, 0],  # group 0 sums |w|: 1.1, 0.15, 1.1 -> drop input 1
            [0, 0, 0, 0.3, -2.0, 0.1],
            [0, 0, 0, -0.3, 0.1, 0.1],  # group 1 sums: 0.6, 2.1, 0.2 -> drop input 5
        ]
    )
    g = torch.tensor(
        [
            [0.0, 0.0, 0.0, 1.0, -0.5, 0.2],
            [0.0, 0.0, 0.0, -1.0, 3.0, 0.2],  # group 0 sums over not-kept {1,3,4,5}: input 4
            [-0.7, 0.4, 0.1, 0.0, 0.0, 0.0],
            [0.7, -0.5, 0.2, 0.0, 0.0, 9.0],  # group 1: input 5 (just dropped) wins: kept
        ]
    )
    new = HASTE.update_group_mask(w, mask, g, fraction=0.34, group_size=2)
    expected = [[1, 0, 1, 0, 1, 0]] * 2 + [[0, 0, 0, 1, 1, 1]] * 2
    assert new.int().tolist() == expected
    _assert_group_shared(new, 2, 3)


def test_update_group_mask_keeps_partial_last_group_and_rejects_unshared_masks():
    gen = torch.Generator().manual_seed(1)
    cols = torch.zeros(3, 20, dtype=torch.bool)
    for r in range(3):
        cols[r, torch.randperm(20, generator=gen)[:6]] = True
    mask = HASTE.group_mask(cols, 7, 3)  # groups of 3, 3 and 1 units
    w = torch.randn(7, 20, generator=gen) * mask
    g = torch.randn(7, 20, generator=gen)
    new = HASTE.update_group_mask(w, mask, g, fraction=0.5, group_size=3)
    _assert_group_shared(new, 3, 6)
    assert not torch.equal(new, mask)
    bad = mask.clone()
    bad[1] = ~bad[1]
    with pytest.raises(ValueError, match="not group-shared"):
        HASTE.group_columns(bad, 3)


def test_allocation_meets_the_global_budget_exactly():
    for shapes in (TINY_SHAPES, LENET_WIDE1K):
        for distribution in ("erk", "uniform"):
            for sparsity in (0.8, 0.9, 0.95):
                h = _haste(sparsity, distribution=distribution, group_size=4)
                counts, fan_in = h.allocation(shapes)
                *others, out = shapes
                biggest = max(others, key=lambda n: math.prod(shapes[n]))
                n_out, n_in = shapes[out]
                d = layer_densities(shapes, 1 - sparsity, distribution)
                static = {n: n_keep(math.prod(s), d[n]) for n, s in shapes.items()}
                assert fan_in == max(1, round(d[out] * n_in))
                assert counts[out] == n_out * fan_in
                assert sum(counts.values()) == sum(static.values())  # Static's total, exactly
                # The rounding (at most n_out / 2) moves to the largest other layer only.
                assert abs(counts[out] - static[out]) <= n_out / 2
                assert all(counts[n] == static[n] for n in shapes if n not in (out, biggest))
    # LeNet-300-100 on wide1k at density 0.1 (ERK): fan-in 11 of 100, 64 weights moved to fc1.
    counts, fan_in = _haste(0.9).allocation(LENET_WIDE1K)
    d = layer_densities(LENET_WIDE1K, 0.1)
    assert fan_in == 11 and counts["fc3"] == 11_000 == n_keep(100_000, d["fc3"]) - 64
    assert counts["fc1"] == n_keep(76_800, d["fc1"]) + 64


def test_haste_keeps_exact_counts_and_fixed_group_fan_in_after_every_update(tiny_fit):
    watcher = MaskWatcher()
    params = {"update_interval": 3, "group_size": 2, "drop_fraction_anneal": "constant"}
    module, method = tiny_fit("haste", 0.8, params, epochs=4, extra_callbacks=[watcher])
    counts, fan_in = method.allocation(TINY_SHAPES)
    assert watcher.nnz[0] == counts
    assert all(n == counts for n in watcher.nnz)  # exact per-layer nonzeros, every step
    for masks in watcher.masks:
        _assert_group_shared(masks[OUT], 2, fan_in)
    assert module.masks.total_nnz == sum(
        n_keep(math.prod(s), d)
        for s, d in zip(TINY_SHAPES.values(), layer_densities(TINY_SHAPES, 0.2).values())
    )

    def changes(name):
        pairs = zip(watcher.masks, watcher.masks[1:])
        return sum(not torch.equal(a[name], b[name]) for a, b in pairs)

    # Both the unstructured layers (RigL) and the output groups evolved.
    assert changes("0") >= 3 and changes(OUT) >= 3


class _InitWatcher(pl.Callback):
    """Weights and masks at the start of the first iteration (before any update)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 0:
            store = pl_module.masks
            self.nonzero = {n: int((store.weight(n) != 0).sum()) for n in store.layers}
            self.nnz = {n: store.nnz(n) for n in store.layers}


def test_initial_masks_keep_the_dense_initialisation_on_the_mask(tiny_fit):
    watcher = _InitWatcher()
    params = {"group_size": 2, "update_interval": 3}
    _, method = tiny_fit("haste", 0.8, params, epochs=1, extra_callbacks=[watcher])
    counts, _ = method.allocation(TINY_SHAPES)
    # Every active weight is its (nonzero) init value, not a zero left by RigL's own masks.
    assert watcher.nnz == counts == watcher.nonzero


class _GrowWatcher(MaskWatcher):
    """Also records the output layer's weights and SGD momentum after every step."""

    def __init__(self):
        super().__init__()
        self.weights, self.momenta = [], []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        w = pl_module.masks.weight(OUT)
        state = trainer.optimizers[0].state.get(w, {})
        self.weights.append(w.detach().clone())
        self.momenta.append(
            state["momentum_buffer"].clone() if "momentum_buffer" in state else None
        )


def test_grown_output_weights_start_at_zero_with_reset_momentum(tiny_fit):
    watcher = _GrowWatcher()
    _, method = tiny_fit(
        "haste", 0.8, {"update_interval": 3, "group_size": 2}, epochs=4, extra_callbacks=[watcher]
    )
    grown_total = 0
    for i in range(1, len(watcher.masks)):
        before, after = watcher.masks[i - 1][OUT], watcher.masks[i][OUT]
        grown = after & ~before
        if grown.any():
            grown_total += int(grown.sum())
            assert torch.all(watcher.weights[i][grown] == 0)
            assert torch.all(watcher.momenta[i][grown] == 0)
    assert grown_total > 0


def test_haste_runs_on_the_cpu_kernel(tiny_fit):
    from sparsebench.kernels import get_backend

    try:
        get_backend("cpu")
    except Exception as e:  # no C++ toolchain here
        pytest.skip(f"cpu backend unavailable: {e}")
    watcher = MaskWatcher()
    module, method = tiny_fit(
        "haste",
        0.8,
        {"update_interval": 3, "group_size": 2},
        epochs=2,
        extra_callbacks=[watcher],
        execution="cpu",
    )
    _, fan_in = method.allocation(TINY_SHAPES)
    assert type(module.model[4]).__name__ == "KernelLinear"
    for masks in watcher.masks:
        _assert_group_shared(masks[OUT], 2, fan_in)


class _UpdateCounter(pl.Callback):
    """Counts the iterations on which RigL's schedule captures dense gradients (updates)."""

    updates = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.updates += bool(pl_module.masks.capture_dense_grads)


def test_haste_counts_rigl_flops(tiny_fit):
    counter = _UpdateCounter()
    params = {"update_interval": 3, "group_size": 2}
    module, m = tiny_fit("haste", 0.8, params, epochs=4, extra_callbacks=[counter])
    flops = m.ctx.flops
    dens = module.masks.densities()
    _, fan_in = m.allocation(TINY_SHAPES)
    assert dens[OUT] == fan_in / 16
    f_s = sum(f * dens[n] for n, f in flops.dense_flops.items())
    assert counter.updates >= 3
    expected = 3 * f_s * 160 * 4 + counter.updates * 16 * (flops.f_dense - f_s)
    assert flops.total == pytest.approx(expected)
    assert flops.dense_flops[OUT] * dens[OUT] == 2 * 3 * fan_in  # 2 n_out fan_in per example


def test_too_short_run_is_refused():
    h = _haste(0.9, total_steps=120)
    with pytest.raises(ValueError, match="haste: no mask update would happen"):
        h.on_fit_start(None, None)
    with pytest.raises(ValueError, match="haste"):
        HASTE.check_budget(HASTE.Params(), 120)
    HASTE.check_budget(HASTE.Params(), 1000)


def test_check_model_refuses_a_non_linear_output_layer():
    conv_last = {"0": nn.Linear(4, 8), "1": nn.Conv2d(8, 10, 1)}
    with pytest.raises(ValueError, match=r"last prunable layer '1' is Conv2d.*nn\.Linear"):
        HASTE.check_model(HASTE.Params(), conv_last)
    with pytest.raises(ValueError, match="no prunable layer"):
        HASTE.check_model(HASTE.Params(), {})
    from sparsebench.suite.pillars.classification.masks import prunable_layers

    HASTE.check_model(HASTE.Params(), prunable_layers(build_model("lenet300_100", (256,), 1000)))


def test_params_validate():
    with pytest.raises(ValueError, match="group_size"):
        HASTE.Params(group_size=0).validate()
    with pytest.raises(ValueError, match="drop_fraction"):
        HASTE.Params(drop_fraction=1.5).validate()
    assert issubclass(HASTE, RigL) and HASTE.Params().group_size == 16

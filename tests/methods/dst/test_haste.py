import math

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import TensorDataset

from sparsebench.methods.dst.haste import HASTE, HEAD
from sparsebench.methods.dst.rigl import RigL
from sparsebench.suite.models import build_model
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep
from tests.methods.conftest import MaskWatcher, run_tiny_fit

OUT = "4"  # the fit model's output layer: Linear(16, 12)
SHAPES = {"0": (32, 12), "2": (16, 32), "4": (12, 16)}
LENET_WIDE1K = {"fc1": (300, 256), "fc2": (100, 300), "fc3": (1000, 100)}
LENET_SKEW300 = {"fc1": (300, 64), "fc2": (100, 300), "fc3": (300, 100)}
# 12 labels, Zipf-like counts (160 examples: 10 batches of 16); label 0 is the most frequent.
COUNTS = [40, 30, 20, 15, 12, 10, 8, 7, 6, 5, 4, 3]
# Labels 0-11 around 4 super-class centres, 3 labels each; labels of a centre are not adjacent.
SUPER = [0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
FIT = {"group_size": 3, "dense_head": 2, "update_interval": 3}


def _haste(sparsity=0.8, total_steps=1000, **params):
    ctx = type("C", (), {"total_steps": total_steps, "generator": torch.Generator().manual_seed(0)})
    return HASTE(HASTE.Params(**params), sparsity, ctx=ctx())


def _fit_data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    centres = 3.0 * torch.randn(4, 12, generator=g)
    mu = centres[SUPER] + 0.3 * torch.randn(12, 12, generator=g)
    y = torch.repeat_interleave(torch.arange(12), torch.tensor(COUNTS))
    y = y[torch.randperm(len(y), generator=g)]
    return TensorDataset(mu[y] + 0.5 * torch.randn(len(y), 12, generator=g), y)


def _fit(sparsity, params, epochs=4, extra_callbacks=(), execution="dense_mask"):
    """A real fit of HASTE on a 12-class MLP 12-32-16-12 (the default tiny fit has a 3-way
    head, too small for label groups plus a dense head)."""
    return run_tiny_fit("haste", sparsity, params, epochs, extra_callbacks, execution, _fit_data())


def _assert_groups(mask: torch.Tensor, groups: list[list[int]], head: list[int], fan_in: int):
    for g in groups:
        rows = mask[g]
        assert torch.equal(rows, rows[:1].expand_as(rows)), f"group {g} not shared"
        assert int(rows[0].sum()) == fan_in
    assert bool(mask[head].all())


def _members(groups: torch.Tensor) -> list[list[int]]:
    return [torch.nonzero(groups == g).flatten().tolist() for g in range(int(groups.max()) + 1)]


# -- groups and head from the task ------------------------------------------------------------


def test_groups_of_a_dataset_with_obvious_clusters_are_those_clusters():
    # 9 labels at three far-apart 2-D points (labels interleaved), plus label 9 the most
    # frequent (head); tight noise, so every label's mean input sits on its cluster's point.
    points = {0: (0.0, 0.0), 1: (10.0, 0.0), 2: (0.0, 10.0)}
    cluster = {0: 0, 3: 0, 5: 0, 1: 1, 2: 1, 7: 1, 4: 2, 6: 2, 8: 2, 9: 1}
    g = torch.Generator().manual_seed(0)
    xs, ys = [], []
    for label, c in cluster.items():
        n = 20 if label == 9 else 5
        xs.append(torch.tensor(points[c]) + 0.01 * torch.randn(n, 2, generator=g))
        ys += [label] * n
    x, y = torch.cat(xs), torch.tensor(ys)
    groups = HASTE.label_groups(x, y, 10, group_size=3, n_head=1)
    assert groups[9] == HEAD
    assert sorted(_members(groups)) == [[0, 3, 5], [1, 2, 7], [4, 6, 8]]
    # without a head label 9 joins no cluster of three: 10 = 3 + 3 + 3 + 1, and the clusters
    # whose four members include 9 give one of them up; the other two clusters stay whole
    alone = HASTE.label_groups(x, y, 10, group_size=3, n_head=0)
    found = [set(m) for m in _members(alone)]
    assert sorted(len(m) for m in found) == [1, 3, 3, 3]
    assert {0, 3, 5} in found and {4, 6, 8} in found


def test_cluster_groups_peels_the_farthest_label_with_its_nearest_neighbours():
    # 1-D embeddings 0, 1, 2, 10, 11, 30 (mean 9): 30 is farthest, its 2 nearest are 11, 10 ->
    # {3, 4, 5}; then among 0, 1, 2 (mean 1) labels 0 and 2 tie: the lower (0) seeds -> {0, 1, 2}
    emb = torch.tensor([[0.0], [1.0], [2.0], [10.0], [11.0], [30.0]])
    got = HASTE.cluster_groups(emb, torch.arange(6), 3)
    assert [m.tolist() for m in got] == [[3, 4, 5], [0, 1, 2]]


def test_dense_head_labels_are_the_most_frequent_training_labels():
    y = torch.tensor([4] * 7 + [1] * 5 + [6] * 5 + [0] * 2 + [2] * 9 + [3])
    assert HASTE.head_labels(y, 8, 3).tolist() == [2, 4, 1]  # 9, 7, then 5 (1 ties 6: lower)
    assert HASTE.head_labels(y, 8, 4).tolist() == [2, 4, 1, 6]
    assert HASTE.head_labels(y, 8, 0).tolist() == []


def test_class_means_are_the_mean_training_inputs_and_a_missing_label_gets_the_overall_mean():
    x = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 6.0]])
    means = HASTE.class_means(x, torch.tensor([0, 0, 2]), 3)
    assert means.tolist() == [[2.0, 1.0], [4 / 3, 8 / 3], [0.0, 6.0]]


# -- the group-level update ----------------------------------------------------------------


def test_update_group_mask_drops_smallest_group_magnitude_grows_largest_group_gradient():
    # Groups {0, 3} and {1, 4} over 6 inputs, fan-in 3, row 2 a dense head row;
    # fraction 0.34 -> k = 1 per group.
    groups = torch.tensor([0, 1, HEAD, 0, 1])
    mask = torch.tensor(
        [[1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1], [1] * 6, [1, 1, 1, 0, 0, 0], [0, 0, 0, 1, 1, 1]],
        dtype=torch.bool,
    )
    w = torch.tensor(
        [
            [0.9, -0.1, 0.5, 0, 0, 0],
            [0, 0, 0, 0.3, -2.0, 0.1],
            [0.01] * 6,  # head: tiny weights, never dropped
            [-0.2, 0.05, -0.6, 0, 0, 0],  # group 0 sums |w|: 1.1, 0.15, 1.1 -> drop input 1
            [0, 0, 0, -0.3, 0.1, 0.1],  # group 1 sums: 0.6, 2.1, 0.2 -> drop input 5
        ]
    )
    g = torch.tensor(
        [
            [0.0, 0.0, 0.0, 1.0, -0.5, 0.2],
            [-0.7, 0.4, 0.1, 0.0, 0.0, 0.0],
            [50.0] * 6,  # head gradients do not count for any group
            [0.0, 0.0, 0.0, -1.0, 3.0, 0.2],  # group 0 over not-kept {1,3,4,5}: input 4
            [0.7, -0.5, 0.2, 0.0, 0.0, 9.0],  # group 1: input 5 (just dropped) wins: kept
        ]
    )
    new = HASTE.update_group_mask(w, mask, g, fraction=0.34, groups=groups)
    a, b = [1, 0, 1, 0, 1, 0], [0, 0, 0, 1, 1, 1]
    assert new.int().tolist() == [a, b, [1] * 6, a, b]


def test_update_group_mask_keeps_a_partial_group_and_rejects_unshared_masks():
    gen = torch.Generator().manual_seed(1)
    groups = torch.tensor([2, 0, 1, 0, HEAD, 1, 0, 1])  # groups of 3, 3 and 1 rows
    cols = torch.zeros(3, 20, dtype=torch.bool)
    for r in range(3):
        cols[r, torch.randperm(20, generator=gen)[:6]] = True
    mask = HASTE.group_mask(cols, groups)
    assert mask[4].all() and torch.equal(mask[6], cols[0]) and torch.equal(mask[0], cols[2])
    w = torch.randn(8, 20, generator=gen) * mask
    new = HASTE.update_group_mask(w, mask, torch.randn(8, 20, generator=gen), 0.5, groups)
    assert not torch.equal(new, mask)
    _assert_groups(new, [[1, 3, 6], [2, 5, 7], [0]], [4], 6)
    bad = mask.clone()
    bad[3] = ~bad[3]
    with pytest.raises(ValueError, match="not group-shared"):
        HASTE.group_columns(bad, groups)
    bad = mask.clone()
    bad[4, 0] = False
    with pytest.raises(ValueError, match="dense-head row"):
        HASTE.group_columns(bad, groups)


# -- allocation ----------------------------------------------------------------------------


def test_allocation_charges_the_head_and_meets_statics_total_exactly():
    # (the 12 x 16 layer cannot pay a head above 80 %: see the next test)
    for shapes, sparsities in ((SHAPES, (0.5, 0.8)), (LENET_WIDE1K, (0.9, 0.95, 0.98)),
                               (LENET_SKEW300, (0.9, 0.95, 0.98))):  # fmt: skip
        for distribution in ("erk", "uniform"):
            for sparsity in sparsities:
                for head in (0, 1, 2):
                    h = _haste(sparsity, distribution=distribution, group_size=3, dense_head=head)
                    counts, fan_in = h.allocation(shapes)
                    *others, out = shapes
                    n_out, n_in = shapes[out]
                    d = layer_densities(shapes, 1 - sparsity, distribution)
                    static = {n: n_keep(math.prod(s), d[n]) for n, s in shapes.items()}
                    want = max(1, round((static[out] - head * n_in) / (n_out - head)))
                    assert fan_in == want
                    assert counts[out] == head * n_in + (n_out - head) * fan_in
                    assert sum(counts.values()) == sum(static.values())  # Static's, exactly
                    biggest = max(others, key=lambda n: math.prod(shapes[n]))
                    assert all(counts[n] == static[n] for n in others if n != biggest)
    # LeNet-300-100 on skew300 at 95 % (ERK), the default head of 4 rows: the budget 1,361 of
    # fc3 -> 400 head + 296 rows x round(961 / 296 = 3.25) = 3 -> 1,288; the 73 left go to
    # fc2 (30,000 weights, the largest other layer): 1,361 + 73
    counts, fan_in = _haste(0.95).allocation(LENET_SKEW300)
    assert (fan_in, counts) == (3, {"fc1": 1238, "fc2": 1434, "fc3": 1288})
    # wide1k at 90 %: fc3's 11,064 -> 400 + 996 x round(10.66) = 11 -> 11,356; fc1 pays 292
    counts, fan_in = _haste(0.9).allocation(LENET_WIDE1K)
    assert (fan_in, counts) == (11, {"fc1": 5592 - 292, "fc2": 4023, "fc3": 11356})


def test_a_head_the_budget_cannot_pay_is_refused():
    # 12 x 16 output layer at 95 % uniform: budget n_keep(192, 0.05) = 10 < one dense row (16)
    with pytest.raises(ValueError, match=r"haste: .*dense_head = 11 rows.*lower dense_head"):
        _haste(0.95, distribution="uniform", dense_head=11, group_size=1).allocation(SHAPES)


# -- in a real fit ---------------------------------------------------------------------------


def test_a_fit_keeps_statics_total_the_head_dense_and_every_group_fan_in_exact():
    watcher = MaskWatcher()
    params = {**FIT, "drop_fraction_anneal": "constant"}
    module, method = _fit(0.6, params, epochs=4, extra_callbacks=[watcher])
    # head: labels 0 and 1 (40 and 30 examples); groups: the 4 super-classes' labels less
    # the head, 3 rows each, so {4, 8}, {5, 9} plus one of the full ones split as 3 + 3 + 3 + 1
    groups = method.groups
    assert torch.nonzero(groups == HEAD).flatten().tolist() == [0, 1]
    members = _members(groups)
    assert sorted(len(m) for m in members) == [1, 3, 3, 3]
    counts, fan_in = method.allocation(SHAPES)
    # budget of "4": n_keep(192, d) = 102 -> 2 x 16 head + 10 x round(70 / 10) = 7 -> 102
    assert fan_in == 7 and counts[OUT] == 102
    d = layer_densities(SHAPES, 0.4)
    assert sum(counts.values()) == sum(n_keep(math.prod(s), d[n]) for n, s in SHAPES.items())
    assert all(n == counts for n in watcher.nnz)  # exact per-layer nonzeros, every step
    for masks in watcher.masks:
        _assert_groups(masks[OUT], members, [0, 1], fan_in)

    def changes(name):
        pairs = zip(watcher.masks, watcher.masks[1:])
        return sum(not torch.equal(a[name], b[name]) for a, b in pairs)

    # Both the unstructured layers (RigL) and the output groups evolved.
    assert changes("0") >= 3 and changes(OUT) >= 3


def test_fit_groups_follow_the_super_classes():
    # 40 examples per label around the 4 super-class centres (3 labels each), no head: the
    # groups are the super-classes
    data = _fit_data()
    x, y = data.tensors
    groups = HASTE.label_groups(x, y, 12, group_size=3, n_head=0)
    want = sorted([[s, s + 4, s + 8] for s in range(4)])
    assert sorted(_members(groups)) == want


class _InitWatcher(pl.Callback):
    """Weights and masks at the start of the first iteration (before any update)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if trainer.global_step == 0:
            store = pl_module.masks
            self.nonzero = {n: int((store.weight(n) != 0).sum()) for n in store.layers}
            self.nnz = {n: store.nnz(n) for n in store.layers}


def test_initial_masks_keep_the_dense_initialisation_on_the_mask():
    watcher = _InitWatcher()
    _, method = _fit(0.6, FIT, epochs=1, extra_callbacks=[watcher])
    counts, _ = method.allocation(SHAPES)
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


def test_grown_output_weights_start_at_zero_with_reset_momentum():
    watcher = _GrowWatcher()
    _fit(0.6, FIT, epochs=4, extra_callbacks=[watcher])
    grown_total = 0
    for i in range(1, len(watcher.masks)):
        before, after = watcher.masks[i - 1][OUT], watcher.masks[i][OUT]
        grown = after & ~before
        if grown.any():
            grown_total += int(grown.sum())
            assert torch.all(watcher.weights[i][grown] == 0)
            assert torch.all(watcher.momenta[i][grown] == 0)
    assert grown_total > 0


def test_haste_runs_on_the_cpu_kernel():
    from sparsebench.kernels import get_backend

    try:
        get_backend("cpu")
    except Exception as e:  # no C++ toolchain here
        pytest.skip(f"cpu backend unavailable: {e}")
    watcher = MaskWatcher()
    module, method = _fit(0.6, FIT, epochs=2, extra_callbacks=[watcher], execution="cpu")
    _, fan_in = method.allocation(SHAPES)
    assert type(module.model[4]).__name__ == "KernelLinear"
    for masks in watcher.masks:
        _assert_groups(masks[OUT], _members(method.groups), [0, 1], fan_in)


class _UpdateCounter(pl.Callback):
    """Counts the iterations on which RigL's schedule captures dense gradients (updates)."""

    updates = 0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        self.updates += bool(pl_module.masks.capture_dense_grads)


def test_haste_counts_rigl_flops():
    counter = _UpdateCounter()
    module, m = _fit(0.6, FIT, epochs=4, extra_callbacks=[counter])
    flops = m.ctx.flops
    dens = module.masks.densities()
    assert dens[OUT] == (2 * 16 + 10 * 7) / (12 * 16)  # head rows + group rows
    f_s = sum(f * dens[n] for n, f in flops.dense_flops.items())
    assert counter.updates >= 3
    expected = 3 * f_s * 160 * 4 + counter.updates * 16 * (flops.f_dense - f_s)
    assert flops.total == pytest.approx(expected)
    assert flops.dense_flops[OUT] * dens[OUT] == 2 * 102  # 2 FLOPs per output-layer nonzero


# -- checks --------------------------------------------------------------------------------


def test_too_short_run_is_refused():
    h = _haste(0.9, total_steps=120)
    with pytest.raises(ValueError, match="haste: no mask update would happen"):
        h.on_fit_start(None, None)
    with pytest.raises(ValueError, match="haste"):
        HASTE.check_budget(HASTE.Params(), 120)
    HASTE.check_budget(HASTE.Params(), 1000)


def test_check_model_refuses_a_non_linear_or_small_output_layer():
    conv_last = {"0": nn.Linear(4, 8), "1": nn.Conv2d(8, 10, 1)}
    with pytest.raises(ValueError, match=r"last prunable layer '1' is Conv2d.*nn\.Linear"):
        HASTE.check_model(HASTE.Params(), conv_last)
    with pytest.raises(ValueError, match="no prunable layer"):
        HASTE.check_model(HASTE.Params(), {})
    small = {"0": nn.Linear(4, 8), "1": nn.Linear(8, 20)}  # 20 - 4 head = 16, not > 16
    with pytest.raises(ValueError, match=r"'1' has 20 units, 16 outside the dense head"):
        HASTE.check_model(HASTE.Params(), small)
    HASTE.check_model(HASTE.Params(dense_head=3), small)
    from sparsebench.suite.pillars.classification.masks import prunable_layers

    HASTE.check_model(HASTE.Params(), prunable_layers(build_model("lenet300_100", (64,), 300)))


def test_params_validate():
    with pytest.raises(ValueError, match="group_size"):
        HASTE.Params(group_size=0).validate()
    with pytest.raises(ValueError, match="dense_head must be >= 0"):
        HASTE.Params(dense_head=-1).validate()
    with pytest.raises(ValueError, match="drop_fraction"):
        HASTE.Params(drop_fraction=1.5).validate()
    assert issubclass(HASTE, RigL)
    assert (HASTE.Params().group_size, HASTE.Params().dense_head) == (16, 4)


def test_a_head_not_below_the_label_count_is_refused_naming_the_allowed_range():
    out = {"0": nn.Linear(4, 8), "1": nn.Linear(8, 20)}  # 20 labels, group_size 3: head <= 16
    for head in (20, 21):
        with pytest.raises(ValueError, match=rf"dense_head = {head} is not below the 20 units"):
            HASTE.check_model(HASTE.Params(dense_head=head, group_size=3), out)
    with pytest.raises(ValueError, match=r"allowed: 0 <= dense_head <= 16"):
        HASTE.check_model(HASTE.Params(dense_head=20, group_size=3), out)
    HASTE.check_model(HASTE.Params(dense_head=16, group_size=3), out)


def test_check_sparsity_with_the_layers_refuses_a_head_the_budget_cannot_pay():
    layers = {n: nn.Linear(s[1], s[0]) for n, s in SHAPES.items()}
    params = HASTE.Params(distribution="uniform", dense_head=11, group_size=1)
    # 12 x 16 output layer at 95 % uniform: budget n_keep(192, 0.05) = 10 < one dense row (16)
    with pytest.raises(ValueError, match=r"haste: at density 0.05.*dense_head = 11 rows"):
        HASTE.check_sparsity(params, 0.95, layers)
    HASTE.check_sparsity(params, 0.95)  # without the model there is no budget to check
    HASTE.check_sparsity(HASTE.Params(distribution="uniform", group_size=1), 0.5, layers)


def test_headless_fan_in_is_at_least_one():
    assert HASTE.output_fan_in(0.1, 4) == 1  # round(0.4) = 0, raised to 1
    assert HASTE.output_fan_in(0.5, 7) == 4  # round(3.5) = 4 (to even)
    assert HASTE.output_fan_in(1.0, 7) == 7


def test_dense_head_message_gives_the_units_kept_outside():
    layers = {"0": nn.Linear(3, 6)}
    with pytest.raises(ValueError, match=r"at least group_size \+ 1 = 5 must stay outside"):
        HASTE.check_model(HASTE.Params(group_size=4, dense_head=6), layers)


def test_layer_counts_keep_the_first_layer_dense_when_asked():
    # "a" dense (16), outside the budget; uniform 0.5 on the (10, 8) output: 40 = 10 rows of
    # fan-in 4, so nothing moves between layers.
    p = HASTE.Params(distribution="uniform", dense_first_layer=True, dense_head=0)
    counts, fan_in = HASTE.layer_counts(p, 0.5, {"a": (4, 4), "out": (10, 8)})
    assert counts == {"a": 16, "out": 40} and fan_in == 4


def test_an_output_layer_alone_cannot_absorb_the_head_rounding():
    # 70 x 0.5 = 35 nonzeros; head 1 row of 7 + 9 rows of round(28 / 9) = 3 = 34: one left over
    # and no other sparse layer to take it.
    p = HASTE.Params(distribution="uniform", dense_head=1)
    with pytest.raises(ValueError, match="no other sparse layer can absorb the difference"):
        HASTE.layer_counts(p, 0.5, {"out": (10, 7)})


def test_equal_counts_put_the_lower_label_first():
    # 20 labels seen once each: all tie, so the head is the 4 lowest (a non-stable sort of 20
    # ties picks others).
    assert HASTE.head_labels(torch.arange(20), 20, 4).tolist() == [0, 1, 2, 3]


def test_clustering_seeds_at_the_lowest_label_among_equally_far_ones():
    # Labels 0-9 at (+1, 0), 10-19 at (-1, 0): the mean is the origin, every label is 1 away,
    # so the first seed is label 0 and its group the 5 nearest (distance 0, lowest first).
    emb = torch.tensor([[1.0, 0.0]] * 10 + [[-1.0, 0.0]] * 10)
    groups = HASTE.cluster_groups(emb, torch.arange(20), 5)
    assert groups[0].tolist() == [0, 1, 2, 3, 4]
    assert sorted(int(x) for g in groups for x in g) == list(range(20))

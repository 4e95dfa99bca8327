import lightning.pytorch as pl
import pytest
import torch
from torch import nn

import sparsebench.methods.dst.acdc  # noqa: F401  (registers "acdc")
from sparsebench.methods.dst.acdc import AcDc, global_magnitude_masks, magnitude_masks
from sparsebench.suite.pillars.classification.masks import MaskStore, layer_densities, n_keep
from tests.methods.conftest import MaskWatcher
from tests.methods.mask_methods import RegistryError, build_params


def _ctx(total_steps):
    return type("C", (), {"total_steps": total_steps})()


def _starts(phases, kind):
    return [(p.start, p.end) for p in phases if p.kind == kind]


def test_default_schedule_is_the_reference_imagenet_schedule():
    # configs/neurips/iht_imagenet_resnet50_insta_cosinelr_s90_ep100.yaml, in epochs of 100:
    # prune at 10, 20, ..., 70 and 85; restore at 15, 25, ..., 65 and 75.
    phases = AcDc.make_schedule(AcDc.Params(), 100)
    assert phases[0] == ("warmup", 0, 10)
    assert _starts(phases, "compressed") == [(c, c + 5) for c in range(10, 71, 10)]
    assert _starts(phases, "decompressed") == [(d, d + 5) for d in range(15, 66, 10)] + [(75, 85)]
    assert phases[-1] == ("final", 85, 100)
    # Contiguous cover of the run.
    assert all(a.end == b.start for a, b in zip(phases, phases[1:]))


def test_cifar100_proportions_give_the_reference_cifar_schedule():
    # configs/neurips/iht_cifar100_wideresnet_steplr_freq20_s90.yaml, 200 epochs:
    # prune at 10, 50, 90, 130, 170; restore at 30, 70, 110, 150.
    params = AcDc.Params(warmup_fraction=0.05, phase_fraction=0.1, last_decompressed_fraction=0.1)
    phases = AcDc.make_schedule(params, 200)
    assert _starts(phases, "compressed") == [(10, 30), (50, 70), (90, 110), (130, 150)]
    assert _starts(phases, "decompressed") == [(30, 50), (70, 90), (110, 130), (150, 170)]
    assert phases[-1] == ("final", 170, 200)


def test_phase_at_known_steps():
    m = AcDc(AcDc.Params(), 0.9, _ctx(1000))  # warm-up 100, phases of 50, final from 850
    kinds = {s: m.phase_at(s).kind for s in (0, 99, 100, 149, 150, 199, 200, 749, 750, 849, 850)}
    assert kinds == {
        0: "warmup",
        99: "warmup",
        100: "compressed",
        149: "compressed",
        150: "decompressed",
        199: "decompressed",
        200: "compressed",
        749: "compressed",
        750: "decompressed",  # the last, 100-step decompressed phase
        849: "decompressed",
        850: "final",
    }
    assert m.phase_at(999).sparse and not m.phase_at(800).sparse


def test_layerwise_magnitude_masks_by_hand():
    w = {
        "a": torch.tensor([[0.1, -4.0, 0.3, 2.0], [-0.2, 0.5, 3.0, -1.0]]),
        "conv": torch.tensor([0.9, -0.1, 0.2, -0.8]).reshape(1, 1, 2, 2),  # Conv2d weight
    }
    masks = magnitude_masks(w, 0.5, "uniform")
    assert masks["a"].tolist() == [[False, True, False, True], [False, False, True, True]]
    assert masks["conv"].tolist() == [[[[True, False], [False, True]]]]
    # dense_first_layer: the first layer is kept whole (None), the rest at the density.
    masks = magnitude_masks(w, 0.5, "uniform", dense_first_layer=True)
    assert masks["a"] is None and int(masks["conv"].sum()) == 2


def test_global_magnitude_masks_rank_across_layers():
    w = {"a": torch.tensor([5.0, 4.0, 0.1, 0.2]), "b": torch.tensor([3.0, 0.3, 0.4, 0.05])}
    masks = global_magnitude_masks(w, 0.5)  # keep 4 of 8: 5, 4, 3 and 0.4
    assert masks["a"].tolist() == [True, True, False, False]
    assert masks["b"].tolist() == [True, False, True, False]
    via = magnitude_masks(w, 0.5, "global")
    assert all(torch.equal(via[n], masks[n]) for n in w)
    # A layer that would lose everything keeps its largest weight.
    w = {"a": torch.tensor([5.0, 4.0, 3.0, 2.0]), "b": torch.tensor([0.1, 0.3, 0.2, 0.0])}
    masks = global_magnitude_masks(w, 0.25)
    assert masks["b"].tolist() == [False, True, False, False]


def _conv_store():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(2, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    store = MaskStore(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    model(torch.randn(5, 2, 6, 6)).sum().backward()
    opt.step()  # fills momentum buffers
    return model, store, opt


def test_compress_and_decompress_on_conv_and_linear():
    model, store, opt = _conv_store()
    m = AcDc(AcDc.Params(distribution="erk"), 0.75, _ctx(100))
    before = {n: store.weight(n).detach().clone() for n in store.layers}
    m.compress(store)
    densities = layer_densities(store.shapes, 0.25, "erk")
    for n, mask in store.masks.items():
        assert store.nnz(n) == n_keep(store.weight(n).numel(), densities[n])
        w = store.weight(n)
        assert torch.all(w[~mask] == 0)
        # The kept weights are the largest-magnitude ones, unchanged.
        assert torch.equal(w[mask], before[n][mask])
        assert before[n][mask].abs().min() >= before[n][~mask].abs().max()
    pruned = {n: ~mk for n, mk in store.masks.items()}
    model(torch.randn(5, 2, 6, 6)).sum().backward()
    opt.step()
    m.decompress(store, [opt])
    assert not store.is_sparse
    for n in store.layers:
        assert torch.all(store.weight(n)[pruned[n]] == 0)  # reintroduced at zero
    # decompress_state_reset="all": every momentum buffer (weights and biases) is zero.
    for p in model.parameters():
        assert torch.all(opt.state[p]["momentum_buffer"] == 0)


def test_reintroduced_only_state_reset_keeps_other_momentum():
    model, store, opt = _conv_store()
    m = AcDc(AcDc.Params(decompress_state_reset="reintroduced"), 0.75, _ctx(100))
    m.compress(store)
    pruned = {n: ~mk for n, mk in store.masks.items()}
    model(torch.randn(5, 2, 6, 6)).sum().backward()
    opt.step()
    m.decompress(store, [opt])
    for n in store.layers:
        buf = opt.state[store.weight(n)]["momentum_buffer"]
        assert torch.all(buf[pruned[n]] == 0) and bool((buf[~pruned[n]] != 0).any())
    assert bool((opt.state[model[0].bias]["momentum_buffer"] != 0).any())


class _PhaseStart(pl.Callback):
    """After the method's hooks at each batch start: is every momentum buffer zero, and the
    weights at the positions pruned in the previous compressed phase."""

    def __init__(self):
        self.momentum_zero, self.prev_pruned_zero, self._pruned = [], [], None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        store, opt = pl_module.masks, trainer.optimizers[0]
        bufs = [opt.state[p].get("momentum_buffer") for p in pl_module.parameters()]
        self.momentum_zero.append(all(b is not None and not b.any() for b in bufs))
        if self._pruned is not None and not store.is_sparse:
            zero = all(not store.weight(n)[m].any() for n, m in self._pruned.items())
            self.prev_pruned_zero.append((trainer.global_step, zero))
        if store.is_sparse:
            self._pruned = {n: ~m for n, m in store.masks.items() if m is not None}


def test_acdc_tiny_run_densities_reset_and_flops(tiny_fit):
    watcher, starts = MaskWatcher(), _PhaseStart()
    module, m = tiny_fit("acdc", 0.8, epochs=4, extra_callbacks=[watcher, starts])
    store = module.masks
    phases = m.schedule  # 40 steps: warm-up 4, phases of 2, last decompressed 4, final 6
    assert phases[0] == ("warmup", 0, 4) and phases[-1] == ("final", 34, 40)
    assert _starts(phases, "compressed") == [(c, c + 2) for c in range(4, 29, 4)]
    densities = layer_densities(store.shapes, 0.2, "erk")
    want = {n: n_keep(store.weight(n).numel(), d) for n, d in densities.items()}
    full = {n: store.weight(n).numel() for n in store.layers}
    # Sparse iterations by hand: compressed [c, c + 2) for c = 4, 8, ..., 28 and final [34, 40).
    sparse = {s for c in range(4, 29, 4) for s in (c, c + 1)} | set(range(34, 40))
    for step, nnz in enumerate(watcher.nnz):
        assert nnz == (want if step in sparse else full), step
    # Reintroduced weights start at zero, with every momentum buffer zeroed.
    dec = [p.start for p in phases if p.kind == "decompressed"]
    assert [s for s, _ in starts.prev_pruned_zero if s in dec] == dec
    assert all(zero for s, zero in starts.prev_pruned_zero if s in dec)
    assert all(starts.momentum_zero[s] for s in dec)
    assert not any(starts.momentum_zero[s] for s in (2, 5, 12, 35))
    # FLOPs: 3 f_D per example in dense steps, 3 f_S in sparse ones; nothing else.
    flops = m.ctx.flops
    f_s = sum(f * want[n] / full[n] for n, f in flops.dense_flops.items())
    n_sparse = sum(p.length for p in phases if p.sparse)
    assert n_sparse == 7 * 2 + 6
    expected = 3 * 16 * ((40 - n_sparse) * flops.f_dense + n_sparse * f_s)
    assert flops.total == pytest.approx(expected)
    assert store.sparsity() == pytest.approx(0.8, abs=0.01)


def test_too_short_run_is_refused():
    m = AcDc(AcDc.Params(), 0.9, _ctx(9))  # 0.05 x 9 rounds to 0 steps
    with pytest.raises(ValueError, match="too few"):
        m.on_fit_start(None, None)
    quarter = dict(phase_fraction=0.25, last_decompressed_fraction=0.25, final_fraction=0.25)
    params = AcDc.Params(warmup_fraction=0.25, **quarter)
    with pytest.raises(ValueError, match="no compressed phase fits"):
        AcDc.check_budget(params, 6)  # every 1.5 rounds up to 2: 2 + 2 + 2 > 6 - 2
    AcDc.check_budget(AcDc.Params(), 10)  # the shortest default run: 1-step phases


def test_bad_fractions_are_refused():
    with pytest.raises(RegistryError, match="no room for one compressed phase"):
        build_params("acdc", {"warmup_fraction": 0.5, "final_fraction": 0.4})
    with pytest.raises(RegistryError, match="last_decompressed_fraction"):
        build_params("acdc", {"phase_fraction": 0.2, "last_decompressed_fraction": 0.1})


def test_each_fraction_outside_its_open_interval_is_named():
    from types import SimpleNamespace

    from sparsebench.methods.dst.acdc import check_schedule_fractions

    ok = dict(warmup_fraction=0.0, phase_fraction=0.1, last_decompressed_fraction=0.1)
    # phase_fraction 1.0 is outside (0, 1) itself (the sum check would also fail, later).
    p = SimpleNamespace(**{**ok, "phase_fraction": 1.0, "last_decompressed_fraction": 1.0})
    with pytest.raises(ValueError, match="phase_fraction must be in"):
        check_schedule_fractions(SimpleNamespace(**vars(p), final_fraction=0.1))
    with pytest.raises(ValueError, match="final_fraction must be in"):
        check_schedule_fractions(SimpleNamespace(**ok, final_fraction=1.5))
    check_schedule_fractions(SimpleNamespace(**ok, final_fraction=0.8))  # 0 + .1 + .1 + .8 = 1


def test_magnitude_masks_default_to_erk_and_global_can_keep_the_first_layer_dense():
    w = {"a": torch.tensor([[0.1, -4.0, 0.3, 2.0], [-0.2, 0.5, 3.0, -1.0]])}
    # One layer: ERK's only density is the global one, 0.5 -> the 4 largest |w|: 4, 3, 2, 1.
    assert magnitude_masks(w, 0.5)["a"].tolist() == [
        [False, True, False, True],
        [False, False, True, True],
    ]
    w2 = {"a": torch.ones(4), "b": torch.tensor([3.0, 0.3, 0.4, 0.05])}
    masks = magnitude_masks(w2, 0.5, "global", dense_first_layer=True)
    # "a" is out of the budget; "b" keeps 2 of 4 on its own: 3.0 and 0.4.
    assert masks["a"] is None and masks["b"].tolist() == [True, False, True, False]


def test_too_short_message_names_the_method():
    with pytest.raises(ValueError, match=r"^acdc: 9 steps are too few"):
        AcDc.check_budget(AcDc.Params(), 9)


def _fake(step, store):
    from types import SimpleNamespace

    return SimpleNamespace(global_step=step, optimizers=[]), SimpleNamespace(masks=store)


def test_a_fresh_method_compresses_at_its_first_sparse_phase():
    _, store, _ = _conv_store()
    m = AcDc(AcDc.Params(distribution="uniform"), 0.5, _ctx(100))  # compressed [10, 15)
    trainer, module = _fake(10, store)
    m.on_train_batch_start(trainer, module, None, 0)  # no on_fit_start: the store is dense
    assert store.is_sparse and m.compressed


def test_a_run_resumed_inside_phase_one_enters_it():
    _, store, _ = _conv_store()
    # warmup 0: phase 0 compressed [0, 5), phase 1 decompressed [5, 10), ...
    m = AcDc(AcDc.Params(distribution="uniform", warmup_fraction=0.0), 0.5, _ctx(100))
    m.compress(store)
    trainer, module = _fake(7, store)
    m.on_fit_start(trainer, module)  # the store is sparse: compressed
    assert m.phase_index(7) == 1
    m.on_train_batch_start(trainer, module, None, 0)
    assert not store.is_sparse and not m.compressed

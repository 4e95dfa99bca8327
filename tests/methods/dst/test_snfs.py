import math

import pytest
import torch
from torch import nn

from sparsebench.methods.dst.snfs import SNFS
from sparsebench.suite.pillars.classification.masks import MaskStore
from tests.methods.conftest import MaskWatcher

T, F = True, False


def _snfs(total_steps=1000, steps_per_epoch=100, **params):
    ctx = type(
        "C",
        (),
        {
            "total_steps": total_steps,
            "steps_per_epoch": steps_per_epoch,
            "epochs": total_steps // steps_per_epoch,
            "generator": torch.Generator().manual_seed(0),
        },
    )()
    return SNFS(SNFS.Params(**params), 0.5, ctx)


def _two_layers():
    w = {
        "a": torch.tensor([[0.5, -3.0, 0.0, 0.0], [0.1, 2.0, 0.0, 0.0]]),
        "b": torch.tensor([[1.0, 0.0, -0.2, 0.0], [0.0, 0.3, 0.0, 4.0]]),
    }
    masks = {n: v != 0 for n, v in w.items()}
    momenta = {
        # mean |M| over active weights: (1 + 5 + 2 + 4) / 4 = 3
        "a": torch.tensor([[1.0, 5.0, 9.0, 0.0], [2.0, 4.0, 7.0, 0.5]]),
        # mean |M| over active weights: 1
        "b": torch.tensor([[1.0, 2.0, 1.0, 3.0], [0.25, 1.0, 0.1, 1.0]]),
    }
    return w, masks, momenta


def test_update_prunes_magnitude_redistributes_by_momentum_and_grows_by_momentum():
    w, masks, momenta = _two_layers()
    new = SNFS.update_masks(w, masks, momenta, rate=0.5)
    # Each layer drops ceil(0.5 * 4) = 2 smallest |w|: K = 4 regrowth slots, shared 3 : 1.
    # a keeps -3 and 2, regrows the three largest |M| off the kept set: 9, 7 and 2 (the
    # just-dropped 0.1 comes back).
    assert new["a"].tolist() == [[F, T, T, F], [T, T, T, F]]
    # b keeps 4.0 and 1.0 and regrows the single largest |M| among the rest: 3.
    assert new["b"].tolist() == [[T, F, F, T], [F, F, F, T]]
    assert sum(int(m.sum()) for m in new.values()) == 8  # global count exact
    assert (int(new["a"].sum()), int(new["b"].sum())) == (5, 3)  # per-layer counts moved


def test_update_on_conv_shaped_weights_matches_linear():
    w, masks, momenta = _two_layers()
    conv = lambda d: {n: v.reshape(2, 1, 2, 2) for n, v in d.items()}  # noqa: E731
    new = SNFS.update_masks(conv(w), conv(masks), conv(momenta), rate=0.5)
    flat = SNFS.update_masks(w, masks, momenta, rate=0.5)
    for n in w:
        assert new[n].shape == (2, 1, 2, 2)
        assert torch.equal(new[n].reshape(2, 4), flat[n])


def test_allocate_caps_layers_and_redistributes_overflow_exactly():
    assert SNFS.allocate({"a": 0.9, "b": 0.1}, 10, {"a": 4, "b": 20}) == {"a": 4, "b": 6}
    # a's overflow goes to b and c by their shares (3 : 1).
    got = SNFS.allocate({"a": 0.6, "b": 0.3, "c": 0.1}, 10, {"a": 2, "b": 50, "c": 50})
    assert got == {"a": 2, "b": 6, "c": 2}
    # Largest remainder; the tie goes to the earlier layer.
    assert SNFS.allocate({"a": 1.0, "b": 1.0, "c": 1.0}, 10, dict.fromkeys("abc", 9)) == {
        "a": 4,
        "b": 3,
        "c": 3,
    }
    # No momentum anywhere: split by free positions.
    assert SNFS.allocate({"a": 0.0, "b": 0.0}, 4, {"a": 2, "b": 6}) == {"a": 1, "b": 3}
    # Chained caps: every layer full.
    assert SNFS.allocate({"a": 0.5, "b": 0.3, "c": 0.2}, 9, {"a": 2, "b": 3, "c": 4}) == {
        "a": 2,
        "b": 3,
        "c": 4,
    }
    with pytest.raises(ValueError, match="cannot regrow 10"):
        SNFS.allocate({"a": 1.0}, 10, {"a": 9})


def test_update_never_overfills_a_layer():
    # Layer a has all the momentum but only 2 free slots after pruning: the rest goes to b.
    b = torch.arange(1.0, 13.0) * (torch.arange(12) < 8)  # 8 of 12 active
    w = {"a": torch.tensor([1.0, 2.0, 0.0, 0.0]), "b": b}
    masks = {n: v != 0 for n, v in w.items()}
    momenta = {"a": torch.full((4,), 10.0), "b": torch.full((12,), 1e-3)}
    new = SNFS.update_masks(w, masks, momenta, rate=0.5)
    assert int(new["a"].sum()) == 4  # full, not more
    assert int(new["a"].sum()) + int(new["b"].sum()) == 10


@pytest.mark.parametrize("mode", ["carry", "zero"])
def test_regrown_weights_start_at_zero_with_their_momentum(mode):
    lin = nn.Linear(4, 2, bias=False)
    model = nn.Sequential(lin)
    store = MaskStore(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    store.attach(opt)
    store.set_mask("0", torch.tensor([[T, T, F, F], [T, T, F, F]]))
    model(torch.ones(1, 4)).sum().backward()
    opt.step()  # creates the momentum buffer
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0.5, -3.0, 0.0, 0.0], [0.1, 2.0, 0.0, 0.0]]))
        opt.state[lin.weight]["momentum_buffer"].copy_(0.7 * store.masks["0"])
    m = _snfs(regrow_momentum=mode)
    m.momenta = {"0": torch.tensor([[1.0, 5.0, 9.0, 0.0], [2.0, 4.0, 7.0, 0.5]])}
    grown = m.apply_update(store, 0.5, [opt])
    # Drop 0.5 and 0.1; regrow the two largest |M| elsewhere: 9 and 7.
    assert store.masks["0"].tolist() == [[F, T, T, F], [F, T, T, F]]
    assert grown["0"].tolist() == [[F, F, T, F], [F, F, T, F]]
    assert lin.weight.tolist() == [[0.0, -3.0, 0.0, 0.0], [0.0, 2.0, 0.0, 0.0]]
    buf = opt.state[lin.weight]["momentum_buffer"]
    regrown = [9.0, 7.0] if mode == "carry" else [0.0, 0.0]
    expected = torch.tensor([[0.0, 0.7, regrown[0], 0.0], [0.0, 0.7, regrown[1], 0.0]])
    assert torch.allclose(buf, expected)


def test_momentum_is_exponentially_smoothed_dense_gradient():
    m = _snfs()
    m.momenta = {"a": torch.zeros(3)}
    m.accumulate({"a": torch.tensor([1.0, 0.0, -2.0])})
    m.accumulate({"a": torch.tensor([1.0, 1.0, 0.0]), "dense": torch.ones(2)})
    assert m.momenta["a"].tolist() == pytest.approx([1.9, 1.0, -1.8])


def test_cosine_prune_rate_schedule_and_update_epochs():
    m = _snfs(total_steps=1000, steps_per_epoch=100)
    assert m.prune_rate_at(0) == pytest.approx(0.5)
    assert m.prune_rate_at(500) == pytest.approx(0.005 + 0.495 / 2)
    assert m.prune_rate_at(1000) == pytest.approx(0.005)
    assert _snfs(prune_rate_min=0.0).prune_rate_at(1000) == pytest.approx(0.0)
    assert [e for e in range(10) if m.is_update_epoch(e)] == list(range(9))  # not the last


def test_snfs_tiny_fit_exact_global_nnz_topology_and_flops(tiny_fit):
    import sparsebench.methods.dst.snfs  # noqa: F401  (registers "snfs")

    watcher = MaskWatcher()
    module, m = tiny_fit("snfs", 0.8, epochs=3, extra_callbacks=[watcher])
    sizes = {n: module.masks.weight(n).numel() for n in module.masks.layers}
    first = sum(watcher.nnz[0].values())
    assert first == 77 + 102 + 10  # uniform 20 % per layer at start
    for nnz in watcher.nnz:
        assert sum(nnz.values()) == first
        assert all(1 <= nnz[n] <= sizes[n] for n in nnz)
    # Updates after epochs 1 and 2 (10 steps each), not after the last.
    assert [s for s, _ in m.updates] == [10, 20]
    # p(t) = 0.005 + 0.495 / 2 (1 + cos(π t / 30)): t = 10 -> 0.005 + 0.2475 x 1.5, t = 20 -> x 0.5
    assert [r for _, r in m.updates] == pytest.approx([0.37625, 0.12875])
    # Each update changes the topology; redistribution moves per-layer counts.
    for i in (9, 19):
        assert not torch.equal(watcher.masks[i]["2"], watcher.masks[i + 1]["2"])
    assert any(nnz != watcher.nnz[0] for nnz in watcher.nnz)
    # The momentum saw the dense gradient: nonzero at inactive positions too.
    assert (m.momenta["0"][~module.masks.masks["0"]] != 0).any()
    assert module.masks.sparsity() == pytest.approx(1 - first / sum(sizes.values()))

    # FLOPs: 2 f_S + f_D per example every step, f_S at that step's masks (watcher.nnz[t]:
    # the masks only change after an epoch's last step).
    flops = m.ctx.flops
    f_s = [sum(flops.dense_flops[n] * nnz[n] / sizes[n] for n in nnz) for nnz in watcher.nnz]
    assert len(f_s) == 30
    assert flops.total == pytest.approx(sum((2 * f + flops.f_dense) * 16 for f in f_s))
    assert not math.isclose(flops.total, sum(3 * f * 16 for f in f_s))


def test_too_short_run_is_refused():
    with pytest.raises(ValueError, match="no mask update would happen"):
        SNFS.check_budget(SNFS.Params(), 19, steps_per_epoch=10)
    with pytest.raises(ValueError, match="train at least 2 epochs"):
        SNFS.check_budget(SNFS.Params(), 1)
    SNFS.check_budget(SNFS.Params(), 20, steps_per_epoch=10)  # two epochs: one update
    with pytest.raises(ValueError, match="1 epoch"):
        _snfs(total_steps=15, steps_per_epoch=10).on_fit_start(None, None)


def test_bad_params_are_refused():
    import sparsebench.methods.dst.snfs  # noqa: F401
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="prune_rate must be in"):
        build_params("snfs", {"prune_rate": 1.5})
    with pytest.raises(RegistryError, match="prune_rate_min"):
        build_params("snfs", {"prune_rate": 0.3, "prune_rate_min": 0.4})
    with pytest.raises(RegistryError, match="momentum must be in"):
        build_params("snfs", {"momentum": 1.0})


def test_the_store_stops_capturing_after_the_momentum_update():
    from types import SimpleNamespace

    from torch import nn

    from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter, layer_flops
    from sparsebench.suite.pillars.classification.masks import MaskStore

    model = nn.Sequential(nn.Linear(4, 2, bias=False))
    store = MaskStore(model)
    store.set_mask("0", torch.tensor([[True, True, False, False], [True, True, False, False]]))
    s = _snfs()
    s.ctx.flops = TrainFlopsCounter(layer_flops(model, (4,)))
    s.momenta = {"0": torch.zeros(2, 4)}
    module = SimpleNamespace(masks=store)
    s.on_train_batch_start(None, module, (torch.zeros(3, 4),), 0)
    assert store.capture_dense_grads
    store.dense_grads["0"] = torch.ones(2, 4)
    s.on_before_optimizer_step(None, module, None)
    assert not store.capture_dense_grads and store.dense_grads == {}


def test_allocation_rounds_by_largest_remainder():
    # Shares 1 : 3 of 1 slot: real 0.25 and 0.75, both floor to 0; the larger remainder
    # (layer "b", not the first by name) takes the slot.
    assert SNFS.allocate({"a": 1.0, "b": 3.0}, 1, {"a": 5, "b": 5}) == {"a": 0, "b": 1}

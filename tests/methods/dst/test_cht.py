import math

import lightning.pytorch as pl
import pytest
import torch
from torch import nn

import sparsebench.methods.dst.cht  # noqa: F401  (registers "cht")
from sparsebench.methods.dst.cht import (
    CHT,
    ch3_l3_flops,
    ch3_l3_scores,
    linear_chains,
    per_sign_removal,
    pooled_removal,
    remove_inactive_neurons,
    swi_std,
    top_k_random_ties,
)
from tests.methods.conftest import MaskWatcher


def _graph(n_out, n_in, edges):
    """Bool adjacency (n_out, n_in) from (input, output) pairs."""
    adj = torch.zeros(n_out, n_in, dtype=torch.bool)
    for i, o in edges:
        adj[o, i] = True
    return adj


def _ch3_l3_by_paths(adj):
    """CH3-L3 by enumerating paths and local communities literally (Muscoloni et al. 2022)."""
    n_out, n_in = adj.shape
    outs_of = [set(torch.nonzero(adj[:, i]).flatten().tolist()) for i in range(n_in)]
    ins_of = [set(torch.nonzero(adj[o]).flatten().tolist()) for o in range(n_out)]
    s = torch.zeros(n_out, n_in, dtype=torch.float64)
    for u in range(n_in):
        for v in range(n_out):
            if adj[v, u]:
                continue
            paths = [(o, i) for o in outs_of[u] for i in ins_of[v] if adj[o, i]]
            lc_out, lc_in = {o for o, _ in paths}, {i for _, i in paths}
            for o, i in paths:
                de_o = len([x for x in ins_of[o] if x not in lc_in and x != u])
                de_i = len([y for y in outs_of[i] if y not in lc_out and y != v])
                s[v, u] += 1.0 / math.sqrt((1 + de_o) * (1 + de_i))
    return s


def test_ch3_l3_on_a_three_by_three_chain():
    # Inputs x0, x1, x2; outputs y0, y1, y2; 4 edges x0-y0, x1-y0, x1-y1, x2-y1 (y2 isolated).
    # (x0, y1): one path x0-y0-x1-y1, LC = {y0, x1}. d_e(y0): neighbours {x0, x1} minus seed x0
    #   minus LC x1 = 0; d_e(x1): {y0, y1} minus seed y1 minus LC y0 = 0. Score 1/sqrt(1*1) = 1.
    # (x2, y0): one path x2-y1-x1-y0, symmetric: 1.
    # (x0, y2), (x1, y2), (x2, y2): y2 has no neighbour, no path: 0.
    adj = _graph(3, 3, [(0, 0), (1, 0), (1, 1), (2, 1)])
    expected = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.allclose(ch3_l3_scores(adj), expected)


def test_ch3_l3_counts_external_degrees_by_hand():
    # Inputs i0..i3, outputs o0..o2. Edges: i0-o0, i1-o0, i2-o0, i3-o0, i1-o1, i2-o1, i1-o2.
    # N(o0) = {i0,i1,i2,i3}, N(o1) = {i1,i2}, N(o2) = {i1}; N(i1) = {o0,o1,o2}, N(i2) = {o0,o1}.
    # (i0, o1): paths i0-o0-i1-o1 and i0-o0-i2-o1; LC = {o0, i1, i2}.
    #   d_e(o0) = |{i0,i1,i2,i3} - seed i0 - LC {i1,i2}| = |{i3}| = 1
    #   d_e(i1) = |{o0,o1,o2} - seed o1 - LC {o0}| = |{o2}| = 1;  d_e(i2) = |{}| = 0
    #   score = 1/sqrt(2*2) + 1/sqrt(2*1) = 0.5 + 0.70711 = 1.20711.   (i3, o1): the same.
    # (i0, o2): path i0-o0-i1-o2; LC = {o0, i1}.
    #   d_e(o0) = |{i2, i3}| = 2, d_e(i1) = |{o1}| = 1: score 1/sqrt(3*2) = 0.40825. (i3, o2) too.
    # (i2, o2): paths i2-o0-i1-o2 and i2-o1-i1-o2; LC = {o0, o1, i1}.
    #   d_e(o0) = |{i0,i3}| = 2, d_e(o1) = |{}| = 0, d_e(i1) = |{o0,o1,o2} - o2 - {o0,o1}| = 0
    #   score = 1/sqrt(3*1) + 1/sqrt(1*1) = 0.57735 + 1 = 1.57735.
    adj = _graph(3, 4, [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (1, 2)])
    a, b, c = 0.5 + 1 / math.sqrt(2), 1 / math.sqrt(6), 1 / math.sqrt(3) + 1
    expected = torch.tensor([[0, 0, 0, 0], [a, 0, 0, a], [b, 0, c, b]], dtype=torch.float32)
    assert torch.allclose(ch3_l3_scores(adj), expected, atol=1e-6)
    # Small batches give the same sums.
    assert torch.allclose(ch3_l3_scores(adj, max_elems=1), expected, atol=1e-6)


def test_ch3_l3_matches_path_enumeration_on_random_graphs():
    g = torch.Generator().manual_seed(1)
    for _ in range(25):
        n_out, n_in = torch.randint(1, 10, (2,), generator=g).tolist()
        adj = torch.rand(n_out, n_in, generator=g) < torch.rand(1, generator=g).item()
        got = ch3_l3_scores(adj, max_elems=64).double()
        assert torch.allclose(got, _ch3_l3_by_paths(adj), atol=1e-5)


def test_link_weights_multiply_each_path_term():
    adj = _graph(3, 4, [(0, 0), (1, 0), (2, 0), (3, 0), (1, 1), (2, 1), (1, 2)])
    plain = ch3_l3_scores(adj)
    assert torch.allclose(ch3_l3_scores(adj, torch.ones(3, 4)), plain)
    w = torch.ones(3, 4)
    w[0, 3] = 8.0  # link i3-o0 is on every path from i3, and on no path from i0
    weighted = ch3_l3_scores(adj, w)
    assert weighted[1, 3] == pytest.approx(8 * float(plain[1, 3]))
    assert weighted[1, 0] == pytest.approx(float(plain[1, 0]))


def test_flops_count_paths_and_co_neighbours():
    adj = _graph(3, 3, [(0, 0), (1, 0), (1, 1), (2, 1)])
    # deg_out = (2, 2, 0), deg_in = (1, 2, 1): co-neighbour work 8 + 6; walks through each
    # link deg(o) * deg(i): 2*1 + 2*2 + 2*2 + 2*1 = 12.
    assert ch3_l3_flops(adj) == 2 * 14 + 2 * 12
    assert ch3_l3_flops(adj, weighted=True) == 2 * 14 + 4 * 12


def test_top_k_grows_best_scores_and_breaks_ties_at_random():
    scores = torch.tensor([[3.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 5.0]])
    cand = torch.ones(2, 4, dtype=torch.bool)
    cand[1, 3] = False  # an existing link, not a candidate
    picks = set()
    for seed in range(20):
        grow = top_k_random_ties(scores, cand, 3, torch.Generator().manual_seed(seed))
        assert int(grow.sum()) == 3 and not grow[1, 3]
        assert grow[0, 0] and grow[1, 0]  # the two positive scores first
        picks.add(tuple(grow.flatten().tolist()))
    assert len(picks) > 1  # the zero-score tie is broken differently by different seeds
    a = top_k_random_ties(scores, cand, 3, torch.Generator().manual_seed(7))
    b = top_k_random_ties(scores, cand, 3, torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="cannot grow"):
        top_k_random_ties(scores, cand, 8, torch.Generator())


def test_per_sign_removal_drops_zeta_of_each_sign_closest_to_zero():
    w = torch.tensor([[-3.0, -2.0, -1.0, -0.5, 0.5, 1.0, 2.0, 3.0, 0.0, 0.0]])
    mask = w != 0
    kept = per_sign_removal(w, mask, 0.5)
    assert kept.tolist() == [[True, True, False, False, False, False, True, True, False, False]]


def test_pooled_removal_ranks_both_signs_together():
    # 8 active links (the last position is inactive); int(0.5 * 8) = 4 smallest |w| go:
    # -0.1, -0.2, -0.3 and 1. Per sign, only int(0.5 * 3) = 1 negative (-0.1) and
    # int(0.5 * 5) = 2 positives (1, 2) would go.
    w = torch.tensor([[-0.1, -0.2, -0.3, 5.0, 4.0, 3.0, 2.0, 1.0, 0.0]])
    mask = torch.ones_like(w, dtype=torch.bool)
    mask[0, 8] = False
    kept = pooled_removal(w, mask, 0.5)
    assert kept.tolist() == [[False, False, False, True, True, True, True, False, False]]
    per_sign = per_sign_removal(w, mask, 0.5)
    assert per_sign.tolist() == [[False, True, True, True, True, True, False, False, False]]


def test_inactive_neurons_lose_their_links_backward_then_forward():
    # a: 3 hidden <- 2 inputs; b: 2 outputs <- 3 hidden.
    a = torch.tensor([[1, 1], [0, 0], [1, 0]], dtype=torch.bool)  # hidden 1 has no input
    b = torch.tensor([[1, 1, 0], [0, 1, 0]], dtype=torch.bool)  # hidden 2 has no output
    masks = {"a": a.clone(), "b": b.clone()}
    remove_inactive_neurons(masks, [("a", "b")])
    assert masks["a"].tolist() == [[True, True], [False, False], [False, False]]
    assert masks["b"].tolist() == [[True, False, False], [False, False, False]]


def test_swi_std_uses_the_sparse_fan_in():
    mask = torch.zeros(4, 100, dtype=torch.bool)
    mask[:, :25] = True  # 25 links into each of the 4 outputs
    assert swi_std(mask) == pytest.approx(math.sqrt(2 / 25))


def test_cht_keeps_exact_layer_nnz_and_evolves_each_epoch(tiny_fit):
    watcher = MaskWatcher()
    params = {"early_stop": False, "end_fraction": 1.0}
    module, m = tiny_fit("cht", 0.8, params, epochs=4, extra_callbacks=[watcher])
    assert m.chains == [("0", "2"), ("2", "4")]  # Linear -> ReLU -> Linear -> ReLU -> Linear
    assert all(n == watcher.nnz[0] for n in watcher.nnz)
    per_epoch = watcher.masks[9::10]  # last batch of each epoch (10 batches per epoch)
    for name in ("0", "2", "4"):
        assert not torch.equal(per_epoch[0][name], per_epoch[1][name]), name
    assert module.masks.sparsity() == pytest.approx(0.8, abs=0.01)
    # Updates after epochs 1, 2, 3, not after the last; each one timed.
    assert len(m.regrowth_seconds) == 3 and len(m.overlaps) == 3
    assert m.regrowth_seconds_total == pytest.approx(sum(m.regrowth_seconds))
    assert set(m.regrowth_seconds_by_layer) == {"0", "2", "4"}


class _GrowthWatcher(pl.Callback):
    """After the method's epoch-end update: values and momentum of newly active weights."""

    def __init__(self):
        self.before, self.grown = {}, []

    def on_train_epoch_start(self, trainer, pl_module):
        self.before = {n: m.clone() for n, m in pl_module.masks.masks.items() if m is not None}

    def on_train_epoch_end(self, trainer, pl_module):
        store = pl_module.masks
        opt = trainer.optimizers[0]
        for name, old in self.before.items():
            fresh = store.masks[name] & ~old
            w = store.weight(name)
            buf = opt.state[w]["momentum_buffer"]
            self.grown.append((int(fresh.sum()), w[fresh].abs().sum(), buf[fresh]))


def test_regrown_weights_start_at_zero_with_zero_momentum(tiny_fit):
    watcher = _GrowthWatcher()
    tiny_fit("cht", 0.8, {"early_stop": False}, epochs=3, extra_callbacks=[watcher])
    assert sum(n for n, _, _ in watcher.grown) > 0
    for _, wmax, buf in watcher.grown:
        assert float(wmax) == 0.0
        assert torch.all(buf == 0)


def test_swi_initialises_the_sparse_layers(tiny_fit):
    class Start(pl.Callback):
        def on_train_start(self, trainer, pl_module):
            store = pl_module.masks
            self.std = {n: float(store.weight(n)[m].std()) for n, m in store.masks.items()}
            self.swi = {n: swi_std(m) for n, m in store.masks.items()}

    s = Start()
    tiny_fit("cht", 0.5, epochs=2, extra_callbacks=[s])
    # Layer "0" (32 x 12 at density 0.5): 192 weights from N(0, 2/6).
    assert s.swi["0"] == pytest.approx(math.sqrt(2 / 6), rel=0.01)
    assert s.std["0"] == pytest.approx(s.swi["0"], rel=0.2)


def test_early_stop_freezes_the_topology_once_every_layer_signals(tiny_fit):
    watcher = MaskWatcher()
    params = {"early_stop_threshold": 0.0, "end_fraction": 1.0}
    _, m = tiny_fit("cht", 0.8, params, epochs=5, extra_callbacks=[watcher])
    # A layer signals once an update regrows some link it just removed (overlap > 0); the
    # signals persist, and evolution stops after the update where the last layer signals.
    signalled, stop = set(), None
    for k, overlaps in enumerate(m.overlaps):
        signalled |= {n for n, o in overlaps.items() if o > 0.0}
        if signalled == {"0", "2", "4"}:
            stop = k
            break
    assert stop is not None and stop < 3  # so that the run has epochs left to freeze
    assert m.evolution_stopped and len(m.overlaps) == stop + 1
    after = watcher.masks[10 * (stop + 1) :]  # batches after the last update
    assert all(torch.equal(a[n], after[0][n]) for a in after for n in ("0", "2", "4"))
    assert not all(torch.equal(watcher.masks[0][n], after[0][n]) for n in ("0", "2", "4"))


def test_cht_counts_link_prediction_flops(tiny_fit):
    module, m = tiny_fit("cht", 0.8, {"early_stop": False}, epochs=3)
    flops = m.ctx.flops
    f_s = sum(f * d for f, d in zip(flops.dense_flops.values(), module.masks.densities().values()))
    assert m.link_prediction_flops > 0
    assert flops.total == pytest.approx(3 * f_s * 160 * 3 + m.link_prediction_flops)


def test_too_short_run_is_refused():
    # The message counts epochs when it knows them, steps otherwise, and says what to change.
    with pytest.raises(
        ValueError, match=r"no topology update would happen in 1 epochs: .* raise end_fraction$"
    ):
        CHT.check_budget(CHT.Params(), total_steps=10, steps_per_epoch=10)  # 1 epoch
    CHT.check_budget(CHT.Params(), total_steps=20, steps_per_epoch=10)  # step 10 < T_end = 15
    with pytest.raises(ValueError, match="no topology update would happen"):
        # 4 epochs at end_fraction 0.25: T_end = 10, and step 10 is not before it
        CHT.check_budget(CHT.Params(end_fraction=0.25), total_steps=40, steps_per_epoch=10)
    with pytest.raises(ValueError, match="no topology update would happen"):
        CHT.check_budget(CHT.Params(update_interval=2), total_steps=20, steps_per_epoch=10)
    with pytest.raises(ValueError, match="no topology update would happen in 1 steps"):
        CHT.check_budget(CHT.Params(), total_steps=1)


def _mask_changes(watcher):
    """Batches after which some layer's mask differs from the batch before."""
    seq = watcher.masks
    return [
        k
        for k in range(1, len(seq))
        if any(not torch.equal(seq[k][n], seq[k - 1][n]) for n in ("0", "2", "4"))
    ]


def test_evolution_ends_at_three_quarters_of_the_run(tiny_fit):
    # 8 epochs of 10 steps: T_end = 0.75 x 80 = 60. Updates at steps 10, 20, 30, 40, 50 (step
    # 60 is not before T_end, as the reference's ``step < T_end``), so 5 updates; the masks
    # change first seen after batches 10, 20, ..., 50 (0-based batch index of the next epoch).
    watcher = MaskWatcher()
    _, m = tiny_fit("cht", 0.8, {"early_stop": False}, epochs=8, extra_callbacks=[watcher])
    assert len(m.overlaps) == 5 and m.update_timing()[1] == 5
    assert _mask_changes(watcher) == [10, 20, 30, 40, 50]
    # end_fraction 1.0 (our earlier variant): every epoch but the last, 7 updates.
    watcher = MaskWatcher()
    params = {"early_stop": False, "end_fraction": 1.0}
    _, m = tiny_fit("cht", 0.8, params, epochs=8, extra_callbacks=[watcher])
    assert _mask_changes(watcher) == [10, 20, 30, 40, 50, 60, 70]
    # end_fraction 0.5 of 4 epochs: T_end = 20, one update at step 10.
    _, m = tiny_fit("cht", 0.8, {"early_stop": False, "end_fraction": 0.5}, epochs=4)
    assert len(m.overlaps) == 1
    with pytest.raises(ValueError, match="no topology update would happen"):
        CHT.check_budget(CHT.Params(end_fraction=0.05), total_steps=100, steps_per_epoch=10)


def test_zeta_decays_by_the_authors_cosine_and_sets_the_removal(tiny_fit, monkeypatch):
    removed: list[tuple[int, int]] = []  # (nnz, links dropped by magnitude) of layer "0"
    remove = CHT.remove

    def spy(self, name, weight, mask):
        kept = remove(self, name, weight, mask)
        if name == "0":
            removed.append((int(mask.sum()), int(mask.sum() - kept.sum())))
        return kept

    monkeypatch.setattr(CHT, "remove", spy)
    _, m = tiny_fit("cht", 0.8, {"early_stop": False}, epochs=8)
    # zeta_t = 0.3 / 2 * (1 + cos(pi t / T_end)), T_end = 60, at t = 10, 20, 30, 40, 50.
    expected = [
        0.15 * (1 + math.sqrt(3) / 2),  # cos(pi/6)
        0.15 * 1.5,  # cos(pi/3) = 1/2
        0.15,  # cos(pi/2) = 0
        0.15 * 0.5,  # cos(2 pi/3) = -1/2
        0.15 * (1 - math.sqrt(3) / 2),  # cos(5 pi/6)
    ]
    assert m.zetas == pytest.approx(expected)
    nnz = round(0.2 * 32 * 12)  # 77 links in the 32 x 12 layer at density 0.2
    assert removed == [(nnz, int(z * nnz)) for z in expected]  # 21, 17, 11, 5, 1
    # The constant schedule (our earlier variant) removes int(0.3 * 77) = 23 every time.
    removed.clear()
    tiny_fit("cht", 0.8, {"early_stop": False, "zeta_schedule": "constant"}, epochs=4)
    assert removed == [(nnz, 23)] * 2


class _Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.relu(self.a(x))
        return self.c(self.b(h) + h)  # h feeds b and the skip; b's output meets the skip


def test_chains_follow_the_graph_not_the_definition_order():
    from sparsebench.suite.models import build_model
    from sparsebench.suite.pillars.classification.masks import prunable_layers

    mlp = build_model("lenet300_100", (1, 28, 28), 10)
    x = torch.zeros(1, 1, 28, 28)
    assert linear_chains(mlp, prunable_layers(mlp), x) == [("fc1", "fc2"), ("fc2", "fc3")]
    # vit_tiny: q, k, v read a LayerNorm, o reads the attention product, fc2 ends in a residual
    # add: the only chains are each block's fc1 -> GELU -> fc2.
    vit = build_model("vit_tiny", (1, 28, 28), 10)
    blocks = [f"trunk.blocks.{i}.mlp" for i in range(4)]
    assert linear_chains(vit, prunable_layers(vit), x) == [(f"{b}.fc1", f"{b}.fc2") for b in blocks]
    assert vit.training  # restored after the eval-mode trace
    res = _Residual()
    assert linear_chains(res, prunable_layers(res), torch.zeros(1, 6)) == []
    seq = nn.Sequential(nn.Linear(4, 6), nn.Dropout(0.5), nn.Linear(6, 6), nn.Tanh())
    assert linear_chains(seq, prunable_layers(seq), torch.zeros(1, 4)) == [("0", "2")]
    shared = nn.Linear(5, 5)
    twice = nn.Sequential(nn.Linear(3, 5), shared, nn.ReLU(), shared)  # shared called twice
    assert linear_chains(twice, prunable_layers(twice), torch.zeros(1, 3)) == []


def test_bad_params_are_refused():
    from tests.methods.mask_methods import RegistryError, build_params

    with pytest.raises(RegistryError, match="zeta must be in"):
        build_params("cht", {"zeta": 0.0})
    with pytest.raises(RegistryError, match="early_stop_threshold"):
        build_params("cht", {"early_stop_threshold": 1.5})


def test_every_update_is_timed_and_counted(tiny_fit):
    _, m = tiny_fit("cht", 0.8, {"early_stop": False}, epochs=3)
    seconds, count = m.update_timing()
    assert count == 2 == len(m.regrowth_seconds)  # after epochs 1 and 2, not the last
    # The whole update (removal + regrowth) takes at least its regrowth part.
    assert seconds >= m.regrowth_seconds_total >= 0.0


def test_a_layer_that_regrows_nothing_does_not_signal():
    from sparsebench.suite.pillars.classification.masks import MaskStore
    from tests.methods.conftest import make_ctx

    model = nn.Sequential(nn.Linear(4, 4))
    store = MaskStore(model)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[:, :2] = True  # 8 links
    store.set_mask("0", mask)
    m = CHT(CHT.Params(early_stop_threshold=0.0), 0.5, make_ctx(model, input_shape=(4,)))
    m.chains = []
    m.zeta_now = 0.1  # int(0.1 * 8) = 0 links removed, so none regrown
    m.evolve(store)
    assert torch.equal(store.masks["0"], mask)
    assert math.isnan(m.overlaps[0]["0"])
    # The reference skips such a layer before its overlap check: no signal, evolution goes on.
    assert m.signalled == set() and not m.evolution_stopped
    m.zeta_now = 0.3  # int(0.3 * 8) = 2 links removed, 2 regrown: exact count kept
    m.evolve(store)
    assert int(store.masks["0"].sum()) == 8 and not math.isnan(m.overlaps[1]["0"])


def test_flops_square_the_degrees():
    # deg_out = (3, 1), deg_in = (1, 2, 1): co-neighbour work 9 + 1 + 1 + 4 + 1 = 16; walks
    # deg_out . (A deg_in) = (3, 1) . (4, 2) = 14.
    adj = _graph(2, 3, [(0, 0), (1, 0), (2, 0), (1, 1)])  # (input, output)
    assert ch3_l3_flops(adj) == 2 * 16 + 2 * 14
    assert ch3_l3_flops(adj, weighted=True) == 2 * 16 + 4 * 14


def test_top_k_of_zero_needs_no_candidates():
    none = torch.zeros(2, 3, dtype=torch.bool)
    grow = top_k_random_ties(torch.zeros(2, 3), none, 0, torch.Generator())
    assert grow.shape == (2, 3) and not grow.any()


def test_nothing_pending_counts_no_flops():
    from sparsebench.methods.dst.cht import CHT
    from tests.methods.conftest import make_ctx

    model = nn.Sequential(nn.Linear(4, 4))
    m = CHT(CHT.Params(), 0.5, make_ctx(model, input_shape=(4,)))
    m.count_pending()  # before any regrowth queued its scoring
    assert m.link_prediction_flops == 0.0 and m.ctx.flops.total == 0.0


def test_a_removed_link_regrown_at_once_keeps_its_weight():
    from sparsebench.methods.dst.cht import CHT
    from sparsebench.suite.pillars.classification.masks import MaskStore
    from tests.methods.conftest import make_ctx

    model = nn.Sequential(nn.Linear(4, 4))
    with torch.no_grad():
        model[0].weight.copy_(
            torch.tensor([[0.1, 5, 0, 0], [0.2, 6, 0, 0], [3, 7, 0, 0], [4, 8, 0, 0]])
        )
    store = MaskStore(model)
    mask = torch.zeros(4, 4, dtype=torch.bool)
    mask[:, :2] = True  # inputs 0 and 1 linked to every output; inputs 2 and 3 unlinked
    store.set_mask("0", mask)
    before = store.weight("0").detach().clone()
    m = CHT(CHT.Params(early_stop_threshold=0.0), 0.5, make_ctx(model, input_shape=(4,)))
    m.chains = []
    m.zeta_now = 0.3  # int(0.3 * 8) = 2 removed: the 0.1 and the 0.2
    m.evolve(store)
    # Each removed link (o, 0) closes length-3 paths o-1-o'-0 and scores > 0; the links to the
    # unlinked inputs 2 and 3 have no path and score 0. So the same 2 links grow back, and a
    # link active before the update is not new: it keeps its value.
    assert torch.equal(store.masks["0"], mask)
    assert torch.equal(store.weight("0").detach(), before)

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from sparsebench.methods.merging._data import loss_gradient
from sparsebench.methods.merging.base import ArtefactContext, Group, MergeInputs, TaskVectorStats
from sparsebench.methods.merging.cass import (
    KEEP_GRID,
    Cass,
    CassTuning,
    contribution_masks,
    contribution_scores,
    gradient_scores,
    select_groups,
    structured_mask,
    tuning_masks,
)
from sparsebench.methods.merging.dare import P_GRID, DareTA
from sparsebench.methods.merging.task_arithmetic import LAMBDA_GRID, TaskArithmetic
from sparsebench.methods.merging.ties import K_GRID, TIES_LAMBDA_GRID, Ties
from sparsebench.suite.method import MethodArtefact
from tests.methods.merging.conftest import (
    D_IN,
    H0,
    H1,
    assert_state_close,
    assert_unchanged,
    make_base,
    make_experts,
    make_groups,
    make_inputs,
    snapshot,
)


def test_mask_covers_exactly_the_selected_groups_and_the_ungrouped_entries():
    base, groups = make_base(), make_groups()
    selected = [0, 3, 4, 9, 12]  # fc0 neurons 0, 3, 4 and fc1 neurons 1, 4
    mask = structured_mask(base, groups, selected)
    for i, g in enumerate(groups):
        for key, dim, a, b in g.slices:
            part = mask[key].narrow(dim, a, b - a)
            assert bool(part.all()) if i in selected else not bool(part.any()), (i, key)
    assert bool(mask["scale"].all())  # ungrouped: kept dense
    owned = sum(
        (b - a) * base[k].numel() // base[k].shape[d]
        for i in selected
        for k, d, a, b in groups[i].slices
    )
    assert sum(int(m.sum()) for m in mask.values()) == owned + base["scale"].numel()


def test_select_top_ceil_keep_per_layer_and_kind():
    groups = make_groups()  # fc0: 8 neurons (indices 0-7), fc1: 5 neurons (8-12)
    scores = torch.tensor([5.0, 1, 7, 3, 3, 0, 2, 6] + [1.0, 9, 4, 4, 0])
    # keep 0.5: ceil(4) = 4 of fc0 -> 7, 6, 5, 3 (indices 2, 7, 0, and 3 before 4 on a tie);
    #           ceil(2.5) = 3 of fc1 -> 9, 4, 4 (indices 9, 10, 11)
    assert select_groups(groups, scores, 0.5) == [0, 2, 3, 7, 9, 10, 11]
    assert select_groups(groups, scores, 0.01) == [2, 9]  # at least one per (layer, kind)
    assert select_groups(groups, scores, 1.0) == list(range(13))
    mixed = groups[:3] + [Group("head", "fc0", 0, (("fc1.bias", 0, 0, 1),))]
    assert select_groups(mixed, torch.tensor([1.0, 2.0, 3.0, -5.0]), 0.3) == [2, 3]


def test_scores_by_hand():
    g = Group("neuron", "l", 0, (("w", 0, 0, 1), ("b", 0, 0, 1)))
    h = Group("neuron", "l", 1, (("w", 0, 1, 2), ("b", 0, 1, 2)))
    grad = {"w": torch.tensor([[1.0, 2.0], [3.0, -1.0]]), "b": torch.tensor([0.5, 2.0])}
    tv = {"w": torch.tensor([[-1.0, 0.0], [1.0, 1.0]]), "b": torch.tensor([4.0, 1.0])}
    # c(g) = −<∇L[g], τ[g]>: g: −(1·−1 + 2·0 + .5·4) = −1;  h: −(3·1 − 1·1 + 2·1) = −4
    assert contribution_scores(grad, tv, [g, h]).tolist() == [-1.0, -4.0]
    # ||∇L[g]||²: g: 1 + 4 + .25;  h: 9 + 1 + 4
    assert gradient_scores(grad, [g, h]).tolist() == [5.25, 14.0]


def test_contribution_is_the_first_order_loss_reduction():
    inputs = make_inputs()
    data, base, groups = inputs.data, inputs.base, inputs.groups
    x, y = data.examples(0, "train", 64)
    grad = loss_gradient(data, base, 0, x, y)
    tv = inputs.task_vectors()[0]
    eps = 1e-3
    scores = contribution_scores(grad, tv, groups)

    def loss(trunk):
        return float(F.cross_entropy(data.logits(trunk, 0, x), y))

    for i in (0, 5, 10):
        m = structured_mask(base, groups, [i])
        only_g = {k: torch.where(m[k] & (k != "scale"), tv[k], 0.0) for k in tv}
        step = {k: base[k] + eps * only_g[k] for k in base}
        assert (loss(base) - loss(step)) / eps == pytest.approx(
            float(scores[i]), rel=0.05, abs=1e-4
        )


def test_keep_one_is_the_host_on_the_raw_experts():
    inputs = make_inputs()
    snap = snapshot(inputs)
    a = Cass().merge(inputs, Cass.Params(keep=1.0, lam=0.4, n_examples=32))
    b = TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=0.4))
    assert_state_close(a.state, b.state, rtol=0, atol=0)
    assert a.examples == 96 and a.info["mask_density"] == [1.0] * 3
    assert_unchanged(inputs, snap)


def test_filters_then_merges_with_the_host():
    inputs = make_inputs()
    x = [inputs.data.examples(t, "train", 32) for t in range(3)]
    grads = [loss_gradient(inputs.data, inputs.base, t, *x[t]) for t in range(3)]
    masks = contribution_masks(inputs.base, inputs.task_vectors(), inputs.groups, grads, 0.5)
    filtered = [
        {k: torch.where(m[k], e[k], inputs.base[k]) for k in e}
        for e, m in zip(inputs.experts, masks)
    ]
    for host, params, ref in (
        (
            "task_arithmetic",
            {"lam": 0.5},
            TaskArithmetic().merge(
                MergeInputs(inputs.base, filtered), TaskArithmetic.Params(lam=0.5)
            ),
        ),
        (
            "ties",
            {"lam": 1.0, "k": 0.3},
            Ties().merge(MergeInputs(inputs.base, filtered), Ties.Params(lam=1.0, k=0.3)),
        ),
        (
            "dare_ta",
            {"lam": 0.5, "p": 0.5},
            DareTA().merge(
                MergeInputs(inputs.base, filtered, seed=4), DareTA.Params(lam=0.5, p=0.5)
            ),
        ),
    ):
        seeded = MergeInputs(
            inputs.base,
            inputs.experts,
            groups=inputs.groups,
            data=inputs.data,
            seed=4 if host == "dare_ta" else 0,
        )
        res = Cass().merge(seeded, Cass.Params(host=host, keep=0.5, n_examples=32, **params))
        assert_state_close(res.state, ref.state, rtol=1e-6, atol=1e-7)
        # fc0 keeps ceil(0.5 · 8) = 4 neurons, fc1 ceil(0.5 · 5) = 3
        for m in masks:
            assert int(m["fc0.bias"].sum()) == 4 and int(m["fc1.bias"].sum()) == 3
    with pytest.raises(ValueError, match="p"):
        Cass().merge(inputs, Cass.Params(host="dare_ties", keep=0.5, lam=1.0))


def test_grid_for_gives_the_hosts_grids():
    none = (None,)  # k / p is not a field of these hosts: it stays None
    assert Cass.search == {"keep": KEEP_GRID, "lam": LAMBDA_GRID, "k": none, "p": none}
    assert Cass.grid_for(Cass.Params()) == Cass.search
    assert Cass.grid_for(Cass.Params(host="ties")) == {
        "keep": KEEP_GRID,
        "lam": TIES_LAMBDA_GRID,
        "k": K_GRID,
        "p": none,
    }
    assert Cass.grid_for(Cass.Params(host="dare_ta")) == {
        "keep": KEEP_GRID,
        "lam": LAMBDA_GRID,
        "k": none,
        "p": P_GRID,
    }
    assert CassTuning.grid_for(CassTuning.Params(host="dare_ties")) == {
        "lam": TIES_LAMBDA_GRID,
        "k": K_GRID,
        "p": P_GRID,
    }


def test_stages_resolve_the_ties_hosts_k_before_host_merge():
    # TIES hosts: keep and λ at k = 0.2, then k (TIES' stages); DARE-TIES: then p at p = 0
    stages = Cass.search_stages(Cass.Params(host="ties"))
    assert stages == [
        ({"keep": KEEP_GRID, "lam": TIES_LAMBDA_GRID, "p": (None,)}, {"k": 0.2}),
        ({"k": K_GRID}, {}),
    ]
    stages = CassTuning.search_stages(CassTuning.Params(host="dare_ties"))
    assert stages == [
        ({"lam": TIES_LAMBDA_GRID}, {"k": 0.2, "p": 0.0}),
        ({"k": K_GRID}, {"p": 0.0}),
        ({"p": P_GRID}, {}),
    ]
    # hosts without a trim keep k's (None,) axis in one stage: it is never fixed to 0.2
    for host in ("task_arithmetic", "dare_ta"):
        for axes, fixed in Cass.search_stages(Cass.Params(host=host)):
            assert "k" not in fixed and axes.get("k", (None,)) == (None,)
    # every stage point, with the stage's stand-ins, gives host_merge a resolved k
    inputs = make_inputs()
    (first, fixed), _ = Cass.search_stages(Cass.Params(host="ties"))
    res = Cass().merge(inputs, Cass.Params(host="ties", keep=0.5, lam=0.3, n_examples=32, **fixed))
    assert res.info["host"] == "ties"
    with pytest.raises(ValueError, match="needs resolved"):
        Cass().merge(inputs, Cass.Params(host="ties", keep=0.5, lam=0.3, n_examples=32))


def test_tuning_masks_rank_by_gradient_norm():
    base, groups = make_base(), make_groups()
    grad = {k: torch.zeros_like(v) for k, v in base.items()}
    grad["fc0.weight"][5] = 3.0  # fc0 neuron 5 has the largest squared gradient
    grad["fc1.bias"][2] = -1.0  # fc1 neuron 2
    grad["scale"] += 100.0  # ungrouped entries never count
    single = tuning_masks(base, groups, grad, 0.1)
    assert single["fc0.bias"].tolist() == [j == 5 for j in range(8)]
    assert single["fc1.bias"].tolist() == [j == 2 for j in range(5)]
    assert bool(single["scale"].all())
    many = tuning_masks(base, groups, [grad, grad], 0.1)
    assert len(many) == 2 and all(torch.equal(many[1][k], single[k]) for k in single)
    assert math.isclose(int(single["fc0.weight"].sum()), 6)


def test_cass_tuning_merges_its_masked_experts_with_the_host():
    assert CassTuning.data_free
    inputs = make_inputs(data=False)
    tuned = make_experts(inputs.base, 3, seed=7, scale=0.1)  # not the standard experts
    with_own = dataclasses.replace(inputs, artefacts={"masked_expert": tuned})
    a = CassTuning().merge(with_own, CassTuning.Params(lam=0.3))
    expected = {  # θ0 + λ Σ_t (θ̃_t − θ0), θ̃_t the masked experts
        k: v + 0.3 * sum(t[k] - v for t in tuned) for k, v in inputs.base.items()
    }
    assert_state_close(a.state, expected)
    assert a.info["keep"] == 0.5 and a.info["host"] == "task_arithmetic"
    raw = [{k: t[k] - inputs.base[k] for k in t} for t in tuned]
    assert a.record_stats(inputs.base, inputs.experts) == TaskVectorStats.of(raw)  # of θ̃_t
    with pytest.raises(ValueError, match="masked_expert"):
        CassTuning().merge(inputs, CassTuning.Params(lam=0.3))  # the pillar gave none


def test_cass_tuning_declares_one_masked_fine_tune_per_keep_overlap_and_task_order():
    section = {"tasks": ["a", "b", "c"]}
    ties = CassTuning.artefacts(CassTuning.Params(host="ties", lam=0.5), section)
    assert ties == [
        MethodArtefact(
            "masked_expert",
            {"keep": 0.5, "n_examples": 256, "overlap": 0.5, "tasks": ["a", "b", "c"]},
        )
    ]
    assert CassTuning.artefacts(CassTuning.Params(), section) == ties  # the host does not count
    other = CassTuning.artefacts(CassTuning.Params(keep=0.25, n_examples=8, overlap=0.0), section)
    assert other[0].params == {"keep": 0.25, "n_examples": 8}  # alone: the tasks do not count
    with pytest.raises(ValueError, match="n_examples"):
        CassTuning.Params(n_examples=0).validate()
    for bad in (-0.1, 1.0):
        with pytest.raises(ValueError, match=r"overlap must be in \[0, 1\), got"):
            CassTuning.Params(overlap=bad).validate()


def test_penalised_selection_by_hand():
    """Four neurons in one layer, keep 0.5, both tasks scoring them 4, 3, 2, 1: alone, both
    keep {0, 1}; with β = 0.5 the second sees 2, 1.5, 2, 1 (ties keep the lower index):
    {0, 2}; with β = 0.9 it sees 0.4, 0.3, 2, 1: {2, 3}."""
    from sparsebench.methods.merging.cass import penalised_selection

    groups = [
        Group(layer="l", kind="neuron", index=j, slices=(("w", 0, j, j + 1),)) for j in range(4)
    ]
    s = torch.tensor([4.0, 3.0, 2.0, 1.0], dtype=torch.float64)
    assert penalised_selection(groups, [s, s], 0.5, 0.0) == [[0, 1], [0, 1]]
    assert penalised_selection(groups, [s, s], 0.5, 0.5) == [[0, 1], [0, 2]]
    assert penalised_selection(groups, [s, s], 0.5, 0.9) == [[0, 1], [2, 3]]
    # a third task at β = 0.5 after {0, 1} and {0, 2}: u = 2, 1, 1, 0, so it sees 1, 1.5, 1, 1
    assert penalised_selection(groups, [s, s, s], 0.5, 0.5)[2] == [0, 1]
    # at β = 0.9 after {0, 1} and {2, 3}: u = 1 everywhere, the task's own order again
    assert penalised_selection(groups, [s, s, s], 0.5, 0.9)[2] == [0, 1]
    t = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)  # reversed: no conflict
    assert penalised_selection(groups, [s, t], 0.5, 0.9) == [[0, 1], [2, 3]]
    with pytest.raises(ValueError, match=r"overlap must be in \[0, 1\)"):
        penalised_selection(groups, [s], 0.5, 1.0)
    with pytest.raises(ValueError, match=">= 0"):
        penalised_selection(groups, [-s], 0.5, 0.5)


def test_the_overlap_penalty_lowers_the_overlap_of_the_tuning_masks():
    from sparsebench.methods.merging.cass import groups_set, mask_overlap

    base, groups = make_base(), make_groups()
    g = torch.Generator().manual_seed(0)
    shared = {k: torch.randn(v.shape, generator=g) for k, v in base.items()}
    grads = [  # correlated tasks: a common gradient plus a small own part
        {k: shared[k] + 0.3 * torch.randn(v.shape, generator=g) for k, v in base.items()}
        for _ in range(4)
    ]
    overlaps = []
    for beta in (0.0, 0.5, 0.9):
        masks = tuning_masks(base, groups, grads, 0.5, beta)
        overlaps.append(mask_overlap([groups_set(m, groups) for m in masks]))
        assert torch.equal(
            masks[0]["fc0.bias"], tuning_masks(base, groups, grads[0], 0.5)["fc0.bias"]
        )
    assert overlaps[0] > overlaps[1] > overlaps[2]


class _Trunk(torch.nn.Module):
    """The conftest trunk as a module: relu(fc1(relu(fc0(x)))) * scale."""

    def __init__(self, base):
        super().__init__()
        self.fc0, self.fc1 = torch.nn.Linear(D_IN, H0), torch.nn.Linear(H0, H1)
        self.scale = torch.nn.Parameter(torch.zeros(H1))
        self.load_state_dict(base)

    def forward(self, x):
        return torch.relu(self.fc1(torch.relu(self.fc0(x)))) * self.scale


def _tiny_tasks(n: int):
    g = torch.Generator().manual_seed(3)
    return [
        (
            (torch.randn(3, H1, generator=g), torch.randn(3, generator=g)),
            (torch.randn(40, D_IN, generator=g), torch.randint(0, 3, (40,), generator=g)),
        )
        for _ in range(n)
    ]


def _by_hand_scores(base, head, x, y):
    """‖∇L(θ0)[neuron]‖² per layer: the row and bias entry of each neuron, by autograd on the
    written-out trunk."""
    w = {k: v.clone().requires_grad_() for k, v in base.items()}
    h = torch.relu(x @ w["fc0.weight"].T + w["fc0.bias"])
    z = torch.relu(h @ w["fc1.weight"].T + w["fc1.bias"]) * w["scale"]
    F.cross_entropy(z @ head[0].T + head[1], y).backward()
    return {
        layer: (w[f"{layer}.weight"].grad ** 2).sum(1) + w[f"{layer}.bias"].grad ** 2
        for layer in ("fc0", "fc1")
    }


def _kept_rows(mask, layer):
    rows = mask[f"{layer}.bias"].tolist()
    assert mask[f"{layer}.weight"].all(1).tolist() == rows
    assert not mask[f"{layer}.weight"][[not r for r in rows]].any()
    return {j for j, r in enumerate(rows) if r}


def test_cass_tuning_builds_its_expert_under_the_gradient_norm_mask():
    base, groups = make_base(), make_groups()
    ((head, (x, y)),) = _tiny_tasks(1)
    seen = []

    def finetune(mask=None):
        seen.append(mask)
        return {"fine": torch.ones(1)}

    ctx = ArtefactContext(
        task="t", seed=0, trunk=_Trunk(base), base=base, expert=base, head=head, train=(x, y),
        groups=groups, config=None, finetune=finetune,
    )  # fmt: skip
    request = MethodArtefact("masked_expert", {"keep": 0.5, "n_examples": 16})
    out = CassTuning.build_artefact(request, ctx)
    assert out == {"fine": torch.ones(1)} and len(seen) == 1
    # by hand: the gradient at θ0 of the mean cross-entropy on the first 16 examples, each
    # neuron scored by the squared norm of its row and bias entry, the top ceil(0.5 · width)
    # per layer kept (fc0: 4 of 8, fc1: 3 of 5), ``scale`` (ungrouped) kept
    scores = _by_hand_scores(base, head, x[:16], y[:16])
    for layer, keep in (("fc0", 4), ("fc1", 3)):
        assert _kept_rows(seen[0], layer) == set(torch.topk(scores[layer], keep).indices.tolist())
    assert bool(seen[0]["scale"].all())
    kept = 4 * (D_IN + 1) + 3 * (H0 + 1) + H1
    total = sum(v.numel() for v in base.values())
    assert ctx.meta["grad_mask_density"] == pytest.approx(kept / total)
    assert ctx.meta["earlier_tasks"] == 0


def test_cass_tuning_penalises_the_groups_the_earlier_tasks_chose():
    """Task "b" after task "a" with β = 0.9: a's mask by hand from a's gradient (through
    ``peer``), then b's scores × 0.1 on a's groups, the top per layer kept."""
    base, groups = make_base(), make_groups()
    (head_a, (xa, ya)), (head_b, (xb, yb)) = _tiny_tasks(2)
    seen, asked = [], []

    def peer(name):
        asked.append(name)
        return head_a, (xa, ya)

    ctx = ArtefactContext(
        task="b", seed=0, trunk=_Trunk(base), base=base, expert=base, head=head_b,
        train=(xb, yb), groups=groups, config=None,
        finetune=lambda mask=None: seen.append(mask) or {"fine": torch.ones(1)}, peer=peer,
    )  # fmt: skip
    params = {"keep": 0.5, "n_examples": 16, "overlap": 0.9, "tasks": ["a", "b", "c"]}
    CassTuning.build_artefact(MethodArtefact("masked_expert", params), ctx)
    assert asked == ["a"] and ctx.meta["earlier_tasks"] == 1  # not "c", which comes after
    sa = _by_hand_scores(base, head_a, xa[:16], ya[:16])
    sb = _by_hand_scores(base, head_b, xb[:16], yb[:16])
    for layer, keep in (("fc0", 4), ("fc1", 3)):
        chosen_a = torch.topk(sa[layer], keep).indices
        penalised = sb[layer].clone()
        penalised[chosen_a] *= 0.1
        assert _kept_rows(seen[0], layer) == set(torch.topk(penalised, keep).indices.tolist())
    alone = dataclasses.replace(ctx, peer=None, meta={})
    with pytest.raises(ValueError, match=r"needs the tasks \['a'\]"):
        CassTuning.build_artefact(MethodArtefact("masked_expert", params), alone)
    stranger = dataclasses.replace(ctx, task="z", meta={})
    with pytest.raises(ValueError, match="'z' is not in the request's tasks"):
        CassTuning.build_artefact(MethodArtefact("masked_expert", params), stranger)


def test_gradients_are_memoised_per_inputs_object():
    inputs = make_inputs()
    a = Cass().merge(inputs, Cass.Params(keep=0.25, lam=0.3, n_examples=20))
    b = Cass().merge(inputs, Cass.Params(keep=0.75, lam=0.6, n_examples=20))
    assert inputs.data.read["train"] == 60  # one gradient pass for both grid points
    assert a.examples == b.examples == 60
    fresh = make_inputs()  # equal contents, another object: computed again, same result
    c = Cass().merge(fresh, Cass.Params(keep=0.25, lam=0.3, n_examples=20))
    assert_state_close(a.state, c.state, rtol=0, atol=0)
    with torch.no_grad():
        inputs.base["scale"].mul_(2.0)  # an in-place change invalidates the memo
    Cass().merge(inputs, Cass.Params(keep=0.25, lam=0.3, n_examples=20))
    assert inputs.data.read["train"] == 120


@pytest.mark.parametrize(
    ("params", "match"),
    [({"host": "task_arithmetic", "p": 0.5}, "no drop rate"),
     ({"host": "dare_ta", "k": 0.5}, "no trim fraction")],
)  # fmt: skip
def test_host_parameters_the_host_does_not_take_are_refused(params, match):
    with pytest.raises(ValueError, match=match):
        Cass.Params(**params).validate()
    Cass.Params(host="dare_ties", p=0.5, k=0.5).validate()  # takes both


def test_host_field_bounds_and_their_messages():
    for ok in (
        Cass.Params(lam=0.0),
        Cass.Params(host="ties", k=1.0),
        Cass.Params(host="dare_ta", p=0.0),
    ):
        ok.validate()  # the closed ends: λ = 0, k = 1, p = 0
    for bad, match in (
        (Cass.Params(lam=-1.0), r"^lam must be >= 0, got -1.0$"),
        (Cass.Params(host="ties", k=0.0), r"^k must be in \(0, 1\], got 0.0$"),
        (Cass.Params(host="ties", k=1.5), r"^k must be in \(0, 1\], got 1.5$"),
        (Cass.Params(host="dare_ta", p=1.0), r"^p must be in \[0, 1\), got 1.0$"),
        (Cass.Params(host="dare_ta", p=1.5), r"^p must be in \[0, 1\), got 1.5$"),
    ):
        with pytest.raises(ValueError, match=match):
            bad.validate()


def test_select_groups_refuses_a_keep_outside_zero_one():
    groups = make_groups()
    scores = torch.zeros(len(groups))
    for keep in (0.0, 1.5):
        with pytest.raises(ValueError, match=rf"^keep must be in \(0, 1\], got {keep}$"):
            select_groups(groups, scores, keep)


def test_host_merge_validates_the_host_parameters():
    from types import SimpleNamespace

    from sparsebench.methods.merging.cass import host_merge

    inputs = make_inputs(data=False)
    with pytest.raises(ValueError, match=r"^lam must be >= 0, got -1.0$"):  # TA's own check
        host_merge("task_arithmetic", inputs, inputs.experts, SimpleNamespace(lam=-1.0))


def test_cass_needs_groups_and_a_resolved_keep():
    inputs = make_inputs()
    no_groups = dataclasses.replace(inputs, groups=())
    with pytest.raises(
        ValueError, match=r"^cass needs the trunk's groups \(MergeInputs.groups is empty\)$"
    ):
        Cass().merge(no_groups, Cass.Params(keep=0.5, lam=0.3))
    with pytest.raises(ValueError, match=r"^cass needs a resolved keep \(got None\)$"):
        Cass().merge(inputs, Cass.Params(lam=0.3))


def test_cass_tuning_keeps_the_hosts_own_task_vectors():
    """TIES host, k = 0.2 over d = 5 entries: each masked expert's τ keeps its single largest
    entry, a[0] (3 and 1), the rest trimmed to 0 (conftest.ties_host_example)."""
    from tests.methods.merging.conftest import ties_host_example

    ex = ties_host_example()
    inputs = dataclasses.replace(ex, artefacts={"masked_expert": ex.experts})
    res = CassTuning().merge(inputs, CassTuning.Params(host="ties", lam=1.0, k=0.2))
    assert [tv["a"].tolist() for tv in res.task_vectors] == [[3.0, 0.0, 0.0], [1.0, 0.0, 0.0]]
    assert [tv["b"].tolist() for tv in res.task_vectors] == [[0.0, 0.0], [0.0, 0.0]]


def test_knockout_scores_by_hand():
    from sparsebench.methods.merging.cass import knockout_scores

    g = Group("neuron", "l", 0, (("w", 0, 0, 1),))
    h = Group("neuron", "l", 1, (("w", 0, 1, 2), ("b", 0, 0, 1)))
    expert = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([1.0])}
    tv = {"w": torch.tensor([0.5, 1.0]), "b": torch.tensor([2.0])}

    def loss(t):  # (w·x + b − y)² at x = (1, 1), y = 0
        return float((t["w"].sum() + t["b"][0]) ** 2)

    # at θ_t: (1 + 2 + 1)² = 16; without τ[g]: w = (0.5, 2): 3.5² = 12.25, c = −3.75;
    # without τ[h]: w = (1, 1), b = −1: 1² = 1, c = −15
    assert knockout_scores(loss, expert, tv, [g, h]).tolist() == [-3.75, -15.0]
    assert expert["w"].tolist() == [1.0, 2.0] and expert["b"].tolist() == [1.0]  # untouched


def test_knockout_score_is_a_setting_and_is_checked():
    inputs = make_inputs()
    p = Cass.Params(keep=0.5, lam=0.3, n_examples=64, score="knockout")
    res = Cass().merge(inputs, p)
    assert res.examples >= 64 and len(res.info["mask_density"]) == len(inputs.experts)
    with pytest.raises(ValueError, match=r"score must be one of \['taylor', 'knockout'\]"):
        Cass.Params(keep=0.5, score="exact").validate()


def test_mask_overlap_by_hand():
    from sparsebench.methods.merging.cass import groups_set, mask_overlap

    groups = [Group("neuron", "l", i, (("w", 0, i, i + 1),)) for i in range(4)]
    flags = {"w": torch.tensor([True, False, True, False])}
    assert groups_set(flags, groups) == {0, 2}
    # {0, 1} vs {1, 2}: 1 / 3; {0, 1} vs {0, 1}: 1; {1, 2} vs {0, 1}: 1 / 3 -> mean 5 / 9
    a, b = frozenset({0, 1}), frozenset({1, 2})
    assert mask_overlap([a, b, a]) == pytest.approx(5 / 9)
    assert mask_overlap([a]) is None
    assert mask_overlap([frozenset(), frozenset()]) == 1.0  # two empty selections agree


def test_cass_and_cass_tuning_report_the_overlap_of_their_masks():
    inputs = make_inputs()
    full = Cass().merge(inputs, Cass.Params(keep=1.0, lam=0.3, n_examples=64))
    assert full.info["mask_overlap"] == 1.0  # every task keeps every group
    tuned = [dict(inputs.base) for _ in inputs.experts]
    for i, t in enumerate(tuned):  # expert i moves only group i's entries
        g = inputs.groups[i]
        t.update({k: v.clone() for k, v in t.items()})
        key, dim, a, b = g.slices[0]
        t[key].narrow(dim, a, b - a).add_(1.0)
    with_own = dataclasses.replace(inputs, artefacts={"masked_expert": tuned})
    res = CassTuning().merge(with_own, CassTuning.Params(lam=0.3))
    assert res.info["mask_overlap"] == 0.0  # {0}, {1}, {2}: no two share a group

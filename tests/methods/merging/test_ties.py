import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs, sign_conflict
from sparsebench.methods.merging.ties import (
    K_DEFAULT,
    K_GRID,
    TIES_LAMBDA_GRID,
    Ties,
    disjoint_merge,
    elect_sign,
    trim,
)
from sparsebench.suite import registry
from sparsebench.suite.pillars.merging.job import _stages
from tests.methods.merging.conftest import (
    assert_state_close,
    assert_unchanged,
    make_base,
    make_experts,
    make_inputs,
    snapshot,
)


def hand_example():
    """Three tasks, two parameters "a" (3 entries) and "b" (2): d = 5 entries per task."""
    zero = {"a": torch.zeros(3), "b": torch.zeros(2)}
    tvs = [
        {"a": torch.tensor([3.0, -1.0, 0.5]), "b": torch.tensor([2.0, -0.1])},
        {"a": torch.tensor([-4.0, 2.0, 0.2]), "b": torch.tensor([1.0, 0.3])},
        {"a": torch.tensor([2.0, -3.0, 0.1]), "b": torch.tensor([-0.5, 1.0])},
    ]
    experts = [{k: zero[k] + tv[k] for k in zero} for tv in tvs]
    return zero, experts, tvs


def test_alg1_step_by_step_by_hand():
    base, experts, tvs = hand_example()
    # Trim, k = 0.4: keep round(0.4 * 5) = 2 largest |τ| of the whole vector per task.
    # Task 2's two largest are both in "a" (-4, 2): its "b" is trimmed entirely, which
    # trimming per tensor would not do.
    trimmed = trim(tvs, 0.4)
    expected = [
        {"a": [3.0, 0.0, 0.0], "b": [2.0, 0.0]},
        {"a": [-4.0, 2.0, 0.0], "b": [0.0, 0.0]},
        {"a": [2.0, -3.0, 0.0], "b": [0.0, 0.0]},
    ]
    for got, exp in zip(trimmed, expected):
        for k in exp:
            assert torch.equal(got[k], torch.tensor(exp[k])), (k, got[k])
    # Elect: Σ τ̂ = a [1, -1, 0], b [2, 0] -> signs [+, -, 0], [+, 0]; the two zeros take the
    # majority sign sgn(1 - 1 + 0 + 1 + 0) = +.
    gamma = elect_sign(trimmed)
    assert torch.equal(gamma["a"], torch.tensor([1.0, -1.0, 1.0]))
    assert torch.equal(gamma["b"], torch.tensor([1.0, 1.0]))
    # Disjoint mean over the agreeing nonzero entries:
    # a0: {3, 2} -> 2.5;  a1: {-3} -> -3;  a2: {} -> 0;  b0: {2} -> 2;  b1: {} -> 0.
    merged = disjoint_merge(trimmed, gamma)
    assert torch.equal(merged["a"], torch.tensor([2.5, -3.0, 0.0]))
    assert torch.equal(merged["b"], torch.tensor([2.0, 0.0]))
    summed = disjoint_merge(trimmed, gamma, agg="sum")
    assert torch.equal(summed["a"], torch.tensor([5.0, -3.0, 0.0]))
    # The method: θ = θ0 + λ τ_m, task vectors = the trimmed ones.
    res = Ties().merge(MergeInputs(base, experts), Ties.Params(k=0.4, lam=2.0))
    assert torch.allclose(res.state["a"], torch.tensor([5.0, -6.0, 0.0]))
    assert torch.allclose(res.state["b"], torch.tensor([4.0, 0.0]))
    assert torch.equal(res.task_vectors[1]["b"], torch.zeros(2))
    assert res.info["trimmed_density"] == pytest.approx(6 / 15)


def test_sign_election_is_by_mass_not_count():
    # two small positive entries, one large negative: the mass is negative
    tvs = [{"w": torch.tensor([0.1])}, {"w": torch.tensor([0.2])}, {"w": torch.tensor([-1.0])}]
    gamma = elect_sign(tvs)
    assert torch.equal(gamma["w"], torch.tensor([-1.0]))
    assert torch.equal(disjoint_merge(tvs, gamma)["w"], torch.tensor([-1.0]))


def test_one_expert_k1_lambda1_returns_it():
    base = make_base()
    (expert,) = make_experts(base, 1)
    res = Ties().merge(MergeInputs(base, [expert]), Ties.Params(k=1.0, lam=1.0))
    assert_state_close(res.state, expert)


def test_lambda_zero_returns_base():
    inputs = make_inputs(data=False)
    res = Ties().merge(inputs, Ties.Params(k=0.2, lam=0.0))
    assert_state_close(res.state, inputs.base, rtol=0, atol=0)


def test_trim_at_the_paper_default_keeps_20_percent():
    assert K_DEFAULT == 0.2
    inputs = make_inputs(data=False)
    res = Ties().merge(inputs, Ties.Params(k=K_DEFAULT, lam=1.0))
    d = sum(v.numel() for v in inputs.base.values())
    for tv in res.task_vectors:
        assert sum(int(torch.count_nonzero(v)) for v in tv.values()) == round(0.2 * d)


def test_inputs_not_modified():
    inputs = make_inputs(data=False)
    snap = snapshot(inputs)
    Ties().merge(inputs, Ties.Params(k=0.3, lam=1.2))
    assert_unchanged(inputs, snap)


def test_lambda_grid_reaches_below_0_1():
    assert TIES_LAMBDA_GRID[:6] == (0.01, 0.02, 0.03, 0.05, 0.07, 0.1)
    assert TIES_LAMBDA_GRID[-1] == 2.5 and list(TIES_LAMBDA_GRID) == sorted(TIES_LAMBDA_GRID)
    assert len(set(TIES_LAMBDA_GRID)) == len(TIES_LAMBDA_GRID) == 30


def test_k_left_none_is_searched_after_lambda():
    params = registry.build_params(registry.all_methods(("merging",))["ties"], {})
    assert params.k is None and params.lam is None
    # the pillar's stages: λ at k = 0.2, then k over {0.1, 0.2, 0.3} at the chosen λ
    assert _stages(Ties, params) == [
        (["lam"], [TIES_LAMBDA_GRID], {"k": 0.2}),
        (["k"], [K_GRID], {}),
    ]
    assert K_GRID == (0.1, 0.2, 0.3)
    # every candidate is accepted
    for k in K_GRID:
        registry.build_params(registry.all_methods(("merging",))["ties"], {"k": k})


def test_an_explicit_k_is_not_searched():
    params = registry.build_params(registry.all_methods(("merging",))["ties"], {"k": 0.2})
    stages = [st for st in _stages(Ties, params) if st[0]]  # run_merge drops empty stages
    assert stages == [(["lam"], [TIES_LAMBDA_GRID], {})]
    both = registry.build_params(registry.all_methods(("merging",))["ties"], {"k": 0.3, "lam": 0.5})
    assert [st for st in _stages(Ties, both) if st[0]] == []  # nothing left to search
    lam_only = registry.build_params(
        registry.all_methods(("merging",))["ties"], {"lam": 0.5}
    )  # k alone is searched
    assert [st for st in _stages(Ties, lam_only) if st[0]] == [(["k"], [K_GRID], {})]


def test_sign_conflict_by_hand():
    """Coordinates with >= 2 nonzero entries and mixed signs, over those with >= 2 nonzero:
    a = [1, −2, 0, 3, 0], b = [2, 1, 0, −1, 4], c = [0, 0, 5, 0, 0] (two keys, the second
    [1, −1] vs [1, 1] vs [0, 0]). Multi-nonzero: coords 0, 1, 3 and both of the second key
    (5); mixed: coords 1, 3 and the second key's second (3) -> 3 / 5."""
    a = {"w": torch.tensor([1.0, -2.0, 0.0, 3.0, 0.0]), "v": torch.tensor([1.0, -1.0])}
    b = {"w": torch.tensor([2.0, 1.0, 0.0, -1.0, 4.0]), "v": torch.tensor([1.0, 1.0])}
    c = {"w": torch.tensor([0.0, 0.0, 5.0, 0.0, 0.0]), "v": torch.tensor([0.0, 0.0])}
    assert sign_conflict([a, b, c]) == pytest.approx(3 / 5)
    assert sign_conflict([a, c]) == 0.0  # no coordinate nonzero in both
    neg = {"w": -a["w"], "v": -a["v"]}
    assert sign_conflict([a, neg]) == 1.0  # every shared coordinate flips


def test_trim_edges_by_hand():
    """d = 4 entries per task: k = 1/4 keeps n = 1 (the largest), k = 0.1 rounds to n = 0
    (all zeros, same keys and shapes), k = 1 and k = 1.5 keep everything; every task of
    the list is trimmed, not only the first."""
    tvs = [
        {"a": torch.tensor([1.0, -4.0]), "b": torch.tensor([[2.0, 0.5]])},
        {"a": torch.tensor([-3.0, 0.25]), "b": torch.tensor([[0.5, 1.0]])},
    ]
    one = trim(tvs, 0.25)
    assert len(one) == 2
    assert torch.equal(one[0]["a"], torch.tensor([0.0, -4.0]))
    assert torch.equal(one[0]["b"], torch.zeros(1, 2))
    assert torch.equal(one[1]["a"], torch.tensor([-3.0, 0.0]))
    assert torch.equal(one[1]["b"], torch.zeros(1, 2))
    none = trim(tvs, 0.1)
    assert len(none) == 2
    for t in none:
        assert torch.equal(t["a"], torch.zeros(2)) and torch.equal(t["b"], torch.zeros(1, 2))
    for k in (1.0, 1.5):
        full = trim(tvs, k)
        assert len(full) == 2
        for got, tv in zip(full, tvs, strict=True):
            assert torch.equal(got["a"], tv["a"]) and torch.equal(got["b"], tv["b"])

import math

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs, TaskVectorStats
from sparsebench.methods.merging.dare import P_GRID, DareTA, DareTies, dare
from sparsebench.methods.merging.task_arithmetic import LAMBDA_GRID
from sparsebench.methods.merging.ties import K_GRID, TIES_LAMBDA_GRID, Ties, trim
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


def big_vector(n: int = 20_000):
    return {"a": torch.linspace(-1.0, 1.0, n).reshape(100, -1) + 2.0, "b": torch.ones(n // 2)}


def test_p0_keeps_the_vector_exactly():
    tv = big_vector()
    (out,) = dare([tv], 0.0, seed=3)
    for k in tv:
        assert torch.equal(out[k], tv[k])


def test_density_is_binomial():
    tv = big_vector()
    n = sum(v.numel() for v in tv.values())
    for p in (0.1, 0.5, 0.9):
        (out,) = dare([tv], p, seed=1)
        kept = sum(int(torch.count_nonzero(v)) for v in out.values())
        sd = math.sqrt(n * p * (1 - p))
        assert abs(kept - n * (1 - p)) < 5 * sd, (p, kept)
        # survivors are rescaled by 1 / (1 - p)
        nz = out["b"] != 0
        assert torch.allclose(out["b"][nz], torch.full((int(nz.sum()),), 1 / (1 - p)))


def test_unbiased_over_seeds():
    tv = {"w": torch.tensor([1.0, -2.0, 0.5, 3.0])}
    p, runs = 0.7, 4000
    mean = sum(dare([tv], p, seed=s)[0]["w"] for s in range(runs)) / runs
    # per entry: sd of the mean = |τ| sqrt(p / (1 - p) / runs)
    tol = 5 * tv["w"].abs() * math.sqrt(p / (1 - p) / runs)
    assert torch.all((mean - tv["w"]).abs() < tol), mean


def test_deterministic_per_seed_and_task():
    tv = big_vector(2000)
    a = dare([tv, tv], 0.5, seed=7)
    b = dare([tv, tv], 0.5, seed=7)
    c = dare([tv, tv], 0.5, seed=8)
    assert all(torch.equal(a[i][k], b[i][k]) for i in range(2) for k in tv)
    assert not torch.equal(a[0]["a"], c[0]["a"])
    assert not torch.equal(a[0]["a"], a[1]["a"])  # each task draws its own mask


def test_dare_ta_one_expert_p0_lambda1_returns_it():
    base = make_base()
    (expert,) = make_experts(base, 1)
    res = DareTA().merge(MergeInputs(base, [expert]), DareTA.Params(p=0.0, lam=1.0))
    assert_state_close(res.state, expert)


def test_dare_ta_is_ta_on_dropped_vectors():
    inputs = make_inputs(data=False, seed=2)
    res = DareTA().merge(inputs, DareTA.Params(p=0.5, lam=0.4))
    dropped = dare(inputs.task_vectors(), 0.5, inputs.seed)
    for k in inputs.base:
        expected = inputs.base[k] + 0.4 * sum(d[k] for d in dropped)
        torch.testing.assert_close(res.state[k], expected)
    assert res.stats() == TaskVectorStats.of(dropped)  # the record's: of the dropped vectors


def test_dare_ties_trims_after_dropping():
    inputs = make_inputs(data=False)
    # p = 0: DARE is the identity, so DARE-TIES is TIES (trim included)
    a = DareTies().merge(inputs, DareTies.Params(p=0.0, k=0.2, lam=1.0))
    b = Ties().merge(inputs, Ties.Params(k=0.2, lam=1.0))
    assert_state_close(a.state, b.state, rtol=0, atol=0)
    # k = 1: no trim, the elect + disjoint mean of the dropped vectors only
    c = DareTies().merge(inputs, DareTies.Params(p=0.5, k=1.0, lam=1.0))
    dropped = dare(inputs.task_vectors(), 0.5, inputs.seed)
    assert all(torch.equal(r[k], d[k]) for r, d in zip(c.task_vectors, dropped) for k in r)
    # p > 0 and k < 1: the task vectors are the trimmed dropped vectors
    e = DareTies().merge(inputs, DareTies.Params(p=0.5, k=0.2, lam=1.0))
    expected = trim(dropped, 0.2)
    assert all(torch.equal(r[k], d[k]) for r, d in zip(e.task_vectors, expected) for k in r)
    assert not all(torch.equal(r[k], d[k]) for r, d in zip(e.task_vectors, dropped) for k in r)


def test_dare_ties_one_expert_returns_it():
    base = make_base()
    (expert,) = make_experts(base, 1)
    res = DareTies().merge(MergeInputs(base, [expert]), DareTies.Params(p=0.0, k=1.0, lam=1.0))
    assert_state_close(res.state, expert)


def test_inputs_not_modified():
    inputs = make_inputs(data=False)
    snap = snapshot(inputs)
    DareTA().merge(inputs, DareTA.Params(p=0.3, lam=0.5))
    DareTies().merge(inputs, DareTies.Params(p=0.3, k=0.2, lam=1.0))
    assert_unchanged(inputs, snap)


def test_dare_ties_searches_lambda_then_k_then_p():
    params = registry.build_params(registry.all_methods(("merging",))["dare_ties"], {})
    assert params.k is None
    assert _stages(DareTies, params) == [
        (["lam"], [TIES_LAMBDA_GRID], {"k": 0.2, "p": 0.0}),
        (["k"], [K_GRID], {"p": 0.0}),
        (["p"], [P_GRID], {}),
    ]
    fixed_k = registry.build_params(
        registry.all_methods(("merging",))["dare_ties"], {"k": 0.2}
    )  # an explicit k: not searched
    assert [st for st in _stages(DareTies, fixed_k) if st[0]] == [
        (["lam"], [TIES_LAMBDA_GRID], {"p": 0.0}),
        (["p"], [P_GRID], {}),
    ]
    # DARE-TA has no k: its two stages are unchanged
    assert _stages(
        DareTA, registry.build_params(registry.all_methods(("merging",))["dare_ta"], {})
    ) == [
        (["lam"], [LAMBDA_GRID], {"p": 0.0}),
        (["p"], [P_GRID], {}),
    ]


def test_drop_rate_bounds():
    tv = [{"w": torch.ones(3)}]
    for p in (1.0, 1.5, -0.1):
        with pytest.raises(ValueError, match=r"drop rate p must be in \[0, 1\)"):
            dare(tv, p, seed=0)


def test_masks_come_from_seed_times_1000003_plus_task():
    """The documented generator: task t's uniforms are those of manual_seed(seed·1000003 + t)
    (drawn here independently), kept where u >= p and rescaled by 1/(1 − p)."""
    v = torch.arange(1.0, 9.0)
    out = dare([{"w": v}, {"w": v}], 0.5, seed=3)
    for t in (0, 1):
        u = torch.rand(8, generator=torch.Generator().manual_seed(3 * 1_000_003 + t))
        assert torch.equal(out[t]["w"], torch.where(u >= 0.5, 2 * v, torch.zeros(8)))


def test_dare_ties_scales_by_lambda():
    """One expert, p = 0, k = 1: TIES keeps τ whole, so θ = θ0 + 0.5 τ."""
    base = {"w": torch.tensor([1.0, 2.0])}
    inputs = MergeInputs(base, [{"w": torch.tensor([3.0, -2.0])}])
    res = DareTies().merge(inputs, DareTies.Params(p=0.0, k=1.0, lam=0.5))
    assert torch.equal(res.state["w"], torch.tensor([2.0, 0.0]))

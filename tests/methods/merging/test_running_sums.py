"""Task Arithmetic and DARE-TA summed parameter by parameter, the record's statistics counted
per parameter, and θ0 + λ·τ_m from merge_vector: each against the plain stacked formula
written out here (T task vectors, a T×P stack per parameter)."""

import pytest
import torch

from sparsebench.methods.merging.base import (
    MergeInputs,
    SignCounts,
    TaskVectorStats,
    sum_task_vectors,
)
from sparsebench.methods.merging.dare import DareTA, DareTies
from sparsebench.methods.merging.task_arithmetic import TaskArithmetic
from sparsebench.methods.merging.ties import Ties
from sparsebench.suite.pillars.merging.diagnostics import chance_of
from tests.methods.merging.conftest import make_inputs


def hand_inputs() -> MergeInputs:
    """Three tasks on two parameters, with zeros and sign conflicts placed by hand."""
    base = {"w": torch.tensor([[1.0, 2.0, 3.0], [0.0, -1.0, 0.5]]), "b": torch.tensor([0.5, 0.0])}
    experts = [
        {"w": torch.tensor([[2.0, 2.0, 1.0], [0.0, -1.5, 0.5]]), "b": torch.tensor([0.5, 1.0])},
        {"w": torch.tensor([[0.0, 2.0, 4.0], [0.0, -1.0, 0.0]]), "b": torch.tensor([1.0, 2.0])},
        {"w": torch.tensor([[3.0, 2.5, 3.0], [0.0, -3.0, 1.0]]), "b": torch.tensor([0.5, -1.0])},
    ]
    return MergeInputs(base, experts, seed=5)


def stacked(inputs: MergeInputs) -> dict[str, torch.Tensor]:
    """Per parameter, the (T, *shape) stack of τ_t = θ_t − θ0."""
    return {k: torch.stack([e[k] - b for e in inputs.experts]) for k, b in inputs.base.items()}


def stacked_dare(inputs: MergeInputs, p: float) -> dict[str, torch.Tensor]:
    """DARE by its definition: task t's uniforms from its own generator
    (seed · 1000003 + t), drawn over the keys in order, one task after the other; kept where
    u >= p, rescaled by 1 / (1 − p)."""
    tvs = stacked(inputs)
    out = {k: torch.empty_like(v) for k, v in tvs.items()}
    for t in range(len(inputs.experts)):
        g = torch.Generator().manual_seed(inputs.seed * 1_000_003 + t)
        for k, v in tvs.items():
            keep = torch.rand(v[t].shape, generator=g) >= p
            out[k][t] = torch.where(keep, v[t] / (1.0 - p), torch.zeros_like(v[t]))
    return out


def stacked_statistics(s: dict[str, torch.Tensor]) -> tuple[float, float, float | None]:
    """(density, sign conflict, its chance level) of stacked task vectors, from the whole
    (T, P) matrix of all parameters at once."""
    flat = torch.cat([v.reshape(v.shape[0], -1) for v in s.values()], 1)
    pos, neg = (flat > 0).sum(0), (flat < 0).sum(0)
    m = pos + neg
    multi = m >= 2
    density = float((flat != 0).sum()) / flat.numel()
    conflict = float((multi & (pos > 0) & (neg > 0)).sum()) / max(int(multi.sum()), 1)
    chance = float((1.0 - 2.0 ** (1.0 - m[multi].double())).mean()) if multi.any() else 0.0
    return density, conflict, chance if flat.shape[0] >= 2 else None


def assert_statistics(stats: TaskVectorStats, s: dict[str, torch.Tensor]) -> None:
    density, conflict, chance = stacked_statistics(s)
    assert stats.density == pytest.approx(density, rel=1e-12)
    assert stats.sign_conflict == pytest.approx(conflict, rel=1e-12)
    assert chance_of(stats) == pytest.approx(chance, rel=1e-12)


@pytest.mark.parametrize("make", [hand_inputs, lambda: make_inputs(n_tasks=4, data=False)])
@pytest.mark.parametrize("lam", [0.3, 1.7])
def test_task_arithmetic_is_the_stacked_sum(make, lam):
    inputs = make()
    s = stacked(inputs)
    res = TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=lam))
    for k, b in inputs.base.items():
        assert torch.equal(res.state[k], b + lam * s[k].sum(0)), k  # the same floats
    assert res.task_vectors is None and res.vector is None  # no T vectors, no second trunk
    assert_statistics(res.record_stats(inputs.base, inputs.experts), s)


@pytest.mark.parametrize("make", [hand_inputs, lambda: make_inputs(n_tasks=4, data=False)])
@pytest.mark.parametrize("p", [0.0, 0.3, 0.9])
def test_dare_ta_draws_the_masks_of_the_definition(make, p):
    inputs = make()
    s = stacked_dare(inputs, p)
    res = DareTA().merge(inputs, DareTA.Params(p=p, lam=0.4))
    for k, b in inputs.base.items():
        assert torch.equal(res.state[k], b + 0.4 * s[k].sum(0)), k
    assert_statistics(res.record_stats(inputs.base, inputs.experts), s)


def test_statistics_by_hand():
    # τ: w = [[1, 0, -2], [0, -0.5, 0]], [[-1, 0, 1], [0, 0, -0.5]], [[2, 0.5, 0], [0, -2, 0.5]]
    #    b = [0, 1], [0.5, 2], [0, -1]
    # nonzero per coordinate (w row-major, then b): 3, 1, 2, 0, 2, 2, 1, 3 -> 14 of 24
    # m >= 2 at 5 coordinates; mixed signs at w00 (+,-,+), w02 (-,+), w12 (-,+), b1 (+,+,-),
    # not at w11 (-,-)
    inputs = hand_inputs()
    stats = TaskArithmetic().merge_vector(inputs, TaskArithmetic.Params(lam=1.0)).stats()
    assert stats.nonzero_hist == [1, 2, 3, 2] and stats.entries == 8
    assert stats.density == pytest.approx(14 / 24)
    assert stats.sign_conflict == pytest.approx(4 / 5)
    # chance: 1 − 2^(1−m): m = 3 -> 3/4 (twice), m = 2 -> 1/2 (three times)
    assert chance_of(stats) == pytest.approx((2 * 0.75 + 3 * 0.5) / 5)
    assert chance_of(TaskVectorStats(1)) is None  # one vector: no chance level


def test_sign_counts_and_sum_feed_one_parameter_at_a_time():
    inputs = hand_inputs()
    calls: list[tuple[int, tuple[int, ...]]] = []

    def spy(t: int, v: torch.Tensor) -> torch.Tensor:
        calls.append((t, tuple(v.shape)))
        return v

    summed = sum_task_vectors(inputs.base, inputs.experts, spy)
    assert calls == [(t, (2, 3)) for t in range(3)] + [(t, (2,)) for t in range(3)]
    assert torch.equal(summed["b"], torch.tensor([0.5, 2.0]))
    counts = SignCounts.like(inputs.base["b"])
    for v in ([1.0, -1.0], [0.0, -2.0], [3.0, float("nan")]):  # NaN: neither sign
        counts.add(torch.tensor(v))
    assert counts.pos.tolist() == [2, 0] and counts.neg.tolist() == [0, 2]


@pytest.mark.parametrize(
    "method, params",
    [
        (TaskArithmetic, {}),
        (Ties, {"k": 0.4}),
        (DareTA, {"p": 0.5}),
        (DareTies, {"p": 0.5, "k": 0.4}),
    ],
)
def test_merge_is_the_base_plus_lambda_times_merge_vector(method, params):
    inputs = make_inputs(n_tasks=3, data=False)
    assert method.scale == "lam"
    vec = method().merge_vector(inputs, method.Params(lam=None, **params)).vector  # λ unread
    for lam in (0.05, 0.8):
        merged = method().merge(inputs, method.Params(lam=lam, **params)).state
        for k, b in inputs.base.items():
            assert torch.equal(merged[k], b + lam * vec[k]), k

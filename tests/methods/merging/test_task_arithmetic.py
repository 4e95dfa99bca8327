import torch

from sparsebench.methods.merging.base import MergeInputs, TaskVectorStats
from sparsebench.methods.merging.task_arithmetic import TaskArithmetic
from tests.methods.merging.conftest import (
    assert_state_close,
    assert_unchanged,
    make_base,
    make_experts,
    make_inputs,
    snapshot,
)


def test_one_expert_lambda_one_returns_it():
    base = make_base()
    (expert,) = make_experts(base, 1)
    res = TaskArithmetic().merge(MergeInputs(base, [expert]), TaskArithmetic.Params(lam=1.0))
    assert_state_close(res.state, expert)


def test_lambda_zero_returns_base():
    inputs = make_inputs(data=False)
    res = TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=0.0))
    assert_state_close(res.state, inputs.base, rtol=0, atol=0)


def test_sum_of_task_vectors():
    base = {"w": torch.tensor([1.0, 2.0])}
    experts = [{"w": torch.tensor([2.0, 2.0])}, {"w": torch.tensor([1.0, 0.0])}]
    res = TaskArithmetic().merge(MergeInputs(base, experts), TaskArithmetic.Params(lam=0.5))
    assert torch.allclose(res.state["w"], torch.tensor([1.5, 1.0]))


def test_inputs_not_modified():
    inputs = make_inputs(data=False)
    snap = snapshot(inputs)
    TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=0.3))
    assert_unchanged(inputs, snap)


def test_statistics_are_those_of_the_raw_task_vectors():
    base = {"w": torch.tensor([1.0, 2.0])}
    experts = [{"w": torch.tensor([2.0, 2.0])}, {"w": torch.tensor([1.0, 0.0])}]
    res = TaskArithmetic().merge(MergeInputs(base, experts), TaskArithmetic.Params(lam=0.5))
    raw = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, -2.0])}]
    assert res.task_vectors is None  # counted while summing: no T task vectors kept
    assert res.stats() == TaskVectorStats.of(raw)
    assert res.stats().nonzero_hist == [0, 2, 0] and res.stats().density == 0.5

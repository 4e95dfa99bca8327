import torch

from sparsebench.methods.merging.averaging import Averaging
from sparsebench.methods.merging.base import MergeInputs
from tests.methods.merging.conftest import (
    assert_state_close,
    assert_unchanged,
    make_base,
    make_inputs,
    snapshot,
)


def test_identical_experts_give_the_expert():
    base = make_base()
    expert = {k: v + 0.37 for k, v in base.items()}
    inputs = MergeInputs(base=base, experts=[expert, dict(expert), dict(expert)])
    res = Averaging().merge(inputs, Averaging.Params())
    assert_state_close(res.state, expert, rtol=1e-6, atol=1e-6)


def test_mean_by_hand_and_task_vectors_raw():
    base = {"w": torch.tensor([0.0, 1.0])}
    inputs = MergeInputs(
        base=base, experts=[{"w": torch.tensor([1.0, 1.0])}, {"w": torch.tensor([3.0, -1.0])}]
    )
    res = Averaging().merge(inputs, Averaging.Params())
    assert torch.equal(res.state["w"], torch.tensor([2.0, 0.0]))
    assert torch.equal(res.task_vectors[1]["w"], torch.tensor([3.0, -2.0]))
    assert res.examples == 0


def test_inputs_not_modified():
    inputs = make_inputs(data=False)
    snap = snapshot(inputs)
    Averaging().merge(inputs, Averaging.Params())
    assert_unchanged(inputs, snap)

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.consensus import Consensus, consensus_mask
from sparsebench.methods.merging.tall_masks import multitask_vector
from sparsebench.methods.merging.task_arithmetic import TaskArithmetic
from tests.methods.merging.conftest import (
    assert_state_close,
    assert_unchanged,
    make_inputs,
    snapshot,
    ties_host_example,
)


def test_consensus_mask_by_hand():
    masks = [
        {"w": torch.tensor([True, True, False, False])},
        {"w": torch.tensor([True, False, True, False])},
        {"w": torch.tensor([True, False, False, False])},
    ]
    assert consensus_mask(masks, 2)["w"].tolist() == [True, False, False, False]
    assert consensus_mask(masks, 1)["w"].tolist() == [True, True, True, False]
    assert consensus_mask(masks, 0)["w"].tolist() == [True] * 4


def test_merge_by_hand():
    # τ1 = [2, .1, -1, 0], τ2 = [-1, .1, 3, 0], τ3 = [1, 0, 0, 1]: τ_MTL = [2, .2, 2, 1]
    base = {"w": torch.zeros(4)}
    experts = [
        {"w": torch.tensor([2.0, 0.1, -1.0, 0.0])},
        {"w": torch.tensor([-1.0, 0.1, 3.0, 0.0])},
        {"w": torch.tensor([1.0, 0.0, 0.0, 1.0])},
    ]
    # λ = 0.5, |τ_t| > 0.5 |τ_MTL − τ_t|:
    #   t1: [2 > .5·0, .1 > .5·.1, 1 > .5·3, 0 > .5·1] = [T, T, F, F]
    #   t2: [1 > .5·3, .1 > .05, 3 > .5, 0 > .5]       = [F, T, T, F]
    #   t3: [1 > .5·1, 0 > .1, 0 > 1, 1 > 0]            = [T, F, F, T]
    # counts [2, 2, 1, 1] >= 2 -> [T, T, F, F]; θ = α [2, .2, 0, 0]
    res = Consensus().merge(MergeInputs(base, experts), Consensus.Params(alpha=0.5, lam=0.5))
    assert torch.allclose(res.state["w"], torch.tensor([1.0, 0.1, 0.0, 0.0]))
    assert res.info["consensus_density"] == 0.5
    assert torch.equal(res.task_vectors[1]["w"], torch.tensor([-1.0, 0.1, 0.0, 0.0]))
    assert res.examples == 0


def test_k0_is_task_arithmetic_and_large_k_is_the_base():
    inputs = make_inputs(data=False)
    snap = snapshot(inputs)
    a = Consensus().merge(inputs, Consensus.Params(alpha=0.3, k=0, lam=0.4))
    b = TaskArithmetic().merge(inputs, TaskArithmetic.Params(lam=0.3))
    assert_state_close(a.state, b.state)
    c = Consensus().merge(inputs, Consensus.Params(alpha=0.3, k=4, lam=0.4))
    assert_state_close(c.state, inputs.base, rtol=0, atol=0)
    assert_unchanged(inputs, snap)


def test_validation_lambdas_and_ties_host():
    inputs = make_inputs()
    res = Consensus().merge(inputs, Consensus.Params(alpha=0.5, n_examples=20))
    assert len(res.info["lambdas"]) == 3 and res.examples == 60
    again = Consensus().merge(inputs, Consensus.Params(alpha=0.2, n_examples=20))
    assert inputs.data.read["val"] == 60 and again.examples == 60  # masks memoised
    assert again.info["lambdas"] == res.info["lambdas"]
    res2 = Consensus().merge(inputs, Consensus.Params(alpha=0.5, lam=0.3, host="ties"))
    ties_mtl = multitask_vector(inputs.task_vectors(), "ties")
    for k, v in ties_mtl.items():  # the merged update lives inside the TIES vector's support
        assert torch.all((res2.state[k] - inputs.base[k])[v == 0] == 0)


def test_k_below_one_is_refused_at_validation():
    with pytest.raises(ValueError, match="k must be >= 1"):
        Consensus.Params(k=0).validate()


def test_check_allows_k_up_to_the_number_of_tasks_in_the_spec():
    section = {"tasks": ["a", "b", "c"]}
    Consensus.check(Consensus.Params(k=3), section)
    with pytest.raises(ValueError, match="k: 4 tasks must agree.*merges 3; allowed: 1 to 3"):
        Consensus.check(Consensus.Params(k=4), section)


def test_ties_host_task_vectors_are_trimmed_by_hand():
    """conftest.ties_host_example: τ_MTL(ties) a = [4, 0, 0], b = 0;
    at λ = 0.5 task 1's mask is all on, task 2's is a = [F, T, F], b = [T, T]. k = 1: the
    mask is all on, θ = θ0 + 0.5 τ_MTL and the task vectors are the 20 %-trimmed τ̂_t (only
    a[0] kept: 3 and 1), not the raw τ_t; k = 2: the mask is task 2's (density 3/5)."""
    inputs = ties_host_example()
    res = Consensus().merge(inputs, Consensus.Params(alpha=0.5, k=1, lam=0.5, host="ties"))
    assert torch.equal(res.state["a"], torch.tensor([2.0, 0.0, 0.0]))
    assert torch.equal(res.state["b"], torch.zeros(2))
    assert torch.equal(res.task_vectors[0]["a"], torch.tensor([3.0, 0.0, 0.0]))
    assert torch.equal(res.task_vectors[1]["a"], torch.tensor([1.0, 0.0, 0.0]))
    for tv in res.task_vectors:
        assert torch.equal(tv["b"], torch.zeros(2))
    res = Consensus().merge(inputs, Consensus.Params(alpha=0.5, k=2, lam=0.5, host="ties"))
    assert res.info["consensus_density"] == pytest.approx(0.6)
    assert torch.equal(res.state["a"], torch.zeros(3))


def test_consensus_mask_of_one_task():
    m = {"w": torch.tensor([True, False])}
    assert consensus_mask([m], 1)["w"].tolist() == [True, False]

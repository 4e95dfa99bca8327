import pytest
import torch

from sparsebench.methods.merging import _data
from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.tall_masks import (
    TALL_LAMBDA_GRID,
    TallMasks,
    mask_density,
    multitask_vector,
    select_tall_masks,
    tall_mask,
)
from tests.methods.merging.conftest import (
    assert_unchanged,
    make_inputs,
    snapshot,
    ties_host_example,
)


def test_mask_formula_by_hand():
    # τ1 = [2, 0.1, -1, 0], τ2 = [-1, 0.1, 3, 0]: τ_MTL = [1, 0.2, 2, 0]
    base = {"w": torch.zeros(4)}
    experts = [
        {"w": torch.tensor([2.0, 0.1, -1.0, 0.0])},
        {"w": torch.tensor([-1.0, 0.1, 3.0, 0.0])},
    ]
    mtl = multitask_vector(MergeInputs(base, experts).task_vectors())
    assert torch.allclose(mtl["w"], torch.tensor([1.0, 0.2, 2.0, 0.0]))
    tv1 = {"w": experts[0]["w"]}
    # |τ1| = [2, .1, 1, 0] vs λ|τ_MTL − τ1| = λ[1, .1, 3, 0]
    assert tall_mask(tv1, mtl, 0.5)["w"].tolist() == [True, True, False, False]
    assert tall_mask(tv1, mtl, 1.0)["w"].tolist() == [True, False, False, False]  # strict >
    assert tall_mask(tv1, mtl, 2.5)["w"].tolist() == [False, False, False, False]
    # θ_1 = θ0 + m_1 ∘ τ_MTL at a fixed λ, with no data
    res = TallMasks().merge(MergeInputs(base, experts), TallMasks.Params(lam=0.5))
    assert res.state is None and res.examples == 0
    assert torch.allclose(res.per_task[0]["w"], torch.tensor([1.0, 0.2, 0.0, 0.0]))
    # τ2: |τ2| = [1, .1, 3, 0] vs 0.5 |τ_MTL − τ2| = [1, .05, .5, 0]: strict > drops entry 0
    assert torch.allclose(res.per_task[1]["w"], torch.tensor([0.0, 0.2, 2.0, 0.0]))
    assert torch.equal(res.task_vectors[0]["w"], res.per_task[0]["w"])
    assert res.info["mask_density"] == [0.5, 0.5]
    assert res.trunk_for(1) is res.per_task[1]


def test_lambda_chosen_per_task_on_validation(monkeypatch):
    inputs = make_inputs()
    snap = snapshot(inputs)
    seen = []
    real = _data.accuracy

    def spy(data, trunk, task, x, y):
        seen.append(task)
        return real(data, trunk, task, x, y)

    monkeypatch.setattr("sparsebench.methods.merging.tall_masks.accuracy", spy)
    res = TallMasks().merge(inputs, TallMasks.Params(n_examples=40))
    assert seen == [t for t in range(3) for _ in TALL_LAMBDA_GRID]
    assert inputs.data.read == {"train": 0, "val": 120, "test": 0} and res.examples == 120
    # each task's chosen λ is the best of the grid on its validation examples
    mtl = multitask_vector(inputs.task_vectors())
    for t, lam in enumerate(res.info["lambdas"]):
        x, y = inputs.data.splits[(t, "val")]
        x, y = x[:40], y[:40]
        accs = {}
        for cand in TALL_LAMBDA_GRID:
            m = tall_mask(inputs.task_vectors()[t], mtl, cand)
            trunk = {k: inputs.base[k] + torch.where(m[k], mtl[k], 0.0) for k in mtl}
            accs[cand] = _data.accuracy(inputs.data, trunk, t, x, y)
        assert accs[lam] == max(accs.values())
        assert lam == min(c for c in TALL_LAMBDA_GRID if accs[c] == accs[lam])
    assert_unchanged(inputs, snap)


def test_ties_host_and_needs_data():
    inputs = make_inputs(data=False)
    res = TallMasks().merge(inputs, TallMasks.Params(lam=0.4, host="ties"))
    assert len(res.per_task) == 3
    with pytest.raises(ValueError, match="data"):
        TallMasks().merge(inputs, TallMasks.Params())


def test_ties_host_by_hand():
    inputs = ties_host_example()
    mtl = multitask_vector(inputs.task_vectors(), "ties")
    assert torch.equal(mtl["a"], torch.tensor([4.0, 0.0, 0.0]))
    assert torch.equal(mtl["b"], torch.zeros(2))
    # λ = 0.5. Task 1: |τ1| > 0.5 |τ_MTL − τ1| everywhere (a[0]: 3 > 0.5). Task 2: a[0]
    # 1 > 0.5·3 fails, so θ_2 = θ0 + 0 = θ0.
    res = TallMasks().merge(inputs, TallMasks.Params(lam=0.5, host="ties"))
    assert torch.equal(res.per_task[0]["a"], torch.tensor([4.0, 0.0, 0.0]))
    assert torch.equal(res.per_task[0]["b"], torch.zeros(2))
    assert torch.equal(res.per_task[1]["a"], torch.zeros(3))
    assert torch.equal(res.per_task[1]["b"], torch.zeros(2))


def test_one_task_multitask_vector_is_its_vector():
    tv = {"w": torch.tensor([1.0, -2.0])}
    assert torch.equal(multitask_vector([tv])["w"], tv["w"])


def test_mask_density_of_an_empty_mask_is_zero():
    assert mask_density({}) == 0.0
    assert mask_density({"w": torch.tensor([True, False, False, False])}) == 0.25


def test_tall_field_bounds():
    for ok in ({"lam": 0.0}, {"lam": 0.5}, {"n_examples": 1}):
        TallMasks.Params(**ok).validate()
    with pytest.raises(ValueError, match="lam must be >= 0"):
        TallMasks.Params(lam=-0.1).validate()
    with pytest.raises(ValueError, match="n_examples must be >= 1"):
        TallMasks.Params(n_examples=0).validate()
    with pytest.raises(ValueError, match="need MergeData"):
        select_tall_masks(ties_host_example(), {}, "val", 8, None)


def test_equal_validation_accuracies_choose_the_smaller_lambda(monkeypatch):
    # every λ of the grid scores the same: the official code keeps the first, 0.2
    monkeypatch.setattr("sparsebench.methods.merging.tall_masks.accuracy", lambda *a: 0.5)
    res = TallMasks().merge(make_inputs(), TallMasks.Params(n_examples=8))
    assert res.info["lambdas"] == [0.2, 0.2, 0.2]

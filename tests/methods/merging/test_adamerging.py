import pytest
import torch

from sparsebench.methods.merging.adamerging import AdaMergingLayer, AdaMergingTask
from tests.methods.merging.conftest import assert_unchanged, make_inputs, snapshot


@pytest.mark.parametrize("cls", [AdaMergingTask, AdaMergingLayer])
def test_lowers_the_entropy_on_unlabeled_test_inputs(cls):
    inputs = make_inputs(seed=1)
    snap = snapshot(inputs)
    res = cls().merge(inputs, cls.Params(steps=60, lr=1e-2, batch_size=16, n_examples=64))
    assert res.info["entropy_after"] < res.info["entropy_before"] - 1e-3, res.info
    assert inputs.data.read == {"train": 0, "val": 0, "test": 3 * 64}  # test inputs only
    assert res.examples == 3 * 64
    assert len(res.info["lambdas"]) == 3
    assert all(0.0 <= v <= 1.0 for v in res.info["lambdas"])
    assert_unchanged(inputs, snap)


def test_zero_steps_is_task_arithmetic_at_init():
    inputs = make_inputs()
    res = AdaMergingTask().merge(inputs, AdaMergingTask.Params(steps=0, init=0.3))
    tvs = inputs.task_vectors()
    for k in inputs.base:
        torch.testing.assert_close(res.state[k], inputs.base[k] + 0.3 * sum(tv[k] for tv in tvs))
    assert res.info["lambdas"] == pytest.approx([0.3] * 3)
    assert res.info["entropy_after"] == pytest.approx(res.info["entropy_before"])


def test_layer_wise_learns_one_coefficient_per_tensor_and_is_deterministic():
    params = AdaMergingLayer.Params(steps=20, lr=1e-2, n_examples=32, init=0.3)
    a = AdaMergingLayer().merge(make_inputs(), params)
    b = AdaMergingLayer().merge(make_inputs(), params)
    assert a.info == b.info
    assert all(torch.equal(a.state[k], b.state[k]) for k in a.state)
    assert a.info["lambda_min"] < a.info["lambda_max"]  # the tensors moved apart
    # the merged trunk is θ0 + Σ_t λ_t^l τ_t^l: per tensor, a combination of the τ_t
    inputs = make_inputs()
    tvs = inputs.task_vectors()
    k = "fc1.bias"
    coef = torch.linalg.lstsq(
        torch.stack([tv[k] for tv in tvs], 1), (a.state[k] - inputs.base[k]).unsqueeze(1)
    ).solution
    assert torch.all((coef >= -1e-5) & (coef <= 1 + 1e-5))


def test_default_init_is_the_task_arithmetic_lambda_with_the_best_selection_score():
    from sparsebench.methods.merging.task_arithmetic import LAMBDA_GRID

    inputs = make_inputs(seed=2)
    tvs = inputs.task_vectors()

    def ta(lam):
        return {k: inputs.base[k] + lam * sum(tv[k] for tv in tvs) for k in inputs.base}

    scored = [inputs.data.selection_score(ta(lam)) for lam in LAMBDA_GRID]
    expected = LAMBDA_GRID[scored.index(max(scored))]  # the first one on a tie
    res = AdaMergingTask().merge(inputs, AdaMergingTask.Params(steps=0, n_examples=16))
    assert res.info["init"] == expected
    assert res.info["lambdas"] == pytest.approx([expected] * 3)
    assert inputs.data.read["val"] == 0  # the selection score is not a data read of the method


@pytest.mark.parametrize("init", ["ties", -0.1, 0.0, 1.0, 5.0])
def test_bad_init_is_refused(init):
    """At the clamp's ends (0, 1 and beyond) its gradient is 0: λ would never move."""
    with pytest.raises(ValueError, match="init must be"):
        AdaMergingTask.Params(init=init).validate()
    if isinstance(init, float) and init >= 1.0:
        AdaMergingTask.Params(init=init, clamp=False).validate()  # no clamp: any λ > 0


def test_a_start_at_the_clamps_end_is_moved_inside_and_learns():
    inputs = make_inputs(seed=1)
    params = AdaMergingTask.Params(steps=30, lr=1e-2, n_examples=32)
    AdaMergingTask.initial_lambda = staticmethod(lambda inputs, params: 1.0)  # TA chose 1.0
    try:
        res = AdaMergingTask().merge(inputs, params)
    finally:
        del AdaMergingTask.initial_lambda
    assert res.info["init"] == pytest.approx(0.999)
    assert res.info["lambdas"] != pytest.approx([0.999] * 3)  # it moved

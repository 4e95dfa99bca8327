import pytest
import torch

from sparsebench.methods.merging.adamerging import AdaMergingLayer, AdaMergingTask
from sparsebench.methods.merging.base import MergeInputs
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


class OneHotData:
    """Three tasks, trunk {a, b, c} of shape (1,): task t's inputs are the one-hot row e_t,
    features(x) = x ∘ (a, b, c), task t's logits (f_t, 0). Its entropy falls as |f_t| grows,
    and a task's input reaches only its own coordinate: a batch sliced into the wrong task
    gives f = 0 there (no gradient)."""

    n_tasks = 3

    def __init__(self, score=None):
        self.score = score

    def examples(self, task, split, n):
        return torch.eye(3)[task].repeat(n, 1), torch.zeros(n, dtype=torch.long)

    def features(self, trunk, x):
        return x * torch.cat([trunk["a"], trunk["b"], trunk["c"]])

    def head_logits(self, task, features):
        return torch.stack([features[:, task], torch.zeros(features.shape[0])], 1)

    def logits(self, trunk, task, x):
        return self.head_logits(task, self.features(trunk, x))

    def selection_score(self, trunk):
        return self.score(trunk)


def one_hot_inputs(score=None):
    """θ0 = (a, b, c) = (0, 1, 0); τ_0 = +1 on a, τ_1 = −1 on b, τ_2 = +1 on c, so the merge
    is a = λ_0, b = 1 − λ_1, c = λ_2."""
    z, one = torch.zeros(1), torch.ones(1)
    base = {"a": z, "b": one, "c": z}
    experts = [{"a": one, "b": one, "c": z}, {"a": z, "b": z, "c": z}, {"a": z, "b": one, "c": one}]
    return MergeInputs(base, experts, data=OneHotData(score))


@pytest.mark.parametrize("clamp", [True, False])
def test_one_adam_step_by_hand(clamp):
    """From λ = 0.5 every f_t = 0.5 > 0, so ∂H/∂λ_0 < 0, ∂H/∂λ_1 > 0 (b = 1 − λ_1), ∂H/∂λ_2 < 0.
    Adam's first step is lr · g / (|g| + ε) ≈ lr · sign(g): with lr 2, λ_raw = (2.5, −1.5, 2.5).
    Clamped to [0, 1]: λ = (1, 0, 1), so a = 1, b = 1 − 0 = 1, c = 1; without the clamp
    a = 2.5, b = 1 + 1.5 = 2.5, c = 2.5. (With weight decay 1 the gradient of λ_0 would be
    −0.12 + 0.5 > 0: the step would go the other way.)"""
    inputs = one_hot_inputs()
    params = AdaMergingTask.Params(
        steps=1, lr=2.0, init=0.5, batch_size=1, n_examples=1, clamp=clamp
    )
    res = AdaMergingTask().merge(inputs, params)
    lam = [1.0, 0.0, 1.0] if clamp else [2.5, -1.5, 2.5]
    value = 1.0 if clamp else 2.5
    assert res.info["lambdas"] == pytest.approx(lam, abs=1e-5)
    for k in "abc":
        assert res.state[k].tolist() == pytest.approx([value], abs=1e-5), k
    for tv, e in zip(res.task_vectors, inputs.experts):  # the raw τ_t
        assert {k: tv[k].tolist() for k in tv} == {k: (e[k] - inputs.base[k]).tolist() for k in e}


def test_initial_lambda_is_the_grid_point_with_the_best_score_by_hand():
    """τ_0 + τ_1 + τ_2 = (a, b, c) += (1, −1, 1); the score −(a − 0.05)² peaks at λ = 0.05
    (a = λ); a constant score ties every λ: the first, 0.01."""
    peak = one_hot_inputs(score=lambda t: -float((t["a"] - 0.05) ** 2))
    assert AdaMergingTask.initial_lambda(peak, AdaMergingTask.Params()) == 0.05
    flat = one_hot_inputs(score=lambda t: 0.0)
    assert AdaMergingTask.initial_lambda(flat, AdaMergingTask.Params()) == 0.01
    # two entries summed per entry, not over the tensor: τ = (1, 0) and (0, 1) sum to (1, 1),
    # and the score −Σ (w − 0.05)² peaks at λ = 0.05 (a tensor-wide sum, 1 + 1 = 2, would
    # put the peak at λ = 0.025, between grid points)
    base = {"w": torch.zeros(2)}
    experts = [{"w": torch.tensor([1.0, 0.0])}, {"w": torch.tensor([0.0, 1.0])}]
    two = MergeInputs(
        base, experts, data=OneHotData(lambda t: -float(((t["w"] - 0.05) ** 2).sum()))
    )
    assert AdaMergingTask.initial_lambda(two, AdaMergingTask.Params()) == 0.05

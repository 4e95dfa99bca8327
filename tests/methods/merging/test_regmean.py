import pytest
import torch

from sparsebench.methods.merging.averaging import Averaging
from sparsebench.methods.merging.regmean import (
    RegMean,
    gram_matrices,
    reduce_off_diagonal,
    regmean_weight,
)
from tests.methods.merging.conftest import (
    FakeData,
    assert_state_close,
    assert_unchanged,
    make_inputs,
    snapshot,
)


class IdentityGramData(FakeData):
    """linear_inputs are identity rows: every Gram matrix is (a multiple of) the identity."""

    def linear_inputs(self, trunk, task, x):
        return {
            "fc0.weight": torch.eye(trunk["fc0.weight"].shape[1]),
            "fc1.weight": torch.eye(trunk["fc1.weight"].shape[1]),
        }


def test_identity_grams_give_the_average():
    inputs = make_inputs()
    inputs.data = IdentityGramData(3, 0)
    snap = snapshot(inputs)
    res = RegMean().merge(inputs, RegMean.Params(alpha=1.0, n_examples=20))
    avg = Averaging().merge(inputs, Averaging.Params()).state
    assert_state_close(res.state, avg, rtol=1e-5, atol=1e-6)
    assert res.info["regmean_layers"] == 2
    assert res.examples == 60
    assert_unchanged(inputs, snap)


def test_alpha1_is_the_least_squares_fit_of_all_experts_outputs():
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(40, 4, generator=g) for _ in range(3)]
    ws = [torch.randn(3, 4, generator=g) for _ in range(3)]
    got = regmean_weight(ws, [x.double().T @ x.double() for x in xs], alpha=1.0)
    # min_W Σ_t ||X_t Wᵀ − X_t W_tᵀ||²: stack the regressions
    a = torch.cat(xs).double()
    b = torch.cat([x @ w.T for x, w in zip(xs, ws)]).double()
    ref = torch.linalg.lstsq(a, b).solution.T
    torch.testing.assert_close(got.double(), ref, rtol=1e-5, atol=1e-6)


def test_reduce_off_diagonal():
    gm = torch.tensor([[4.0, 2.0], [2.0, 9.0]])
    assert torch.equal(reduce_off_diagonal(gm, 0.5), torch.tensor([[4.0, 1.0], [1.0, 9.0]]))
    assert torch.equal(reduce_off_diagonal(gm, 0.0), torch.diag(torch.tensor([4.0, 9.0])))


def test_singular_gram_keeps_the_average_on_unseen_inputs():
    # input 1 is never excited by any task: its column of W* stays the average
    x = torch.tensor([[1.0, 0.0], [2.0, 0.0]])
    ws = [torch.tensor([[1.0, 5.0]]), torch.tensor([[3.0, -1.0]])]
    got = regmean_weight(ws, [x.T @ x, 2 * x.T @ x], alpha=1.0)
    assert torch.allclose(got, torch.tensor([[(1 * 1 + 2 * 3) / 3, 2.0]]), atol=1e-6)


def test_grams_are_sums_over_rows():
    inputs = make_inputs()
    x, _ = inputs.data.examples(0, "train", 10)
    grams = gram_matrices(inputs.data, inputs.experts[0], 0, x)
    h = inputs.data.hidden(inputs.experts[0], x)
    torch.testing.assert_close(grams["fc0.weight"], x.double().T @ x.double())
    torch.testing.assert_close(grams["fc1.weight"], h.double().T @ h.double())


def test_non_linear_parameters_are_averaged():
    inputs = make_inputs()
    res = RegMean().merge(inputs, RegMean.Params(n_examples=16))
    avg = Averaging().merge(inputs, Averaging.Params()).state
    for k in ("fc0.bias", "fc1.bias", "scale"):
        torch.testing.assert_close(res.state[k], avg[k])
    assert not torch.allclose(res.state["fc0.weight"], avg["fc0.weight"])


def test_needs_data():
    with pytest.raises(ValueError, match="data"):
        RegMean().merge(make_inputs(data=False), RegMean.Params())


def test_singular_gram_on_the_first_input_keeps_its_column_average():
    # only input 1 is excited (G = [[0, 0], [0, 5]]): column 0 stays the average (1 + 5)/2 = 3
    # (not the mean of all entries, 2.5); column 1 is the G-weighted (1·5 + 2·(−1))/3 = 1
    x = torch.tensor([[0.0, 1.0], [0.0, 2.0]])
    ws = [torch.tensor([[1.0, 5.0]]), torch.tensor([[5.0, -1.0]])]
    got = regmean_weight(ws, [x.T @ x, 2 * x.T @ x], alpha=1.0)
    assert torch.allclose(got, torch.tensor([[3.0, 1.0]]), atol=1e-6)


class RowsData:
    """linear_inputs returns (task + 1)·x as layer "w"'s input rows."""

    def linear_inputs(self, trunk, task, x):
        return {"w": (task + 1) * x}


def test_grams_sum_over_every_chunk():
    # 300 examples: more than one forward chunk (256), so G must add the chunks' Grams
    x = torch.arange(600.0).reshape(300, 2) / 100
    for task in (0, 1):
        g = gram_matrices(RowsData(), {}, task, x)["w"]
        want = (task + 1) ** 2 * (x.double().T @ x.double())
        torch.testing.assert_close(g, want)


class TaskScaledGramData(FakeData):
    """Task t's linear inputs are (t + 1) · I rows, so G_t = (t + 1)² I; one more linear key,
    ``extra.weight``, that the trunk does not hold."""

    linear_keys = ("fc0.weight", "fc1.weight", "extra.weight")

    def linear_inputs(self, trunk, task, x):
        return {
            "fc0.weight": (task + 1) * torch.eye(trunk["fc0.weight"].shape[1]),
            "fc1.weight": (task + 1) * torch.eye(trunk["fc1.weight"].shape[1]),
            "extra.weight": torch.eye(2),
        }


def test_task_grams_weight_the_experts_and_keys_outside_the_trunk_are_skipped():
    """α = 1, G_t = (t + 1)² I for t = 0, 1: W* = (1 · W_0 + 4 · W_1) / 5; the bias is the
    plain mean; ``extra.weight`` is in every Gram but not in the trunk: not a RegMean layer."""
    inputs = make_inputs(n_tasks=2)
    inputs.data = TaskScaledGramData(2, 0)
    res = RegMean().merge(inputs, RegMean.Params(alpha=1.0, n_examples=4))
    e0, e1 = inputs.experts
    for k in ("fc0.weight", "fc1.weight"):
        torch.testing.assert_close(res.state[k], (e0[k] + 4 * e1[k]) / 5)
    torch.testing.assert_close(res.state["fc0.bias"], (e0["fc0.bias"] + e1["fc0.bias"]) / 2)
    assert res.info["regmean_layers"] == 2

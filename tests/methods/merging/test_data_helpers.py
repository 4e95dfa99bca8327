"""The shared helpers of the data-dependent methods (``_data.py``) and the error a
data-dependent method gives without data, each checked by hand on tiny tensors."""

import gc
import math

import pytest
import torch

from sparsebench.methods.merging import _data
from sparsebench.methods.merging._data import accuracy, entropy, loss_gradient, memo, read
from sparsebench.methods.merging.adamerging import AdaMergingLayer, AdaMergingTask
from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.cass import Cass, _gradients
from sparsebench.methods.merging.consensus import Consensus
from sparsebench.methods.merging.fisher import Fisher
from sparsebench.methods.merging.regmean import RegMean
from sparsebench.methods.merging.tall_masks import TallMasks
from tests.methods.merging.conftest import make_inputs


class LinearData:
    """logits = x @ trunk["w"]ᵀ (the trunk's other entries are unused); fixed splits."""

    n_tasks = 2
    linear_keys = ("w",)

    def __init__(self, splits):
        self.splits = splits  # (task, split) -> (x, y)

    def examples(self, task, split, n):
        x, y = self.splits[(task, split)]
        return x[:n], y[:n]

    def logits(self, trunk, task, x):
        return x @ trunk["w"].T


def test_read_returns_the_first_examples_and_refuses_an_empty_split():
    x = torch.arange(8.0).reshape(4, 2)
    data = LinearData({(0, "train"): (x, torch.arange(4)), (1, "val"): (x[:0], torch.zeros(0))})
    one_x, one_y = read(data, 0, "train", 1)  # a single example is not "none"
    assert one_x.tolist() == [[0.0, 1.0]] and one_y.tolist() == [0]
    with pytest.raises(ValueError, match=r"^task 1: no val examples$"):
        read(data, 1, "val", 5)  # x of shape (0, 2): zero rows, two columns


def test_accuracy_by_hand():
    # logits are the rows of x: argmax per row 0, 1, 2, 0; labels 0, 1, 2, 1 -> 3 of 4 right
    x = torch.tensor([[1.0, 0, 0], [0, 2, 0], [0, 0, 3], [1, 0, 0]])
    data = LinearData({})
    assert accuracy(data, {"w": torch.eye(3)}, 0, x, torch.tensor([0, 1, 2, 1])) == 0.75


def test_entropy_by_hand():
    # rows: p = (1/2, 1/2) -> ln 2; p = (1/4, 3/4) -> ln 4 − (3/4) ln 3; p = (1/2, 1/2) -> ln 2
    logits = torch.tensor([[0.0, 0.0], [0.0, math.log(3.0)], [5.0, 5.0]])
    expected = [math.log(2), math.log(4) - 0.75 * math.log(3), math.log(2)]
    assert entropy(logits).tolist() == pytest.approx(expected, rel=1e-6)


def test_loss_gradient_sums_every_chunk_and_leaves_unused_parameters_at_zero():
    # 300 examples (two chunks: 256 + 44), all x = (1, 0), label 0, w = 0: p = (1/2, 1/2);
    # ∇_w (1/n) Σ −log p(0 | x) = (p − e_0) xᵀ = rows (−1/2, 0) and (1/2, 0)
    n = 300
    x, y = torch.tensor([[1.0, 0.0]]).repeat(n, 1), torch.zeros(n, dtype=torch.long)
    trunk = {"w": torch.zeros(2, 2), "unused": torch.ones(3)}
    g = loss_gradient(LinearData({}), trunk, 0, x, y)
    torch.testing.assert_close(g["w"], torch.tensor([[-0.5, 0.0], [0.5, 0.0]]))
    assert g["unused"].tolist() == [0.0, 0.0, 0.0]
    assert trunk["w"].tolist() == [[0.0, 0.0], [0.0, 0.0]]  # the trunk is not modified


def _counting():
    calls = []

    def compute():
        calls.append(1)
        return len(calls)

    return calls, compute


def _tiny_inputs(base, data=None):
    return MergeInputs(base, [{"w": base["w"] + 1.0}], data=data)


def test_memo_computes_once_per_inputs_object_and_key():
    inputs = _tiny_inputs({"w": torch.zeros(2)})
    calls, compute = _counting()
    assert memo(inputs, ("memo-a",), compute) == 1
    assert memo(inputs, ("memo-a",), compute) == 1  # memoised
    assert memo(inputs, ("memo-b",), compute) == 2  # another key: computed again
    # another object holding the very same tensors: its own entry, and neither evicts the other
    twin = MergeInputs(inputs.base, inputs.experts)
    assert memo(twin, ("memo-a",), compute) == 3
    assert memo(inputs, ("memo-a",), compute) == 1 and len(calls) == 3


def test_memo_key_follows_the_data_object_and_replaced_tensors():
    data_a, data_b = object(), object()
    inputs = _tiny_inputs({"w": torch.zeros(2)}, data=data_a)
    calls, compute = _counting()
    memo(inputs, ("memo-c",), compute)
    inputs.data = data_b  # other data: another fingerprint
    assert memo(inputs, ("memo-c",), compute) == 2
    old = inputs.base["w"]
    inputs.base["w"] = torch.zeros(2)  # a new tensor (version 0, like the old one)
    assert memo(inputs, ("memo-c",), compute) == 3
    assert old is not inputs.base["w"]


def test_memo_entry_is_dropped_when_its_inputs_die():
    inputs = _tiny_inputs({"w": torch.zeros(2)})
    memo(inputs, ("memo-weakref",), lambda: 0)
    assert any(k[-1] == "memo-weakref" for k in _data._MEMO)
    del inputs
    gc.collect()
    assert not any(k[-1] == "memo-weakref" for k in _data._MEMO)


@pytest.mark.parametrize(
    ("merge", "name"),
    [
        (lambda i: AdaMergingTask().merge(i, AdaMergingTask.Params(init=0.3)), "adamerging_task"),
        (lambda i: AdaMergingLayer().merge(i, AdaMergingLayer.Params()), "adamerging_layer"),
        (lambda i: AdaMergingTask.initial_lambda(i, AdaMergingTask.Params()), "adamerging"),
        (lambda i: Cass().merge(i, Cass.Params(keep=0.5, lam=0.3)), "cass"),
        (lambda i: _gradients(i, 4), "cass"),
        (lambda i: Fisher().merge(i, Fisher.Params()), "fisher"),
        (lambda i: RegMean().merge(i, RegMean.Params()), "regmean"),
        (lambda i: TallMasks().merge(i, TallMasks.Params(lam="val")), "tall_masks"),
        (lambda i: Consensus().merge(i, Consensus.Params(lam="val")), "consensus"),
    ],
)
def test_a_data_dependent_method_without_data_names_itself(merge, name):
    with pytest.raises(ValueError, match=rf"^{name} is data-dependent: MergeInputs.data is None$"):
        merge(make_inputs(data=False))

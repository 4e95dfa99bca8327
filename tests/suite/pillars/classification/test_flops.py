import pytest
from torch import nn

from sparsebench.suite.pillars.classification.flops import (
    TrainFlopsCounter,
    layer_flops,
    sparse_forward_flops,
)


def test_linear_and_conv_flops_at_a_density():
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 8 * 8, 10)
    )
    f = layer_flops(model, (3, 8, 8))
    # conv: 2 * C_in * C_out * k*k * H_out*W_out ; linear: 2 * in * out (2 FLOPs per MAC)
    assert f == {"0": 2 * 3 * 8 * 9 * 64, "3": 2 * 512 * 10}
    assert sparse_forward_flops(f, {"0": 0.5, "3": 0.1}) == pytest.approx(13824 + 1024)


def test_train_flops_are_three_forward_passes_per_example():
    c = TrainFlopsCounter({"a": 100, "b": 50})
    c.step(4, {"a": 0.1, "b": 1.0})
    assert c.total == pytest.approx(3 * (10 + 50) * 4)
    assert c.dense_total == pytest.approx(3 * 150 * 4)
    c.add(7)
    assert c.total == pytest.approx(3 * 60 * 4 + 7)


def test_dense_grad_extra_is_the_dense_minus_the_sparse_forward_per_example():
    counter = TrainFlopsCounter({"a": 100, "b": 50})
    # f_D = 150, f_S = 0.1 x 100 + 1.0 x 50 = 60: 90 FLOPs per example, 4 examples.
    assert counter.dense_grad_extra({"a": 0.1, "b": 1.0}, 4) == 360.0
    assert counter.total == 0.0  # a value, not an addition

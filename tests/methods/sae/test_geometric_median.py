"""The geometric median that can start b_dec, on cases whose median is known in closed form,
and its use by train_sae."""

from __future__ import annotations

import math

import pytest
import torch

from sparsebench.methods.sae.topk import TopK
from sparsebench.methods.sae.training import TrainConfig, geometric_median, train_sae


def test_three_points_on_a_line_have_the_middle_one_as_median():
    x = torch.tensor([[0.0, 0.0], [1.0, 0.0], [10.0, 0.0]])
    torch.testing.assert_close(geometric_median(x), torch.tensor([1.0, 0.0]), atol=1e-4, rtol=0)


def test_the_fermat_point_of_an_equilateral_triangle_is_its_centre():
    x = torch.tensor([[0.0, 0.0], [2.0, 0.0], [1.0, math.sqrt(3.0)]])
    want = torch.tensor([1.0, math.sqrt(3.0) / 3.0])
    torch.testing.assert_close(geometric_median(x), want, atol=1e-5, rtol=0)


def test_a_far_outlier_moves_the_mean_but_not_the_median():
    # 99 tokens at the origin and one at 1000 e1: the mean is 10 e1, the median the origin.
    x = torch.zeros(100, 3)
    x[0, 0] = 1000.0
    assert float(x.mean(0).norm()) == pytest.approx(10.0)
    assert float(geometric_median(x).norm()) < 1e-3


def test_train_sae_starts_b_dec_at_the_median_when_asked():
    # Every token is v except one outlier: the median is v; a 1e-12 lr leaves b_dec there.
    v = torch.tensor([3.0, -2.0, 1.0, 0.5])
    x = v.repeat(64, 1)
    x[5] = torch.tensor([40.0, 40.0, -40.0, 40.0])
    for init, want in (("geometric_median", v), ("zeros", torch.zeros(4))):
        sae = TopK(4, 8, TopK.Params(k=2), seed=0)
        cfg = TrainConfig(steps=1, batch_size=64, lr=1e-12, dead_window=64, b_dec_init=init)
        train_sae(sae, x, cfg, seed=0)
        torch.testing.assert_close(sae.b_dec.detach(), want, atol=1e-4, rtol=0)


def test_an_unknown_init_is_refused_with_the_allowed_ones():
    with pytest.raises(ValueError, match="zeros, geometric_median.*'median'"):
        TrainConfig(b_dec_init="median").validate()

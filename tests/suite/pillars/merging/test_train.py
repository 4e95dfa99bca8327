"""The merging pillar's task heads: fit on a few labelled examples per class."""

from __future__ import annotations

import torch
from torch import nn
from torch.utils.data import TensorDataset

from sparsebench.suite.pillars.merging.train import few_shot, fit_head


def test_few_shot_takes_that_many_of_every_class_and_all_of_a_smaller_one():
    y = torch.tensor([0, 1, 0, 1, 1, 2, 0, 1])  # class 0: 3 examples, 1: 4, 2: 1
    idx = few_shot(y, 2, seed=0)
    counts = torch.bincount(y[idx], minlength=3).tolist()
    assert counts == [2, 2, 1]  # class 2 has only one example: it is kept, not repeated
    assert idx.tolist() == sorted(set(idx.tolist()))  # ascending, no repeats
    assert few_shot(y, None, seed=0).tolist() == list(range(8))
    assert few_shot(y, 10, seed=0).tolist() == list(range(8))  # more shots than examples


def test_few_shot_draws_by_the_seed():
    y = torch.arange(100) % 2  # 50 of each class; 2 of them out of 50 rarely coincide
    a, b = few_shot(y, 2, seed=0), few_shot(y, 2, seed=1)
    assert a.tolist() == few_shot(y, 2, seed=0).tolist()
    assert a.tolist() != b.tolist()


class _Identity(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.flatten(1)


def test_the_head_sees_only_its_shots():
    # A head fit on one shot per class is the head fit on exactly the drawn examples; fit on
    # all five (class 1's outlier at x = -5 among them) it is another head.
    x = torch.tensor([[-1.0], [-1.0], [1.0], [1.0], [-5.0]]).reshape(5, 1, 1, 1)
    y = torch.tensor([0, 0, 1, 1, 1])
    data = TensorDataset(x, y)
    shot = few_shot(y, 1, seed=3)
    w1, b1 = fit_head(_Identity(), data, seed=3, shots=1)
    wd, bd = fit_head(_Identity(), TensorDataset(x[shot], y[shot]), seed=3)
    assert torch.allclose(w1, wd) and torch.allclose(b1, bd)
    w_all, b_all = fit_head(_Identity(), data, seed=3)
    assert not torch.allclose(w_all, w1)


def test_the_board_says_what_the_heads_saw():
    import polars as pl

    from sparsebench.suite.pillars.merging.board import heads_text

    assert heads_text(pl.DataFrame({"head_shots": [10, 10]})) == (
        "θ0 with heads fit on 10 labelled examples per class"
    )
    full = pl.DataFrame({"head_shots": [None]}, schema={"head_shots": pl.Int64})
    assert "whole training split: not zero-shot" in heads_text(full)
    assert heads_text(pl.DataFrame({"x": [1]})) == "θ0 with the frozen task heads"

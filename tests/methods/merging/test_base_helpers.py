"""base.py's task-vector statistics, group masks and MergeResult, by hand."""

import pytest
import torch

from sparsebench.methods.merging.base import (
    Group,
    MergeResult,
    density,
    group_masks,
    sign_conflict,
)
from sparsebench.methods.merging.cass import _density


def test_density_of_no_entries_is_zero():
    assert density([]) == 0.0
    assert density([{"w": torch.zeros(0)}]) == 0.0
    assert density([{"w": torch.tensor([0.0, 2.0, 0.0, -1.0])}]) == 0.5  # 2 of 4
    assert _density({}) == 0.0  # CASS's mask density
    assert _density({"m": torch.tensor([True, False, False, False])}) == 0.25


def test_sign_conflict_counts_only_mixed_signs():
    # entry 0: −1, −2 (two nonzero, one sign); entry 1: 1, −1 (a conflict); entry 2: one
    # nonzero (not counted) -> 1 conflict among 2 entries with two nonzero values
    vectors = [{"w": torch.tensor([-1.0, 1.0, 2.0])}, {"w": torch.tensor([-2.0, -1.0, 0.0])}]
    assert sign_conflict(vectors) == 0.5


def test_group_masks_and_mask_into_default_to_true():
    base = {"w": torch.zeros(2, 3), "s": torch.zeros(2)}
    g = Group("neuron", "l", 1, (("w", 0, 1, 2),))  # row 1 of w
    masks = group_masks(base, [g])
    assert masks["w"].tolist() == [[False] * 3, [True] * 3] and masks["s"].tolist() == [False] * 2
    blank = {"w": torch.zeros(2, 3, dtype=torch.bool)}
    g.mask_into(blank)
    assert blank["w"].tolist() == [[False] * 3, [True] * 3]


def test_trunk_for_returns_the_shared_or_the_task_trunk():
    shared = {"w": torch.ones(1)}
    assert MergeResult(state=shared).trunk_for(2) is shared
    per = [{"w": torch.zeros(1)}, {"w": torch.ones(1)}]
    assert MergeResult(per_task=per).trunk_for(1) is per[1]
    with pytest.raises(AssertionError):
        MergeResult().trunk_for(0)

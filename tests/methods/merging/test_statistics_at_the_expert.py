"""Fisher merging and RegMean take each expert's statistics at that expert θ_t, not at θ0:
two-expert cases worked out by hand, whose answers at θ0 would be different numbers."""

from __future__ import annotations

import math

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs
from sparsebench.methods.merging.fisher import Fisher
from sparsebench.methods.merging.regmean import RegMean


class _Scalar:
    """Trunk z = l2·(l1·x) on one input x = 1 per task; task heads [[1], [−1]], so the logits
    are (z, −z)."""

    n_tasks = 2
    linear_keys = ("l1.weight", "l2.weight")

    def examples(self, task, split, n):
        return torch.ones(1, 1), torch.zeros(1, dtype=torch.int64)

    def features(self, trunk, x):
        return x @ trunk["l1.weight"].T @ trunk["l2.weight"].T

    def head_logits(self, task, features):
        return features @ torch.tensor([[1.0], [-1.0]]).T

    def logits(self, trunk, task, x):
        return self.head_logits(task, self.features(trunk, x))

    def linear_inputs(self, trunk, task, x):
        return {"l1.weight": x, "l2.weight": x @ trunk["l1.weight"].T}


def _w(l1: float, l2: float):
    return {"l1.weight": torch.tensor([[float(l1)]]), "l2.weight": torch.tensor([[float(l2)]])}


def test_regmean_grams_are_the_experts_own_inputs():
    # experts (l1, l2) = (1, 2) and (3, 6); θ0 = (1, 1). l2's input under expert t is l1_t·x:
    # G_t = l1_t² = 1 and 9, so l2* = (1·2 + 9·6) / (1 + 9) = 5.6 (at θ0 both Grams would be
    # 1: l2* = 4); l1's input is x under every model: l1* = (1 + 3) / 2 = 2.
    inputs = MergeInputs(_w(1, 1), [_w(1, 2), _w(3, 6)], data=_Scalar())
    out = RegMean().merge(inputs, RegMean.Params(alpha=1.0, n_examples=1)).state
    assert float(out["l2.weight"]) == pytest.approx(5.6)
    assert float(out["l1.weight"]) == pytest.approx(2.0)


def _sigmoid(v: float) -> float:
    return 1.0 / (1.0 + math.exp(-v))


@pytest.mark.parametrize("kind", ["exact", "empirical"])
def test_fisher_is_taken_at_each_expert(kind):
    """Logits (z, −z), z = w·x with x = 1: p(0) = σ(2w). ∂ log p(0)/∂w = 2(1 − σ), ∂ log p(1)/∂w
    = −2σ, so the exact Fisher is σ·4(1 − σ)² + (1 − σ)·4σ² = 4σ(1 − σ), and the empirical one
    with label 0 is 4(1 − σ)². The experts (l1 = 1, l2 = w_t) with w_t = 0.5 and 2 weight l2 by
    their own Fishers; at θ0 (w = 0) both Fishers are equal and l2* would be 1.25."""
    inputs = MergeInputs(_w(1, 0), [_w(1, 0.5), _w(1, 2.0)], data=_Scalar())
    out = Fisher().merge(inputs, Fisher.Params(n_examples=1, fisher=kind)).state

    def f(w: float) -> float:
        s = _sigmoid(2 * w)
        # ∂z/∂l2 = l1·x = 1, so the Fisher of l2 is the Fisher in w
        return 4 * s * (1 - s) if kind == "exact" else 4 * (1 - s) ** 2

    f0, f1 = f(0.5), f(2.0)
    assert float(out["l2.weight"]) == pytest.approx((0.5 * f0 + 2.0 * f1) / (f0 + f1), rel=1e-5)
    assert float(out["l2.weight"]) != pytest.approx(1.25, abs=0.05)

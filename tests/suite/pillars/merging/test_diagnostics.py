"""The merging setting's diagnostics against cases worked out by hand."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch

from sparsebench.methods.merging.base import sign_conflict
from sparsebench.suite.pillars.merging import diagnostics as dg


def test_relative_norms_and_mean_cosine_by_hand():
    base = {"w": torch.tensor([3.0]), "b": torch.tensor([4.0])}  # ||θ0|| = 5
    t1 = {"w": torch.tensor([1.0]), "b": torch.tensor([0.0])}
    t2 = {"w": torch.tensor([0.0]), "b": torch.tensor([1.0])}
    t3 = {"w": torch.tensor([2.0]), "b": torch.tensor([2.0])}
    assert dg.rel_norms(base, [t1, t3]) == pytest.approx([0.2, math.sqrt(8) / 5])
    # cos(t1, t2) = 0, cos(t1, t3) = cos(t2, t3) = 1/√2: mean (2/√2) / 3 = √2 / 3
    assert dg.mean_cosine([t1, t2, t3]) == pytest.approx(math.sqrt(2) / 3)
    assert dg.mean_cosine([t1, {"w": -t1["w"], "b": t1["b"]}]) == pytest.approx(-1.0)
    assert dg.mean_cosine([t1]) is None


def test_sign_conflict_chance_by_hand():
    # coordinates with m = 2, 3 and 1 nonzero entries over three vectors: chance 1/2, 3/4 and
    # (m = 1, not counted): mean 5/8
    v = [
        {"w": torch.tensor([1.0, 1.0, 1.0])},
        {"w": torch.tensor([-2.0, 1.0, 0.0])},
        {"w": torch.tensor([0.0, 1.0, 0.0])},
    ]
    assert dg.sign_conflict_chance(v) == pytest.approx(5 / 8)
    dense = [{"w": torch.ones(4)} for _ in range(8)]
    assert dg.sign_conflict_chance(dense) == pytest.approx(1 - 2**-7)  # 0.9921875
    assert dg.chance_of(dense[:1]) is None and dg.chance_of(None) is None
    assert dg.sign_conflict_chance([{"w": torch.tensor([1.0, 0.0])}] * 1) == 0.0


def test_independent_gaussian_vectors_conflict_at_the_chance_level():
    """The measured fraction (base.sign_conflict) of eight independent Gaussian vectors is the
    chance level 1 − 2^(1−8) = 0.992 to within sampling error (100,000 coordinates: std
    √(0.992·0.008/1e5) ≈ 2.8e-4)."""
    g = torch.Generator().manual_seed(0)
    v = [{"w": torch.randn(100_000, generator=g)} for _ in range(8)]
    assert sign_conflict(v) == pytest.approx(dg.sign_conflict_chance(v), abs=0.0015)


class _Bank:
    """Accuracy of trunk w on task t: 0.5 + 0.1·(w_t − θ0_t) − 0.05·(w_{1−t} − θ0_{1−t})."""

    tasks = [SimpleNamespace(name="a"), SimpleNamespace(name="b")]

    def __init__(self, base):
        self.base = base["w"]
        self.calls: list[tuple[str, int | None]] = []

    def evaluate(self, trunk, t, split, limit=None):
        self.calls.append((split, limit))
        d = trunk["w"] - self.base
        return float(0.5 + 0.1 * d[t] - 0.05 * d[1 - t]), 0.0


def test_batch_diagnostics_by_hand():
    base = {"w": torch.tensor([3.0, 4.0])}  # ||θ0|| = 5
    experts = [{"w": torch.tensor([3.5, 4.0])}, {"w": torch.tensor([3.0, 4.5])}]  # τ = 0.5 e_t
    bank = _Bank(base)
    out = dg.batch_diagnostics(bank, base, experts, limit=7)
    # own: 0.5 + 0.1·0.5 = 0.55 against 0.5 at θ0; with the other at λ = 0.3: −0.05·0.15
    per = json.loads(out["diagnostics_json"])
    for t in "ab":
        assert per[t]["own_gain"] == pytest.approx(0.05)
        assert per[t]["others_cost"] == pytest.approx(-0.0075)
        assert per[t]["tau_rel_norm"] == pytest.approx(0.1)
    assert out["own_gain"] == pytest.approx(0.05) and out["others_cost"] == pytest.approx(-0.0075)
    assert out["tau_rel_norm"] == pytest.approx(0.1) and out["tau_cosine"] == pytest.approx(0.0)
    assert out["others_lambda"] == 0.3
    assert set(bank.calls) == {("val", 7)}  # never the test split

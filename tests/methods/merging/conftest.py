"""A tiny, deterministic merging problem for the merging methods' tests.

Trunk (no torch.nn, the forward pass is written by hand from the state dict):

    h = relu(x @ fc0.weightᵀ + fc0.bias)            x (n, 6) -> h (n, 8)
    z = relu(h @ fc1.weightᵀ + fc1.bias) * scale     h (n, 8) -> z (n, 5)
    logits_t = z @ head_tᵀ                           per-task frozen head (classes_t, 5)

Groups: the 8 neurons of fc0 (row of fc0.weight + fc0.bias entry) and the 5 neurons of fc1
(row of fc1.weight + fc1.bias entry); ``scale`` is ungrouped.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
import torch

from sparsebench.methods.merging.base import Group, MergeInputs, StateDict

D_IN, H0, H1 = 6, 8, 5
CLASSES = (3, 4, 2, 3)


class FakeData:
    """A :class:`MergeData` over random Gaussian inputs with teacher labels."""

    linear_keys = ("fc0.weight", "fc1.weight")

    def __init__(self, n_tasks: int = 3, seed: int = 0, n_per_split: int = 64):
        g = torch.Generator().manual_seed(1000 + seed)
        self.n_tasks = n_tasks
        self.heads = [torch.randn(CLASSES[t], H1, generator=g) for t in range(n_tasks)]
        self.splits: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor]] = {}
        for t in range(n_tasks):
            teacher = torch.randn(D_IN, CLASSES[t], generator=g)
            for split in ("train", "val", "test"):
                x = torch.randn(n_per_split, D_IN, generator=g)
                self.splits[(t, split)] = (x, (x @ teacher).argmax(-1))
        self.read: dict[str, int] = {"train": 0, "val": 0, "test": 0}

    def examples(self, task: int, split: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = self.splits[(task, split)]
        self.read[split] += min(n, x.shape[0])
        return x[:n], y[:n]

    def hidden(self, trunk: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ trunk["fc0.weight"].T + trunk["fc0.bias"])

    def features(self, trunk: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor:
        h = self.hidden(trunk, x)
        return torch.relu(h @ trunk["fc1.weight"].T + trunk["fc1.bias"]) * trunk["scale"]

    def head_logits(self, task: int, features: torch.Tensor) -> torch.Tensor:
        return features @ self.heads[task].T

    def logits(self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor):
        return self.head_logits(task, self.features(trunk, x))

    def selection_score(self, trunk: Mapping[str, torch.Tensor]) -> float:
        """Mean validation accuracy over tasks (the fake has no experts to normalize by)."""
        accs = []
        for t in range(self.n_tasks):
            x, y = self.splits[(t, "val")]
            accs.append(float((self.logits(trunk, t, x).argmax(-1) == y).float().mean()))
        return sum(accs) / len(accs)

    def linear_inputs(self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor):
        return {"fc0.weight": x, "fc1.weight": self.hidden(trunk, x)}


def make_base(seed: int = 0) -> StateDict:
    g = torch.Generator().manual_seed(seed)
    return {
        "fc0.weight": torch.randn(H0, D_IN, generator=g) * 0.5,
        "fc0.bias": torch.randn(H0, generator=g) * 0.1 + 0.2,
        "fc1.weight": torch.randn(H1, H0, generator=g) * 0.5,
        "fc1.bias": torch.randn(H1, generator=g) * 0.1 + 0.2,
        "scale": torch.ones(H1) + 0.1 * torch.randn(H1, generator=g),
    }


def make_experts(base: StateDict, n_tasks: int, seed: int = 0, scale: float = 0.3):
    g = torch.Generator().manual_seed(100 + seed)
    return [
        {k: v + scale * torch.randn(v.shape, generator=g) for k, v in base.items()}
        for _ in range(n_tasks)
    ]


def make_groups() -> list[Group]:
    out = []
    for layer, width in (("fc0", H0), ("fc1", H1)):
        for j in range(width):
            sl = ((f"{layer}.weight", 0, j, j + 1), (f"{layer}.bias", 0, j, j + 1))
            out.append(Group("neuron", layer, j, sl))
    return out


def make_inputs(n_tasks: int = 3, seed: int = 0, data: bool = True, **kw) -> MergeInputs:
    base = make_base(seed)
    return MergeInputs(
        base=base,
        experts=make_experts(base, n_tasks, seed),
        tasks=[f"task{t}" for t in range(n_tasks)],
        groups=make_groups(),
        data=FakeData(n_tasks, seed) if data else None,
        **kw,
    )


def snapshot(inputs: MergeInputs) -> tuple[StateDict, list[StateDict]]:
    return (
        {k: v.clone() for k, v in inputs.base.items()},
        [{k: v.clone() for k, v in e.items()} for e in inputs.experts],
    )


def assert_unchanged(inputs: MergeInputs, snap: tuple[StateDict, list[StateDict]]) -> None:
    base, experts = snap
    for k, v in base.items():
        assert torch.equal(inputs.base[k], v), f"base {k} was modified"
    for e, e0 in zip(inputs.experts, experts):
        for k, v in e0.items():
            assert torch.equal(e[k], v), f"expert {k} was modified"


def assert_state_close(a: Mapping[str, torch.Tensor], b: Mapping[str, torch.Tensor], **kw):
    assert set(a) == set(b)
    for k in a:
        torch.testing.assert_close(a[k], b[k], **kw, msg=lambda m, k=k: f"{k}: {m}")


@pytest.fixture
def problem():
    """make_inputs(n_tasks=3, seed=0, data=True, **kw) -> MergeInputs (fresh each call)."""
    return make_inputs


def ties_host_example():
    """Two tasks, d = 5 entries each: TIES's 20 % trim keeps n = 1 entry per task (a[0] of
    both, 3 and 1, same sign), so τ_MTL(ties) is their disjoint *sum* a = [4, 0, 0], b = 0
    (the mean would be 2; the untrimmed sum a = [4, -0.5, 0.5], b = [1.8, 0])."""
    base = {"a": torch.zeros(3), "b": torch.zeros(2)}
    experts = [
        {"a": torch.tensor([3.0, -1.0, 0.5]), "b": torch.tensor([2.0, -0.1])},
        {"a": torch.tensor([1.0, 0.5, 0.0]), "b": torch.tensor([-0.2, 0.1])},
    ]
    return MergeInputs(base, experts)

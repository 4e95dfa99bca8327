"""Helpers the data-dependent merging methods share: reading a task's examples, chunked
forward passes through :meth:`MergeData.logits`, accuracy, the gradient of the mean
cross-entropy with respect to a trunk, prediction entropy, and a per-``MergeInputs`` memo.

Not a method module: nothing here is registered.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import torch
import torch.nn.functional as F

from .base import MergeData, MergeInputs, Split, StateDict

CHUNK = 256  # examples per forward pass (bounds activation memory; results do not depend on it)
T = TypeVar("T")
_MEMO: dict[tuple[Any, ...], tuple[weakref.ref, Any]] = {}


def require_data(inputs: MergeInputs, method: str) -> MergeData:
    """``inputs.data``, or a ValueError naming the method that needs it."""
    if inputs.data is None:
        raise ValueError(f"{method} is data-dependent: MergeInputs.data is None")
    return inputs.data


def read(data: MergeData, task: int, split: Split, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` examples of ``task``'s ``split`` (fewer if the split is smaller: callers
    count ``x.shape[0]``). Raises ValueError when none come back."""
    x, y = data.examples(task, split, n)
    if x.shape[0] == 0:
        raise ValueError(f"task {task}: no {split} examples")
    return x, y


def chunks(n: int, size: int = CHUNK) -> Iterator[slice]:
    for start in range(0, n, size):
        yield slice(start, min(start + size, n))


@torch.no_grad()
def logits(data: MergeData, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor):
    """(n, classes) logits of ``trunk`` with task ``task``'s head, in chunks, without grad."""
    return torch.cat([data.logits(trunk, task, x[s]) for s in chunks(x.shape[0])])


def accuracy(
    data: MergeData, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor, y: torch.Tensor
) -> float:
    """Top-1 accuracy of ``trunk`` on (x, y) of task ``task``."""
    pred = logits(data, trunk, task, x).argmax(-1)
    return float((pred == y.to(pred.device)).float().mean())


def loss_gradient(
    data: MergeData, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor, y: torch.Tensor
) -> StateDict:
    """∇_θ of the mean cross-entropy L(θ) = (1/n) Σ_i −log p(y_i | x_i; θ) at θ = ``trunk``
    (task ``task``'s head), shapes as the trunk; the trunk's tensors are not modified."""
    params = {k: v.detach().clone().requires_grad_(True) for k, v in trunk.items()}
    grads = {k: torch.zeros_like(v) for k, v in params.items()}
    n = x.shape[0]
    keys = list(params)
    for s in chunks(n):
        out = data.logits(params, task, x[s])
        loss = F.cross_entropy(out, y[s].to(out.device), reduction="sum") / n
        gs = torch.autograd.grad(loss, [params[k] for k in keys], allow_unused=True)
        for k, g in zip(keys, gs):
            if g is not None:
                grads[k] += g
    return grads


def entropy(logits_: torch.Tensor) -> torch.Tensor:
    """Shannon entropy of softmax(logits) per row, shape (n,) (nats)."""
    logp = torch.log_softmax(logits_, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _fingerprint(inputs: MergeInputs) -> tuple[Any, ...]:
    """Identity and in-place-modification counters of every tensor the inputs hold."""
    tensors = [*inputs.base.values(), *(v for e in inputs.experts for v in e.values())]
    return (id(inputs), id(inputs.data), inputs.seed, tuple((id(t), t._version) for t in tensors))


def memo(inputs: MergeInputs, key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()`` once per (``inputs`` object, ``key``) while that object lives and none of
    its tensors is modified in place (their version counters are part of the key).

    The pillar merges one ``MergeInputs`` once per grid point; quantities that depend on the
    inputs but not on the searched parameters (CASS's ∇L_t(θ0), the TALL masks' per-task λ_t)
    are computed once. A merge's result does not depend on the memo; callers must treat the
    returned value as read-only. The examples read count only on the first computation, and
    the memoised value carries that count, so results report the same ``examples``."""
    k = (*_fingerprint(inputs), *key)
    hit = _MEMO.get(k)
    if hit is not None and hit[0]() is inputs:
        return hit[1]
    value = compute()
    _MEMO[k] = (weakref.ref(inputs, lambda _r, k=k: _MEMO.pop(k, None)), value)
    return value

"""Diagnostics of a merging setting, the same for every cell of a (trunk, seed) batch: whether
its task vectors are in the regime where adding them works, and how far a measured sign
conflict is from what chance alone gives.

* ``tau_rel_norm``: ‖τ_t‖ / ‖θ0‖ per task (all trunk parameters as one vector). Task
  arithmetic is studied where fine-tuning moves the weights little (Ilharco et al. 2023;
  Ortiz-Jiménez et al. 2023, the tangent regime).
* ``tau_cosine``: the mean cosine between the task vectors of distinct tasks (near 0: nearly
  orthogonal, as CLIP's are in Ilharco et al. 2023, Fig. 5).
* ``own_gain``: acc_t(θ0 + τ_t) − acc_t(θ0): what a task's own vector adds to the zero-shot
  trunk (θ0 + τ_t is the expert).
* ``others_cost``: acc_t(θ0 + τ_t + λ Σ_{s≠t} τ_s) − acc_t(θ0 + τ_t) at λ = 0.3: what the
  other tasks' vectors take from the expert (interference). λ = 0.3 is ours: the scale
  Ilharco et al. report as typical of their validation choice.
* :func:`sign_conflict_chance`: the sign-conflict fraction that independent, symmetric task
  vectors with the same nonzero pattern would give: a coordinate with m nonzero entries has
  mixed signs with probability 1 − 2^(1−m) (all m of one sign: 2 · 2^−m), so dense vectors of
  T tasks give 1 − 2^(1−T) (0.992 for T = 8). A measured fraction near it says nothing about
  interference.

Accuracies are on the validation examples the selection reads (never on test).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from sparsebench.methods.merging.base import TaskVectorStats

OTHERS_LAMBDA = 0.3


def _flat(vector: Mapping[str, torch.Tensor]) -> torch.Tensor:
    return torch.cat([vector[k].reshape(-1).double() for k in sorted(vector)])


def rel_norms(
    base: Mapping[str, torch.Tensor], vectors: Sequence[Mapping[str, torch.Tensor]]
) -> list[float]:
    """‖τ_t‖ / ‖θ0‖ per task vector."""
    b = float(_flat(base).norm())
    return [float(_flat(v).norm()) / b for v in vectors]


def mean_cosine(vectors: Sequence[Mapping[str, torch.Tensor]]) -> float | None:
    """Mean cosine similarity over the T(T−1)/2 pairs of distinct task vectors (None for one
    vector; a zero vector counts as cosine 0)."""
    flat = [_flat(v) for v in vectors]
    pairs = [(i, j) for i in range(len(flat)) for j in range(i + 1, len(flat))]
    if not pairs:
        return None
    total = 0.0
    for i, j in pairs:
        denom = float(flat[i].norm() * flat[j].norm())
        total += float(flat[i] @ flat[j]) / denom if denom else 0.0
    return total / len(pairs)


def sign_conflict_chance(vectors: Sequence[Mapping[str, torch.Tensor]]) -> float:
    """Expected sign-conflict fraction (as ``methods.merging.base.sign_conflict`` counts it)
    of vectors with these nonzero patterns and independent fair signs: the mean of
    1 − 2^(1−m) over the coordinates with m ≥ 2 nonzero entries (0.0 when there are none)."""
    total = 0.0
    count = 0
    for k in vectors[0]:
        m = torch.stack([v[k] != 0 for v in vectors]).sum(0)
        m = m[m >= 2].double()
        count += int(m.numel())
        total += float((1.0 - torch.pow(2.0, 1.0 - m)).sum())
    return total / count if count else 0.0


def batch_diagnostics(bank: Any, base: Mapping[str, torch.Tensor], experts, limit: int | None):
    """The diagnostics of one batch (module docstring): a dict of record columns.
    ``bank`` is the pillar's TaskBank (``evaluate(trunk, t, split, limit)``)."""
    vectors = [{k: e[k] - base[k] for k in base} for e in experts]
    n = len(vectors)
    total = {k: sum(v[k] for v in vectors) for k in base}
    per_task: dict[str, dict[str, float]] = {}
    for t, (name, expert) in enumerate(zip([d.name for d in bank.tasks], experts)):
        zero = bank.evaluate(base, t, "val", limit)[0]
        own = bank.evaluate(expert, t, "val", limit)[0]
        with_others = {k: expert[k] + OTHERS_LAMBDA * (total[k] - vectors[t][k]) for k in base}
        others = bank.evaluate(with_others, t, "val", limit)[0]
        per_task[name] = {"own_gain": own - zero, "others_cost": others - own}
    norms = rel_norms(base, vectors)
    for name, r in zip(per_task, norms):
        per_task[name]["tau_rel_norm"] = r
    return {
        "tau_rel_norm": sum(norms) / n,
        "tau_cosine": mean_cosine(vectors),
        "own_gain": sum(p["own_gain"] for p in per_task.values()) / n,
        "others_cost": sum(p["others_cost"] for p in per_task.values()) / n,
        "diagnostics_json": json.dumps(per_task, sort_keys=True),
        "others_lambda": OTHERS_LAMBDA,
    }


def chance_from_stats(stats: TaskVectorStats) -> float:
    """:func:`sign_conflict_chance` from the counts of nonzero entries per coordinate."""
    multi = sum(stats.nonzero_hist[2:])
    total = sum(c * (1.0 - 2.0 ** (1 - m)) for m, c in enumerate(stats.nonzero_hist) if m >= 2)
    return total / multi if multi else 0.0


def chance_of(vectors: Sequence[Mapping[str, torch.Tensor]] | TaskVectorStats | None):
    """:func:`sign_conflict_chance` of a record's vectors (or of their statistics); None for
    fewer than two."""
    if isinstance(vectors, TaskVectorStats):
        return chance_from_stats(vectors) if vectors.n_vectors >= 2 else None
    return sign_conflict_chance(vectors) if vectors and len(vectors) >= 2 else None

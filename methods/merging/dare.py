"""DARE (Drop And REscale) in front of Task Arithmetic and TIES (Yu et al. 2024)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from sparsebench.suite.registry import register

from .base import (
    MergeInputs,
    MergeResult,
    MergingMethod,
    StateDict,
    TaskVectorStats,
    sum_task_vectors,
)
from .task_arithmetic import LAMBDA_GRID
from .ties import K_GRID, TIES_LAMBDA_GRID, ties_stages, ties_vector

# The official code (github.com/yule-BUAA/MergeLM, merge_plms_glue.py, "mask_merging") searches
# the drop rate over {0.1, 0.3, 0.5, 0.7, 0.9}.
P_GRID = (0.1, 0.3, 0.5, 0.7, 0.9)


def dare_stages(grid: dict[str, tuple[Any, ...]]) -> list[tuple[dict[str, tuple], dict[str, Any]]]:
    """The DARE protocol as selection stages: the host's other parameters first without
    dropping (p = 0: the host alone), in the host's own stages (λ, ...; a TIES host: λ at
    k = 0.2, then k, :func:`~.ties.ties_stages`), then p over its grid at those values: the
    official code's order (the host's hyperparameters are tuned before DARE is applied), and
    |λ grid| (+ |k grid|) + |p grid| merges instead of their product."""
    first = {k: v for k, v in grid.items() if k != "p"}
    host = [(axes, {**fixed, "p": 0.0}) for axes, fixed in ties_stages(first)]
    return [*host, ({"p": grid["p"]}, {})]


def task_generator(seed: int, task: int) -> torch.Generator:
    """The CPU generator of task ``task``'s drop mask: a function of (seed, task) only."""
    return torch.Generator().manual_seed(int(seed) * 1_000_003 + int(task))


def dare(vectors: Sequence[Mapping[str, torch.Tensor]], p: float, seed: int) -> list[StateDict]:
    """DARE (Sec. 3): for each task t and entry, m ~ Bernoulli(p) (drop), τ̃ = (1 − m) ⊙ τ,
    τ̂ = τ̃ / (1 − p), so E[τ̂] = τ. The masks come from ``task_generator(seed, t)``, drawn over
    the vector's keys in their order (uniforms on CPU, kept if u >= p); p = 0 keeps τ exactly.
    New tensors."""
    drop = Dropper(p, seed, len(vectors))
    return [{key: drop(t, v) for key, v in tv.items()} for t, tv in enumerate(vectors)]


class Dropper:
    """DARE's drop and rescale, applied entry by entry: ``drop(t, v)`` is task t's next
    parameter τ_t[key] dropped and rescaled. Each task has its own generator, so the masks
    depend only on (seed, t) and on the order of task t's own keys, not on whether the tasks
    are interleaved (parameter by parameter, as :meth:`DareTA.merge_vector` feeds them) or
    done one after the other (:func:`dare`). ``in_place``: overwrite ``v`` (a
    :data:`~.base.Transform` for :func:`~.base.sum_task_vectors`)."""

    def __init__(self, p: float, seed: int, n_tasks: int, in_place: bool = False) -> None:
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop rate p must be in [0, 1), got {p}")
        self.p = p
        self.in_place = in_place
        self.generators = [task_generator(seed, t) for t in range(n_tasks)]

    def __call__(self, t: int, v: torch.Tensor) -> torch.Tensor:
        if self.p == 0.0:  # every u >= 0 is kept: the masks need no draw (nor the state after)
            return v if self.in_place else v.clone()
        keep = torch.rand(v.shape, generator=self.generators[t]) >= self.p
        out = v.div_(1.0 - self.p) if self.in_place else v / (1.0 - self.p)
        # × mask rather than where / masked_fill (several times slower on CPU); a dropped
        # negative entry becomes −0.0, equal to 0 in every sum, sign test and count
        return out.mul_(keep.to(v.device))


@register("dare_ta", family="merging")
class DareTA(MergingMethod):
    """DARE + Task Arithmetic: drop each entry of every τ_t with probability p and rescale the
    survivors by 1/(1 − p) (Sec. 3), then θ = θ0 + λ Σ_t τ̂_t.

    Defaults: p and λ chosen on validation as the official protocol does, in two stages
    (:func:`dare_stages`): λ over Task Arithmetic's grid 0.01, ..., 1.00 without dropping, then
    p over {0.1, 0.3, 0.5, 0.7, 0.9} (the official code's grid) at that λ. The drop masks are a
    function of ``MergeInputs.seed`` and the task index. Task vectors: the dropped-and-rescaled
    τ̂_t.

    Source: Yu, Yu, Yu, Huang, Li, "Language Models are Super Mario: Absorbing Abilities from
    Homologous Models as a Free Lunch", ICML 2024, Sec. 3 (drop and rescale: m ~ Bernoulli(p),
    τ̂ = (1 − m) ⊙ τ / (1 − p)); code github.com/yule-BUAA/MergeLM.
    """

    search = {"p": P_GRID, "lam": LAMBDA_GRID}
    scale = "lam"
    test_params = {"p": 0.5}  # one drop rate: the contract tests' tiny run

    @classmethod
    def search_stages(cls, params: Any):
        return dare_stages(cls.grid_for(params))

    @dataclass
    class Params:
        p: float | None = None  # drop rate; None: chosen on validation over P_GRID
        lam: float | None = None  # None: chosen on validation over LAMBDA_GRID

        def validate(self) -> None:
            if self.p is not None and not 0.0 <= self.p < 1.0:
                raise ValueError(f"p must be in [0, 1), got {self.p}")
            if self.lam is not None and self.lam < 0:
                raise ValueError(f"lam must be >= 0, got {self.lam}")

    def merge_vector(self, inputs: MergeInputs, params: Params) -> MergeResult:
        """τ_m = Σ_t τ̂_t, dropped and summed parameter by parameter (the masks of
        :func:`dare`, bit for bit; the record's statistics: of the τ̂_t, counted in a pass of
        their own that draws the same masks again)."""
        base, experts, n = inputs.base, inputs.experts, len(inputs.experts)
        p, seed = params.p, inputs.seed
        return MergeResult(
            vector=sum_task_vectors(base, experts, Dropper(p, seed, n, in_place=True)),
            stats=lambda: TaskVectorStats.stream(base, experts, Dropper(p, seed, n, True)),
        )


@register("dare_ties", family="merging")
class DareTies(MergingMethod):
    """DARE + TIES: drop-and-rescale every τ_t (Sec. 3), then the whole of TIES-Merging on
    the results (trim to the top-k magnitudes, elect sign, disjoint mean), θ = θ0 + λ τ_m.

    TIES' trim step is applied after DARE, as in the DARE paper's own code (its
    ``mask_merging`` with ``ties_merging`` passes the DARE-ed models to the full TIES with its
    magnitude mask rate) and FusionBench's ``DareTiesMerging``; mergekit's ``dare_ties``
    replaces the trim by DARE instead (k = 1.0 here reproduces that). With p >= 1 − k the
    trim keeps every surviving entry.

    Defaults: chosen on validation in the official order (:func:`dare_stages`), without
    dropping first: λ over TIES' grid 0.01, ..., 2.5 (the paper's 0.8, ..., 2.5 extended
    below: see ties.py) at k = 0.2, then k over {0.1, 0.2, 0.3} (ours, TIES' staged search)
    at that λ, then p over {0.1, 0.3, 0.5, 0.7, 0.9} at those values. An explicit k is not
    searched.
    Masks from ``MergeInputs.seed`` and the task index. Task vectors: the dropped, rescaled
    and trimmed vectors.

    Source: Yu, Yu, Yu, Huang, Li, "Language Models are Super Mario: Absorbing Abilities from
    Homologous Models as a Free Lunch", ICML 2024, Sec. 3 (drop and rescale) with Yadav et
    al., "TIES-Merging", NeurIPS 2023, Alg. 1; code github.com/yule-BUAA/MergeLM.
    """

    search = {"p": P_GRID, "k": K_GRID, "lam": TIES_LAMBDA_GRID}
    scale = "lam"
    test_params = {"p": 0.5}

    @classmethod
    def search_stages(cls, params: Any):
        return dare_stages(cls.grid_for(params))

    @dataclass
    class Params:
        p: float | None = None  # drop rate; None: chosen on validation over P_GRID
        # TIES trim: fraction of each (dropped) task vector kept; None: chosen over K_GRID
        k: float | None = None
        lam: float | None = None  # None: chosen on validation over TIES_LAMBDA_GRID

        def validate(self) -> None:
            if self.p is not None and not 0.0 <= self.p < 1.0:
                raise ValueError(f"p must be in [0, 1), got {self.p}")
            if self.k is not None and not 0.0 < self.k <= 1.0:
                raise ValueError(f"k must be in (0, 1], got {self.k}")
            if self.lam is not None and self.lam < 0:
                raise ValueError(f"lam must be >= 0, got {self.lam}")

    def merge_vector(self, inputs: MergeInputs, params: Params) -> MergeResult:
        dropped = dare(inputs.task_vectors(), params.p, inputs.seed)
        merged, trimmed = ties_vector(dropped, params.k)
        return MergeResult(vector=merged, task_vectors=trimmed)

"""CASS: contribution-aware structured sparsity, a head/neuron filter in front of Task
Arithmetic, TIES and DARE, and CASS-Tuning (our implementation of a paper whose method is
public only through its abstract)."""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F

from sparsebench.suite import registry
from sparsebench.suite.method import MethodArtefact
from sparsebench.suite.registry import register

from ._data import logits, loss_gradient, memo, read, require_data
from .base import (
    ArtefactContext,
    Group,
    MergeInputs,
    MergeResult,
    MergingMethod,
    StateDict,
    group_masks,
    task_vectors,
)
from .dare import P_GRID, dare_stages  # importing the hosts registers them for host_merge
from .task_arithmetic import LAMBDA_GRID
from .ties import K_GRID, TIES_LAMBDA_GRID, ties_stages

KEEP_GRID = (0.25, 0.5, 0.75)  # ours: fraction of heads / neurons kept per (layer, kind)

CassHost = Literal["task_arithmetic", "ties", "dare_ta", "dare_ties"]
CassScore = Literal["taylor", "knockout"]
CASS_SCORES = ("taylor", "knockout")


# ------------------------------------------------------------------------------------ scores
@functools.lru_cache(maxsize=8)
def _group_index(groups: tuple[Group, ...], shapes: tuple[tuple[str, torch.Size], ...]):
    """Per trunk key, an int64 tensor of its shape: the index of the group owning each entry,
    −1 where no group does (groups never overlap)."""
    index = {k: torch.full(shape, -1, dtype=torch.long) for k, shape in shapes}
    for i, g in enumerate(groups):
        for key, dim, a, b in g.slices:
            index[key].narrow(dim, a, b - a).fill_(i)
    return {k: (v.reshape(-1) >= 0, v.reshape(-1)) for k, v in index.items()}


def _group_sums(values: Mapping[str, torch.Tensor], groups: Sequence[Group]) -> torch.Tensor:
    """Σ of ``values`` over the entries each group owns, shape (len(groups),) float64."""
    shapes = tuple((k, v.shape) for k, v in values.items())
    out = torch.zeros(len(groups), dtype=torch.float64)
    for key, (owned, ids) in _group_index(tuple(groups), shapes).items():
        if owned.any():
            flat = values[key].detach().reshape(-1).double().cpu()
            out.index_add_(0, ids[owned], flat[owned])
    return out


def contribution_scores(
    grad: Mapping[str, torch.Tensor], tv: Mapping[str, torch.Tensor], groups: Sequence[Group]
) -> torch.Tensor:
    """c(g) = −⟨∇L(θ0)[g], τ[g]⟩ for every group, shape (len(groups),) float64: the first-order
    Taylor estimate of the loss reduction L(θ0) − L(θ0 + τ[g]) that g's slice of τ brings."""
    return -_group_sums({k: grad[k].double() * tv[k].double() for k in tv}, groups)


def gradient_scores(grad: Mapping[str, torch.Tensor], groups: Sequence[Group]) -> torch.Tensor:
    """c(g) = ‖∇L(θ0)[g]‖² for every group, shape (len(groups),) float64: the first-order gain
    of one gradient step restricted to g (CASS-Tuning: no τ exists before fine-tuning)."""
    return _group_sums({k: v.double() ** 2 for k, v in grad.items()}, groups)


def knockout_scores(
    loss, expert: Mapping[str, torch.Tensor], tv: Mapping[str, torch.Tensor],
    groups: Sequence[Group],
) -> torch.Tensor:  # fmt: skip
    """c(g) = L(θ_t − τ[g]) − L(θ_t) for every group, shape (len(groups),) float64: how much
    the task's loss rises at the expert when g's slice of τ is removed (``loss``: a trunk
    state dict -> the task's mean loss). Exact where the Taylor score is a first-order
    estimate at θ0, at one loss evaluation per group."""
    at_expert = float(loss(expert))
    out = torch.zeros(len(groups), dtype=torch.float64)
    for i, g in enumerate(groups):
        knocked = dict(expert)
        for key, dim, a, b in g.slices:
            if key not in knocked or knocked[key] is expert[key]:
                knocked[key] = expert[key].clone()
            knocked[key].narrow(dim, a, b - a).sub_(tv[key].narrow(dim, a, b - a))
        out[i] = float(loss(knocked)) - at_expert
    return out


def select_groups(groups: Sequence[Group], scores: torch.Tensor, keep: float) -> list[int]:
    """Indices (into ``groups``) of the top ceil(keep · count) groups by score within every
    (layer, kind), at least one per (layer, kind); equal scores keep the lower index."""
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    by_unit: dict[tuple[str, str], list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_unit[(g.layer, g.kind)].append(i)
    chosen: list[int] = []
    for members in by_unit.values():
        n_keep = max(1, math.ceil(keep * len(members) - 1e-9))
        s = scores[members]
        order = torch.argsort(-s, stable=True)[:n_keep]
        chosen += [members[int(j)] for j in order]
    return sorted(chosen)


def structured_mask(
    base: Mapping[str, torch.Tensor], groups: Sequence[Group], selected: Sequence[int]
) -> StateDict:
    """Boolean mask (trunk keys and shapes, CPU): True on the entries of the ``selected``
    groups and on every entry no group covers (embeddings, norms, positions, output biases:
    kept dense), False on the entries of the other groups."""
    mask = group_masks(base, groups, value=False)  # grouped entries False, ungrouped True
    for i in selected:
        groups[i].mask_into(mask, True)
    return mask


def contribution_masks(
    base: Mapping[str, torch.Tensor],
    task_vectors: Sequence[Mapping[str, torch.Tensor]],
    groups: Sequence[Group],
    grads: Sequence[Mapping[str, torch.Tensor]],
    keep: float,
) -> list[StateDict]:
    """CASS masks per task t: the groups of largest contribution c_t(g) = −⟨∇L_t(θ0)[g],
    τ_t[g]⟩ (``grads[t]`` = ∇L_t at θ0) within each (layer, kind), plus ungrouped entries."""
    out = []
    for g, tv in zip(grads, task_vectors):
        chosen = select_groups(groups, contribution_scores(g, tv, groups), keep)
        out.append(structured_mask(base, groups, chosen))
    return out


def tuning_masks(
    base: Mapping[str, torch.Tensor],
    groups: Sequence[Group],
    grads: Sequence[Mapping[str, torch.Tensor]] | Mapping[str, torch.Tensor],
    keep: float,
    overlap: float = 0.0,
) -> list[StateDict] | StateDict:
    """CASS-Tuning masks, computed before fine-tuning from the gradients at θ0: per task, the
    groups of largest ‖∇L_t(θ0)[g]‖² within each (layer, kind) (at least one), plus ungrouped
    entries. ``grads``: one gradient state dict per task, in the spec's task order (returns
    one mask per task), or a single gradient state dict (returns its mask), shapes as the
    trunk: ∇L_t at θ0 of the mean cross-entropy on task t's train examples with its head
    (e.g. ``loss_gradient(data, θ0, t, x, y)``, importable from this module).

    Overlap reduction (``overlap`` = β in [0, 1)): the tasks choose in order, task t ranking
    group g by ‖∇L_t(θ0)[g]‖² · (1 − β)^u(g), u(g) the number of tasks before t that chose g
    (:func:`penalised_selection`); β = 0 chooses every mask alone. Masks are boolean, trunk
    keys and shapes, on CPU. :meth:`CassTuning.build_artefact` trains expert t with the
    gradients outside mask t set to zero."""
    if isinstance(grads, Mapping):
        chosen = select_groups(groups, gradient_scores(grads, groups), keep)
        return structured_mask(base, groups, chosen)
    scores = [gradient_scores(g, groups) for g in grads]
    chosen_all = penalised_selection(groups, scores, keep, overlap)
    return [structured_mask(base, groups, chosen) for chosen in chosen_all]


def penalised_selection(
    groups: Sequence[Group], scores: Sequence[torch.Tensor], keep: float, overlap: float
) -> list[list[int]]:
    """Greedy, in task order: task t keeps :func:`select_groups` of scores_t · (1 − overlap)^u,
    u(g) how many earlier tasks kept g. Scores must be ≥ 0 (a penalty that multiplies a
    negative score would raise it)."""
    if not 0.0 <= overlap < 1.0:
        raise ValueError(f"overlap must be in [0, 1), got {overlap}")
    used = torch.zeros(len(groups), dtype=torch.float64)
    out = []
    for s in scores:
        if bool((s < 0).any()):
            raise ValueError("penalised_selection needs scores >= 0")
        chosen = select_groups(groups, s * (1.0 - overlap) ** used, keep)
        used[chosen] += 1.0
        out.append(chosen)
    return out


# ------------------------------------------------------------------------------------- hosts
_HOST_FIELDS = {
    "task_arithmetic": ("lam",),
    "ties": ("k", "lam"),
    "dare_ta": ("p", "lam"),
    "dare_ties": ("p", "k", "lam"),
}


def host_search(host: str) -> dict[str, tuple[Any, ...]]:
    """The grids of the host fields for ``host``: λ over the host's grid, TIES' trim fraction
    k over :data:`~.ties.K_GRID`, DARE's p over :data:`P_GRID`; a host that does not take k
    or p gets ``(None,)`` for it (it stays None, unused)."""
    ties_host = host in ("ties", "dare_ties")
    return {
        "lam": TIES_LAMBDA_GRID if ties_host else LAMBDA_GRID,
        "k": K_GRID if ties_host else (None,),
        "p": P_GRID if host.startswith("dare") else (None,),
    }


def host_merge(
    host: str, inputs: MergeInputs, experts: Sequence[StateDict], params: Any
) -> MergeResult:
    """Merge ``experts`` with the registered host method ``host`` and the host fields of
    ``params`` (lam, k, p as the host takes them); the other inputs (base, data, seed) are
    ``inputs``'."""
    info = registry.get_method(host, ("merging",))
    values = {f: getattr(params, f) for f in _HOST_FIELDS[host]}
    missing = [f for f, v in values.items() if v is None]
    if missing:
        raise ValueError(f"host {host!r} needs resolved {missing} (got None)")
    host_params = info.params_cls(**values)
    check = getattr(host_params, "validate", None)
    if check is not None:
        check()
    sub = MergeInputs(
        base=inputs.base,
        experts=list(experts),
        tasks=inputs.tasks,
        groups=inputs.groups,
        data=inputs.data,
        seed=inputs.seed,
        artefacts=inputs.artefacts,
    )
    return info.cls().merge(sub, host_params)


class _HostParamsMixin:
    """:meth:`grid_for` by host: the class-level ``search`` holds the default host's (Task
    Arithmetic) grids; ``grid_for(params)`` those of ``params.host``."""

    search: ClassVar[dict[str, tuple[Any, ...]]]

    @classmethod
    def grid_for(cls, params: Any) -> dict[str, tuple[Any, ...]]:
        out = host_search(params.host)
        if "keep" in cls.search:
            out["keep"] = cls.search["keep"]
        return out

    @classmethod
    def search_stages(cls, params: Any):
        """The host's own stages: TIES hosts λ (and keep) at k = 0.2, then k
        (:func:`~.ties.ties_stages`); DARE hosts all of that without dropping, then p
        (:func:`~.dare.dare_stages`); Task Arithmetic one stage."""
        grid = cls.grid_for(params)
        return dare_stages(grid) if params.host.startswith("dare") else ties_stages(grid)


def _validate_host_fields(p: Any) -> None:
    takes = _HOST_FIELDS[p.host]
    if "p" not in takes and p.p is not None:
        raise ValueError(f"host {p.host!r} has no drop rate p (only dare_ta, dare_ties do)")
    if "k" not in takes and p.k != type(p).__dataclass_fields__["k"].default:
        raise ValueError(f"host {p.host!r} has no trim fraction k (only ties, dare_ties do)")
    if p.lam is not None and p.lam < 0:
        raise ValueError(f"lam must be >= 0, got {p.lam}")
    if p.k is not None and not 0.0 < p.k <= 1.0:
        raise ValueError(f"k must be in (0, 1], got {p.k}")
    if p.p is not None and not 0.0 <= p.p < 1.0:
        raise ValueError(f"p must be in [0, 1), got {p.p}")


@register("cass", family="merging")
class Cass(_HostParamsMixin, MergingMethod):
    """CASS (Contribution-Aware Structured Sparsity) as a plug-in filter: for each task, keep
    only the attention heads and FFN / hidden neurons that contribute most to that task,
    then merge the filtered experts with a host method (Task Arithmetic, TIES, DARE).

    Everything below the first sentence is OUR specification (the paper's method is public
    only through its abstract):

    * contribution of group g (a :class:`Group` of ``inputs.groups``) to task t: the
      first-order Taylor estimate of the loss reduction that g's slice of τ_t brings at θ0,
      c_t(g) = −⟨∇_θ L_t(θ0), τ_t[g]⟩, L_t the mean cross-entropy of θ0 with task t's head on
      the first ``n_examples`` train examples of task t;
    * or, with ``score="knockout"`` (ours, offered because the Taylor score at θ0 is only a
      first-order estimate, far from θ0 where τ_t is long): c_t(g) = L_t(θ_t − τ_t[g]) −
      L_t(θ_t), the loss the expert loses when g's slice of its vector is removed, on the same
      examples, one loss evaluation per group (:func:`knockout_scores`);
    * within each (layer, kind), the top ceil(keep · count) groups by c_t are kept (at least
      one; equal scores keep the lower index);
    * the filtered vector is τ_t on the kept groups and on every entry no group covers
      (embeddings, positions, norms, output biases: ungrouped, kept dense), 0 elsewhere;
    * the host ``host`` (a registered merging method) merges the filtered experts
      θ0 + m_t ∘ τ_t with its own parameters ``lam`` (all hosts), ``k`` (TIES trim) and ``p``
      (DARE drop rate); None: searched over the host's grid.

    Defaults: host Task Arithmetic, keep searched over {0.25, 0.5, 0.75} (ours), λ over the
    host's grid (TA, DARE-TA: 0.01, ..., 1.00; TIES, DARE-TIES: 0.01, ..., 2.5, see ties.py),
    k over {0.1, 0.2, 0.3} (TIES hosts, ours: after keep and λ at k = 0.2, TIES' own two
    stages; other hosts leave it None), p over {0.1, 0.3, 0.5, 0.7, 0.9} (DARE hosts, after
    the host's other parameters without dropping, DARE's own stages; other hosts leave it
    None), n_examples = 1024 (ours). An explicit k or p is not searched. The class-level
    ``search`` holds the default host's grids; :meth:`grid_for` gives the chosen host's.
    ∇L_t(θ0) is computed once per ``MergeInputs`` (memoised across the grid points of one
    selection: it depends on neither keep nor the host). Task vectors: the host's (for TA
    the filtered m_t ∘ τ_t); ``info``: the mask density per task and ``mask_overlap``, the
    mean pairwise Jaccard index of the groups the tasks kept (:func:`mask_overlap`).

    Source: "Contribution-Aware Structured Sparsity" (2026; abstract only: "a
    contribution-aware structured mask selecting task-relevant attention heads and FFN
    neurons per task, used as a plug-in filter in front of TA, TIES and DARE"); scoring,
    selection and host application are ours (see the docstring).
    """

    data_free = False
    search = {"keep": KEEP_GRID, **host_search("task_arithmetic")}
    test_params = {"keep": 0.5, "n_examples": 64}

    @dataclass
    class Params:
        host: CassHost = "task_arithmetic"
        keep: float | None = None  # None: chosen on validation over KEEP_GRID
        lam: float | None = None  # host λ; None: chosen over the host's grid
        k: float | None = None  # TIES trim (hosts ties, dare_ties); None: chosen over K_GRID
        p: float | None = None  # DARE drop rate (hosts dare_*); None: chosen over P_GRID
        n_examples: int = 1024  # train examples per task for ∇L_t(θ0)
        score: CassScore = "taylor"  # or "knockout": L_t(θ_t − τ_t[g]) − L_t(θ_t)

        def validate(self) -> None:
            if self.keep is not None and not 0.0 < self.keep <= 1.0:
                raise ValueError(f"keep must be in (0, 1], got {self.keep}")
            if self.score not in CASS_SCORES:
                raise ValueError(f"score must be one of {list(CASS_SCORES)}, got {self.score!r}")
            if self.n_examples < 1:
                raise ValueError(f"n_examples must be >= 1, got {self.n_examples}")
            _validate_host_fields(self)

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        require_data(inputs, "cass")
        if not inputs.groups:
            raise ValueError("cass needs the trunk's groups (MergeInputs.groups is empty)")
        if params.keep is None:
            raise ValueError("cass needs a resolved keep (got None)")
        tvs = inputs.task_vectors()
        if params.score == "knockout":
            scores, read_n = memo(  # nor do the knock-out losses at θ_t
                inputs, ("cass_knockout", params.n_examples),
                lambda: _knockouts(inputs, tvs, params.n_examples),
            )  # fmt: skip
            chosen = [select_groups(inputs.groups, c, params.keep) for c in scores]
            masks = [structured_mask(inputs.base, inputs.groups, ch) for ch in chosen]
        else:
            grads, read_n = memo(  # ∇L_t(θ0) does not depend on keep or the host's parameters
                inputs, ("cass_grads", params.n_examples),
                lambda: _gradients(inputs, params.n_examples),
            )  # fmt: skip
            masks = contribution_masks(inputs.base, tvs, inputs.groups, grads, params.keep)
        filtered = [  # θ0 + m_t ∘ τ_t, taken as θ_t on kept entries and θ0 elsewhere
            {k: torch.where(m[k].to(e[k].device), e[k], inputs.base[k]) for k in inputs.base}
            for e, m in zip(inputs.experts, masks)
        ]
        res = host_merge(params.host, inputs, filtered, params)
        res.examples += read_n
        res.info = {
            **res.info,
            "mask_density": [_density(m) for m in masks],
            "mask_overlap": mask_overlap([groups_set(m, inputs.groups) for m in masks]),
            "host": params.host,
        }
        return res


@register("cass_tuning", family="merging")
class CassTuning(_HostParamsMixin, MergingMethod):
    """CASS-Tuning: experts fine-tuned under CASS gradient masks (the method's own artefact
    ``masked_expert``, one per task), merged by the host method with no further filtering.

    OUR specification (the paper is public only through its abstract: "CASS-Tuning, where
    masks constrain fine-tuning gradients"): before fine-tuning no τ exists, so the mask of
    task t keeps, within each (layer, kind), the top ceil(keep · count) groups by
    ‖∇L_t(θ0)[g]‖² (the first-order gain of one gradient step restricted to g; at least one)
    plus every ungrouped entry (:func:`tuning_masks`), L_t the mean cross-entropy of θ0 with
    task t's frozen head on the first ``n_examples`` train examples of task t; expert t is
    fine-tuned from θ0 with the standard experts' recipe and the gradients outside its mask
    zeroed (:meth:`build_artefact`). Overlap reduction: the tasks choose their masks in the
    spec's task order, and task t ranks group g by ‖∇L_t(θ0)[g]‖² · (1 − overlap)^u(g), u(g)
    the number of earlier tasks that kept g (:func:`penalised_selection`), so a group another
    task already trains is taken only where it matters more than the free ones. ``merge``
    then combines those experts with ``host`` and its ``lam`` / ``k`` / ``p``.

    Defaults (ours): keep = 0.5 (fixed: it defines the experts, so it is not searched; a list
    gives one expert set and one cell per value), overlap = 0.5 (fixed, as keep; 0 chooses
    each mask alone), n_examples = 256, host Task Arithmetic with
    λ over its grid (TIES hosts: 0.01, ..., 2.5, see ties.py), k over {0.1, 0.2, 0.3} after λ
    (TIES hosts: TIES' two stages), p over {0.1, ..., 0.9} after those (DARE hosts: DARE's
    stages). Task vectors: the host's, of the masked experts; ``info["mask_overlap"]``: the
    mean pairwise Jaccard index of the groups whose entries each expert moved from θ0.

    Source: "Contribution-Aware Structured Sparsity" (2026; abstract only: "CASS-Tuning, where
    masks constrain fine-tuning gradients"); the gradient-norm selection is ours.
    """

    search = host_search("task_arithmetic")
    test_params = {"n_examples": 32}
    ARTEFACT: ClassVar[str] = "masked_expert"

    @dataclass
    class Params:
        host: CassHost = "task_arithmetic"
        keep: float = 0.5  # fraction of heads / neurons per (layer, kind) left trainable
        overlap: float = 0.5  # β: a group u earlier tasks kept scores × (1 − β)^u
        lam: float | None = None  # host λ; None: chosen over the host's grid
        k: float | None = None  # TIES trim (hosts ties, dare_ties); None: chosen over K_GRID
        p: float | None = None  # DARE drop rate (hosts dare_*); None: chosen over P_GRID
        n_examples: int = 256  # train examples per task for the masks' ∇L_t(θ0)

        def validate(self) -> None:
            if not 0.0 < self.keep <= 1.0:
                raise ValueError(f"keep must be in (0, 1], got {self.keep}")
            if not 0.0 <= self.overlap < 1.0:
                raise ValueError(f"overlap must be in [0, 1), got {self.overlap}")
            if self.n_examples < 1:
                raise ValueError(f"n_examples must be >= 1, got {self.n_examples}")
            _validate_host_fields(self)

    @classmethod
    def artefacts(cls, params: Params, section: Mapping[str, Any]) -> list[MethodArtefact]:
        """One masked fine-tune per task, defined by keep, overlap and n_examples, and with an
        overlap penalty by the spec's task order (a task's mask depends on the tasks before
        it). The host's parameters do not change the experts: settings that differ only there
        share them."""
        request: dict[str, Any] = {"keep": params.keep, "n_examples": params.n_examples}
        if params.overlap > 0:
            request.update(overlap=params.overlap, tasks=list(section.get("tasks", ())))
        return [MethodArtefact(cls.ARTEFACT, request)]

    @classmethod
    def build_artefact(cls, request: MethodArtefact, ctx: ArtefactContext) -> StateDict:
        """Expert t fine-tuned from θ0 under its CASS-Tuning mask (with an overlap penalty:
        the gradients at θ0 of the tasks before t, through ``ctx.peer``, replay their
        choices)."""
        keep, n = request.params["keep"], request.params["n_examples"]
        overlap = request.params.get("overlap", 0.0)
        order = list(request.params.get("tasks", [ctx.task])) if overlap > 0 else [ctx.task]
        if ctx.task not in order:
            raise ValueError(f"task {ctx.task!r} is not in the request's tasks {order}")
        earlier = order[: order.index(ctx.task)]
        if earlier and ctx.peer is None:
            raise ValueError(f"cass_tuning's overlap penalty needs the tasks {earlier} (no peer)")
        trunk = ctx.trunk

        def gradient(head, train) -> StateDict:
            x, y = train
            trunk.zero_grad()
            F.cross_entropy(F.linear(trunk(x[:n]), *head), y[:n]).backward()
            return {k: p.grad.detach().clone() for k, p in trunk.named_parameters()}

        grads = [gradient(*ctx.peer(t)) for t in earlier]  # type: ignore[misc]
        grads.append(gradient(ctx.head, ctx.train))
        base = {k: v.detach() for k, v in trunk.state_dict().items()}
        masks = tuning_masks(base, ctx.groups, grads, keep, overlap)
        ctx.meta["grad_mask_density"] = _density(masks[-1])
        ctx.meta["earlier_tasks"] = len(earlier)
        return ctx.finetune(mask=masks[-1])

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        tuned = inputs.artefact(self.ARTEFACT)
        res = host_merge(params.host, inputs, tuned, params)
        if res.task_vectors is None and res.stats is None:  # the record's: of the masked experts
            res.task_vectors = task_vectors(inputs.base, tuned)
        moved = [  # a group counts as kept where its expert moved from θ0
            groups_set({k: t[k] != inputs.base[k] for k in inputs.base}, inputs.groups)
            for t in tuned
        ]
        res.info = {**res.info, "host": params.host, "keep": params.keep}
        res.info["overlap_penalty"] = params.overlap
        res.info["mask_overlap"] = mask_overlap(moved)
        return res


def _gradients(inputs: MergeInputs, n: int) -> tuple[list[StateDict], int]:
    """∇L_t(θ0) per task t (mean cross-entropy on its first n train examples) and the number
    of examples read."""
    data = require_data(inputs, "cass")
    grads, read_n = [], 0
    for t in range(len(inputs.experts)):
        x, y = read(data, t, "train", n)
        read_n += x.shape[0]
        grads.append(loss_gradient(data, inputs.base, t, x, y))
    return grads, read_n


def _knockouts(
    inputs: MergeInputs, tvs: Sequence[StateDict], n: int
) -> tuple[list[torch.Tensor], int]:
    """:func:`knockout_scores` per task t at its expert (mean cross-entropy on its first n
    train examples with its head) and the number of examples read."""
    data = require_data(inputs, "cass")
    out, read_n = [], 0
    for t, (expert, tv) in enumerate(zip(inputs.experts, tvs)):
        x, y = read(data, t, "train", n)
        read_n += x.shape[0]

        def loss(trunk, t=t, x=x, y=y) -> float:
            return float(F.cross_entropy(logits(data, trunk, t, x), y))

        out.append(knockout_scores(loss, expert, tv, inputs.groups))
    return out, read_n


def groups_set(flags: Mapping[str, torch.Tensor], groups: Sequence[Group]) -> frozenset[int]:
    """Indices of the groups that own at least one True entry of ``flags`` (trunk keys)."""
    return frozenset(
        i for i, g in enumerate(groups)
        if any(bool(flags[k].narrow(d, a, b - a).any()) for k, d, a, b in g.slices)
    )  # fmt: skip


def mask_overlap(chosen: Sequence[frozenset[int]]) -> float | None:
    """Mean over pairs of tasks of the Jaccard index |A ∩ B| / |A ∪ B| of the groups each
    task kept; None for fewer than two tasks."""
    pairs = [(a, b) for i, a in enumerate(chosen) for b in chosen[i + 1 :]]
    if not pairs:
        return None
    return sum(len(a & b) / len(a | b) if a | b else 1.0 for a, b in pairs) / len(pairs)


def _density(mask: Mapping[str, torch.Tensor]) -> float:
    total = sum(m.numel() for m in mask.values())
    return sum(int(m.sum()) for m in mask.values()) / total if total else 0.0

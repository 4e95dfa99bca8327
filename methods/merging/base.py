"""What every merging method shares: state dicts, task vectors, structured groups, the data a
data-dependent method may ask for, and the result a method returns.

A merging method is a pure function (DESIGN.md, "the pillar contract"): ``merge(inputs,
params)`` reads the base trunk θ0, the experts' trunks θ_t, its resolved parameters and, for a
data-dependent method, :class:`MergeData`; it returns a :class:`MergeResult` and changes none
of its inputs. Only the trunk is merged: every task keeps its own frozen head (the pillar's
job), so the state dicts here hold trunk parameters only.

Artefacts of a method's own (e.g. experts fine-tuned under the method's masks): the method
declares them in :meth:`~sparsebench.suite.method.Method.artefacts` (one
:class:`~sparsebench.suite.method.MethodArtefact` per distinct artefact a setting needs); the
pillar makes one per (trunk, seed, task), built by :meth:`MergingMethod.build_artefact` from an
:class:`ArtefactContext`, and hands the built ones to ``merge`` as
``inputs.artefacts[kind]``, one state dict per task.

Hyperparameter search: a ``Params`` field whose value is ``None`` is chosen by the pillar on
each task's validation split over the method's :attr:`MergingMethod.search` grid (by average
normalized accuracy); ``merge`` always receives resolved values (no ``None``). A method whose
paper tunes its parameters one after the other (DARE: the host's λ without dropping, then
the drop rate at that λ) says so in :meth:`MergingMethod.search_stages`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

import torch

from sparsebench.suite.method import Method, MethodArtefact

StateDict = dict[str, torch.Tensor]  # parameter name -> tensor (trunk only)
Split = Literal["train", "val", "test"]
# transform(t, τ_t[key]) -> the vector task t contributes at that key; it may overwrite its
# argument (a fresh tensor) and return it. Called with the keys in order within each task.
Transform = Callable[[int, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Group:
    """One structured unit of the trunk: an attention head or an FFN / hidden neuron.

    Attributes:
        kind: ``"head"`` or ``"neuron"``.
        layer: the module it belongs to (``"blocks.0.attn"``, ``"blocks.0.mlp"``, ``"fc0"``);
            CASS ranks groups within one (layer, kind).
        index: head or neuron index within the layer.
        slices: ``(param key, dim, start, stop)``: the parameter entries the unit owns (e.g.
            rows of W_q, W_k, W_v and columns of W_o for a head). Groups never overlap.
    """

    kind: str
    layer: str
    index: int
    slices: tuple[tuple[str, int, int, int], ...]

    def mask_into(self, masks: StateDict, value: bool = True) -> None:
        """Set this group's entries of the boolean ``masks`` (same keys as the trunk)."""
        for key, dim, start, stop in self.slices:
            masks[key].narrow(dim, start, stop - start).fill_(value)


class MergeData(Protocol):
    """Data and model access the pillar gives data-dependent methods (Fisher, RegMean,
    AdaMerging, TALL masks, CASS). Every call counts toward the record's ``examples``.

    ``examples(t, split, n)`` -> ``(x, y)``: the first ``n`` examples of task ``t``'s split
    (fixed order), x of shape (n, *input_shape), y (n,) int64.
    ``logits(trunk, t, x)`` -> (n, classes_t): the trunk (a state dict, possibly holding
    tensors that require grad: the call is differentiable in them) with task t's frozen head.
    ``linear_inputs(trunk, t, x)`` -> ``{weight key: (rows, in_features)}``: the inputs of
    every ``nn.Linear`` of the trunk (tokens flattened into rows), for Gram matrices.
    ``linear_keys``: the weight keys of those linear layers.
    ``features(trunk, x)`` -> (n, d) and ``head_logits(t, features)`` -> (n, classes_t): the
    two halves of ``logits`` (the trunk is shared by every task: a method that evaluates one
    merged trunk on several tasks runs it once on their inputs concatenated).
    ``selection_score(trunk)`` -> float: the pillar's selection criterion of one merged trunk
    (average normalized accuracy on the validation examples the selection reads; higher is
    better), for a method whose own starting point is a hyperparameter chosen on validation
    (AdaMerging's initial λ).
    """

    n_tasks: int
    linear_keys: Sequence[str]

    def examples(self, task: int, split: Split, n: int) -> tuple[torch.Tensor, torch.Tensor]: ...

    def logits(
        self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor
    ) -> torch.Tensor: ...

    def linear_inputs(
        self, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor
    ) -> dict[str, torch.Tensor]: ...

    def features(self, trunk: Mapping[str, torch.Tensor], x: torch.Tensor) -> torch.Tensor: ...

    def head_logits(self, task: int, features: torch.Tensor) -> torch.Tensor: ...

    def selection_score(self, trunk: Mapping[str, torch.Tensor]) -> float: ...


@dataclass
class MergeInputs:
    """Everything a merging method may read.

    Attributes:
        base: θ0's trunk.
        experts: θ_t per task, same keys, shapes and dtypes as ``base``.
        tasks: task names, in the order of ``experts``.
        groups: the trunk's heads and neurons (for structured methods; may be empty).
        data: the pillar's :class:`MergeData` (None in pure unit tests).
        seed: seed of any randomness (DARE's drop): a merge is a function of its inputs.
        artefacts: kind -> one state dict per task (in task order): the artefacts the method
            declared (:meth:`MergingMethod.build_artefact` made them).
    """

    base: StateDict
    experts: Sequence[StateDict]
    tasks: Sequence[str] = ()
    groups: Sequence[Group] = ()
    data: MergeData | None = None
    seed: int = 0
    artefacts: Mapping[str, Sequence[StateDict]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.experts:
            raise ValueError("merging needs at least one expert")
        keys = set(self.base)
        for i, e in enumerate(self.experts):
            if set(e) != keys:
                diff = sorted(keys ^ set(e))[:5]
                raise ValueError(f"expert {i} has other parameters than the base: {diff}")
            for k, v in e.items():
                if v.shape != self.base[k].shape:
                    raise ValueError(
                        f"expert {i}: {k} has shape {tuple(v.shape)}, "
                        f"the base {tuple(self.base[k].shape)}"
                    )
        if self.tasks and len(self.tasks) != len(self.experts):
            raise ValueError(f"{len(self.tasks)} task names for {len(self.experts)} experts")
        for kind, per_task in self.artefacts.items():
            if len(per_task) != len(self.experts):
                raise ValueError(
                    f"artefact {kind!r}: {len(per_task)} files for {len(self.experts)} experts"
                )

    def artefact(self, kind: str) -> Sequence[StateDict]:
        """The method's artefacts of ``kind``, one per task; a clear error when the pillar
        did not provide them."""
        if kind not in self.artefacts:
            have = ", ".join(sorted(self.artefacts)) or "none"
            raise ValueError(
                f"the merge needs its artefact {kind!r} (declared by the method's artefacts()); "
                f"the inputs hold: {have}"
            )
        return self.artefacts[kind]

    def task_vectors(self) -> list[StateDict]:
        """τ_t = θ_t − θ0 per task (Ilharco et al. 2023, Eq. 1)."""
        return task_vectors(self.base, self.experts)


@dataclass
class MergeResult:
    """What a merge returns.

    Attributes:
        state: the merged trunk (one model for every task); None when ``per_task`` is given,
            or in the result of :meth:`MergingMethod.merge_vector` (see ``vector``).
        per_task: one trunk per task (TALL masks), in task order.
        task_vectors: the (sparsified) task vectors the method combined, for the record's
            task-vector density and sign-conflict fraction (None: ``stats``, else the raw
            task vectors).
        stats: for a method that never holds its T task vectors at once, how to count the
            same statistics (:class:`TaskVectorStats`, e.g. :meth:`TaskVectorStats.stream`
            over the inputs again): called once, for the record, outside the merge's time;
            takes precedence over ``task_vectors``.
        vector: the merged task vector τ_m of a method whose merge is θ0 + λ·τ_m
            (:attr:`MergingMethod.scale`); :meth:`scaled` turns it into ``state``.
        examples: data examples the method read (0 for data-free methods).
        info: method-specific numbers for the record (e.g. AdaMerging's learned λ).
    """

    state: StateDict | None = None
    per_task: list[StateDict] | None = None
    task_vectors: list[StateDict] | None = None
    stats: Callable[[], TaskVectorStats] | None = None
    vector: StateDict | None = None
    examples: int = 0
    info: dict[str, Any] = field(default_factory=dict)

    def trunk_for(self, task: int) -> StateDict:
        if self.per_task is not None:
            return self.per_task[task]
        assert self.state is not None
        return self.state

    def scaled(
        self, base: Mapping[str, torch.Tensor], lam: float, in_place: bool = False
    ) -> MergeResult:
        """θ0 + λ·τ_m as a result with ``state`` and no ``vector``: new tensors (the
        selection evaluates many λ on one τ_m), or, ``in_place``, τ_m's own tensors
        overwritten (a merge from scratch: no second copy of the trunk)."""
        if self.vector is None:
            raise ValueError("scaled() needs the merged task vector (MergeResult.vector)")
        if in_place:  # λ·τ_m + θ0: the same float operations as θ0 + λ·τ_m
            state = {k: self.vector[k].mul_(lam).add_(base[k]) for k in base}
        else:
            state = add_scaled(base, self.vector, lam)
        return dataclasses.replace(self, state=state, vector=None)

    def record_stats(self, base: Mapping[str, torch.Tensor], experts: Iterable[StateDict]):
        """The statistics of the record's density and sign-conflict columns: ``stats``, else
        those of ``task_vectors``, else those of the raw task vectors of ``experts``."""
        if self.stats is not None:
            return self.stats()
        if self.task_vectors is not None:
            return TaskVectorStats.of(self.task_vectors)
        return TaskVectorStats.stream(base, list(experts))


@dataclass
class SignCounts:
    """Per coordinate of one parameter: how many of the task vectors fed so far are positive
    and negative there (uint8: at most 255 tasks)."""

    pos: torch.Tensor
    neg: torch.Tensor

    @classmethod
    def like(cls, t: torch.Tensor) -> SignCounts:
        return cls(
            torch.zeros(t.shape, dtype=torch.uint8, device=t.device),
            torch.zeros(t.shape, dtype=torch.uint8, device=t.device),
        )

    def add(self, v: torch.Tensor) -> None:
        """Count one task's entries of this parameter (NaN counts as neither sign)."""
        self.pos.add_(v > 0)
        self.neg.add_(v < 0)


@dataclass
class TaskVectorStats:
    """The record's task-vector statistics, fed parameter by parameter (:class:`SignCounts`
    of every task at one key), so no method has to hold its T task vectors at once.

    Attributes:
        n_vectors: T, the number of task vectors.
        entries: coordinates seen (per task vector).
        nonzero_hist: ``nonzero_hist[m]``: coordinates where exactly m vectors are nonzero.
        conflicts: coordinates with at least two nonzero entries of both signs.
    """

    n_vectors: int
    entries: int = 0
    nonzero_hist: list[int] = field(default_factory=list)
    conflicts: int = 0

    def __post_init__(self) -> None:
        if not self.nonzero_hist:
            self.nonzero_hist = [0] * (self.n_vectors + 1)
        if self.n_vectors > 255:
            raise ValueError(f"SignCounts count at most 255 task vectors, got {self.n_vectors}")

    def add(self, counts: SignCounts) -> None:
        """Fold in one parameter's counts (over all T task vectors)."""
        m = counts.pos + counts.neg
        hist = torch.bincount(m.reshape(-1).cpu(), minlength=self.n_vectors + 1)
        for i, c in enumerate(hist.tolist()):
            self.nonzero_hist[i] += c
        self.entries += m.numel()
        self.conflicts += int(((counts.pos > 0) & (counts.neg > 0)).sum())

    @classmethod
    def of(cls, vectors: Sequence[Mapping[str, torch.Tensor]]) -> TaskVectorStats:
        """The statistics of task vectors held as state dicts."""
        stats = cls(len(vectors))
        for k in vectors[0] if vectors else ():
            counts = SignCounts.like(vectors[0][k])
            for v in vectors:
                counts.add(v[k])
            stats.add(counts)
        return stats

    @classmethod
    def stream(
        cls,
        base: Mapping[str, torch.Tensor],
        experts: Sequence[Mapping[str, torch.Tensor]],
        transform: Transform | None = None,
    ) -> TaskVectorStats:
        """The statistics of τ_t = θ_t − θ0 (or of ``transform(t, τ_t)``, fed as by
        :func:`sum_task_vectors`), one τ_t[key] at a time."""
        stats = cls(len(experts))
        for k, b in base.items():
            counts = SignCounts.like(b)
            for t, e in enumerate(experts):
                tv = e[k] - b
                counts.add(tv if transform is None else transform(t, tv))
            stats.add(counts)
        return stats

    @property
    def density(self) -> float:
        """As :func:`density`."""
        nnz = sum(m * c for m, c in enumerate(self.nonzero_hist))
        total = self.entries * self.n_vectors
        return nnz / total if total else 0.0

    @property
    def sign_conflict(self) -> float:
        """As :func:`sign_conflict`."""
        multi = sum(self.nonzero_hist[2:])
        return self.conflicts / multi if multi else 0.0


TensorPair = tuple[torch.Tensor, torch.Tensor]


@dataclass
class ArtefactContext:
    """What the pillar gives :meth:`MergingMethod.build_artefact` for one (trunk, seed, task).

    Attributes:
        task: the task's name.
        seed: the seed of θ0 and the experts.
        trunk: a fresh trunk module holding θ0 (train mode; for gradients at θ0).
        base: θ0's trunk state dict.
        expert: the task's standard expert (trunk state dict).
        head: the task's frozen head (weight (classes, features), bias (classes,)).
        train: (x, y) of the task's train split, in its fixed order.
        groups: the trunk's heads and neurons.
        config: the trunk's architecture (the pillar's config object; informational).
        finetune: ``finetune(mask=None) -> trunk state dict``: fine-tune the trunk from θ0 on
            the task under its frozen head with the pillar's expert recipe and seed (the same
            training as the standard expert's); ``mask`` (trunk key -> bool tensor) confines
            the update to its True entries (the others stay exactly θ0).
        meta: numbers the method adds to the artefact's ``meta.json`` (optional).
        peer: ``peer(name) -> (head, (x, y))``: another task of the spec (any name in its
            ``tasks``), its frozen head and train split as for this task, for an artefact that
            depends on the other tasks (the pillar makes every method artefact of a seed wait
            for all of that seed's experts); None where no other task is available.
    """

    task: str
    seed: int
    trunk: torch.nn.Module
    base: StateDict
    expert: StateDict
    head: tuple[torch.Tensor, torch.Tensor]
    train: tuple[torch.Tensor, torch.Tensor]
    groups: Sequence[Group]
    config: Any
    finetune: Callable[..., StateDict]
    meta: dict[str, Any] = field(default_factory=dict)
    peer: Callable[[str], tuple[TensorPair, TensorPair]] | None = None


class MergingMethod(Method):
    """Base class of the ``merging`` family (register with ``@register(name, "merging")``).

    Class attributes:
        search: field -> candidate values; a field left ``None`` in ``Params`` is chosen over
            these on validation (the grid is the paper's where it gives one; see each
            docstring).
        data_free: False when ``merge`` needs :class:`MergeData`.

    A method that needs artefacts of its own declares them in ``artefacts(params, section)``
    and builds each in :meth:`build_artefact`; ``merge`` reads them from
    ``inputs.artefacts``.
    """

    search: ClassVar[dict[str, tuple[Any, ...]]] = {}
    data_free: ClassVar[bool] = True
    # The Params field λ of a method whose merge is θ0 + λ·τ_m with τ_m independent of λ:
    # such a method defines merge_vector (τ_m), and the selection computes τ_m once for all
    # the λ it tries at the same values of the other fields. None: merge() only.
    scale: ClassVar[str | None] = None

    @classmethod
    def build_artefact(cls, request: MethodArtefact, ctx: ArtefactContext) -> StateDict:
        """Make one artefact ``request`` (one of :meth:`artefacts`' requests) for the task of
        ``ctx``: a state dict of tensors, saved by the pillar (safetensors) and handed to
        ``merge`` as ``inputs.artefacts[request.kind][task]``."""
        raise NotImplementedError(
            f"{cls.__name__} declares the artefact {request.kind!r} but defines no "
            "build_artefact(request, ctx)"
        )

    @classmethod
    def grid_for(cls, params: Any) -> dict[str, tuple[Any, ...]]:
        """The grid of the fields left ``None`` in ``params`` (default :attr:`search`; a method
        whose grid depends on another parameter, such as CASS's host operator, overrides it)."""
        return cls.search

    @classmethod
    def search_stages(cls, params: Any) -> list[tuple[dict[str, tuple[Any, ...]], dict[str, Any]]]:
        """The selection as successive stages ``(axes, fixed)``: stage i searches the product
        of its ``axes`` with the values chosen by the stages before it, and with ``fixed``
        standing in for open fields that a later stage chooses. Default: one stage, the whole
        grid. Only fields left ``None`` in ``params`` are searched or fixed."""
        return [(cls.grid_for(params), {})]

    def merge(self, inputs: MergeInputs, params: Any) -> MergeResult:
        """The merged model(s). Default, for a method with a :attr:`scale`: θ0 + λ·τ_m from
        :meth:`merge_vector`."""
        if self.scale is None:
            raise NotImplementedError
        res = self.merge_vector(inputs, params)
        return res.scaled(inputs.base, getattr(params, self.scale), in_place=True)

    def merge_vector(self, inputs: MergeInputs, params: Any) -> MergeResult:
        """τ_m (``MergeResult.vector``, new tensors, no ``state``) of a method with a
        :attr:`scale`: a function of every field of ``params`` but that one, which it must
        not read."""
        raise NotImplementedError(f"{type(self).__name__} declares no scale parameter")


# ---------------------------------------------------------------------- task-vector algebra
def task_vectors(base: Mapping[str, torch.Tensor], experts: Iterable[StateDict]) -> list[StateDict]:
    """τ_t = θ_t − θ0 for every expert (new tensors)."""
    return [{k: e[k] - base[k] for k in base} for e in experts]


def sum_task_vectors(
    base: Mapping[str, torch.Tensor],
    experts: Sequence[Mapping[str, torch.Tensor]],
    transform: Transform | None = None,
) -> StateDict:
    """Σ_t τ_t (or Σ_t ``transform(t, τ_t)``), parameter by parameter (keys in ``base``'s
    order, tasks in order within a key): one τ_t[key] at a time, never T task vectors nor a
    T×P stack. The tasks are added in order, as ``torch.stack(...).sum(0)`` adds them. New
    tensors."""
    out: StateDict = {}
    for k, b in base.items():
        acc = experts[0][k] - b
        if transform is not None:
            acc = transform(0, acc)
        buf = torch.empty_like(acc)
        for t in range(1, len(experts)):
            tv = torch.sub(experts[t][k], b, out=buf)
            acc.add_(tv if transform is None else transform(t, tv))
        out[k] = acc
    return out


def add_scaled(
    base: Mapping[str, torch.Tensor], vector: Mapping[str, torch.Tensor], lam: float = 1.0
) -> StateDict:
    """θ0 + λ·τ (new tensors)."""
    return {k: base[k] + lam * vector[k] for k in base}


def combine(
    vectors: Sequence[Mapping[str, torch.Tensor]],
    fn: Callable[[torch.Tensor], torch.Tensor],
) -> StateDict:
    """Apply ``fn`` to each parameter's task vectors stacked on dim 0 (shape (T, *shape))."""
    return {k: fn(torch.stack([v[k] for v in vectors])) for k in vectors[0]}


def density(vectors: Sequence[Mapping[str, torch.Tensor]]) -> float:
    """Fraction of nonzero entries of the task vectors, over all tasks and parameters."""
    nnz = sum(int(torch.count_nonzero(v[k])) for v in vectors for k in v)
    total = sum(v[k].numel() for v in vectors for k in v)
    return nnz / total if total else 0.0


def sign_conflict(vectors: Sequence[Mapping[str, torch.Tensor]]) -> float:
    """Fraction of coordinates, among those where at least two task vectors are nonzero,
    whose nonzero entries do not all share one sign (Yadav et al. 2023, Sec. 3's sign
    interference); 0.0 when no coordinate has two nonzero entries."""
    both = conflicts = 0
    for k in vectors[0]:
        s = torch.stack([torch.sign(v[k]) for v in vectors])
        pos = (s > 0).sum(0)
        neg = (s < 0).sum(0)
        multi = (pos + neg) >= 2
        both += int(multi.sum())
        conflicts += int((multi & (pos > 0) & (neg > 0)).sum())
    return conflicts / both if both else 0.0


def group_masks(
    base: Mapping[str, torch.Tensor], groups: Iterable[Group], value: bool = True
) -> StateDict:
    """Boolean masks (trunk keys) with the entries of ``groups`` set to ``value``, the others
    to ``not value``."""
    masks = {k: torch.full(v.shape, not value, dtype=torch.bool) for k, v in base.items()}
    for g in groups:
        g.mask_into(masks, value)
    return masks

"""HASTE: hardware-aware dynamic sparse training with a group-shared fixed fan-in output layer,
semantically related label groups and a small dense head over frequent labels."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from sparsebench.methods.dst.rigl import RigL
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register

HEAD = -1  # group id of a dense-head row in a ``groups`` vector


@register("haste", family="dst")
class HASTE(RigL):
    """HASTE: hardware-aware DST whose large output layer has group-shared fixed fan-in over
    semantically related label groups, plus a small dense head over the frequent labels.

    What is known of the seed paper: its summary ("hardware-aware DST with group-shared fixed
    fan-in for a large output layer") and, as a reviewer read its full abstract, that it names
    "semantically related label groups" and "a small dense head over frequent labels" (the
    reviewer's words; the abstract's own text is not available to us). Everything below
    beyond those phrases is our reading, and every choice of ours is marked (ours). The
    structure is meant for a LARGE output layer over many, frequency-skewed labels:
    ``suite/benchmarks/dst.yaml`` runs HASTE on ``skew300`` (300 Zipf-frequency classes drawn
    around 30 super-class centres, suite/data.py).

    Structure. The output layer is the model's last prunable layer, an ``nn.Linear`` with weight
    ``(n_out, n_in)``, n_out = classes, row o = label o. (1) Dense head: the rows of the
    ``dense_head`` = F most frequent labels of the training set (``ctx.train_data``; ties: the
    lower label first, ours) stay dense (all ``n_in`` inputs) and never change. (2) Label
    groups: the other ``n_out - F`` labels are cut into groups of ``G = group_size`` labels
    (the last group has the remainder when G does not divide ``n_out - F``), and all rows of a
    group share one set of exactly ``fan_in`` input indices, so the layer is a stack of dense
    ``(G, fan_in)`` blocks over gathered inputs plus one dense ``(F, n_in)`` block. The groups
    are formed from the task at fit start (ours, how "semantically related" is made concrete):
    each label's embedding is the mean of its training inputs (flattened; a label with no
    training example gets the mean of all of them), and groups are made greedily: the
    ungrouped label farthest (Euclidean) from the mean embedding of the ungrouped labels
    seeds a group, joined by its ``G - 1`` nearest ungrouped labels (ties: lower label
    first), until none is left. Defaults (ours): G = 16, the row block of our C++ CSR kernel
    (kernels/csrc/sparse_linear.cpp, ``row_block<float>``), one AVX-512 register of fp32 and
    the M = 16 tile of tensor-core MMA; F = 4: small next to the output layer's budget at
    the benchmark's sparsities (on skew300 at 95 % the head takes 400 of the layer's 1,361
    nonzeros and the other rows keep fan-in 3) while, under skew300's Zipf frequencies, the
    4 most frequent labels carry a third of the training examples. Every other prunable
    layer is sparse unstructured. Under ``execution: cpu`` the output layer runs on the
    suite's generic CSR kernel like any other pattern (the kernel does not exploit the shared
    indices): timed by the kernels pillar (pattern ``haste``, consecutive groups without a
    head, against ``random`` on Linear(100, 1000)), HASTE's mask was neither consistently
    faster nor slower than a random mask of the same nnz (docs/dst.md).

    Allocation. Layer densities d_l come from the spec's ``distribution`` (ERK or uniform,
    ``dense_first_layer`` as in :class:`Static`), so the output layer's budget is Static's
    ``b = n_keep(n_out * n_in, d_out)``. The head is charged to it (ours): the other
    ``R = n_out - F`` rows get ``fan_in = clamp(round((b - F * n_in) / R), 1, n_in)``, and the
    layer holds ``F * n_in + R * fan_in`` nonzeros; the difference from ``b`` is given to (or
    taken from) the largest other sparse layer (ours), so the total number of nonzeros is
    exactly Static's / RigL's at the same spec. An allocation that cannot be exact (the
    compensating layer would leave [1, numel]) is refused with a ValueError naming
    ``dense_head``. Each layer's count then never changes. If ``d_out`` is 1 the output layer
    is dense. Initial masks: the unstructured layers uniformly random (as Static), each
    group's index set uniformly random (ours); weights keep their dense initialisation on the
    mask.

    Evolution (RigL for all layers; we chose RigL over SET because the output layer's group
    criterion is RigL's gradient regrowth). At RigL's update iterations (whatever RigL's
    schedule says: every ΔT = ``update_interval`` steps before T_end, t = 0 included unless
    ``update_at_start`` is false; RigL's cosine drop fraction f(t), Eq. 1) the
    unstructured layers run RigL's drop/grow (Algorithm 1), and the output layer runs it at the
    group level (ours): for every group, with ``k = floor(f(t) * fan_in)``, keep the
    ``fan_in - k`` shared indices with the largest group-summed magnitude
    ``sum_{o in group} |W[o, i]|``, and grow the ``k`` indices, among those not kept, with the
    largest group-summed dense-gradient magnitude ``sum_{o in group} |dL/dW[o, i]|``; the head
    rows stay dense. Every group's fan-in stays exactly ``fan_in``, so every layer's nonzero
    count is exact after every update. As in RigL, grown weights start at zero and their
    optimizer state is reset (MaskStore.set_mask, at every changed position); an index dropped
    and regrown in one update keeps its values, and the update iteration replaces the
    optimizer step. When ``f(t) * fan_in < 1`` the output layer stops changing while the
    (larger) unstructured layers may still change. The output layer's update runs through
    RigL's per-layer ``update_mask``, which this class overrides for that layer, so schedule,
    gradient capture and FLOPs are RigL's own.

    Training FLOPs: RigL's (Evci et al. 2020, Appendix H): ``3 f_S`` per example on regular
    iterations, ``2 f_S + f_D`` on update iterations, where the output layer's share of f_S is
    its dense FLOPs times its density ``(F n_in + R fan_in) / (n_out n_in)``. The grouping at
    fit start (one pass over the training labels and inputs), the group reductions
    (``2 n_out n_in`` adds every ΔT steps) and the top-k are not counted, as RigL's top-k is
    not.

    Raises ValueError (``check_model``) when the last prunable layer is not an ``nn.Linear`` or
    has no more than ``group_size`` rows outside the head (or ``dense_head`` is not below the
    number of labels), (``check_sparsity``, given the model's layers) when the output layer's
    budget cannot pay the head, and (``check_budget``) when the run is too short for any
    update (RigL's rule).

    Source: HASTE, 2026 seed paper (known: its summary, "hardware-aware DST with group-shared
    fixed fan-in for a large output layer", and the reviewer's reading of its abstract,
    "semantically related label groups", "a small dense head over frequent labels");
    schedule and drop/grow rule from Evci et al. 2020, "Rigging the Lottery: Making All
    Tickets Winners", ICML, Algorithm 1 and Eq. 1 (ΔT = 100, α = 0.3, cosine, T_end = 0.75,
    ERK); the grouping rule, the head's charge, group_size = 16 and dense_head = 4 are ours.
    """

    @dataclass
    class Params(RigL.Params):
        group_size: int = 16
        dense_head: int = 4

        def validate(self) -> None:
            super().validate()
            if self.group_size < 1:
                raise ValueError(f"group_size must be >= 1, got {self.group_size}")
            if self.dense_head < 0:
                raise ValueError(f"dense_head must be >= 0, got {self.dense_head}")

    _output_name: str | None = None
    _output_weight: Tensor | None = None
    groups: Tensor | None = None  # int64 (n_out,): each label's group, HEAD for head rows

    # -- checks ------------------------------------------------------------------------
    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        """RigL's rule: refuse a run whose T_end does not pass ΔT (it would never update)."""
        try:
            super().check_budget(params, total_steps)
        except ValueError as e:
            raise ValueError(f"haste: {str(e).removeprefix('rigl: ')}") from None

    @classmethod
    def check_model(cls, params: Params, layers: dict[str, nn.Module]) -> None:
        """Refuse a model whose last prunable layer (definition order) is not ``nn.Linear``, or
        has no more than ``group_size`` units outside the dense head (one group: not a large
        output layer).

        Raises: ValueError naming the layer, its type or size, and what to change."""
        if not layers:
            raise ValueError("haste: the model has no prunable layer")
        name, last = next(reversed(layers.items()))
        if not isinstance(last, nn.Linear):
            raise ValueError(
                f"haste: the last prunable layer {name!r} is {type(last).__name__}; HASTE needs "
                f"the output layer to be an nn.Linear (weight (n_classes, in_features)) to give "
                f"it a group-shared fixed fan-in"
            )
        if params.dense_head >= last.out_features:
            raise ValueError(
                f"haste: dense_head = {params.dense_head} is not below the "
                f"{last.out_features} units (labels) of the output layer {name!r}: the head "
                f"is the most frequent labels and at least group_size + 1 = "
                f"{params.group_size + 1} must stay outside it; allowed: 0 <= dense_head <= "
                f"{max(0, last.out_features - params.group_size - 1)}"
            )
        rest = last.out_features - params.dense_head
        if rest <= params.group_size:
            raise ValueError(
                f"haste: the output layer {name!r} has {last.out_features} units, "
                f"{rest} outside the dense head (dense_head = {params.dense_head}), not more "
                f"than group_size = {params.group_size}: at most one label group, not HASTE's "
                f"large output layer; use a many-class task (e.g. dataset skew300) or a "
                f"smaller group_size / dense_head"
            )

    @classmethod
    def check_sparsity(
        cls, params: Params, sparsity: float, layers: dict[str, nn.Module] | None = None
    ) -> None:
        """With the model's prunable ``layers``: refuse a dense head the output layer's budget
        at ``sparsity`` cannot pay (:meth:`layer_counts`), at validation rather than at fit
        start. Without ``layers`` nothing can be checked: the budget is the model's.

        Raises: ValueError naming ``dense_head``, the density and the counts."""
        super().check_sparsity(params, sparsity)
        if layers:
            shapes = {n: tuple(m.weight.shape) for n, m in layers.items()}
            cls.layer_counts(params, 1.0 - float(sparsity), shapes)

    # -- groups from the task --------------------------------------------------------------
    @staticmethod
    def head_labels(labels: Tensor, n_out: int, n_head: int) -> Tensor:
        """int64 ``(n_head,)``: the ``n_head`` most frequent of ``labels`` (int, any shape)
        among ``0 .. n_out - 1``, most frequent first; ties: the lower label first."""
        counts = torch.bincount(labels.reshape(-1).long(), minlength=n_out)[:n_out]
        # stable sort of -count: equal counts keep ascending label order
        return torch.sort(-counts, stable=True).indices[:n_head]

    @staticmethod
    def class_means(inputs: Tensor, labels: Tensor, n_out: int) -> Tensor:
        """float ``(n_out, prod(input_shape))``: each label's mean training input; a label
        without examples gets the mean of all inputs (ours)."""
        x = inputs.reshape(len(inputs), -1).double()
        y = labels.reshape(-1).long()
        sums = torch.zeros(n_out, x.shape[1], dtype=x.dtype).index_add_(0, y, x)
        counts = torch.bincount(y, minlength=n_out)[:n_out]
        means = sums / counts.clamp(min=1).unsqueeze(1).to(x.dtype)
        means[counts == 0] = x.mean(0)
        return means

    @staticmethod
    def cluster_groups(embeddings: Tensor, members: Tensor, group_size: int) -> list[Tensor]:
        """Greedy equal-size grouping of ``members`` (int64 label ids) by their rows of
        ``embeddings``: the ungrouped label farthest from the mean embedding of the ungrouped
        labels, plus its ``group_size - 1`` nearest ungrouped labels (Euclidean; ties: lower
        label first), until none is left. Returns the groups, each sorted ascending."""
        left = members.sort().values
        out: list[Tensor] = []
        while len(left):
            emb = embeddings[left]
            far = torch.linalg.vector_norm(emb - emb.mean(0), dim=1)
            seed = int(torch.sort(-far, stable=True).indices[0])
            near = torch.sort(torch.linalg.vector_norm(emb - emb[seed], dim=1), stable=True)
            take = near.indices[:group_size]
            out.append(left[take].sort().values)
            keep = torch.ones(len(left), dtype=torch.bool)
            keep[take] = False
            left = left[keep]
        return out

    @classmethod
    def label_groups(
        cls, inputs: Tensor, labels: Tensor, n_out: int, group_size: int, n_head: int
    ) -> Tensor:
        """int64 ``(n_out,)``: the group of every label (0, 1, ... in order of formation;
        ``HEAD`` for the dense-head labels), from training ``inputs`` and ``labels``."""
        head = cls.head_labels(labels, n_out, n_head)
        groups = torch.full((n_out,), -2, dtype=torch.int64)
        groups[head] = HEAD
        rest = torch.nonzero(groups != HEAD).flatten()
        embeddings = cls.class_means(inputs, labels, n_out)
        for g, members in enumerate(cls.cluster_groups(embeddings, rest, group_size)):
            groups[members] = g
        return groups

    @staticmethod
    def consecutive_groups(n_out: int, group_size: int) -> Tensor:
        """int64 ``(n_out,)``: groups of ``group_size`` consecutive units, no head (the kernels
        pillar's pattern, which has no task to group by)."""
        return torch.arange(n_out) // group_size

    # -- allocation ----------------------------------------------------------------------
    def allocation(self, shapes: Mapping[str, Sequence[int]]) -> tuple[dict[str, int], int]:
        """:meth:`layer_counts` at this run's params and density."""
        return self.layer_counts(self.params, self.density, shapes)

    @classmethod
    def layer_counts(
        cls, params: Params, density: float, shapes: Mapping[str, Sequence[int]]
    ) -> tuple[dict[str, int], int]:
        """Nonzeros per layer and the output layer's per-group fan-in (class docstring) at
        overall ``density``.

        Args:
            shapes: layer name -> weight shape, in definition order; the last is the output
                layer, shape ``(n_out, n_in)``.
        Returns: ``(counts, fan_in)``: name -> number of nonzeros (``numel`` = dense), and the
            fan-in of every non-head output row (``n_in`` when the layer is dense).
            ``sum(counts)`` equals Static's total at the same density, distribution and
            dense_first_layer.
        Raises: ValueError when the head's charge cannot be met exactly.
        """
        p = params
        dens = layer_densities(shapes, density, p.distribution, p.dense_first_layer)
        numel = {n: math.prod(s) for n, s in shapes.items()}
        counts = {n: numel[n] if d >= 1.0 else n_keep(numel[n], d) for n, d in dens.items()}
        out = next(reversed(shapes))
        n_out, n_in = shapes[out]
        if counts[out] >= numel[out]:
            return counts, n_in
        rest = n_out - p.dense_head
        fan_in = cls.rest_fan_in(counts[out], n_out, n_in, p.dense_head)
        new = p.dense_head * n_in + rest * fan_in
        delta, counts[out] = counts[out] - new, new
        if delta:
            sparse = [n for n in shapes if n != out and counts[n] < numel[n]]
            big = max(sparse, key=lambda n: numel[n]) if sparse else None
            if big is None or not 1 <= counts[big] + delta <= numel[big]:
                raise ValueError(
                    f"haste: at density {density:g} the output layer {out!r} holds "
                    f"{new} nonzeros (dense_head = {p.dense_head} rows of {n_in} + {rest} rows "
                    f"of fan-in {fan_in}) against its budget {new + delta}, and "
                    + (
                        f"layer {big!r} ({counts[big]} of {numel[big]}) cannot absorb {delta}"
                        if big
                        else "no other sparse layer can absorb the difference"
                    )
                    + "; lower dense_head or the sparsity"
                )
            counts[big] += delta
        return counts, fan_in

    @staticmethod
    def rest_fan_in(budget: int, n_out: int, n_in: int, n_head: int) -> int:
        """Fan-in of the non-head rows when the output layer's budget is ``budget`` nonzeros
        and ``n_head`` rows are dense: ``clamp(round((budget - n_head n_in) / (n_out -
        n_head)), 1, n_in)`` (ours)."""
        return min(n_in, max(1, round((budget - n_head * n_in) / (n_out - n_head))))

    @staticmethod
    def output_fan_in(density: float, n_in: int) -> int:
        """Per-unit fan-in of a head-less HASTE layer at density ``density``:
        ``clamp(round(density * n_in), 1, n_in)`` (ours), ``n_in`` when it is dense (the
        kernels pillar's pattern)."""
        return n_in if density >= 1.0 else min(n_in, max(1, round(density * n_in)))

    @staticmethod
    def group_columns(mask: Tensor, groups: Tensor) -> Tensor:
        """The shared input indices of each group as a bool ``(n_groups, n_in)`` tensor.

        Args:
            mask: bool ``(n_out, n_in)`` output-layer mask.
            groups: int64 ``(n_out,)`` group of each row (``HEAD``: a dense-head row).
        Raises: ValueError if the rows of some group do not share one index set, groups have
            different fan-ins, or a head row is not dense.
        """
        groups = groups.to(mask.device)
        head = groups == HEAD
        if not bool(mask[head].all()):
            raise ValueError("output mask has a dense-head row that is not dense")
        n_groups = int(groups.max()) + 1
        first = torch.full((n_groups,), len(groups), dtype=torch.int64, device=mask.device)
        rows = torch.arange(len(groups), device=mask.device)
        first = first.scatter_reduce(0, groups[~head], rows[~head], reduce="amin")
        cols = mask[first]
        if not torch.equal(cols[groups[~head]], mask[~head]):
            raise ValueError("output mask is not group-shared: units of a group differ")
        fan = cols.sum(1)
        if not bool((fan == fan[0]).all()):
            raise ValueError(f"output mask has unequal group fan-ins {sorted(set(fan.tolist()))}")
        return cols

    @staticmethod
    def group_mask(cols: Tensor, groups: Tensor) -> Tensor:
        """Expand ``cols`` bool ``(n_groups, n_in)`` to the bool ``(n_out, n_in)`` mask: row o
        is its group's columns, all ones for a head row (``groups[o] == HEAD``)."""
        groups = groups.to(cols.device)
        head = groups == HEAD
        mask = cols[groups.clamp(min=0)]
        mask[head] = True
        return mask

    @classmethod
    def output_mask(
        cls,
        n_out: int,
        n_in: int,
        fan_in: int,
        group_size: int,
        generator: torch.Generator,
        groups: Tensor | None = None,
    ) -> Tensor:
        """HASTE's initial output-layer mask, bool ``(n_out, n_in)``: for each group one
        uniformly random set of ``fan_in`` inputs (ours), drawn from ``generator`` (one
        ``(n_groups, n_in)`` uniform draw); head rows dense. ``groups`` defaults to
        :meth:`consecutive_groups` (no head): the kernels pillar times that pattern
        (``patterns: {haste: ...}``)."""
        if groups is None:
            groups = cls.consecutive_groups(n_out, group_size)
        n_groups = int(groups.max()) + 1
        cols = _row_topk(torch.rand((n_groups, n_in), generator=generator), fan_in)
        return cls.group_mask(cols, groups)

    @torch.no_grad()
    def init_masks(self, store) -> None:
        """Install HASTE's initial masks on ``store`` (a MaskStore): the allocation's counts,
        uniformly random positions, one uniformly random index set per output group, dense
        head rows (``self.groups``, set by :meth:`on_fit_start`)."""
        shapes = store.shapes
        counts, fan_in = self.allocation(shapes)
        gen = self.ctx.generator
        out = next(reversed(shapes))
        for name, shape in shapes.items():
            numel = math.prod(shape)
            if counts[name] >= numel:
                store.set_mask(name, None)
                continue
            w = store.weight(name)
            if name == out:
                n_out, n_in = shape
                mask = self.output_mask(
                    n_out, n_in, fan_in, self.params.group_size, gen, self.groups
                )
            else:
                mask = top_mask(torch.rand(shape, generator=gen), counts[name])
            store.set_mask(name, mask.to(w.device))

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        store = pl_module.masks
        self.check_model(self.params, store.layers)
        out = next(reversed(store.layers))
        n_out = store.shapes[out][0]
        data = self.ctx.train_data
        inputs, labels = data[torch.arange(len(data))]
        self.groups = self.label_groups(
            inputs, labels, n_out, self.params.group_size, self.params.dense_head
        )
        # RigL's own fit start first (whatever it sets up), then its random ERK masks are
        # replaced by HASTE's; the dense initial weights are put back so that every weight on
        # the new masks starts from its initialisation, not from RigL's masking.
        init = {n: store.weight(n).detach().clone() for n in store.layers}
        super().on_fit_start(trainer, pl_module)
        with torch.no_grad():
            for n, w in init.items():
                store.weight(n).copy_(w)
        self.init_masks(store)
        self._output_name = out
        self._output_weight = store.weight(out)

    def update_mask(self, weight: Tensor, mask: Tensor, grad: Tensor, fraction: float) -> Tensor:
        """RigL's per-layer drop/grow (called by RigL's update for every sparse layer); on the
        output layer the group-level rule :meth:`update_group_mask` instead. Arguments and
        return as :meth:`RigL.update_mask`."""
        if self._output_weight is not None and weight is self._output_weight:
            return self.update_group_mask(weight, mask, grad, fraction, self.groups)
        return RigL.update_mask(weight, mask, grad, fraction)

    @classmethod
    @torch.no_grad()
    def update_group_mask(
        cls, weight: Tensor, mask: Tensor, grad: Tensor, fraction: float, groups: Tensor
    ) -> Tensor:
        """RigL's drop/grow at the group level on the output layer; head rows stay dense.

        Args:
            weight, grad: the layer's weight and dense gradient, ``(n_out, n_in)``.
            mask: its bool group-shared mask ``(n_out, n_in)``, fan-in ``fan_in`` per group.
            fraction: share of each group's ``fan_in`` indices to drop and regrow
                (``k = floor(fraction * fan_in)`` per group).
            groups: int64 ``(n_out,)`` group of each row, ``HEAD`` for a dense-head row.
        Returns: the new bool ``(n_out, n_in)`` mask, group-shared, same fan-in per group.
        Raises: ValueError if ``mask`` is not group-shared (see :meth:`group_columns`).
        """
        cols = cls.group_columns(mask, groups)
        fan_in = int(cols[0].sum())
        k = int(fraction * fan_in)
        if k == 0:
            return mask
        groups = groups.to(weight.device)
        rows = groups != HEAD
        summed = torch.zeros(cols.shape, dtype=weight.dtype, device=weight.device)
        magnitude = summed.index_add(0, groups[rows], weight.detach().abs()[rows])
        gradient = summed.index_add(0, groups[rows], grad.detach().abs().to(weight.dtype)[rows])
        inf = torch.full_like(magnitude, math.inf)
        kept = _row_topk(torch.where(cols, magnitude, -inf), fan_in - k)
        grow = _row_topk(torch.where(kept, -inf, gradient), k)
        return cls.group_mask(kept | grow, groups)


def _row_topk(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` largest entries of every row of 2-D ``scores`` (ties: topk's
    order, deterministic on CPU)."""
    mask = torch.zeros_like(scores, dtype=torch.bool)
    if k > 0:
        mask.scatter_(1, torch.topk(scores, k, dim=1, sorted=False).indices, True)
    return mask

"""HASTE: hardware-aware dynamic sparse training with a group-shared fixed fan-in output layer."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from sparsebench.methods.dst.rigl import RigL
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register


@register("haste", family="dst")
class HASTE(RigL):
    """HASTE: hardware-aware DST whose large output layer keeps a group-shared fixed fan-in.

    Of the seed paper only its one-line summary is known ("hardware-aware DST with group-shared
    fixed fan-in for a large output layer"); everything below beyond that line is our reading,
    and every choice of ours is marked (ours). The structure is meant for a LARGE output layer:
    with ``n_out <= group_size`` (a 10-way head) the whole layer is one group, i.e. the
    layer's input columns are pruned together, and hidden units left without an outgoing link
    are not cleaned up; ``suite/benchmarks/dst.yaml`` runs HASTE on the 1,000-way ``wide1k``
    task for that reason.

    Structure. The output layer is the model's last prunable layer, an ``nn.Linear`` with weight
    ``(n_out, n_in)`` (n_out = classes). Its output units are cut into ``ceil(n_out / G)``
    groups of ``G = group_size`` consecutive units (the last group has ``n_out mod G`` units
    when G does not divide n_out), and all units of a group share one set of exactly ``fan_in``
    input indices, so the layer is a stack of dense ``(G, fan_in)`` blocks over gathered
    inputs: one index list per group, contiguous values, the same x columns reused by G rows.
    Default G = 16 (ours): 16 fp32 values are one AVX-512 register / one cache line, the row
    block of our C++ CSR kernel (kernels/csrc/sparse_linear.cpp, ``row_block<float>``), and
    the M = 16 tile of tensor-core MMA. Every other prunable layer is sparse unstructured.
    Under ``execution: cpu`` the output layer runs on the suite's generic CSR kernel like any
    other pattern (the kernel does not exploit the shared indices), so there the structure
    buys no speed: timed by the kernels pillar (pattern ``haste`` against ``random`` on
    LeNet-300-100's Linear(100, 1000), ``suite/benchmarks/kernels.yaml``), HASTE's mask was
    neither consistently faster nor slower than a random mask of the same nnz (docs/dst.md).

    Allocation. Layer densities d_l come from the spec's ``distribution`` (ERK or uniform,
    ``dense_first_layer`` as in :class:`Static`). The output layer gets ``fan_in =
    clamp(round(d_out * n_in), 1, n_in)`` (ours), i.e. ``n_out * fan_in`` nonzeros instead of
    ``n_keep(n_out * n_in, d_out)``; the difference (at most n_out / 2 weights) is given to
    (or taken from) the largest other sparse layer (ours), so the total number of nonzeros is
    exactly what :class:`Static` / :class:`RigL` would keep at the same spec and the global
    density is met as for them. Each layer's count then never changes. If ``d_out`` is 1 or
    ``fan_in`` rounds to ``n_in`` the output layer is dense. Initial masks: the unstructured
    layers uniformly random (as Static), each group's index set uniformly random (ours);
    weights keep their dense initialisation on the mask.

    Evolution (RigL for all layers; we chose RigL over SET because the output layer's group
    criterion is RigL's gradient regrowth). At RigL's update iterations (whatever RigL's
    schedule says: every ΔT = ``update_interval`` steps before T_end, t = 0 included unless
    ``update_at_start`` is false; RigL's cosine drop fraction f(t), Eq. 1) the
    unstructured layers run RigL's drop/grow (Algorithm 1), and the output layer runs it at the
    group level (ours, our reading of the summary): for every group, with
    ``k = floor(f(t) * fan_in)``, keep the ``fan_in - k`` shared indices with the largest
    group-summed magnitude ``sum_{o in group} |W[o, i]|``, and grow the ``k`` indices, among
    those not kept, with the largest group-summed dense-gradient magnitude
    ``sum_{o in group} |dL/dW[o, i]|``. Every group's fan-in stays exactly ``fan_in``, so every
    layer's nonzero count is exact after every update. As in RigL, grown weights start at zero
    and their optimizer state is reset (MaskStore.set_mask, at every changed position); an
    index dropped and regrown in one update keeps its values, and the update iteration
    replaces the optimizer step. When ``f(t) * fan_in < 1`` the output layer stops changing
    while the (larger) unstructured layers may still change. The output layer's update runs
    through RigL's per-layer ``update_mask``, which this class overrides for that layer, so
    schedule, gradient capture and FLOPs are RigL's own.

    Training FLOPs: RigL's (Evci et al. 2020, Appendix H): ``3 f_S`` per example on regular
    iterations, ``2 f_S + f_D`` on update iterations, where the output layer's share of f_S is
    its dense FLOPs times ``fan_in / n_in`` (exactly the ``2 n_out fan_in`` multiply-add FLOPs
    of the grouped dense blocks). The group reductions (``2 n_out n_in`` adds every ΔT steps)
    and the top-k are not counted, as RigL's top-k is not.

    Raises ValueError (``check_model``) when the last prunable layer is not an ``nn.Linear``,
    and (``check_budget``) when the run is too short for any update (RigL's rule).

    Source: HASTE, 2026 seed paper (only its summary is known: hardware-aware DST with
    group-shared fixed fan-in for a large output layer); schedule and drop/grow rule from Evci
    et al. 2020, "Rigging the Lottery: Making All Tickets Winners", ICML, Algorithm 1 and Eq. 1
    (ΔT = 100, α = 0.3, cosine, T_end = 0.75, ERK); group_size = 16 is ours.
    """

    @dataclass
    class Params(RigL.Params):
        group_size: int = 16

        def validate(self) -> None:
            super().validate()
            if self.group_size < 1:
                raise ValueError(f"group_size must be >= 1, got {self.group_size}")

    _output_name: str | None = None
    _output_weight: Tensor | None = None

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
        has no more output units than ``group_size`` (one group: not a large output layer).

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
        if last.out_features <= params.group_size:
            raise ValueError(
                f"haste: the output layer {name!r} has {last.out_features} units, not more than "
                f"group_size = {params.group_size}: the whole layer would be one group (input "
                f"columns pruned together), not HASTE's large output layer; use a many-class "
                f"task (e.g. dataset wide1k) or a smaller group_size"
            )

    # -- allocation ----------------------------------------------------------------------
    def allocation(self, shapes: Mapping[str, Sequence[int]]) -> tuple[dict[str, int], int]:
        """Nonzeros per layer and the output layer's fan-in (see the class docstring).

        Args:
            shapes: layer name -> weight shape, in definition order; the last is the output
                layer, shape ``(n_out, n_in)``.
        Returns: ``(counts, fan_in)``: name -> number of nonzeros (``numel`` = dense), and the
            output layer's per-unit fan-in (``n_in`` when it is dense). ``sum(counts)`` equals
            Static's total at the same density, distribution and dense_first_layer, unless the
            compensating layer would leave [1, numel] (then the rest is not compensated).
        """
        p = self.params
        dens = layer_densities(shapes, self.density, p.distribution, p.dense_first_layer)
        numel = {n: math.prod(s) for n, s in shapes.items()}
        counts = {n: numel[n] if d >= 1.0 else n_keep(numel[n], d) for n, d in dens.items()}
        out = next(reversed(shapes))
        n_out, n_in = shapes[out]
        fan_in = self.output_fan_in(dens[out], n_in)
        delta = counts[out] - n_out * fan_in
        counts[out] = n_out * fan_in
        sparse = [n for n in shapes if n != out and counts[n] < numel[n]]
        if delta and sparse:
            big = max(sparse, key=lambda n: numel[n])
            counts[big] = min(numel[big], max(1, counts[big] + delta))
        return counts, fan_in

    @staticmethod
    def group_of(n_out: int, group_size: int) -> Tensor:
        """int64 ``(n_out,)``: the group of each output unit (``o // group_size``)."""
        return torch.arange(n_out) // group_size

    @classmethod
    def group_columns(cls, mask: Tensor, group_size: int) -> Tensor:
        """The shared input indices of each group as a bool ``(n_groups, n_in)`` tensor.

        Args:
            mask: bool ``(n_out, n_in)`` output-layer mask.
        Raises: ValueError if the units of some group do not share one index set, or groups
            have different fan-ins.
        """
        groups = cls.group_of(mask.shape[0], group_size).to(mask.device)
        first = torch.arange(0, mask.shape[0], group_size, device=mask.device)
        cols = mask[first]
        if not torch.equal(cols[groups], mask):
            raise ValueError("output mask is not group-shared: units of a group differ")
        fan = cols.sum(1)
        if not bool((fan == fan[0]).all()):
            raise ValueError(f"output mask has unequal group fan-ins {sorted(set(fan.tolist()))}")
        return cols

    @classmethod
    def group_mask(cls, cols: Tensor, n_out: int, group_size: int) -> Tensor:
        """Expand ``cols`` bool ``(n_groups, n_in)`` to the bool ``(n_out, n_in)`` mask."""
        return cols[cls.group_of(n_out, group_size).to(cols.device)]

    @staticmethod
    def output_fan_in(density: float, n_in: int) -> int:
        """The output layer's per-unit fan-in at layer density ``density``:
        ``clamp(round(density * n_in), 1, n_in)`` (ours), ``n_in`` when the layer is dense."""
        return n_in if density >= 1.0 else min(n_in, max(1, round(density * n_in)))

    @classmethod
    def output_mask(
        cls, n_out: int, n_in: int, fan_in: int, group_size: int, generator: torch.Generator
    ) -> Tensor:
        """HASTE's initial output-layer mask, bool ``(n_out, n_in)``: for each group of
        ``group_size`` consecutive units one uniformly random set of ``fan_in`` inputs (ours),
        drawn from ``generator`` (one ``(n_groups, n_in)`` uniform draw). The kernels pillar
        times this pattern (``patterns: {haste: ...}``)."""
        n_groups = -(-n_out // group_size)
        cols = _row_topk(torch.rand((n_groups, n_in), generator=generator), fan_in)
        return cls.group_mask(cols, n_out, group_size)

    @torch.no_grad()
    def init_masks(self, store) -> None:
        """Install HASTE's initial masks on ``store`` (a MaskStore): the allocation's counts,
        uniformly random positions, one uniformly random index set per output group."""
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
                mask = self.output_mask(n_out, n_in, fan_in, self.params.group_size, gen)
            else:
                mask = top_mask(torch.rand(shape, generator=gen), counts[name])
            store.set_mask(name, mask.to(w.device))

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        store = pl_module.masks
        self.check_model(self.params, store.layers)
        # RigL's own fit start first (whatever it sets up), then its random ERK masks are
        # replaced by HASTE's; the dense initial weights are put back so that every weight on
        # the new masks starts from its initialisation, not from RigL's masking.
        init = {n: store.weight(n).detach().clone() for n in store.layers}
        super().on_fit_start(trainer, pl_module)
        with torch.no_grad():
            for n, w in init.items():
                store.weight(n).copy_(w)
        self.init_masks(store)
        self._output_name = next(reversed(store.layers))
        self._output_weight = store.weight(self._output_name)

    def update_mask(self, weight: Tensor, mask: Tensor, grad: Tensor, fraction: float) -> Tensor:
        """RigL's per-layer drop/grow (called by RigL's update for every sparse layer); on the
        output layer the group-level rule :meth:`update_group_mask` instead. Arguments and
        return as :meth:`RigL.update_mask`."""
        if self._output_weight is not None and weight is self._output_weight:
            return self.update_group_mask(weight, mask, grad, fraction, self.params.group_size)
        return RigL.update_mask(weight, mask, grad, fraction)

    @classmethod
    @torch.no_grad()
    def update_group_mask(
        cls, weight: Tensor, mask: Tensor, grad: Tensor, fraction: float, group_size: int
    ) -> Tensor:
        """RigL's drop/grow at the group level on the output layer.

        Args:
            weight, grad: the layer's weight and dense gradient, ``(n_out, n_in)``.
            mask: its bool group-shared mask ``(n_out, n_in)``, fan-in ``fan_in`` per group.
            fraction: share of each group's ``fan_in`` indices to drop and regrow
                (``k = floor(fraction * fan_in)`` per group).
            group_size: units per group.
        Returns: the new bool ``(n_out, n_in)`` mask, group-shared, same fan-in per group.
        Raises: ValueError if ``mask`` is not group-shared (see :meth:`group_columns`).
        """
        cols = cls.group_columns(mask, group_size)
        fan_in = int(cols[0].sum())
        k = int(fraction * fan_in)
        if k == 0:
            return mask
        n_out = weight.shape[0]
        groups = cls.group_of(n_out, group_size).to(weight.device)
        summed = torch.zeros(cols.shape, dtype=weight.dtype, device=weight.device)
        magnitude = summed.index_add(0, groups, weight.detach().abs())
        gradient = summed.index_add(0, groups, grad.detach().abs().to(weight.dtype))
        inf = torch.full_like(magnitude, math.inf)
        kept = _row_topk(torch.where(cols, magnitude, -inf), fan_in - k)
        grow = _row_topk(torch.where(kept, -inf, gradient), k)
        return cls.group_mask(kept | grow, n_out, group_size)


def _row_topk(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` largest entries of every row of 2-D ``scores`` (ties: topk's
    order, deterministic on CPU)."""
    mask = torch.zeros_like(scores, dtype=torch.bool)
    if k > 0:
        mask.scatter_(1, torch.topk(scores, k, dim=1, sorted=False).indices, True)
    return mask

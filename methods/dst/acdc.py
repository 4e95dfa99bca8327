"""AC/DC: Alternating Compressed/DeCompressed training."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, NamedTuple

import torch

from sparsebench.methods.dst.base import MaskMethod
from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.init import check_dense_start
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register

SPARSE_KINDS = ("compressed", "final")


class Phase(NamedTuple):
    """One phase of the AC/DC schedule: optimizer steps ``start <= t < end``.

    ``kind`` is ``warmup`` (dense), ``compressed`` (sparse), ``decompressed`` (dense) or
    ``final`` (the last, long compressed phase)."""

    kind: str
    start: int
    end: int

    @property
    def sparse(self) -> bool:
        return self.kind in SPARSE_KINDS

    @property
    def length(self) -> int:
        return self.end - self.start


def _steps(fraction: float, total_steps: int) -> int:
    """``fraction * total_steps`` rounded half up (0.05 x 10 = 0.5 -> 1 step)."""
    return int(math.floor(fraction * total_steps + 0.5))


def global_magnitude_masks(
    weights: Mapping[str, torch.Tensor], density: float, dense_layers: Iterable[str] = ()
) -> dict[str, torch.Tensor | None]:
    """Global magnitude top-k: keep the ``density`` fraction of all weights of the layers not in
    ``dense_layers`` with the largest |w|, ranked jointly across those layers.

    Args:
        weights: layer name -> weight tensor (any shape).
        density: kept fraction of the pruned layers' weights, in (0, 1].
        dense_layers: layers left dense (mask ``None``), outside the budget.
    Returns: layer name -> bool mask of the weight's shape, or ``None`` for a dense layer (also
    when every weight of a layer is kept). A layer that would lose every weight keeps its one
    largest, as :meth:`~sparsebench.suite.pillars.classification.masks.MaskStore.global_top_masks`.
    """
    dense = set(dense_layers)
    names = [n for n in weights if n not in dense]
    out: dict[str, torch.Tensor | None] = dict.fromkeys(dense)
    if not names:
        return {n: None for n in weights}
    flat = torch.cat([weights[n].detach().abs().reshape(-1).float() for n in names])
    keep = top_mask(flat, n_keep(flat.numel(), density))
    start = 0
    for n in names:
        w = weights[n]
        m = keep[start : start + w.numel()].view(w.shape)
        start += w.numel()
        if not m.any():  # never disconnect a layer entirely
            m = top_mask(w.detach().abs(), 1)
        out[n] = None if bool(m.all()) else m
    return {n: out[n] for n in weights}


def magnitude_masks(
    weights: Mapping[str, torch.Tensor],
    density: float,
    distribution: str = "erk",
    dense_first_layer: bool = False,
) -> dict[str, torch.Tensor | None]:
    """The masks an AC/DC compression step installs: magnitude top-k to ``density``.

    ``distribution`` ``erk`` or ``uniform``: each layer keeps its ``n_keep(numel, d_l)`` weights
    of largest |w|, with the layer densities d_l of the mask store's ``layer_densities``;
    ``global``: one threshold over all layers
    (:func:`global_magnitude_masks`). With ``dense_first_layer`` the first layer stays dense,
    outside the budget.

    Args:
        weights: layer name -> weight tensor, in the model's layer order.
        density: global target density in (0, 1].
    Returns: layer name -> bool mask of the weight's shape, or ``None`` for a dense layer.
    Raises: ValueError for an unknown ``distribution`` or a density outside (0, 1].
    """
    first = next(iter(weights), None)
    if distribution == "global":
        dense = [first] if dense_first_layer and len(weights) > 1 else []
        return global_magnitude_masks(weights, density, dense)
    shapes = {n: tuple(w.shape) for n, w in weights.items()}
    densities = layer_densities(shapes, density, distribution, dense_first_layer)
    out: dict[str, torch.Tensor | None] = {}
    for n, w in weights.items():
        d = densities[n]
        out[n] = None if d >= 1.0 else top_mask(w.detach().abs(), n_keep(w.numel(), d))
    return out


def check_schedule_fractions(p) -> None:
    """AC/DC's checks of its schedule's fractions on ``p`` (AC/DC's or ARC's Params).

    Raises: ValueError naming the fraction and its allowed range."""
    if not 0.0 <= p.warmup_fraction < 1.0:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {p.warmup_fraction}")
    if not 0.0 < p.phase_fraction < 1.0:
        raise ValueError(f"phase_fraction must be in (0, 1), got {p.phase_fraction}")
    if not 0.0 < p.final_fraction < 1.0:
        raise ValueError(f"final_fraction must be in (0, 1), got {p.final_fraction}")
    if p.last_decompressed_fraction < p.phase_fraction:
        raise ValueError(
            f"last_decompressed_fraction ({p.last_decompressed_fraction}) must be >= "
            f"phase_fraction ({p.phase_fraction})"
        )
    used = p.warmup_fraction + p.phase_fraction + p.last_decompressed_fraction + p.final_fraction
    if used > 1.0 + 1e-9:
        raise ValueError(
            "warmup_fraction + phase_fraction + last_decompressed_fraction + "
            f"final_fraction = {used:g} > 1: no room for one compressed phase"
        )


@register("acdc", family="dst")
class AcDc(MaskMethod):
    """Alternating Compressed/DeCompressed training (Peste et al. 2021, Sec. 3 and Fig. 1).

    The run (``T = total_steps`` optimizer steps; all lengths are fractions of T, rounded half
    up, so the schedule scales with the budget) is:

    1. a dense warm-up of ``warmup_fraction`` x T steps;
    2. alternating compressed and decompressed phases, each ``phase_fraction`` x T long,
       starting with a compressed one; the alternation repeats while a compressed phase still
       leaves at least ``last_decompressed_fraction`` x T dense steps before the final phase,
       and the last decompressed phase runs until the final phase (so it is that long or a
       little longer);
    3. a final compressed phase of the last ``final_fraction`` x T steps (fine-tuning of the
       sparse model; the run ends sparse).

    Each compressed phase starts with magnitude top-k of the (dense) weights to the target
    density; the pruned weights are set to zero and the mask stays fixed during the phase
    (sparse training on a fixed support, the IHT step of Sec. 3). Each decompressed phase
    makes every layer dense again: the pruned weights come back at ZERO, not at their value
    before pruning (the reference code's ``RestoreWeights`` recycler sets them to zero and
    drops the masks; its ``keep_pruned`` copy of old values is off in every published config),
    and the whole network trains dense from the compressed model.

    Defaults are the paper's ResNet50/ImageNet schedule (100 epochs, config
    ``iht_imagenet_resnet50_insta_cosinelr_s90_ep100.yaml`` of the reference code): 10 warm-up
    epochs (``warmup_fraction`` 0.1), 5-epoch compressed and decompressed phases (0.05: prune at
    epochs 10, 20, ..., 70, restore at 15, ..., 65), a 10-epoch last decompressed phase
    (epochs 75-85, 0.1) and the final compressed phase over the last 15 epochs (0.15). The
    paper's CIFAR-100 schedule (200 epochs: warm-up 10, 20-epoch phases, final 30) is
    ``warmup_fraction=0.05, phase_fraction=0.1, last_decompressed_fraction=0.1,
    final_fraction=0.15``.

    Optimizer state: every published run uses ``--reset_momentum_after_recycling``, which zeroes
    the momentum buffer of every parameter (weights, biases, BatchNorm) at the first step of
    each decompressed phase; ``decompress_state_reset="all"`` (default) does that (for Adam it
    zeroes both moments, not the step count). ``"reintroduced"`` zeroes only the state of the
    reintroduced weights. At compression the pruned weights' state is zeroed; they stay zero.

    Our choices, documented: (i) layer allocation: our default is ERK (``distribution="erk"``,
    per-layer magnitude top-k at the ERK densities; ``"uniform"`` likewise), NOT the paper's:
    the paper's main results (and its released checkpoints) prune by GLOBAL magnitude over
    all prunable layers (``UnstructuredMagnitudePruner``), available as
    ``distribution="global"``. ERK is the default so that every method of one board shares
    the layer-wise allocation (docs/dst.md, "One layer-wise allocation"); the paper's uniform
    variant keeps the first and last layers dense, we offer only ``dense_first_layer``.
    (ii) Phase boundaries are in optimizer steps (fractions of T), not whole epochs.
    (iii) During compressed phases gradients are masked (the reference code computes dense
    gradients and re-masks the weights after each step, which gives the same updates of the
    active weights). (iv) Magnitude ties are broken by ``torch.topk``'s order (the reference code
    thresholds |w| + 1e-4 at a percentile, which can keep a few extra tied weights); we keep the
    exact count.

    Training FLOPs: ``3 f_D`` per example in dense phases (warm-up, decompressed), ``3 f_S`` in
    compressed phases (the suite's accounting, Evci et al. 2020, Appendix H); the top-k at
    each compression is O(N log N) on the weights, not a forward/backward pass, and is not
    counted. A run too short for the schedule (a phase of zero steps, or no compressed phase
    before the final one) is refused with a ValueError.

    Source: Peste, Iofinova, Vladu, Alistarh 2021, "AC/DC: Alternating Compressed/DeCompressed
    Training of Deep Neural Networks", NeurIPS, Sec. 3 and Fig. 1; schedule, global magnitude
    pruning, zero reintroduction and momentum reset from the reference code
    (github.com/IST-DASLab/ACDC, configs/neurips, policies/recyclers.py, run_*.sh).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        distribution: Literal["erk", "uniform", "global"] = "erk"
        warmup_fraction: float = 0.1
        phase_fraction: float = 0.05
        last_decompressed_fraction: float = 0.1
        final_fraction: float = 0.15
        decompress_state_reset: Literal["all", "reintroduced"] = "all"

        def validate(self) -> None:
            check_schedule_fractions(self)
            check_dense_start(
                self.init,
                "AC/DC installs its first masks from the weights at its first "
                "compression, after fit start",
            )

    def __init__(self, params, sparsity, ctx):
        super().__init__(params, sparsity, ctx)
        self.compressed = False  # whether the masks are installed now
        self._phase = -1  # index of the phase the last batch ran in
        self._schedule: list[Phase] | None = None

    # -- schedule ------------------------------------------------------------------------
    @classmethod
    def make_schedule(cls, params: Params, total_steps: int) -> list[Phase]:
        """The phases of a run of ``total_steps`` optimizer steps, in order, covering
        ``[0, total_steps)`` without gaps.

        Raises: ValueError when the run is too short: a phase would have zero steps, or no
        compressed phase fits before the final one (the message names the numbers)."""
        t = total_steps
        w = _steps(params.warmup_fraction, t)
        p = _steps(params.phase_fraction, t)
        last = _steps(params.last_decompressed_fraction, t)
        final = _steps(params.final_fraction, t)
        f_start = t - final
        name = getattr(cls, "method_name", "acdc")
        if p < 1 or final < 1:
            raise ValueError(
                f"{name}: {t} steps are too few: phase_fraction x T = {params.phase_fraction} x "
                f"{t} and final_fraction x T = {params.final_fraction} x {t} must each round to "
                f">= 1 step (got {p} and {final}); train longer or raise the fractions"
            )
        if w + p + last > f_start:
            raise ValueError(
                f"{name}: no compressed phase fits: warm-up {w} + phase {p} + last decompressed "
                f"{last} steps > {f_start} steps before the final phase ({t} steps in all); "
                "train longer or lower the fractions"
            )
        phases = [Phase("warmup", 0, w)] if w > 0 else []
        c = w
        while True:
            phases.append(Phase("compressed", c, c + p))
            nxt = c + 2 * p
            if nxt + p + last <= f_start:
                phases.append(Phase("decompressed", c + p, nxt))
                c = nxt
            else:
                phases.append(Phase("decompressed", c + p, f_start))
                break
        phases.append(Phase("final", f_start, t))
        return phases

    @property
    def schedule(self) -> list[Phase]:
        if self._schedule is None:
            self._schedule = self.make_schedule(self.params, self.ctx.total_steps)
        return self._schedule

    def phase_index(self, step: int) -> int:
        """Index in :attr:`schedule` of the phase optimizer step ``step`` (0-based) belongs to;
        steps past the end belong to the final phase."""
        for i, ph in enumerate(self.schedule):
            if step < ph.end:
                return i
        return len(self.schedule) - 1

    def phase_at(self, step: int) -> Phase:
        return self.schedule[self.phase_index(step)]

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        cls.make_schedule(params, total_steps)

    # -- masks ---------------------------------------------------------------------------
    def target_masks(self, store) -> dict[str, torch.Tensor | None]:
        """The masks a compression would install now: magnitude top-k of the current weights
        (see :func:`magnitude_masks`)."""
        weights = {n: store.weight(n).detach() for n in store.layers}
        return magnitude_masks(
            weights, self.density, self.params.distribution, self.params.dense_first_layer
        )

    def compress(self, store, masks: Mapping[str, torch.Tensor | None] | None = None) -> None:
        """Install ``masks`` (default: :meth:`target_masks`), zeroing the pruned weights and
        their optimizer state."""
        with self.timed_update(store):
            masks = self.target_masks(store) if masks is None else masks
            for name, mask in masks.items():
                store.set_mask(name, mask)
        self.compressed = True

    def decompress(self, store, optimizers: Sequence[torch.optim.Optimizer] = ()) -> None:
        """Make every layer dense; the pruned weights come back at zero with zero optimizer
        state, and with ``decompress_state_reset="all"`` every parameter's optimizer state
        tensors (momentum, Adam moments) in ``optimizers`` are zeroed too."""
        with self.timed_update(store):
            for name in store.layers:
                store.set_mask(name, None)
            if self.params.decompress_state_reset == "all":
                reset_optimizer_state(optimizers)
        self.compressed = False

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        self.check_model(self.params, pl_module.masks.layers)
        self._schedule = None
        self._phase = -1
        self.compressed = pl_module.masks.is_sparse

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        i = self.phase_index(step)
        if i != self._phase:
            self._phase = i
            self.enter_phase(i, step, trainer, pl_module)

    def enter_phase(self, i: int, step: int, trainer, pl_module) -> None:
        """Called at the first step of phase ``i``: compress at a sparse phase (unless already
        compressed), decompress at a dense one (unless already dense)."""
        store = pl_module.masks
        if self.schedule[i].sparse:
            if not self.compressed:
                self.compress(store)
        elif self.compressed:
            self.decompress(store, trainer.optimizers)


@torch.no_grad()
def reset_optimizer_state(optimizers: Iterable[torch.optim.Optimizer]) -> None:
    """Zero every state tensor shaped like its parameter (SGD momentum, Adam moments) of every
    parameter of ``optimizers``; scalar state (Adam's step count) is kept."""
    for opt in optimizers:
        for group in opt.param_groups:
            for p in group["params"]:
                for value in opt.state.get(p, {}).values():
                    if torch.is_tensor(value) and value.shape == p.shape:
                        value.zero_()

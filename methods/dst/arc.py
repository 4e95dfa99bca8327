"""ARC: Alternating Rewiring Compression (AC/DC's schedule with sparse rewiring phases in place
of its dense phases)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

import torch

from sparsebench.methods.dst.acdc import AcDc, check_schedule_fractions
from sparsebench.methods.dst.arc_acdc import mask_iou
from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.masks import layer_densities, n_keep, top_mask
from sparsebench.suite.registry import register

# floor(f * nnz) on floats: 0.29 * 100 is 28.999999999999996, which must still floor to 29.
_EPS = 1e-9


@register("arc", family="dst")
class Arc(AcDc):
    """ARC, Alternating Rewiring Compression, as the seed text describes it: AC/DC with
    zero-initialised reintroduced weights, its dense phases replaced ENTIRELY by sparse
    rewiring phases "that update only the active mask and a small, high-gradient fraction of
    out-of-mask weights", and those phases truncated on mask convergence. No step of a run is
    dense. (Our AC/DC-based variant that keeps the dense phases is ``arc_acdc``.)

    Schedule: AC/DC's (:meth:`AcDc.make_schedule`: same fractions of the run, same phase
    boundaries). Every phase AC/DC runs sparse (``compressed``, ``final``) trains on a fixed
    mask of exactly nnz_l = ``n_keep(numel_l, d_l)`` weights per layer (d_l: the layer
    densities of ``distribution``). Every phase AC/DC runs dense (the warm-up and the
    decompressed phases) is a rewiring phase instead:

    1. Growth, once, at the phase's first step r: the dense weight gradient of that step's
       batch is captured (the step itself is an ordinary sparse step), and after its optimizer
       step each sparse layer adds to its trainable set the k = min(floor(``rewire_fraction``
       · nnz_l), numel_l - nnz_l) out-of-mask weights of largest |grad|. They were masked, so
       they start at zero, and :meth:`MaskStore.set_mask` gives them zero optimizer state.
    2. From step r + 1 the layer trains on active ∪ grown (density d_l (1 + f), never more).
    3. Convergence: at steps r + j·``check_interval`` (j >= 1, before the phase's end) the
       compressed masks (step 4) are computed; when their IoU with the mask the phase started
       from (pooled over layers, :func:`~sparsebench.methods.dst.arc_acdc.mask_iou`) exceeds
       ``convergence_threshold``, the phase ends there. Its remaining steps go to the
       following compressed phase, whose end and every later boundary stay where AC/DC has
       them.
    4. Compression at the phase's end (scheduled or early): each layer keeps the nnz_l
       weights of largest |w| among active ∪ grown (exactly nnz_l; pruned weights are zeroed
       with their optimizer state) and trains on that fixed mask until the next rewiring phase.

    Our choices (the seed gives only the sentence quoted above): no dense warm-up; the run
    starts from a uniformly random mask at the layer densities, drawn as
    :class:`~sparsebench.methods.dst.static.Static` draws it (same generator, so the same
    mask as ``static`` at a seed), and the warm-up is a rewiring phase like the others, with
    that random mask as its "previous" mask; growth once per rewiring phase, at its first
    step, from one batch's dense gradient; the grown set fixed through the phase (only its
    values and the active ones train); "convergence" read as in ``arc_acdc``: the mask the
    compression would install agrees with the mask the phase started from, IoU > 0.9 (with
    equal mask sizes, 94.7 % of the weights in common), checked every ``check_interval``
    steps, by default one tenth of a regular phase and at least 2 (``null``; an integer sets
    the steps; at least 2, because the first check after growth at 1 step would see the grown
    weights still at zero and always agree); compression by magnitude over active ∪ grown per
    layer; ``decompress_state_reset`` does not exist here (nothing is decompressed).
    ``rewire_fraction`` = 0.1 of each layer's ACTIVE weights (RigL's convention; a fraction of
    the out-of-mask weights would exceed the active count at high sparsity): "small" (a
    rewiring step costs at most 1.1 x a compressed one), and the smallest round fraction for
    which the convergence test at threshold 0.9 can fail at all: a compression can swap at
    most k = f·nnz weights, so the IoU is at least (1 - f) / (1 + f), which is above 0.9 for
    every f < 1/19 ≈ 0.053 (0.05 would end every phase at its first check by construction);
    a setting where the test cannot fail, (1 - f) / (1 + f) > ``convergence_threshold``, is
    refused.
    Only ``erk`` and ``uniform`` allocations (no ``global``: the per-layer counts nnz_l are
    what a compression restores).

    Training FLOPs: ``3 f_S`` per example in every step at that step's layer densities
    (``3 f_S(d)`` in compressed steps, ``3 f_S(d (1 + f))`` in rewiring steps after the
    growth), plus ``(f_D - f_S(d))`` per example of the growth step's batch for its dense
    weight gradient. The convergence checks and the top-k's are operations on the weights, not
    forward/backward passes, and are not counted. A run too short for the schedule is refused
    with a ValueError: AC/DC's own checks, a rewiring phase where no convergence check fits
    (``check_interval`` >= the regular phase length), and a 1-step warm-up (its grown weights
    would never train).

    Source: ARC, "Alternating Rewiring Compression" (2026 seed paper, innovation 3; only its
    summary is known); schedule and magnitude compression from Peste, Iofinova, Vladu, Alistarh
    2021, "AC/DC: Alternating Compressed/DeCompressed Training of Deep Neural Networks",
    NeurIPS, Sec. 3; growth by dense-gradient magnitude with zero init as Evci et al. 2020,
    "Rigging the Lottery", ICML, Algorithm 1.
    """

    test_params: ClassVar[Mapping[str, object]] = {"check_interval": 2}

    @dataclass
    class Params(Static.Params):
        warmup_fraction: float = 0.1
        phase_fraction: float = 0.05
        last_decompressed_fraction: float = 0.1
        final_fraction: float = 0.15
        check_interval: int | None = None
        convergence_threshold: float = 0.9
        rewire_fraction: float = 0.1

        def validate(self) -> None:
            check_schedule_fractions(self)  # as AC/DC checks them
            if self.check_interval is not None and self.check_interval < 2:
                raise ValueError(
                    f"check_interval must be >= 2 or null, got {self.check_interval} (a check "
                    "1 step after the growth sees the grown weights still at zero)"
                )
            if not 0.0 < self.convergence_threshold < 1.0:
                raise ValueError(
                    f"convergence_threshold must be in (0, 1), got {self.convergence_threshold}"
                )
            if not 0.0 < self.rewire_fraction < 1.0:
                raise ValueError(f"rewire_fraction must be in (0, 1), got {self.rewire_fraction}")
            f, t = self.rewire_fraction, self.convergence_threshold
            if (1.0 - f) / (1.0 + f) > t:
                raise ValueError(
                    f"rewire_fraction = {f:g} with convergence_threshold = {t:g}: a compression "
                    f"swaps at most rewire_fraction of the active weights, so the IoU is at "
                    f"least (1 - f) / (1 + f) = {(1.0 - f) / (1.0 + f):.6g} > "
                    f"convergence_threshold and every rewiring phase would end at its first "
                    f"check by construction; raise rewire_fraction to at least (1 - t) / (1 + t)"
                    f" = {(1.0 - t) / (1.0 + t):.4g} or convergence_threshold to at least "
                    f"{(1.0 - f) / (1.0 + f):.6g}"
                )

    def __init__(self, params, sparsity, ctx):
        super().__init__(params, sparsity, ctx)
        self._reset_state()

    def _reset_state(self) -> None:
        self._check_dt = self.interval(self.params, self.ctx.total_steps)
        self.nnz: dict[str, int | None] = {}  # layer -> exact count after compression
        self.prev_masks: dict[str, torch.Tensor | None] = {}
        self.truncations: list[tuple[int, int]] = []  # (rewiring phase index, step)
        self.grow_steps: list[int] = []
        self.grown: list[dict[str, int]] = []  # per growth: layer -> weights grown
        self.last_iou: float | None = None
        self._batch_size = 0
        self._grow_at = -1

    # -- schedule ------------------------------------------------------------------------
    @classmethod
    def interval(cls, params: Params, total_steps: int) -> int:
        """``check_interval`` in steps for a run of ``total_steps``."""
        if params.check_interval is not None:
            return params.check_interval
        phases = cls.make_schedule(params, total_steps)
        p = next(ph.length for ph in phases if ph.kind == "compressed")
        return max(2, p // 10)

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        phases = cls.make_schedule(params, total_steps)
        p = next(ph.length for ph in phases if ph.kind == "compressed")
        check = cls.interval(params, total_steps)
        if check >= p:
            fix = (
                "lower check_interval (>= 2) or train longer"
                if check > 2
                else "check_interval is at its minimum of 2, so a rewiring phase needs at "
                "least 3 steps: train longer or raise phase_fraction"
            )
            raise ValueError(
                f"arc: no convergence check would happen: check_interval = {check} >= the "
                f"{p}-step rewiring phases of a {total_steps}-step run; {fix}"
            )
        warm = phases[0]
        if warm.kind == "warmup" and warm.length < 2:
            raise ValueError(
                f"arc: the warm-up rewiring phase of a {total_steps}-step run is 1 step: its "
                "grown weights would never train; set warmup_fraction to 0 or train longer"
            )

    def is_check_step(self, step: int) -> bool:
        """Whether a convergence check runs at ``step`` (when a rewiring phase is on)."""
        ph = self.phase_at(step)
        return not ph.sparse and step > ph.start and (step - ph.start) % self._check_dt == 0

    # -- masks ---------------------------------------------------------------------------
    @staticmethod
    @torch.no_grad()
    def grow_mask(mask: torch.Tensor, grad: torch.Tensor, fraction: float) -> torch.Tensor:
        """ARC's growth on one layer: ``mask`` plus the k out-of-mask positions of largest
        |grad|, k = min(floor(fraction · nnz), numel - nnz)."""
        n_active = int(mask.sum())
        k = min(math.floor(fraction * n_active + _EPS), mask.numel() - n_active)
        if k <= 0:
            return mask
        scores = torch.where(mask, -math.inf, grad.abs().float().to(mask.device))
        return mask | top_mask(scores, k)

    @staticmethod
    @torch.no_grad()
    def compress_mask(weight: torch.Tensor, mask: torch.Tensor, nnz: int) -> torch.Tensor:
        """The ``nnz`` positions of largest |weight| among the trainable ones (``mask``)."""
        scores = torch.where(mask, weight.detach().abs().float(), -math.inf)
        return top_mask(scores, nnz)

    def target_masks(self, store) -> dict[str, torch.Tensor | None]:
        """The masks a compression would install now (step 4 of the class docstring)."""
        out: dict[str, torch.Tensor | None] = {}
        for name, mask in store.masks.items():
            nnz = self.nnz.get(name)
            out[name] = (
                None
                if mask is None or nnz is None
                else (self.compress_mask(store.weight(name), mask, nnz))
            )
        return out

    def grow(self, store, grads: Mapping[str, torch.Tensor]) -> None:
        """Growth (step 1) of every sparse layer with a captured dense gradient, and its extra
        FLOPs: ``(f_D - f_S(d))`` per example of the batch."""
        extra = self.ctx.flops.dense_grad_extra(store.densities(), self._batch_size)
        counts: dict[str, int] = {}
        with self.timed_update(store):
            for name, mask in store.masks.items():
                if mask is not None and name in grads:
                    new = self.grow_mask(mask, grads[name], self.params.rewire_fraction)
                    counts[name] = int(new.sum()) - int(mask.sum())
                    store.set_mask(name, new)
        self.grown.append(counts)
        self.ctx.flops.add(extra)

    def check_convergence(self, store, step: int) -> bool:
        """Convergence check (step 3) at ``step`` of a rewiring phase: compress now and return
        True when the IoU of the would-be masks with :attr:`prev_masks` exceeds
        ``convergence_threshold``."""
        if self.compressed:
            return False
        masks = self.target_masks(store)
        self.last_iou = mask_iou(masks, self.prev_masks)
        if self.last_iou <= self.params.convergence_threshold:
            return False
        self.compress(store, masks)
        self.truncations.append((self.phase_index(step), step))
        return True

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        self.check_budget(self.params, self.ctx.total_steps)
        self.check_model(self.params, store.layers)
        self._reset_state()
        densities = layer_densities(
            store.shapes, self.density, self.params.distribution, self.params.dense_first_layer
        )
        store.random_masks(densities, self.ctx.generator)
        self.nnz = {
            n: None if d >= 1.0 else n_keep(store.weight(n).numel(), d)
            for n, d in densities.items()
        }
        self._schedule = None
        self._phase = -1
        self.compressed = True

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step, store = trainer.global_step, pl_module.masks
        i = self.phase_index(step)
        if i != self._phase:
            self._phase = i
            self._batch_size = int(batch[0].shape[0])
            self.enter_phase(i, step, trainer, pl_module)
        elif not self.compressed and self.is_check_step(step):
            self.check_convergence(store, step)

    def enter_phase(self, i: int, step: int, trainer, pl_module) -> None:
        """At the first step of phase ``i``: compress at a sparse phase (unless a convergence
        check already did), start a rewiring phase (growth after this step) at the others."""
        store = pl_module.masks
        if self.schedule[i].sparse:
            if not self.compressed:
                self.compress(store)
            return
        self.prev_masks = {n: None if m is None else m.clone() for n, m in store.masks.items()}
        self.compressed = False
        store.capture_dense_grads = True
        self._grow_at = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        store = pl_module.masks
        if not store.capture_dense_grads:
            return
        store.capture_dense_grads = False
        self.grow(store, store.dense_grads)
        store.dense_grads.clear()
        self.grow_steps.append(self._grow_at)

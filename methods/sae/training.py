"""The one training loop every SAE architecture shares: a Lightning module around an
:class:`~.base.SparseAutoencoder`, and :func:`train_sae` to run it on a tensor of activations.

Pinned recipe (docs/sae.md): Adam with one lr shared by every architecture (``TrainConfig.lr``,
1e-3: the papers' lrs, 5e-5 to 3e-4, are tuned for 10⁵–10⁶ steps and leave the L1- and
L0-penalised SAEs unconverged at our 10³, measured in docs/sae.md; ``lr: None`` uses each
architecture's published lr, ``learning_rate()``) and the architecture's betas
(``adam_betas``; default (0.9, 0.999)), constant lr then a linear decay to 0 over the last
20 % of the steps (Anthropic's April 2024 update), gradient-norm clipping at 1, decoder rows
renormalised after every step where the architecture constrains them (and the parallel
gradient removed before it), tokens shuffled once per epoch by a seeded generator. Dead
latents: per latent the training tokens since it last fired; dead when that reaches
``dead_window`` tokens (handed to AuxK through :class:`~.base.TrainState`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

import lightning.pytorch as pl
import torch
from torch.utils.data import DataLoader, TensorDataset

from .base import SparseAutoencoder, TrainState

LR_DECAY_FRAC = 0.2
B_DEC_INITS = ("zeros", "geometric_median")
GM_TOKENS = 16_384  # ours: a sample the size of a few batches, as the references use
STEPS_PER_CALL = 16  # optimiser steps per Lightning training_step (SAEModule)


@dataclass(frozen=True)
class TrainConfig:
    """How long and on what an SAE trains.

    Attributes:
        steps: optimiser steps.
        batch_size: tokens per step.
        lr: Adam's lr for every architecture (ours, for this budget); None: each
            architecture's published lr.
        dead_window: tokens without firing after which a latent counts as dead.
        grad_clip: max gradient norm.
        b_dec_init: ``"zeros"`` or ``"geometric_median"`` (of the first ``GM_TOKENS``
            training tokens, before the first step: Gao et al. 2024, Sec. A.1; Bricken et al.
            2023; dictionary_learning's TopK family). The default for every architecture (ours
            where a paper starts at 0): on the LM residual stream it never hurt and helped the
            L1-penalised SAEs (ReLU+L1: FVU −0.02 at 1.7 lower L0; docs/sae.md).
    """

    steps: int = 2000
    batch_size: int = 512
    lr: float | None = 1e-3
    dead_window: int = 200_000
    grad_clip: float = 1.0
    b_dec_init: str = "geometric_median"

    def validate(self) -> None:
        for name in ("steps", "batch_size", "dead_window"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.grad_clip <= 0:
            raise ValueError(f"grad_clip must be > 0, got {self.grad_clip}")
        if self.lr is not None and self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if self.b_dec_init not in B_DEC_INITS:
            raise ValueError(
                f"b_dec_init must be one of {', '.join(B_DEC_INITS)}, got {self.b_dec_init!r}"
            )


def geometric_median(x: torch.Tensor, max_iter: int = 200, tol: float = 1e-7) -> torch.Tensor:
    """argmin_y Σ_i ‖x_i − y‖₂ over the rows of x (n, d), by Weiszfeld's iteration
    y ← Σ w_i x_i / Σ w_i with w_i = 1 / ‖x_i − y‖ from the mean, in float64; a row that
    coincides with y gets weight 1/1e-12 (ours: the plain iteration's guard against a division
    by zero; Vardi & Zhang's correction is not needed at this precision). Stops when y moves
    by less than tol · (1 + ‖y‖)."""
    xd = x.double()
    y = xd.mean(0)
    for _ in range(max_iter):
        w = 1.0 / (xd - y).norm(dim=1).clamp_min(1e-12)
        y_next = (w[:, None] * xd).sum(0) / w.sum()
        done = float((y_next - y).norm()) < tol * (1.0 + float(y.norm()))
        y = y_next
        if done:
            break
    return y.to(x.dtype)


class BatchBlocks:
    """The first ``steps`` batches of ``loader``, epoch after epoch, in blocks of up to
    ``size`` batches (one Lightning step each, :class:`SAEModule`). An epoch takes exactly
    ``len(loader)`` batches from a fresh iterator, never the exhausting ``next`` that would
    make the sampler draw a permutation it does not use: the generator's draws, hence the
    batches, are those of Lightning iterating ``loader`` itself for ``steps`` steps."""

    def __init__(self, loader: DataLoader, steps: int, size: int):
        self.loader, self.steps, self.size = loader, steps, size

    def __len__(self) -> int:
        return -(-self.steps // self.size)

    def __iter__(self) -> Iterator[list]:
        block: list = []
        taken = 0
        while taken < self.steps:
            it = iter(self.loader)
            for _ in range(min(len(self.loader), self.steps - taken)):
                block.append(next(it))
                taken += 1
                if len(block) == self.size:
                    yield block
                    block = []
        if block:
            yield block


class SAEModule(pl.LightningModule):
    """Lightning wrapper: one Lightning step = a block of up to ``STEPS_PER_CALL`` batches of
    tokens (:class:`BatchBlocks`; each batch a list whose [0] is (B, d)), one optimiser step
    per batch.

    Manual optimisation: :meth:`sae_step` is the whole recipe in Lightning's automatic order
    (forward, zero_grad, backward, parallel gradient removed, clipping, Adam through
    Lightning's optimizer, so ``global_step`` counts optimiser steps, lr schedule, rows
    renormalised). Ours, for speed alone: Lightning's per-step work (hooks, closure,
    progress bookkeeping, about a thousand Python calls) cost about as much as the SAE's own
    step at the suite's sizes (+40 % CPU time at width 128); a block of 16 leaves it at a few %.
    Results are those of one batch per Lightning step, bit for bit."""

    def __init__(self, sae: SparseAutoencoder, cfg: TrainConfig):
        super().__init__()
        self.sae, self.cfg = sae, cfg
        self.automatic_optimization = False
        self.register_buffer("since_fire", torch.zeros(sae.width, dtype=torch.long))
        self.tokens_seen = 0
        self.parts: dict[str, torch.Tensor] = {}  # the last step's, detached

    @property
    def last_parts(self) -> dict[str, float]:
        """The last step's loss parts as floats (read once, not synchronised every step)."""
        return {k: float(v) for k, v in self.parts.items()}

    def dead_mask(self) -> torch.Tensor:
        return self.since_fire >= self.cfg.dead_window

    def training_step(self, block, block_idx):
        opt, sched = self.optimizers(), self.lr_schedulers()
        for batch in block:
            self.sae_step(batch[0], opt, sched)

    def sae_step(self, x: torch.Tensor, opt, sched) -> None:
        """One optimiser step on the batch x (B, d)."""
        state = TrainState(frac=self.global_step / self.cfg.steps, dead=self.dead_mask())
        out = self.sae(x, state)
        if not torch.isfinite(out.loss):
            raise FloatingPointError(f"SAE loss is {float(out.loss)} at step {self.global_step}")
        with torch.no_grad():
            fired = out.fired if out.fired is not None else (out.z != 0).any(0)
            self.since_fire.add_(x.shape[0]).masked_fill_(fired, 0)
        self.tokens_seen += x.shape[0]
        self.parts = out.parts
        opt.zero_grad()
        self.manual_backward(out.loss)
        if self.sae.unit_norm_decoder:
            self.sae.remove_parallel_grad()
        self.clip_gradients(opt, self.cfg.grad_clip, "norm")
        opt.step()
        sched.step()
        if self.sae.unit_norm_decoder:
            self.sae.normalize_decoder()

    def configure_optimizers(self):
        betas = getattr(self.sae, "adam_betas", (0.9, 0.999))
        lr = self.cfg.lr if self.cfg.lr is not None else self.sae.learning_rate()
        opt = torch.optim.Adam(self.sae.param_groups(lr), lr=lr, betas=betas)
        total = self.cfg.steps
        start = math.floor((1 - LR_DECAY_FRAC) * total)

        def factor(step: int) -> float:
            return 1.0 if step < start else max(0.0, (total - step) / max(1, total - start))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


@dataclass
class TrainResult:
    """A trained SAE and what its record needs: seconds, tokens, dead fraction at the end,
    the last loss parts, training FLOPs."""

    sae: SparseAutoencoder
    train_s: float
    tokens: int
    dead_fraction: float
    parts: dict[str, float]
    train_flops: float
    since_fire: torch.Tensor  # (m,) training tokens since each latent last fired


def train_flops(sae: SparseAutoencoder, tokens: int) -> float:
    """Training FLOPs, dense accounting: every d × m matrix product of the forward pass costs
    2·d·m FLOPs per token (encoder, decoder, and the extra paths an architecture has:
    ``matmuls``), the backward pass twice the forward (RigL paper's convention)."""
    return 3.0 * 2.0 * sae.d_in * sae.width * getattr(sae, "matmuls", 2) * tokens


def train_sae(
    sae: SparseAutoencoder, x: torch.Tensor, cfg: TrainConfig, seed: int = 0
) -> TrainResult:
    """Train ``sae`` in place on the (already scaled) activations ``x`` (n, d) for
    ``cfg.steps`` steps through one Lightning ``Trainer`` (CPU unless a GPU is there).
    Raises ValueError for an empty or mis-shaped x, FloatingPointError when the loss diverges."""
    cfg.validate()
    if x.dim() != 2 or x.shape[1] != sae.d_in or x.shape[0] == 0:
        raise ValueError(f"activations must be (n, {sae.d_in}) with n >= 1, got {tuple(x.shape)}")
    from sparsebench.suite.data import batch_loader
    from sparsebench.suite.lightning import quiet_trainer, runtime_cuda_check

    pl.seed_everything(seed, workers=True, verbose=False)
    module = SAEModule(sae, cfg)
    g = torch.Generator().manual_seed(int(seed))
    loader = batch_loader(TensorDataset(x), min(cfg.batch_size, x.shape[0]), g)
    blocks = BatchBlocks(loader, cfg.steps, STEPS_PER_CALL)
    trainer = quiet_trainer(max_steps=cfg.steps, max_epochs=1, deterministic=True)
    if cfg.b_dec_init == "geometric_median":
        with torch.no_grad():
            sae.b_dec.copy_(geometric_median(x[:GM_TOKENS]))
    sae.train()
    t0 = time.perf_counter()
    with runtime_cuda_check():
        trainer.fit(module, blocks)
    sae.eval()
    with torch.no_grad():
        sae.finish_training(x)
    train_s = time.perf_counter() - t0
    return TrainResult(
        sae,
        train_s,
        module.tokens_seen,
        float(module.dead_mask().double().mean()),
        module.last_parts,
        train_flops(sae, module.tokens_seen),
        module.since_fire.detach().cpu().clone(),
    )


def input_scale(x: torch.Tensor) -> float:
    """The scalar c with E‖c·x‖₂ = √d over the rows of x (the pinned input scaling)."""
    mean_norm = float(x.double().norm(dim=1).mean())
    if mean_norm == 0:
        raise ValueError("activations are all zero: no input scale")
    return math.sqrt(x.shape[1]) / mean_norm

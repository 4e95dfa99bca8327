"""Soft movement pruning: learned scores with an L1 penalty on their sigmoid, one threshold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.methods.pruning.movement import Movement
from sparsebench.suite.registry import register

FLOOR = 0.005  # the authors' ThresholdBinarizer keeps at least this share of each matrix


def floor_count(numel: int) -> int:
    """⌊0.005 n⌋ + 1: the entries a matrix keeps however low its scores fall."""
    return int(FLOOR * numel) + 1


@register("soft_movement", family="pruning")
class SoftMovement(Movement):
    """Soft movement pruning (Sanh et al. 2020, Sec. 4): every weight has a learned score S
    (from 0); the forward uses W' = W ⊙ M with M = 1[σ(S) > τ], one threshold τ for all
    pruned matrices, each keeping at least ⌊0.005 n⌋ + 1 entries (its largest scores);
    the scores get the straight-through gradient ∂L/∂S = (∂L/∂W') ⊙ W (through the
    binarizer as if it were the identity), plus that of the penalty λ_t R with R the mean
    over the pruned matrices of Σ σ(S) / n (Eq. 8's L1 on σ(S)), and take Adam steps of
    their own at lr 1e-2 without decay. λ_t = λ_f c_t, with c_t = 1 − (1 − p)³ the cubic
    ramp over the pruning window (the authors scale λ with their threshold's cubic rise
    from τ_i = 0, λ_t = λ_f τ_t / τ_f) and λ_f = 400 (``--regularization l1 --final_lambda
    400 --mask_scores_learning_rate 1e-2 --initial_warmup 1 --final_warmup 2``: the window
    ``begin_fraction: 0.1`` to ``end_fraction: 0.8`` as hard movement). Masked weights keep
    their values and can come back; at the end the weights are pruned to the last mask.

    Ours: in the paper τ is fixed (0.1 at the end of its ramp) and the sparsity is whatever λ
    makes it, so a board at a given target would need a λ sweep per target. Here τ is, at
    every step, the one global threshold on σ(S) that keeps the cubic schedule's density
    (Zhu & Gupta, as hard movement, to the cell's target): the form of the mask (one
    threshold across matrices, so the layers' allocation comes out of the scores) and the
    scores' penalty and optimizer are the paper's, the sparsity is the target's. A λ steered
    toward the target instead (LinBreg's ×/÷ 1.05 per step) was tried and collapsed every
    matrix to the floor: Adam normalises the scores' steps, so once the penalty dominates all
    scores fall at the same rate and cross any fixed τ together. (The authors' scripts have a
    close precedent, ``--global_topk``: one threshold over all scores at the scheduled
    density.) A section's ``distribution`` (``erk``, ``uniform``) makes it per layer at that
    allocation instead, as for every method of such a board: then only the scores differ
    from hard movement's. Each matrix's floor counts inside the global budget (theirs comes
    on top); at a density below the floors' sum the global ranking keeps an arbitrary subset
    of them. Also ours: the scores' Adam runs at a constant rate (the authors' AdamW without
    decay follows the weights' warm-up and decay) and their gradient is not clipped (the
    authors clip all gradients to norm 1), every prunable layer is pruned (theirs: BERT's
    encoder matrices), and the network trains from scratch rather than being fine-tuned.

    Training FLOPs: as hard movement, ``2 f_S(t) + f_D`` (the scores need the dense gradient
    of W').

    Source: Sanh, Wolf, Rush 2020, "Movement Pruning: Adaptive Sparsity by Fine-Tuning", NeurIPS
    (arXiv:2005.07683), Sec. 4 (soft movement, Eq. 6-8); huggingface/transformers research_projects/
    movement-pruning (``emmental/modules/binarizer.py`` ThresholdBinarizer and its floor,
    ``masked_run_glue.py`` schedule_threshold and the L1 regularization, README recipe).
    """

    @dataclass
    class Params(Movement.Params):
        final_lambda: float = 400.0
        scores_lr: float = 1e-2
        distribution: Literal["uniform", "erk", "global"] = "global"

        def validate(self) -> None:
            top = torch.finfo(torch.float32).max  # the scores are float32
            for name in ("final_lambda", "scores_lr"):
                value = getattr(self, name)
                if not 0 < value <= top:
                    raise ValueError(f"{name} must be > 0 and at most {top:.3g}, got {value!r}")
            super().validate()

    def on_fit_start(self, trainer, pl_module) -> None:
        super().on_fit_start(trainer, pl_module)
        store = pl_module.masks
        self.score_grads = {n: torch.zeros_like(self.scores[n]) for n in store.layers}
        for score in self.scores.values():
            score.requires_grad_()
        self.score_opt = torch.optim.Adam(list(self.scores.values()), lr=self.params.scores_lr)
        for name in store.layers:
            store.set_straight_through(name, self.moving_forward(self.score_grads[name], 1.0))

    def ramp(self, step: int) -> float:
        """c_t: 0 before the window, 1 − (1 − p)³ inside it, 1 after."""
        p = self.params
        t0 = int(p.begin_fraction * self.ctx.total_steps)
        t_end = int(p.end_fraction * self.ctx.total_steps)
        frac = min(max((step - t0) / max(t_end - t0, 1), 0.0), 1.0)
        return 1.0 - (1.0 - frac) ** 3

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        step = trainer.global_step
        s_t = self.sparsity_at(step)
        t0, _, dt, n = self.schedule(self.params, self.ctx.total_steps)
        if s_t is None and step > t0 + n * dt:
            s_t = self.sparsity
        if s_t is None or s_t <= 0.0:
            return
        store = pl_module.masks
        with torch.no_grad():
            ranked = {}
            for name in store.layers:  # σ is monotone: ranking S ranks σ(S)
                score = self.scores[name].detach().clone()
                floor = torch.topk(score.flatten(), floor_count(score.numel())).indices
                score.view(-1)[floor] = torch.inf
                ranked[name] = score
            store.allocate(
                1.0 - s_t, ranked, self.params.distribution, self.params.dense_first_layer
            )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        lam = self.params.final_lambda * self.ramp(trainer.global_step)
        layers = list(self.scores)
        for name in layers:
            sig = torch.sigmoid(self.scores[name].detach())
            # ∂(λ R)/∂S with R = (1/L) Σ_layers Σ σ(S) / n
            penalty = lam * sig * (1 - sig) / (sig.numel() * len(layers))
            self.scores[name].grad = self.score_grads[name] + penalty
        try:
            self.score_opt.step()
        except RuntimeError as e:  # Adam's step size overflowing float32
            if "overflow" not in str(e):
                raise
            raise self._diverged(trainer.global_step) from e
        for buf in self.score_grads.values():
            buf.zero_()
        if not all(bool(torch.isfinite(v).all()) for v in self.scores.values()):
            raise self._diverged(trainer.global_step)

    def _diverged(self, step: int) -> Exception:
        from sparsebench.suite.pillars.classification.lit import DivergedError

        p = self.params
        return DivergedError(
            f"soft_movement's mask scores are no longer finite at step {step} (final_lambda "
            f"{p.final_lambda}, scores_lr {p.scores_lr}); lower them"
        )

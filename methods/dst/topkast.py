"""Top-KAST: Top-K Always Sparse Training."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.flops import sparse_forward_flops
from sparsebench.suite.pillars.classification.masks import (
    MaskStore,
    layer_densities,
    n_keep,
    top_mask,
)
from sparsebench.suite.registry import register


@register("topkast", family="dst")
class TopKAST(Static):
    """Top-K Always Sparse Training (Jayakumar et al. 2020, Sec. 2 and Appendix D, Algorithm 1).

    Every sparse layer keeps a dense parameter reservoir θ (the "dense parameterisation",
    Sec. 2.1). The forward pass uses α = θ on the set A = the top-D share of |θ| of that layer
    (Sec. 2.1; D = the layer's density), zero elsewhere; the gradient of the loss with respect to
    α updates θ on the superset B = the top-(D+M) share of |θ| (Sec. 2.2, "backward density"
    D+M), and θ outside B does not move. The loss carries the exploration regulariser of
    Sec. 2.3 (an L2 penalty on A, and divided by D on B \\ A; :meth:`exploration_penalty`).
    A and B are recomputed from θ every ``topk_interval`` steps (Sec. 2: every step; Appendix C,
    Table 6: every 100 steps does as well). At initialisation A is the top-D of the freshly
    initialised θ0 (Sec. 2.2).

    In this suite the layer weight holds α and the MaskStore holds A, so the forward network,
    the final model and ``actual_sparsity`` are exactly at the spec's density; θ lives in this
    callback. Each step, after the backward pass (which captures the dense gradient
    ∇_α L, as RigL does), the callback (1) sets θ.grad = (∇_α L + ∇ penalty) on B, 0 elsewhere,
    (2) steps θ with a private optimizer of the trainer's optimizer class whose hyperparameters
    (lr after the schedule, momentum, Nesterov, Adam betas, ...) are copied from the trainer
    optimizer's param group every step, with its own weight decay off (the penalty is the
    weight decay, below), (3) restores θ outside B bit for bit, (4) on a top-K step recomputes
    A and B (A is taken inside B, so A ⊆ B always holds even with ties), (5) writes θ·A into
    the weight and installs A with ``MaskStore.set_mask``, and (6) clears the weight's gradient
    so the trainer's optimizer skips it (biases, norms and dense layers are stepped by the
    trainer as usual). MaskStore's post-step re-masking therefore never touches θ.

    Choices of ours where the paper leaves them open:

    * Backward density: ``backward_density_ratio`` r gives each layer B = top-min(1, r·d) with
      d its forward density (M = (r - 1)·d). The paper has no single default; it reports
      forward/backward sparsity pairs, of which 90/80 and 95/90 (Tables 1, 3, 5, 6) and 80/60
      (Tables 3, 5) — all r = 2 — are the most common; ImageNet 80/50 (Table 6) is r = 2.5,
      enwik8 90/60 (Table 2) r = 4. Default r = 2.0, i.e. M = D. r = 1 (B = A) amounts to the
      paper's ablation without exploration updates (Table 1, t = 0).
    * Regulariser: R = λ/2 · (Σ_{A} θ² + Σ_{B\\A} θ² / D) per layer. Sec. 2.3 writes the
      per-weight terms as |θ_i| and |θ_i|/D but calls the penalty an L2 regularisation, and
      Algorithm 1 adds l2(A) + l2(B \\ A) / (X/100): we use squares. D is the run's global
      forward density (the paper's network density 1 - S; the pseudocode's X/100; under
      ERK the layers' own densities differ from it: we keep the global D, our reading). The
      coefficient is the paper's weight decay (Appendix B: 1e-4 for Top-KAST on ImageNet), so
      λ = the ``weight_decay`` of the trainer optimizer's param group holding the layer
      (``exploration_l2`` overrides it); the ½ makes the gradient on A exactly the recipe's
      weight decay λθ, and λθ/D on B \\ A. Weights outside B are not penalised (Sec. 2.3).
    * Optimizer state: Δθ_i = -η·(update) only for i in B (Sec. 2.2). Optimizer state (momentum,
      Adam moments) is kept only on B, as in a truly sparse implementation: a coordinate
      leaving B loses its state and one entering B starts from zero. A coordinate moving from
      B \\ A into A keeps both its value θ_i (α is a view of θ) and its state, as it was
      trained all along; one leaving A keeps its value in θ.
    * Layer densities: the paper sparsifies ResNet-50 uniformly with the first and last layers
      dense (Sec. 4, Appendix B). Default ``distribution = "uniform"``; ``dense_first_layer``
      is available but off so the spec's global density is exact; a dense last layer is not
      available in this suite.

    Training FLOPs per example, counted pass by pass as RigL's accounting (Evci et al. 2020,
    App. H): f_S(D) for the sparse forward, f_S(D) for the activation gradients (they need only
    α, which is zero outside A) and f_S(D+M) for the weight gradients on B (the backward
    density of Sec. 2.4): ``FlopsCallback`` counts 3·f_S(D) at A and the method adds
    (f_S(D+M) - f_S(D)) per example each step, at the step's B. (Counting the whole backward
    at B, 2·f_S(D+M), would overstate Top-KAST's cost by 25 % at the default ratio.)
    Not counted: the top-K and the regulariser (O(numel) per layer, "much fewer" FLOPs than
    training, Sec. 2.4), and the dense gradient this dense-mask emulation captures to read
    ∇_α L on B (an implementation detail: a real implementation computes it on B only).
    Because the dense gradient is captured every step, a kernel ``execution`` backend runs
    the dense product in every training step (see ``execution.KernelLinear``), so Top-KAST's
    training wall-clock there is not a sparse-kernel timing; inference is.

    Raises (at fit start): ValueError when ``topk_interval >= total_steps``, as A and B would
    never be recomputed during training (the run would be static).

    Source: Jayakumar, Pascanu, Rae, Osindero, Elsen 2020, "Top-KAST: Top-K Always Sparse
    Training", NeurIPS, Sec. 2.1-2.4, Appendix B-D; defaults backward density 2 × forward
    (Tables 1, 3, 5, 6), top-K every step (Sec. 2; N = 100 in Appendix C), regulariser
    coefficient = the weight decay (Appendix B), uniform layer sparsity (Sec. 4).
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        distribution: Literal["erk", "uniform"] = "uniform"
        backward_density_ratio: float = 2.0
        topk_interval: int = 1
        exploration_l2: float | None = None

        def validate(self) -> None:
            if self.backward_density_ratio < 1.0:
                raise ValueError(
                    f"backward_density_ratio must be >= 1 (B contains A), got "
                    f"{self.backward_density_ratio}"
                )
            if self.topk_interval < 1:
                raise ValueError(f"topk_interval must be >= 1, got {self.topk_interval}")
            if self.exploration_l2 is not None and self.exploration_l2 < 0.0:
                raise ValueError(f"exploration_l2 must be >= 0 or null, got {self.exploration_l2}")

    def __init__(self, params, sparsity, ctx):
        super().__init__(params, sparsity, ctx)
        # name -> dense reservoir θ (a Parameter of the private optimizer), weight's shape.
        self.theta: dict[str, nn.Parameter] = {}
        # name -> bool backward set B (weight's shape); the forward set A is the store's mask.
        self.backward_masks: dict[str, torch.Tensor] = {}
        self._n_keep: dict[str, tuple[int, int]] = {}  # name -> (|A|, |B|)
        self._opt: torch.optim.Optimizer | None = None
        self._groups: dict[str, dict] = {}  # name -> the private optimizer's group of θ
        self._decay: dict[str, float] = {}  # name -> the trainer's weight decay for the layer
        self._batch_size = 0

    # -- schedule and budget -------------------------------------------------------------
    def is_topk_step(self, step: int) -> bool:
        """Whether A and B are recomputed from θ after optimizer step ``step`` (1-based)."""
        return step % self.params.topk_interval == 0

    @classmethod
    def check_budget(cls, params: Params, total_steps: int) -> None:
        if params.topk_interval >= total_steps:
            raise ValueError(
                f"topkast: the top-K sets would never be recomputed during training: "
                f"topk_interval = {params.topk_interval} >= total_steps = {total_steps}; "
                f"lower topk_interval or train longer"
            )

    # -- the pieces of one update, on one layer ------------------------------------------
    @staticmethod
    @torch.no_grad()
    def select(theta: torch.Tensor, n_forward: int, n_backward: int):
        """The forward set A (top ``n_forward`` of |θ|) and backward set B (top ``n_backward``
        of |θ|) of one layer, with A ⊆ B (A is taken inside B, so ties cannot break it).

        Args:
            theta: the layer's reservoir, any shape (Linear (out, in), Conv2d (out, in, kh, kw)).
            n_forward, n_backward: set sizes, ``0 < n_forward <= n_backward <= theta.numel()``.
        Returns: (A, B), bool tensors of ``theta``'s shape.
        Raises: ValueError if the sizes are out of order or range.
        """
        if not 0 < n_forward <= n_backward <= theta.numel():
            raise ValueError(
                f"need 0 < n_forward ({n_forward}) <= n_backward ({n_backward}) <= "
                f"numel ({theta.numel()})"
            )
        mag = theta.abs()
        bwd = top_mask(mag, n_backward)
        fwd = top_mask(torch.where(bwd, mag, torch.full_like(mag, -1.0)), n_forward)
        return fwd, bwd

    @staticmethod
    def exploration_penalty(
        theta: torch.Tensor, fwd: torch.Tensor, bwd: torch.Tensor, density: float, coeff: float
    ) -> torch.Tensor:
        """Exploration regulariser of Sec. 2.3 on one layer (a scalar, differentiable in θ):
        ``coeff / 2 * (sum_{A} θ² + sum_{B \\ A} θ² / density)``; weights outside B are not
        penalised.

        Args:
            theta: the reservoir; fwd, bwd: bool A and B of its shape (A ⊆ B).
            density: the forward density D in (0, 1]; coeff: λ >= 0.
        """
        sq = theta.square()
        return 0.5 * coeff * (sq[fwd].sum() + sq[bwd & ~fwd].sum() / density)

    @staticmethod
    def penalty_grad(
        theta: torch.Tensor, fwd: torch.Tensor, bwd: torch.Tensor, density: float, coeff: float
    ) -> torch.Tensor:
        """Gradient of :meth:`exploration_penalty` in θ: λθ on A, λθ/D on B \\ A, 0 elsewhere."""
        scale = fwd.to(theta.dtype) + (bwd & ~fwd).to(theta.dtype) / density
        return coeff * scale * theta

    # -- hooks ---------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        self.check_budget(self.params, self.ctx.total_steps)
        store: MaskStore = pl_module.masks
        self.check_model(self.params, store.layers)
        densities = layer_densities(
            store.shapes, self.density, self.params.distribution, self.params.dense_first_layer
        )
        ratio = self.params.backward_density_ratio
        for name, d in densities.items():
            w = store.weight(name)
            if d >= 1.0:
                store.set_mask(name, None)
                continue
            theta = nn.Parameter(w.detach().clone())  # θ0: the fresh initialisation
            sizes = (n_keep(w.numel(), d), n_keep(w.numel(), min(1.0, ratio * d)))
            fwd, bwd = self.select(theta.detach(), *sizes)
            self.theta[name], self.backward_masks[name], self._n_keep[name] = theta, bwd, sizes
            store.set_mask(name, fwd)  # the weight now holds α = θ0 · A

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # Every step needs ∇_α L on B \ A, which the masked weight gradient does not carry.
        pl_module.masks.capture_dense_grads = bool(self.theta)
        self._batch_size = int(batch[0].shape[0])

    def backward_densities(self, store: MaskStore) -> dict[str, float]:
        """Layer name -> density of B (of A's density where the layer has no B: dense)."""
        out = store.densities()
        for name, bwd in self.backward_masks.items():
            out[name] = int(bwd.sum()) / bwd.numel()
        return out

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        """After the backward pass, before the trainer's optimizer moves any parameter: step θ
        on B, recompute A and B on a top-K step, write α = θ·A into the weights."""
        store: MaskStore = pl_module.masks
        if not self.theta or not store.capture_dense_grads:
            return
        store.capture_dense_grads = False
        step = trainer.global_step + 1
        flops = self.ctx.flops
        f_fwd = sparse_forward_flops(flops.dense_flops, store.densities())
        f_bwd = sparse_forward_flops(flops.dense_flops, self.backward_densities(store))

        self._sync_optimizer(optimizer, store)
        before = {}
        for name, theta in self.theta.items():
            fwd, bwd = store.masks[name], self.backward_masks[name]
            coeff = self._coeff(name)
            grad = store.dense_grads[name] + self.penalty_grad(
                theta.detach(), fwd, bwd, self.density, coeff
            )
            theta.grad = torch.where(bwd, grad, torch.zeros_like(grad))
            before[name] = theta.detach().clone()
        store.dense_grads.clear()
        self._opt.step()

        recompute = self.is_topk_step(step)
        seconds = 0.0  # of the top-K step: selecting A and B, installing them
        with torch.no_grad():
            for name, theta in self.theta.items():
                bwd = self.backward_masks[name]
                theta.copy_(torch.where(bwd, theta, before[name]))  # Δθ = 0 outside B
                theta.grad = None
                fwd = store.masks[name]
                if recompute and theta.is_cuda:
                    torch.cuda.synchronize(theta.device)
                t0 = time.perf_counter()
                if recompute:
                    fwd, bwd = self.select(theta.detach(), *self._n_keep[name])
                    self.backward_masks[name] = bwd
                    self._reset_state_outside(theta, bwd)
                w = store.weight(name)
                w.copy_(theta * fwd)
                store.set_mask(name, fwd)
                if recompute:
                    if w.is_cuda:
                        torch.cuda.synchronize(w.device)
                    seconds += time.perf_counter() - t0
                w.grad = None  # the trainer's optimizer skips the weight: θ was stepped here
        if recompute:
            self.record_update(seconds)
        flops.add((f_bwd - f_fwd) * self._batch_size)  # weight gradients on B \ A

    # -- the private optimizer of the reservoirs -----------------------------------------
    def _sync_optimizer(self, optimizer, store: MaskStore) -> None:
        """Build (first call) and update the private optimizer over the θs: one param group per
        layer, with the hyperparameters of the trainer's group holding that layer's weight."""
        optimizer = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer wrapper
        hyper = {name: self._hyper(optimizer, store.weight(name)) for name in self.theta}
        self._decay = {name: h.pop("weight_decay") for name, h in hyper.items()}
        if self._opt is None:
            groups = [
                {"params": [theta], **hyper[n], "weight_decay": 0.0}
                for n, theta in self.theta.items()
            ]
            self._opt = type(optimizer)(groups)
            self._groups = dict(zip(self.theta, self._opt.param_groups))
        for name, group in self._groups.items():
            # Weight decay stays off here: the exploration penalty's gradient replaces it.
            group.update(hyper[name])

    @staticmethod
    def _hyper(optimizer: torch.optim.Optimizer, weight: torch.Tensor) -> dict:
        """The hyperparameters (all keys but ``params``) of ``weight``'s group in ``optimizer``;
        ``weight_decay`` is always present (0.0 when the optimizer has none)."""
        for group in optimizer.param_groups:
            if any(p is weight for p in group["params"]):
                hyper = {k: v for k, v in group.items() if k != "params"}
                hyper["weight_decay"] = float(hyper.get("weight_decay", 0.0))
                return hyper
        raise ValueError("topkast: a sparse layer's weight is not in the trainer's optimizer")

    def _coeff(self, name: str) -> float:
        if self.params.exploration_l2 is not None:
            return float(self.params.exploration_l2)
        return self._decay[name]

    @torch.no_grad()
    def _reset_state_outside(self, theta: torch.Tensor, bwd: torch.Tensor) -> None:
        for value in self._opt.state.get(theta, {}).values():
            if torch.is_tensor(value) and value.shape == theta.shape:
                value.masked_fill_(~bwd, 0.0)

"""JumpReLU SAE trained with straight-through estimators (Rajamanoharan et al. 2024b)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from .base import SAEOutput, SparseAutoencoder, TrainState, check_params, mse, warmup


def _kernel(pre: torch.Tensor, theta: torch.Tensor, eps: float) -> torch.Tensor:
    """Rectangle kernel K((pre − θ)/ε) = 1[|pre − θ| < ε/2] (the paper's choice of K)."""
    return ((pre - theta).abs() < eps / 2).to(pre.dtype)


class JumpReLUFn(torch.autograd.Function):
    """JumpReLU_θ(u) = u · H(u − θ); ∂/∂u = H(u − θ), and the pseudo-derivative
    ∂/∂θ = −(θ/ε) K((u − θ)/ε) (Rajamanoharan et al. 2024b, Eq. 11)."""

    @staticmethod
    def forward(ctx, pre, theta, eps):
        ctx.save_for_backward(pre, theta)
        ctx.eps = eps
        return pre * (pre > theta).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, theta = ctx.saved_tensors
        g_pre = grad * (pre > theta).to(pre.dtype)
        g_theta = -(theta / ctx.eps) * _kernel(pre, theta, ctx.eps) * grad
        return g_pre, g_theta.reshape(-1, theta.shape[-1]).sum(0), None


class StepFn(torch.autograd.Function):
    """H(u − θ) with no gradient to u and ∂/∂θ = −(1/ε) K((u − θ)/ε) (Eq. 12): the L0 term."""

    @staticmethod
    def forward(ctx, pre, theta, eps):
        ctx.save_for_backward(pre, theta)
        ctx.eps = eps
        return (pre > theta).to(pre.dtype)

    @staticmethod
    def backward(ctx, grad):
        pre, theta = ctx.saved_tensors
        g_theta = -(1.0 / ctx.eps) * _kernel(pre, theta, ctx.eps) * grad
        return None, g_theta.reshape(-1, theta.shape[-1]).sum(0), None


@register("jumprelu", family="sae")
class JumpReLU(SparseAutoencoder):
    """z = JumpReLU_θ(ReLU(x W_enc + b_enc)) with one learned threshold θ_i > 0 per latent
    (stored directly and clamped at 1e-6, as dictionary_learning's trainer; SAELens and Gemma
    Scope store log θ, whose Adam steps are relative and far too slow for our budget), trained
    on L = ‖x − x̂‖² + λ ‖z‖₀, ‖z‖₀ = Σ_i H(pre_i − θ_i): each latent
    counted **once** (dictionary_learning issue #55 applied the threshold twice in this term).
    The Heaviside has zero gradient almost everywhere, so θ learns through the straight-through
    pseudo-derivatives of :class:`JumpReLUFn` and :class:`StepFn` (rectangle kernel, bandwidth
    ε). λ rises linearly over the first ``sparsity_warmup_frac`` of training.

    Defaults: Adam lr 7e-5 with β = (0, 0.999) (the paper's, for the thresholds' noisy
    gradients), unit-norm decoder rows (Gemma Scope's training). Ours: ε = 0.05 and θ
    initialised at 0.05: the paper's 0.001 are small against its pre-activations, ours are O(1)
    at E‖x‖₂ = √d with unit decoder rows, where 0.001 leaves about 0.3 tokens per latent and
    batch inside the kernel and θ does not move; λ = 1 on the raw L0 with a 10 % warm-up (the
    paper sweeps λ for its L0 range; the board sweeps it too); ReLU before the jump (so θ acts
    on positive pre-activations, as the reference trainers do). ``threshold_lr_scale``
    (default 1: one lr, as the paper) trains θ at that multiple of the lr: with Adam a
    threshold moves by about lr per step whatever λ is, so a short run needs a larger scale
    for λ to set L0 (``sae.yaml`` uses 10 at 800 steps, ours).

    Source: Rajamanoharan, Lieberum, Sonnerat, Conmy, Varma, Kramár, Nanda, "Jumping Ahead:
    Improving Reconstruction Fidelity with JumpReLU Sparse Autoencoders", 2024, Sec. 3-4
    (Eq. 11-12 for the pseudo-derivatives).
    """

    @dataclass
    class Params:
        sparsity_coeff: float = 1.0  # λ
        sparsity_warmup_frac: float = 0.1
        bandwidth: float = 0.05  # ε (ours, see above; the paper's 0.001)
        threshold_init: float = 0.05  # (ours; the paper's 0.001)
        lr: float = 7e-5
        threshold_lr_scale: float = 1.0  # θ's lr ÷ the lr (1: one lr, the paper's)

        def validate(self) -> None:
            check_params(
                self,
                ("bandwidth", "threshold_init", "lr", "threshold_lr_scale"),
                ("sparsity_coeff",),
            )

    adam_betas = (0.0, 0.999)

    def __init__(self, d_in: int, width: int, params, seed: int = 0):
        super().__init__(d_in, width, params, seed)
        self.threshold = torch.nn.Parameter(torch.full((width,), float(params.threshold_init)))

    def threshold_parameters(self) -> list[torch.nn.Parameter]:
        return [self.threshold]

    def theta(self) -> torch.Tensor:
        """The thresholds θ, (m,), kept positive."""
        return self.threshold.clamp_min(1e-6)

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.W_enc + self.b_enc)

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.pre_acts(x)
        return pre * (pre > self.theta()).to(pre.dtype)

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        pre = self.pre_acts(x)
        theta = self.theta()
        z = JumpReLUFn.apply(pre, theta, self.params.bandwidth)
        x_hat = self.decode(z)
        rec = mse(x, x_hat)
        l0 = StepFn.apply(pre, theta, self.params.bandwidth).sum(-1).mean()
        lam = self.params.sparsity_coeff * warmup(state.frac, self.params.sparsity_warmup_frac)
        return SAEOutput(x_hat, z, rec + lam * l0, {"mse": rec.detach(), "sparsity": l0.detach()})

"""Sign-aware gated SAE with the Bi-Jump-ReLU gate (the 2026 seed paper, arXiv 2605.28149;
our implementation of what its abstract and the issue state)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from sparsebench.suite.registry import register

from .base import SAEOutput, SparseAutoencoder, TrainState, check_params, mse, warmup
from .jumprelu import StepFn


class GatedMagnitudeFn(torch.autograd.Function):
    """μ · H(u − θ): the magnitude μ through an open gate. ∂/∂μ = H(u − θ); no gradient to u
    (the gate is hard, as in the Gated SAE); the JumpReLU-style pseudo-derivative
    ∂/∂θ = −(μ/ε) K((u − θ)/ε) (rectangle kernel), so that the thresholds learn from the
    reconstruction, not only from the L0 penalty."""

    @staticmethod
    def forward(ctx, u, theta, mu, eps):
        ctx.save_for_backward(u, theta, mu)
        ctx.eps = eps
        return mu * (u > theta).to(mu.dtype)

    @staticmethod
    def backward(ctx, grad):
        u, theta, mu = ctx.saved_tensors
        band = ((u - theta).abs() < ctx.eps / 2).to(mu.dtype)
        g_theta = -(mu / ctx.eps) * band * grad
        return (
            None,
            g_theta.reshape(-1, theta.shape[-1]).sum(0),
            grad * (u > theta).to(mu.dtype),
            None,
        )


def bi_jump_relu(u: torch.Tensor, theta_pos: torch.Tensor, theta_neg: torch.Tensor):
    """Bi-Jump-ReLU: u where u > θ⁺ or u < −θ⁻, 0 in the band [−θ⁻, θ⁺] (both signs pass)."""
    return u * ((u > theta_pos) | (u < -theta_neg)).to(u.dtype)


@register("sign_aware_gated", family="sae")
class SignAwareGated(SparseAutoencoder):
    """A gated SAE whose latents carry a sign: one latent can stand for a direction and its
    opposite (the anticorrelated pairs of the synthetic data), so a signed latent does the
    work of two ReLU latents.

    The seed paper names three parts: a polarity-sensitive gate, a signed-magnitude path and
    an auxiliary reconstruction; it recommends the symmetric-magnitude variant. Everything
    below the names is OUR specification. With x̃ = x − b_dec:

    * gate: π = x̃ W_enc + b_enc; a latent is open with positive polarity when π > θ⁺ and with
      negative polarity when π < −θ⁻ (two learned thresholds per latent):
      g = H(π − θ⁺) + H(−π − θ⁻), s = sign(π) (Bi-Jump-ReLU, :func:`bi_jump_relu`; θ± > 0
      stored directly);
    * signed magnitude: with W_mag = W_enc ⊙ exp(r_mag) as in the Gated SAE, the magnitude
      of polarity s is μ_s = ReLU(s · x̃ W_mag + b_mag) and the latent z = s · g · μ_s.
      ``magnitude: symmetric`` (default) uses that one path for both polarities;
      ``asymmetric`` gives the negative one its own (r⁻, b⁻): μ₋ = ReLU(−x̃ (W_enc ⊙ exp(r⁻))
      + b⁻);
    * loss: ‖x − x̂‖² + λ L0 + ‖x − (BiJumpReLU(π) W_dec⁺ + b_dec⁺)‖², where L0 = Σ_i g_i
      (each latent once, either sign) pushes θ± up through the JumpReLU straight-through
      pseudo-derivative (bandwidth ε), the reconstruction pulls them down through the
      pseudo-derivative of the gated magnitude (:class:`GatedMagnitudeFn`), and the last
      term (auxiliary reconstruction) decodes the gate's own signed output with a frozen
      decoder (⁺: detached), so that the gate learns to reconstruct, as in the Gated SAE.

    Defaults (ours, following the Gated and JumpReLU SAEs' where they apply): λ = 1 with a
    10 % warm-up, ε = 0.05 and θ± initialised at 0.05 (JumpReLU's, scaled to our inputs: see
    jumprelu.py), Adam lr 5e-5 with β = (0, 0.999), unit-norm decoder rows.
    L0 counts negative activations (``signed = True``). ``threshold_lr_scale`` (default 1)
    trains θ± at that multiple of the lr, as JumpReLU's (ours, for short runs).

    Source: the 2026 seed paper, arXiv 2605.28149 (what is known of it: a sign-aware gated SAE
    with a Bi-Jump-ReLU, a polarity-sensitive gate, a signed-magnitude path and an auxiliary
    reconstruction, the symmetric-magnitude variant recommended). The equations are ours.
    """

    signed = True
    adam_betas = (0.0, 0.999)  # JumpReLU's, for the thresholds' noisy gradients

    @property
    def matmuls(self) -> int:  # gate, magnitude path(s), decoder, auxiliary reconstruction
        return 5 if self.params.magnitude == "asymmetric" else 4

    @dataclass
    class Params:
        sparsity_coeff: float = 1.0  # λ
        sparsity_warmup_frac: float = 0.1
        bandwidth: float = 0.05  # ε
        threshold_init: float = 0.05
        magnitude: Literal["symmetric", "asymmetric"] = "symmetric"
        lr: float = 5e-5
        threshold_lr_scale: float = 1.0  # θ±'s lr ÷ the lr (1: one lr)

        def validate(self) -> None:
            check_params(
                self,
                ("bandwidth", "threshold_init", "lr", "threshold_lr_scale"),
                ("sparsity_coeff",),
            )
            if self.magnitude not in ("symmetric", "asymmetric"):
                raise ValueError(
                    f"magnitude must be symmetric or asymmetric, got {self.magnitude!r}"
                )

    def __init__(self, d_in: int, width: int, params, seed: int = 0):
        super().__init__(d_in, width, params, seed)
        start = torch.full((width,), float(params.threshold_init))
        self.theta_pos = torch.nn.Parameter(start.clone())  # stored directly, as JumpReLU's
        self.theta_neg = torch.nn.Parameter(start.clone())
        self.r_mag = torch.nn.Parameter(torch.zeros(width))
        self.b_mag = torch.nn.Parameter(torch.zeros(width))
        if params.magnitude == "asymmetric":
            self.r_neg = torch.nn.Parameter(torch.zeros(width))
            self.b_neg = torch.nn.Parameter(torch.zeros(width))

    def threshold_parameters(self) -> list[torch.nn.Parameter]:
        return [self.theta_pos, self.theta_neg]

    def _parts(self, x: torch.Tensor):
        xt = x - self.b_dec
        pi = xt @ self.W_enc + self.b_enc
        th_p, th_n = self.theta_pos.clamp_min(1e-6), self.theta_neg.clamp_min(1e-6)
        proj = xt @ (self.W_enc * self.r_mag.exp())
        mu_pos = torch.relu(proj + self.b_mag)
        if self.params.magnitude == "asymmetric":
            mu_neg = torch.relu(-(xt @ (self.W_enc * self.r_neg.exp())) + self.b_neg)
        else:  # one magnitude path, read with the polarity's sign
            mu_neg = torch.relu(-proj + self.b_mag)
        eps = self.params.bandwidth
        z = GatedMagnitudeFn.apply(pi, th_p, mu_pos, eps) - GatedMagnitudeFn.apply(
            -pi, th_n, mu_neg, eps
        )
        return pi, th_p, th_n, z

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self._parts(x)[3]

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        pi, th_p, th_n, z = self._parts(x)
        x_hat = self.decode(z)
        rec = mse(x, x_hat)
        eps = self.params.bandwidth
        l0 = (StepFn.apply(pi, th_p, eps) + StepFn.apply(-pi, th_n, eps)).sum(-1).mean()
        gate_out = bi_jump_relu(pi, th_p.detach(), th_n.detach())  # θ learns in the main path
        aux = mse(x, gate_out @ self.W_dec.detach() + self.b_dec.detach())
        lam = self.params.sparsity_coeff * warmup(state.frac, self.params.sparsity_warmup_frac)
        parts = {"mse": rec.detach(), "sparsity": l0.detach(), "aux": aux.detach()}
        return SAEOutput(x_hat, z, rec + lam * l0 + aux, parts)

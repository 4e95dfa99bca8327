"""ReLU + L1 SAE (Bricken et al. 2023) with the decoder-norm-weighted L1 of Anthropic's April
2024 update."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from .base import SAEOutput, SparseAutoencoder, TrainState, mse, warmup


@register("relu_l1", family="sae")
class ReluL1(SparseAutoencoder):
    """z = ReLU(x W_enc + b_enc), x̂ = z W_dec + b_dec, trained on

        L = ‖x − x̂‖² + λ Σ_i z_i ‖W_dec,i‖₂

    (the April 2024 update's loss: the L1 of each latent weighted by its decoder row's norm,
    so the decoder norm is left free instead of constrained, and the encoder does not subtract
    b_dec). λ rises linearly from 0 over the first 5 % of training.

    Defaults (April 2024 update, for inputs scaled to E‖x‖₂ = √d): λ = 5, decoder rows
    initialised at norm 0.1 with W_enc = W_decᵀ, Adam lr 5e-5 (β 0.9, 0.999), the loop's
    linear decay of the lr to 0 over the last 20 % and gradient-norm clipping at 1.

    Source: Bricken et al., "Towards Monosemanticity", Transformer Circuits 2023 (ReLU SAE,
    L1 penalty); Conerly et al., "Circuits Updates - April 2024: Training Sparse Autoencoders"
    (norm-weighted L1, no pre-encoder bias, initialisation, λ warm-up).
    """

    unit_norm_decoder = False

    @dataclass
    class Params:
        l1_coeff: float = 5.0  # λ
        l1_warmup_frac: float = 0.05
        lr: float = 5e-5
        dec_init_norm: float = 0.1

        def validate(self) -> None:
            if self.l1_coeff < 0:
                raise ValueError(f"l1_coeff must be >= 0, got {self.l1_coeff}")
            if not 0.0 <= self.l1_warmup_frac <= 1.0:
                raise ValueError(f"l1_warmup_frac must be in [0, 1], got {self.l1_warmup_frac}")
            if self.lr <= 0 or self.dec_init_norm <= 0:
                raise ValueError("lr and dec_init_norm must be > 0")

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ self.W_enc + self.b_enc)

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        z = self.encode(x)
        x_hat = self.decode(z)
        rec = mse(x, x_hat)
        l1 = (z * self.W_dec.norm(dim=1)).sum(-1).mean()
        lam = self.params.l1_coeff * warmup(state.frac, self.params.l1_warmup_frac)
        return SAEOutput(x_hat, z, rec + lam * l1, {"mse": rec.detach(), "sparsity": l1.detach()})

"""Gated SAE (Rajamanoharan et al. 2024a)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from .base import SAEOutput, SparseAutoencoder, TrainState, mse, warmup


@register("gated", family="sae")
class Gated(SparseAutoencoder):
    """Separate *which* latents fire from *how much*: with x̃ = x − b_dec,

        π_gate = x̃ W_gate + b_gate,   f_gate = H(π_gate)            (W_gate = W_enc)
        f_mag = ReLU(x̃ W_mag + b_mag), W_mag = W_gate ⊙ exp(r_mag)   (per-latent rescale)
        z = f_gate ⊙ f_mag,            x̂ = z W_dec + b_dec

    trained on L = ‖x − x̂‖² + λ ‖ReLU(π_gate)‖₁ + ‖x − x̂_frozen(ReLU(π_gate))‖², the last
    term (auxiliary reconstruction) decoding ReLU(π_gate) with a frozen copy of the decoder
    so that the gate path is trained to reconstruct too (Eq. 9); the decoder rows have unit
    norm, so the L1 needs no decoder-norm weight.

    Defaults: Adam lr 5e-5 with β = (0, 0.999) (dictionary_learning's trainer for this paper,
    ``gdm.py``), r_mag = b_mag = b_gate = 0 at init, unit-norm decoder rows. Ours: λ = 1 with
    a 5 % warm-up at E‖x‖₂ = √d (the paper sweeps λ; the board sweeps it too).

    No ``threshold_lr_scale`` (ours), unlike JumpReLU and the sign-aware SAE: the gate
    H(π_gate) cuts at π_gate = 0 and has no learned threshold for such a scale to act on
    (:meth:`threshold_parameters` is empty). What moves the cut is b_gate and W_gate, ordinary
    encoder parameters that the L1 term λ‖ReLU(π_gate)‖₁ and the auxiliary reconstruction train
    by their true gradients (ReLU(π_gate) is differentiable), not a θ learning only through a
    step's pseudo-derivative; λ alone moves L0 over a decade at one lr (synthetic source,
    seed 0: L0 31.6 / 14.7 / 4.5 at λ = 1 / 2.5 / 6.25; docs/sae.md), so the board's sweep
    reaches L0 = 4 by a larger λ (15.6), not by a threshold lr.

    Source: Rajamanoharan, Conmy, Smith, Lieberum, Varma, Kramár, Shah, Nanda, "Improving
    Dictionary Learning with Gated Sparse Autoencoders", 2024, Sec. 3 (Eq. 5-9).
    """

    matmuls = 4  # gate, magnitude, decoder, frozen-decoder auxiliary reconstruction
    adam_betas = (0.0, 0.999)

    @dataclass
    class Params:
        l1_coeff: float = 1.0  # λ
        l1_warmup_frac: float = 0.05
        lr: float = 5e-5

        def validate(self) -> None:
            if self.l1_coeff < 0:
                raise ValueError(f"l1_coeff must be >= 0, got {self.l1_coeff}")
            if self.lr <= 0:
                raise ValueError(f"lr must be > 0, got {self.lr}")

    def __init__(self, d_in: int, width: int, params, seed: int = 0):
        super().__init__(d_in, width, params, seed)
        self.r_mag = torch.nn.Parameter(torch.zeros(width))
        self.b_mag = torch.nn.Parameter(torch.zeros(width))

    def paths(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(π_gate, f_mag), both (n, m)."""
        xt = x - self.b_dec
        pi_gate = xt @ self.W_enc + self.b_enc
        f_mag = torch.relu(xt @ (self.W_enc * self.r_mag.exp()) + self.b_mag)
        return pi_gate, f_mag

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        pi_gate, f_mag = self.paths(x)
        return (pi_gate > 0).to(f_mag.dtype) * f_mag

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        pi_gate, f_mag = self.paths(x)
        z = (pi_gate > 0).to(f_mag.dtype) * f_mag
        x_hat = self.decode(z)
        rec = mse(x, x_hat)
        gate = torch.relu(pi_gate)
        l1 = gate.sum(-1).mean()
        aux = mse(x, gate @ self.W_dec.detach() + self.b_dec.detach())
        lam = self.params.l1_coeff * warmup(state.frac, self.params.l1_warmup_frac)
        parts = {"mse": rec.detach(), "sparsity": l1.detach(), "aux": aux.detach()}
        return SAEOutput(x_hat, z, rec + lam * l1 + aux, parts)

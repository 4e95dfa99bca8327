"""TopK SAE with the AuxK loss (Gao et al. 2024)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparsebench.suite.registry import register

from .base import SAEOutput, SparseAutoencoder, TrainState, mse, section_widths


def top_mask(pre: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean (n, m): the k largest entries of each row."""
    idx = torch.topk(pre, min(k, pre.shape[-1]), dim=-1, sorted=False).indices
    return torch.zeros_like(pre, dtype=torch.bool).scatter_(-1, idx, True)


def normalized_mse(target: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """‖target − pred‖² / ‖target − mean(target)‖², both averaged over tokens (the reference
    code's normalised MSE, which makes AuxK's α independent of the residual's scale)."""
    den = (target - target.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
    return (target - pred).pow(2).sum(-1).mean() / den


def auxk_loss(
    sae: SparseAutoencoder,
    pre: torch.Tensor,
    x: torch.Tensor,
    x_hat: torch.Tensor,
    dead: torch.Tensor | None,
    k_aux: int,
) -> torch.Tensor:
    """AuxK (Gao et al. 2024, Sec. A.2): the top ``k_aux`` pre-activations among the dead
    latents, through ReLU, reconstruct the residual e = x − x̂ (detached) through the decoder
    **without** b_dec (x̂ already holds it once: adding it again is sparsify issue #132);
    normalised MSE of e. Zero when no latent is dead."""
    if dead is None or not bool(dead.any()):
        return pre.new_zeros(())
    masked = pre.masked_fill(~dead.to(pre.device), -math.inf)
    keep = top_mask(masked, min(k_aux, int(dead.sum())))
    z_aux = torch.where(keep, torch.relu(pre), torch.zeros_like(pre))
    e = (x - x_hat).detach()
    return normalized_mse(e, z_aux @ sae.W_dec)


def default_k_aux(d_in: int) -> int:
    """A power of two close to d/2 (Gao et al. 2024, Sec. A.2)."""
    return max(1, 2 ** round(math.log2(max(1, d_in / 2))))


@register("topk", family="sae")
class TopK(SparseAutoencoder):
    """z = ReLU(TopK_k((x − b_dec) W_enc + b_enc)): the k largest pre-activations of each token
    kept, the others zeroed (exactly k active per token unless some of the k are ≤ 0), trained
    on L = ‖x − x̂‖² + α · E‖x − x̄‖² · AuxK (AuxK a normalised MSE: both terms in the units
    of the reference code, which divides each by its target's variance).

    Defaults (Gao et al. 2024): k = 32, α = 1/32, k_aux = a power of two near d/2, unit-norm
    decoder rows with the parallel gradient removed, W_enc = W_decᵀ at init, Adam (β 0.9,
    0.999) at lr 2e-4 · (m / 2¹⁴)^(−1/2) (their lr-vs-width rule; ``lr: null``), dead window
    in tokens (the loop's), b_dec starting at the training tokens' geometric median (the
    loop's default). Ours: the loop's schedule shared by every architecture (constant, then a
    linear decay over the last 20 %) and its gradient clipping at 1 (the reference keeps the
    lr constant and does not clip).

    Source: Gao, la Tour, Tillman, Goh, Troll, Radford, Sutskever, Leike, Wu, "Scaling and
    evaluating sparse autoencoders", 2024, Sec. 2.3 (TopK) and A.2 (AuxK).
    """

    @dataclass
    class Params:
        k: int = 32
        aux_coeff: float = 1 / 32  # α
        k_aux: int | None = None  # None: a power of two near d/2
        lr: float | None = None  # None: 2e-4 / sqrt(m / 2**14)

        def validate(self) -> None:
            if self.k < 1:
                raise ValueError(f"k must be >= 1, got {self.k}")
            if self.aux_coeff < 0:
                raise ValueError(f"aux_coeff must be >= 0, got {self.aux_coeff}")
            if self.k_aux is not None and self.k_aux < 1:
                raise ValueError(f"k_aux must be >= 1, got {self.k_aux}")
            if self.lr is not None and self.lr <= 0:
                raise ValueError(f"lr must be > 0, got {self.lr}")

    test_params: ClassVar[Mapping[str, Any]] = {"k": 4}  # the default 32: all of a tiny SAE

    @classmethod
    def check(cls, params: Any, section: Mapping[str, Any]) -> None:
        """k active latents need at least k latents: k must not exceed any width trained."""
        smallest = min(section_widths(section))
        if params.k > smallest:
            raise ValueError(
                f"k = {params.k} exceeds the width {smallest}; allowed: 1 to the smallest SAE "
                "width (sae.widths, sources' widths)"
            )

    def __init__(self, d_in: int, width: int, params, seed: int = 0):
        super().__init__(d_in, width, params, seed)
        if params.k > width:
            raise ValueError(f"k = {params.k} exceeds the width {width}")

    def learning_rate(self) -> float:
        return self.params.lr or 2e-4 / math.sqrt(self.width / 2**14)

    def k_aux(self) -> int:
        return self.params.k_aux or default_k_aux(self.d_in)

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return torch.where(top_mask(pre, self.params.k), torch.relu(pre), torch.zeros_like(pre))

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_acts(x))

    def observe(self, z: torch.Tensor) -> None:
        """Hook on each training batch's latents (BatchTopK's threshold); default nothing."""

    def reconstruction(self, x: torch.Tensor, z: torch.Tensor):
        """(x̂, reconstruction loss, extra parts): ‖x − x̂‖² (Matryoshka overrides it)."""
        x_hat = self.decode(z)
        return x_hat, mse(x, x_hat), {}

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        pre = self.pre_acts(x)
        z = self.activate(pre)
        if self.training:
            self.observe(z)
        x_hat, rec, extra = self.reconstruction(x, z)
        aux = auxk_loss(self, pre, x, x_hat, state.dead, self.k_aux())
        # the reference normalises both terms by their target's variance; our main term is the
        # raw ‖x − x̂‖², so AuxK is scaled by E‖x − x̄‖² to keep α's meaning
        var = (x - x.mean(0)).pow(2).sum(-1).mean().detach()
        loss = rec + self.params.aux_coeff * var * aux
        return SAEOutput(
            x_hat, z, loss, {"mse": mse(x, x_hat).detach(), "aux": aux.detach(), **extra}
        )

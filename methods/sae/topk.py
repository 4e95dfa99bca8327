"""TopK SAE with the AuxK loss (Gao et al. 2024)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from sparsebench.suite.registry import register

from .base import (
    SAEOutput,
    SparseAutoencoder,
    SparseLatents,
    TrainState,
    mse,
    section_widths,
    sparse_decode_pays,
)

DECODINGS = ("auto", "dense", "sparse")


def normalized_mse(target: torch.Tensor, pred: torch.Tensor) -> torch.Tensor:
    """‖target − pred‖² / ‖target − mean(target)‖², both averaged over tokens (the reference
    code's normalised MSE, which makes AuxK's α independent of the residual's scale)."""
    den = (target - target.mean(0)).pow(2).sum(-1).mean().clamp_min(1e-12)
    return (target - pred).pow(2).sum(-1).mean() / den


def auxk_loss(
    sae: TopK,
    pre: torch.Tensor,
    x: torch.Tensor,
    x_hat: torch.Tensor,
    dead: torch.Tensor | None,
    k_aux: int,
) -> torch.Tensor:
    """AuxK (Gao et al. 2024, Sec. A.2): the top ``k_aux`` pre-activations among the dead
    latents, through ReLU, reconstruct the residual e = x − x̂ (detached) through the decoder
    **without** b_dec (x̂ already holds it once: adding it again is sparsify issue #132);
    normalised MSE of e. Zero when no latent is dead. Decoded from the kept values and
    indices or densely, whichever :meth:`TopK.decodes_sparsely` says is faster."""
    if dead is None or not bool(dead.any()):
        return pre.new_zeros(())
    k = min(k_aux, int(dead.sum()))
    # every kept entry is dead (k ≤ #dead), so its value is the finite pre-activation
    values, indices = torch.topk(pre.masked_fill(~dead.to(pre.device), -math.inf), k, dim=-1)
    code = SparseLatents(torch.relu(values), indices, pre.shape[0], pre.shape[1])
    if sae.decodes_sparsely(k):
        e_hat = code.decode(sae.W_dec)
    else:
        e_hat = code.dense() @ sae.W_dec
    return normalized_mse((x - x_hat).detach(), e_hat)


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

    Implementation (ours): the latents are kept as (values, indices) (:meth:`sparse_code`);
    where :func:`~.base.sparse_decode_pays` says so, the forward decodes them by gathering
    decoder rows and never forms z (:meth:`sparse_path`); AuxK is skipped when α = 0.

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
        # "auto": decode from (values, indices) where that is faster (sparse_decode_pays),
        # else z W_dec; "dense" / "sparse" force one (the tests compare them)
        self.decoding = "auto"

    def learning_rate(self) -> float:
        return self.params.lr or 2e-4 / math.sqrt(self.width / 2**14)

    def k_aux(self) -> int:
        return self.params.k_aux or default_k_aux(self.d_in)

    def decodes_sparsely(self, active: float) -> bool:
        """Whether ``active`` latents per token decode by gathering decoder rows (``decoding``)."""
        if self.decoding not in DECODINGS:
            raise ValueError(f"decoding must be one of {', '.join(DECODINGS)}, got {self.decoding}")
        if self.decoding != "auto":
            return self.decoding == "sparse"
        return sparse_decode_pays(self.d_in, self.width, active)

    def sparse_path(self) -> bool:
        """Whether the forward decodes from (values, indices), never forming z."""
        return self.decodes_sparsely(self.params.k)

    def pre_acts(self, x: torch.Tensor) -> torch.Tensor:
        """(x − b_dec) W_enc + b_enc; on the sparse path as x W_enc + (b_enc − b_dec W_enc)
        (ours: equal up to rounding, and b_dec's gradient then costs a (d, m) product instead
        of the (n, m)·(m, d) one the subtraction makes autograd compute)."""
        if self.sparse_path():
            return x @ self.W_enc + (self.b_enc - self.b_dec @ self.W_enc)
        return super().pre_acts(x)

    def sparse_code(self, pre: torch.Tensor) -> SparseLatents:
        """ReLU of the k largest pre-activations of each token, at their latent indices."""
        values, indices = torch.topk(pre, min(self.params.k, pre.shape[-1]), dim=-1, sorted=False)
        return SparseLatents(torch.relu(values), indices, pre.shape[0], pre.shape[1])

    def activate(self, pre: torch.Tensor) -> torch.Tensor:
        return self.sparse_code(pre).dense()

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        return self.activate(self.pre_acts(x))

    def observe(self, code: SparseLatents) -> None:
        """Hook on each training batch's latents (BatchTopK's threshold); default nothing."""

    def reconstruction(self, x: torch.Tensor, code: SparseLatents, z: torch.Tensor | None):
        """(x̂, reconstruction loss, extra parts): ‖x − x̂‖², x̂ from z when given, else
        gathered from ``code`` (Matryoshka overrides it)."""
        x_hat = self.decode(z) if z is not None else code.decode(self.W_dec) + self.b_dec
        return x_hat, mse(x, x_hat), {}

    def forward(self, x: torch.Tensor, state: TrainState | None = None) -> SAEOutput:
        state = state or TrainState()
        pre = self.pre_acts(x)
        code = self.sparse_code(pre)
        if self.training:
            self.observe(code)
        z = None if self.sparse_path() else code.dense()
        x_hat, rec, extra = self.reconstruction(x, code, z)
        parts = {"mse": mse(x, x_hat).detach(), **extra}
        loss = rec
        if self.params.aux_coeff > 0:  # at 0, AuxK is not computed at all
            aux = auxk_loss(self, pre, x, x_hat, state.dead, self.k_aux())
            # the reference normalises both terms by their target's variance; our main term is
            # the raw ‖x − x̂‖², so AuxK is scaled by E‖x − x̄‖² to keep α's meaning
            var = (x - x.mean(0)).pow(2).sum(-1).mean().detach()
            loss = rec + self.params.aux_coeff * var * aux
            parts["aux"] = aux.detach()
        return SAEOutput(x_hat, z, loss, parts, code=code, fired=code.fired())

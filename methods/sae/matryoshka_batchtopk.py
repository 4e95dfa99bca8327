"""Matryoshka BatchTopK SAE (Bussmann et al. 2025; Nabeshima 2025)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from .base import SparseLatents, mse
from .batchtopk import BatchTopK


def prefix_sizes(width: int, fractions: tuple[float, ...]) -> list[int]:
    """Nested dictionary sizes m_1 < ... < m_K = width from cumulative fractions (rounded,
    at least 1, strictly increasing)."""
    out: list[int] = []
    for f in fractions:
        m = max(1, min(width, round(f * width)))
        if out and m <= out[-1]:
            continue
        out.append(m)
    if not out or out[-1] != width:
        out.append(width)
    return out


@register("matryoshka_batchtopk", family="sae")
class MatryoshkaBatchTopK(BatchTopK):
    """BatchTopK latents trained so that every prefix of the dictionary reconstructs on its
    own: with nested sizes m_1 < ... < m_K = m,

        L = (1/K) Σ_k ‖x − (z_{1..m_k} W_dec[1..m_k] + b_dec)‖² + α · AuxK

    (the first latents learn general features, the later ones refinements; the full
    reconstruction is the k = K term). Encoding, inference threshold and AuxK as
    :class:`BatchTopK`.

    Defaults: prefixes at 1/16, 1/8, 1/4, 1/2 and all of the width (the authors' group sizes
    m/16, m/16, m/8, m/4, m/2), the mean over prefixes (as dictionary_learning's Matryoshka
    trainer), k = 32, α = 1/32, Adam lr 3e-4 with β = (0.9, 0.99) (BatchTopK's).

    Source: Bussmann, Nabeshima, Karvonen, Nanda, "Learning Multi-Level Features with
    Matryoshka Sparse Autoencoders", ICML 2025, Sec. 3; Nabeshima, "Matryoshka Sparse
    Autoencoders", 2025.
    """

    @dataclass
    class Params(BatchTopK.Params):
        prefix_fractions: tuple[float, ...] = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0)

        def validate(self) -> None:
            super().validate()
            fr = self.prefix_fractions
            if not fr or any(not 0 < f <= 1 for f in fr) or list(fr) != sorted(fr):
                raise ValueError(f"prefix_fractions must increase within (0, 1], got {fr}")

    def __init__(self, d_in: int, width: int, params, seed: int = 0):
        super().__init__(d_in, width, params, seed)
        self.prefixes = prefix_sizes(width, tuple(params.prefix_fractions))

    @property
    def matmuls(self) -> float:  # the encoder and one decoding per prefix
        return 1 + sum(self.prefixes) / self.width

    def sparse_path(self) -> bool:
        # a gather per prefix, where the dense products cover Σ m_k / m of the width
        return self.decodes_sparsely(
            self.params.k * len(self.prefixes) * self.width / sum(self.prefixes)
        )

    def prefix_reconstructions(self, z: torch.Tensor) -> list[torch.Tensor]:
        """x̂ from the first m_k latents alone, for every prefix, each (n, d)."""
        return [z[:, :m] @ self.W_dec[:m] + self.b_dec for m in self.prefixes]

    def sparse_prefix_reconstructions(self, code: SparseLatents) -> list[torch.Tensor]:
        """:meth:`prefix_reconstructions` gathered from the active latents alone: prefix m_k
        weighs the entries of latents beyond it by 0."""
        return [
            code.decode(self.W_dec, None if m == self.width else code.indices < m) + self.b_dec
            for m in self.prefixes
        ]

    def reconstruction(self, x: torch.Tensor, code: SparseLatents, z: torch.Tensor | None):
        """(full x̂, mean over prefixes of ‖x − x̂_{≤m_k}‖², the prefix losses' mean); from z
        when given, else gathered from ``code``."""
        if z is not None:
            recs = self.prefix_reconstructions(z)
        else:
            recs = self.sparse_prefix_reconstructions(code)
        losses = torch.stack([mse(x, r) for r in recs])
        return recs[-1], losses.mean(), {"prefix_mse": losses.mean().detach()}

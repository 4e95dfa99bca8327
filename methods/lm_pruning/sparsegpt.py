"""SparseGPT: one-shot pruning with approximate second-order weight reconstruction (Frantar &
Alistarh 2023)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from .base import LayerStats, LMPruningMethod, Target


@dataclass
class SparseGPTParams:
    """Attributes:
    blocksize: columns per lazy-update block, which is also the adaptive mask selection's
        block B_s (the paper's and the code's 128).
    percdamp: dampening λ = percdamp · mean(diag H) added to H's diagonal (the code's 0.01).
    """

    blocksize: int = 128
    percdamp: float = 0.01


@register("sparsegpt", family="lm_pruning")
class SparseGPT(LMPruningMethod):
    """SparseGPT: with H = 2 X Xᵀ the Hessian of the layer's squared reconstruction error on the
    calibration inputs X, the columns are visited left to right; a weight pruned in column i
    has its error spread over the row's not yet visited weights by the OBS update
    δ = −(w_i / [H_F⁻¹]_ii) · [H_F⁻¹]_{i,:}, where H_F is H restricted to the columns not yet
    visited (i and after). All of them come from one upper Cholesky factor U of (H + λI)⁻¹:
    U[i, i:] is proportional to the first row of H_F⁻¹ and U_ii² is its first diagonal entry
    (Algorithm 1), computed for all rows at once. The mask is chosen per block of B_s columns
    by the OBS saliency w² / U_ii²: unstructured removes that fraction of the block's weights
    with the lowest saliency (over all rows of the block, so a layer's sparsity is uniform
    across blocks), N:M the M − N lowest of every group of M consecutive columns of a row,
    chosen when the group's first column is reached (after the updates of the columns before
    it). Dead inputs (H_jj = 0) get H_jj = 1 and their weights zero.

    Source: Frantar & Alistarh 2023, "SparseGPT: Massive Language Models Can Be Accurately
    Pruned in One-Shot" (ICML), Algorithm 1 and Sec. 3 (adaptive mask selection, the
    extension to N:M); the authors' code (``SparseGPT.fasterprune``, ``opt_sequential``):
    block size 128, dampening 0.01 · mean(diag H), blocks of layers in order with the
    calibration inputs passed through the pruned ones, 128 calibration sequences. Ours: the
    calibration windows of the stdlib corpus (the pillar's ``calibration`` section; theirs
    2,048-token C4 segments); exactly ⌊sparsity · weights⌋ of each block removed (their
    threshold ``<= sorted[k]`` removes one more, and ties); N:M removes M − N per group
    (their ``prunen`` is the count removed, so "2:4" and "4:8" mean the same in both); the
    block size must be a multiple of M (theirs lets a group straddle two blocks); float64
    arithmetic (theirs float32); no weight quantization (their optional joint ``wbits``).
    """

    Params = SparseGPTParams
    statistics = "hessian"
    test_params = {"blocksize": 16}

    @classmethod
    def check(cls, params: SparseGPTParams, section) -> None:
        if params.blocksize < 1:
            raise ValueError(f"blocksize must be >= 1, got {params.blocksize}")
        if not 0 < params.percdamp < 1:  # 0 leaves H singular where an input never varies
            raise ValueError(f"percdamp must be in (0, 1), got {params.percdamp}")
        for pattern in section.get("patterns", ()):
            m = pattern.partition(":")[2]
            if m.isdigit() and params.blocksize % int(m):
                raise ValueError(
                    f"blocksize {params.blocksize} is not a multiple of M = {m} (pattern "
                    f"{pattern}): an N:M group would straddle two blocks"
                )

    def prune(self, weight: torch.Tensor, stats: LayerStats | None, target: Target) -> torch.Tensor:
        if stats is None or stats.hessian is None:
            raise ValueError("sparsegpt needs the calibration inputs' Hessian of every layer")
        p: SparseGPTParams = self.params
        if target.nm is not None and p.blocksize % target.nm[1]:
            raise ValueError(f"blocksize {p.blocksize} is not a multiple of M = {target.nm[1]}")
        w = weight.detach().to(torch.float64).clone()
        h = stats.hessian.to(torch.float64).clone()
        dead = torch.diag(h) == 0
        h[dead, dead] = 1.0
        w[:, dead] = 0.0
        h.diagonal().add_(p.percdamp * torch.diag(h).mean())
        u = torch.linalg.cholesky(torch.cholesky_inverse(torch.linalg.cholesky(h)), upper=True)
        rows, cols = w.shape
        for i1 in range(0, cols, p.blocksize):
            i2 = min(i1 + p.blocksize, cols)
            w1, u1 = w[:, i1:i2].clone(), u[i1:i2, i1:i2]
            err1 = torch.zeros_like(w1)
            d1 = torch.diag(u1)
            if target.nm is None:
                prune1 = _lowest(w1**2 / d1.reshape(1, -1) ** 2, target.sparsity)
            else:
                prune1 = torch.zeros_like(w1, dtype=torch.bool)
            for i in range(i2 - i1):
                if target.nm is not None and i % target.nm[1] == 0:
                    n, m = target.nm
                    sal = w1[:, i : i + m] ** 2 / d1[i : i + m].reshape(1, -1) ** 2
                    low = torch.topk(sal, m - n, dim=1, largest=False).indices
                    prune1.scatter_(1, i + low, True)
                col = w1[:, i]
                q = torch.where(prune1[:, i], torch.zeros_like(col), col)
                e = (col - q) / u1[i, i]
                w1[:, i:] -= e.unsqueeze(1) * u1[i, i:].unsqueeze(0)
                w1[:, i] = q  # exactly zero where pruned, unchanged where kept
                err1[:, i] = e
            w[:, i1:i2] = w1
            w[:, i2:] -= err1 @ u[i1:i2, i2:]
        return w.to(weight.dtype)


def _lowest(saliency: torch.Tensor, sparsity: float) -> torch.Tensor:
    """Boolean mask of the ⌊sparsity · numel⌋ lowest entries (stable order on ties)."""
    k = int(saliency.numel() * sparsity)
    out = torch.zeros(saliency.numel(), dtype=torch.bool)
    out[torch.sort(saliency.flatten(), stable=True).indices[:k]] = True
    return out.reshape(saliency.shape)

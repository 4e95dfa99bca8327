"""RegMean: merge each linear layer by the least-squares regression on the experts' inputs
(Jin et al. 2023)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

from sparsebench.suite.registry import register

from ._data import chunks, read, require_data
from .base import MergeData, MergeInputs, MergeResult, MergingMethod, StateDict


def gram_matrices(
    data: MergeData, trunk: Mapping[str, torch.Tensor], task: int, x: torch.Tensor
) -> dict[str, torch.Tensor]:
    """G = XᵀX (float64, (in, in)) per linear weight key of ``data.linear_keys``, X the rows of
    that layer's inputs (tokens flattened) when ``trunk`` runs on ``x`` (summed over all rows,
    the paper's G_i = X_iᵀ X_i)."""
    grams: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for s in chunks(x.shape[0]):
            for key, rows in data.linear_inputs(trunk, task, x[s]).items():
                r = rows.detach().reshape(-1, rows.shape[-1]).double()
                g = r.T @ r
                grams[key] = grams[key] + g if key in grams else g
    return grams


def reduce_off_diagonal(g: torch.Tensor, alpha: float) -> torch.Tensor:
    """G̃ = α G + (1 − α) diag(G): off-diagonal entries scaled by α (the paper's reduction of
    the non-diagonal items; the official ``reduce_non_diag``)."""
    return alpha * g + (1.0 - alpha) * torch.diag_embed(torch.diagonal(g))


def regmean_weight(
    weights: Sequence[torch.Tensor], grams: Sequence[torch.Tensor], alpha: float
) -> torch.Tensor:
    """W* of one linear layer, weights W_t of shape (out, in), Gram matrices (in, in):

        W*ᵀ = (Σ_t G̃_t)⁻¹ Σ_t G̃_t W_tᵀ,

    the minimiser of Σ_t ‖X_t Wᵀ − X_t W_tᵀ‖² for α = 1. Solved in float64 as
    W* = W̄ + Δ with (Σ G̃_t) Δᵀ = Σ G̃_t (W_t − W̄)ᵀ (W̄ the average): identical when Σ G̃_t
    is invertible; when it is singular (an input direction no task excites), the minimum-norm
    Δ (pseudo-inverse) leaves W* = W̄ along the unseen directions (our choice)."""
    ws = [w.double() for w in weights]
    mean = torch.stack(ws).mean(0)
    gs = [reduce_off_diagonal(g.double().to(mean.device), alpha) for g in grams]
    lhs = sum(gs)
    rhs = sum(g @ (w - mean).T for g, w in zip(gs, ws))
    delta_t, info = torch.linalg.solve_ex(lhs, rhs)
    if int(info) != 0 or not torch.isfinite(delta_t).all():
        delta_t = torch.linalg.pinv(lhs, hermitian=True) @ rhs
    return (mean + delta_t.T).to(weights[0].dtype)


@register("regmean", family="merging")
class RegMean(MergingMethod):
    """RegMean: for every linear layer, the weight that best reproduces all experts' outputs on
    their own inputs, W*ᵀ = (Σ_t G̃_t)⁻¹ Σ_t G̃_t W_tᵀ (W of shape (out, in)), G_t = X_tᵀ X_t the
    Gram matrix of the layer's inputs under expert t on task t's train examples and
    G̃_t = α G_t + (1 − α) diag(G_t) (Sec. 3); every linear layer gets the solve (the ViT's
    patch embedding is one), every other parameter (biases, norms, the class token and
    positions) is the plain average.

    Defaults: α = 0.9 (ours, not the paper's: the authors' experiment configs default to no
    reduction, ``regmean_reduce_nondiag = -1``, i.e. α = 1, and the paper tunes it; 0.9 is
    FusionBench-style helper code's default and in MergeLM's grid {0.7, 0.8, 0.9, 1.0}),
    n_examples = 1000 train examples per task (the official configs' ``gram_n_example``).
    Grams are sums over all input rows (tokens flattened), in float64; a singular Σ G̃_t keeps
    the average along its null space (see :func:`regmean_weight`). Task vectors: the raw τ_t.

    Source: Jin, Ren, Preotiuc-Pietro, Cheng, "Dataless Knowledge Fusion by Merging Weights of
    Language Models", ICLR 2023, Sec. 3 (closed-form merge of linear layers and the
    reduction of non-diagonal Gram entries); code github.com/bloomberg/dataless-model-merging.
    """

    data_free = False
    search = {"alpha": (0.7, 0.8, 0.9, 1.0)}  # used only if alpha is set to None
    test_params = {"n_examples": 64}

    @dataclass
    class Params:
        alpha: float | None = 0.9  # off-diagonal scale of the Gram matrices
        n_examples: int = 1000  # train examples per task for its Gram matrices

        def validate(self) -> None:
            if self.alpha is not None and not 0.0 <= self.alpha <= 1.0:
                raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
            if self.n_examples < 1:
                raise ValueError(f"n_examples must be >= 1, got {self.n_examples}")

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        data = require_data(inputs, "regmean")
        grams, read_n = [], 0
        for t, expert in enumerate(inputs.experts):
            x, _ = read(data, t, "train", params.n_examples)
            read_n += x.shape[0]
            grams.append(gram_matrices(data, expert, t, x))
        linear = [k for k in data.linear_keys if k in inputs.base and all(k in g for g in grams)]
        state: StateDict = {}
        for k in inputs.base:
            ws = [e[k] for e in inputs.experts]
            if k in linear:
                state[k] = regmean_weight(ws, [g[k] for g in grams], params.alpha)
            else:
                state[k] = torch.stack(ws).mean(0)
        return MergeResult(
            state=state, task_vectors=None, examples=read_n, info={"regmean_layers": len(linear)}
        )

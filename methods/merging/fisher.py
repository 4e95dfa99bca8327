"""Fisher merging: per-parameter Fisher-weighted average of the experts (Matena & Raffel 2022)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch.func import grad, jacrev, vmap
from torch.nn.attention import SDPBackend, sdpa_kernel

from sparsebench.suite.registry import register

from ._data import chunks, read, require_data
from .base import MergeData, MergeInputs, MergeResult, MergingMethod, StateDict

# Entries of the per-example Jacobian held at once (floats): bounds the memory of one chunk.
_JACOBIAN_BUDGET = 32_000_000


def diagonal_fisher(
    data: MergeData,
    trunk: Mapping[str, torch.Tensor],
    task: int,
    x: torch.Tensor,
    y: torch.Tensor,
    kind: Literal["exact", "empirical"] = "exact",
) -> StateDict:
    """Diagonal Fisher of ``trunk`` (task ``task``'s head) over the n examples ``x``:

    * ``"exact"`` (the paper's choice; its code's ``expectation_wrt_logits=True``):
      F = (1/n) Σ_i Σ_c p(c | x_i) (∂ log p(c | x_i; θ) / ∂θ)², the expectation over the
      model's own predictive distribution, computed exactly over the classes;
    * ``"empirical"``: F = (1/n) Σ_i (∂ log p(y_i | x_i; θ) / ∂θ)² with the true labels.

    Per-example gradients by ``torch.func.vmap`` over ``data.logits`` (one example at a time
    inside the map, scaled-dot-product attention on its math kernel), in chunks; if
    ``data.logits`` cannot be vmapped, a per-example autograd loop gives the same numbers.
    Shapes as the trunk; ``trunk`` is not modified."""
    params = {k: v.detach() for k, v in trunk.items()}
    fisher = {k: torch.zeros_like(v) for k, v in params.items()}
    n = x.shape[0]
    n_params = sum(v.numel() for v in params.values())
    with torch.no_grad():
        n_classes = data.logits(params, task, x[:1]).shape[-1]
    per_example = n_params * (n_classes if kind == "exact" else 1)
    size = max(1, min(n, _JACOBIAN_BUDGET // max(1, per_example)))
    try:
        # functorch has no batching rule for the fused CPU attention kernels (it would loop
        # per example): inside the map, attention runs on the math kernel (batched ops).
        with sdpa_kernel([SDPBackend.MATH]):
            for s in chunks(n, size):
                _accumulate_vmap(data, params, task, x[s], y[s], kind, fisher)
    except RuntimeError:  # vmap unsupported by this data.logits: same numbers by a loop
        fisher = {k: torch.zeros_like(v) for k, v in params.items()}
        for i in range(n):
            _accumulate_loop(data, params, task, x[i : i + 1], y[i : i + 1], kind, fisher)
    return {k: f / n for k, f in fisher.items()}


def _accumulate_vmap(data, params, task, xb, yb, kind, fisher) -> None:
    def log_probs(p, x1):  # (C,) for one example x1 of shape input_shape
        return torch.log_softmax(data.logits(p, task, x1.unsqueeze(0)), dim=-1).squeeze(0)

    if kind == "exact":
        jac = vmap(jacrev(log_probs), in_dims=(None, 0))(params, xb)  # key -> (B, C, *shape)
        with torch.no_grad():
            probs = torch.softmax(data.logits(params, task, xb), dim=-1)  # (B, C)
        for k, j in jac.items():
            w = probs.reshape(*probs.shape, *([1] * (j.dim() - 2))).to(j.dtype)
            fisher[k] += (w * j.detach() ** 2).sum((0, 1))
    else:

        def log_lik(p, x1, y1):  # gather, not [y1]: indexing by a tensor is .item() in vmap
            return log_probs(p, x1).gather(0, y1.reshape(1)).squeeze(0)

        g = vmap(grad(log_lik), in_dims=(None, 0, 0))(params, xb, yb.to(xb.device))
        for k, gk in g.items():
            fisher[k] += (gk.detach() ** 2).sum(0)


def _accumulate_loop(data, params, task, x1, y1, kind, fisher) -> None:
    p = {k: v.detach().requires_grad_(True) for k, v in params.items()}
    keys = list(p)
    logp = torch.log_softmax(data.logits(p, task, x1), dim=-1)[0]  # (C,)
    classes = range(logp.shape[0]) if kind == "exact" else [int(y1[0])]
    probs = logp.detach().exp()
    for c in classes:
        gs = torch.autograd.grad(
            logp[c], [p[k] for k in keys], retain_graph=True, allow_unused=True
        )
        w = probs[c] if kind == "exact" else 1.0
        for k, gk in zip(keys, gs):
            if gk is not None:
                fisher[k] += w * gk**2


def fisher_average(
    experts: Sequence[Mapping[str, torch.Tensor]],
    fishers: Sequence[Mapping[str, torch.Tensor]],
    floor: float = 1e-6,
    normalize: bool = False,
) -> StateDict:
    """The Fisher merge with equal model weights: θ* = Σ_t F̃_t θ_t / Σ_t F̃_t per entry, F̃_t =
    max(F_t, floor) (the official ``fisher_floor``: where every Fisher is below it, θ* is the
    plain average). ``normalize`` divides each F̃_t by ‖F_t‖₂ over all parameters (the
    official script's ``--normalize_fishers``)."""
    scale = [1.0] * len(experts)
    if normalize:
        scale = [
            1.0 / max(float(torch.sqrt(sum((f.double() ** 2).sum() for f in fi.values()))), 1e-30)
            for fi in fishers
        ]
    out: StateDict = {}
    for k in experts[0]:
        w = torch.stack([s * f[k].clamp(min=floor) for s, f in zip(scale, fishers)])
        th = torch.stack([e[k] for e in experts])
        out[k] = ((w * th).sum(0) / w.sum(0)).to(experts[0][k].dtype)
    return out


@register("fisher", family="merging")
class Fisher(MergingMethod):
    """Fisher merging: the Laplace-approximation posterior average of the experts with the
    diagonal Fisher F_t of each expert as its precision, θ*_p = Σ_t F_t,p θ_t,p / Σ_t F_t,p
    (the paper's closed-form Fisher merge with equal model weights λ_t = 1/T).

    F_t: diagonal Fisher of expert θ_t with task t's head on the first ``n_examples`` train
    examples of task t; by default the exact Fisher (expectation over the model's predictive
    distribution, summed over the classes: the paper's choice and its code's default),
    ``fisher="empirical"`` uses the true labels instead. Entries are floored at 1e-6 (the
    official ``fisher_floor``) so that 0/0 gives the plain average.

    Defaults: n_examples = 256 (ours: the official Fisher script uses 4096, MergeLM searches
    {256, ..., 2048}; the exact Fisher costs one backward pass per class per example), floor
    1e-6, no Fisher normalisation (the paper's formula; the official merge script normalises
    each Fisher to unit L2 norm by default: ``normalize=True``). Task vectors: the raw τ_t
    (the merge re-weights them).

    Source: Matena & Raffel, "Merging Models with Fisher-Weighted Averaging", NeurIPS 2022,
    Sec. 2 (Fisher merging: diagonal-Fisher-weighted average); code
    github.com/mmatena/model_merging (fisher.py, merging.py).
    """

    data_free = False
    test_params = {"n_examples": 32}

    @dataclass
    class Params:
        n_examples: int = 256  # train examples per task for its expert's Fisher
        fisher: Literal["exact", "empirical"] = "exact"
        floor: float = 1e-6
        normalize: bool = False

        def validate(self) -> None:
            if self.n_examples < 1:
                raise ValueError(f"n_examples must be >= 1, got {self.n_examples}")
            if self.floor <= 0:
                raise ValueError(f"floor must be > 0, got {self.floor}")

    def merge(self, inputs: MergeInputs, params: Params) -> MergeResult:
        data = require_data(inputs, "fisher")
        fishers, read_n = [], 0
        for t, expert in enumerate(inputs.experts):
            x, y = read(data, t, "train", params.n_examples)
            read_n += x.shape[0]
            fishers.append(diagonal_fisher(data, expert, t, x, y, params.fisher))
        state = fisher_average(inputs.experts, fishers, params.floor, params.normalize)
        info = {
            "fisher_mean": [
                float(sum(f.sum() for f in fi.values()) / sum(f.numel() for f in fi.values()))
                for fi in fishers
            ]
        }
        return MergeResult(state=state, task_vectors=None, examples=read_n, info=info)

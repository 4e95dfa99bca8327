"""N:M fine-grained structured sparsity: at most N nonzeros in every group of M consecutive
weights (2:4 is what sparse tensor cores run), and the sparse-refined straight-through
estimator that trains such masks from scratch (SR-STE).

Groups follow the authors' reference code (github.com/aojunzz/NM-sparsity,
``devkit/sparse_ops``): the weight flattened with the input channel fastest, a convolution's
(out, in, kh, kw) as (out, kh, kw, in) and a linear layer's (out, in) as it is, cut into
consecutive groups of M. As in their code, a group may run across two output rows (or kernel
positions) where a row's length is not a multiple of M (LeNet-300-100's second and third
layers at 4:8): the N:M count holds, but that is not a layout sparse tensor cores take
(NVIDIA's ASP skips such layers). A weight whose size is not a multiple of M cannot be cut at
all (their code fails on it); here such a layer stays dense (ours), and its density in the
record says so.
"""

from __future__ import annotations

import re

import torch


def parse_nm(pattern: str) -> tuple[int, int]:
    """(N, M) of an ``"N:M"`` pattern; ValueError unless 0 < N < M (2:4 and 4:8 in the
    papers; 1:4 and 2:8 in Zhou et al.'s tables)."""
    match = re.fullmatch(r"([1-9][0-9]*):([1-9][0-9]*)", str(pattern))
    n, m = match.groups() if match else ("0", "0")
    if not 0 < int(n) < int(m):
        raise ValueError(f"pattern must be 'N:M' with 0 < N < M (e.g. '2:4'), got {pattern!r}")
    return int(n), int(m)


def nm_eligible(shape: tuple[int, ...], m: int) -> bool:
    """Whether a weight of ``shape`` splits into groups of ``m`` (its size is a multiple)."""
    numel = 1
    for d in shape:
        numel *= int(d)
    return numel % m == 0


def _input_fastest(t: torch.Tensor) -> torch.Tensor:
    return t.permute(0, 2, 3, 1) if t.dim() == 4 else t


def nm_mask(scores: torch.Tensor, n: int, m: int) -> torch.Tensor | None:
    """Boolean mask keeping the ``n`` largest ``scores`` of every group of ``m`` consecutive
    weights (input channel fastest); ``None`` when the weight is not a multiple of ``m`` in
    size (the layer stays dense). Ties go by ``torch.topk``'s order (deterministic on CPU)."""
    if not 0 < n < m:
        raise ValueError(f"N:M sparsity needs 0 < N < M, got {n}:{m}")
    if not nm_eligible(tuple(scores.shape), m):
        return None
    flat = _input_fastest(scores).reshape(-1, m)
    keep = torch.zeros_like(flat, dtype=torch.bool)
    keep.scatter_(1, flat.topk(n, dim=1).indices, True)
    keep = keep.reshape(_input_fastest(scores).shape)
    return keep.permute(0, 3, 1, 2).contiguous() if scores.dim() == 4 else keep


def nm_groups_ok(mask: torch.Tensor, n: int, m: int) -> bool:
    """Whether ``mask`` has exactly ``n`` ones in every group of ``m`` (the N:M invariant)."""
    counts = _input_fastest(mask).reshape(-1, m).sum(dim=1)
    return bool((counts == n).all())


def sr_ste_forward(decay: float):
    """A straight-through layer's forward (``MaskStore.set_straight_through``) for SR-STE."""

    def forward(weight: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return weight if mask is None else SparseRefinedSTE.apply(weight, mask, decay)

    return forward


class SparseRefinedSTE(torch.autograd.Function):
    """W̃ = W ⊙ M forward; backward the straight-through gradient with the sparse-refined term,
    ∂L/∂W = ∂L/∂W̃ + λ_W (1 - M) ⊙ W (Zhou et al. 2021, Eq. 4): the pruned weights get the
    dense gradient and a decay that pulls them towards zero, so the mask settles."""

    @staticmethod
    def forward(ctx, weight: torch.Tensor, mask: torch.Tensor, decay: float) -> torch.Tensor:
        ctx.save_for_backward(weight, mask)
        ctx.decay = decay
        return weight * mask

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        weight, mask = ctx.saved_tensors
        return grad + ctx.decay * (~mask) * weight, None, None

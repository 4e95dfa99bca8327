"""Topology updates of a values-only sparse layer, in O(nnz): a new pattern from flat indices,
the values and the optimizer's per-weight state carried over to it, and random growth.

A :class:`~.sparse_linear.SparseLinear` keeps only its nnz values; a dynamic sparse training
update (drop some connections, grow as many new ones) changes which positions they sit at.
:func:`set_pattern` rewrites the layer's pattern buffers and, for every position of the new
pattern, keeps the value and optimizer state (momentum, Adam's m and v: every (nnz,)-shaped
state tensor) it had if the position was kept, or starts it at the given new value with zero
state. Positions are matched by ``searchsorted`` over the sorted flat indices. With the same
nnz the values Parameter is rewritten in place, so the optimizer's reference to it stays valid
(SET and RigL keep each layer's nnz exact); with another nnz (a pruning step) a new Parameter
replaces it in the optimizer, with the remapped state. These are the semantics of RigL's and
jaxpruner's ``restart_inner_state``: a grown connection has no history.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .pattern import SparsityPattern


def remap(old_flat: Tensor, new_flat: Tensor, old: Tensor, fill: Tensor | float) -> Tensor:
    """Values on ``new_flat``: ``old``'s (given on ``old_flat``) where the position is in both,
    ``fill`` (a scalar or one value per new position) where it is new. Both index tensors
    strictly increasing; O((n_old + n_new) log n_old)."""
    fill_t = torch.as_tensor(fill, dtype=old.dtype, device=old.device).expand(new_flat.shape)
    if old_flat.numel() == 0:
        return fill_t.clone()
    pos = torch.searchsorted(old_flat, new_flat).clamp_(max=old_flat.numel() - 1)
    kept = old_flat[pos] == new_flat
    return torch.where(kept, old[pos], fill_t)


def kept_positions(old_flat: Tensor, new_flat: Tensor) -> Tensor:
    """Bool (n_new,): which positions of ``new_flat`` are in ``old_flat`` (both sorted)."""
    if old_flat.numel() == 0:
        return torch.zeros(new_flat.shape, dtype=torch.bool, device=new_flat.device)
    pos = torch.searchsorted(old_flat, new_flat).clamp_(max=old_flat.numel() - 1)
    return old_flat[pos] == new_flat


def set_pattern(
    layer: nn.Module,
    new_flat: Tensor,
    new_values: Tensor | float = 0.0,
    optimizer: torch.optim.Optimizer | None = None,
    fresh: Tensor | None = None,
) -> Tensor:
    """Move ``layer`` (a :class:`~.sparse_linear.SparseLinear`) to the positions ``new_flat``.

    Args:
        layer: the values-only layer; its pattern buffers are replaced.
        new_flat: int64 (nnz',) flat indices (row * in + col), strictly increasing.
        new_values: the value of each new connection (a scalar, or one per position of
            ``new_flat``; only the new positions' entries are used): its init.
        optimizer: the optimizer holding ``layer.values``; its (nnz,)-shaped state tensors are
            remapped (kept positions keep theirs, new ones start at zero).
        fresh: positions (sorted flat indices) that start anew even if they were in the old
            pattern (SET re-initialises a connection it drops and regrows at once).

    Returns:
        bool (nnz',): which positions were kept (True) rather than grown.

    Raises:
        ValueError: ``new_flat`` is not strictly increasing inside the layer's shape.
    """
    shape = (layer.out_features, layer.in_features)
    pattern = SparsityPattern.from_flat(shape, new_flat.to(layer.flat_index.device))
    new_flat = pattern.flat_index
    old_param = layer.values
    # the old positions whose value and state carry over: all but the fresh ones
    carried = None
    if fresh is not None and fresh.numel():
        carried = ~kept_positions(fresh.to(new_flat.device), layer.flat_index)
    old_flat = layer.flat_index if carried is None else layer.flat_index[carried]

    def carry(t: Tensor, fill: Tensor | float) -> Tensor:
        return remap(old_flat, new_flat, t if carried is None else t[carried], fill)

    with torch.no_grad():
        values = carry(old_param.detach(), new_values)
    state = optimizer.state.get(old_param, {}) if optimizer is not None else {}
    remapped = {
        k: carry(v, 0.0)
        if isinstance(v, Tensor) and v.shape == old_param.shape and v.dim() == 1
        else v
        for k, v in state.items()
    }
    kept = kept_positions(old_flat, new_flat)
    for name, t in pattern.tensors().items():
        setattr(layer, name, t)  # buffers: rebinding keeps them registered
    if values.numel() == old_param.numel():  # in place: the optimizer's reference holds
        with torch.no_grad():
            old_param.copy_(values)
        for k, v in remapped.items():
            if isinstance(v, Tensor) and k in state and state[k] is not v:
                state[k].copy_(v)
        return kept
    new_param = nn.Parameter(values, requires_grad=old_param.requires_grad)
    layer.values = new_param
    if optimizer is not None:
        for group in optimizer.param_groups:
            group["params"] = [new_param if p is old_param else p for p in group["params"]]
        if old_param in optimizer.state:
            del optimizer.state[old_param]
            optimizer.state[new_param] = remapped
    return kept


def grow_random(
    taken: Tensor, numel: int, k: int, generator: torch.Generator | None = None
) -> Tensor:
    """``k`` flat indices drawn uniformly without replacement from the positions of
    ``range(numel)`` not in ``taken`` (strictly increasing), by rejection sampling: candidates
    are drawn uniformly from the whole range, those taken or repeated are dropped, and a
    uniformly random k of the survivors are kept. No tensor of size ``numel``: the expected
    work is O(k · numel / free + nnz log nnz). Returns them sorted.

    Raises:
        ValueError: fewer than ``k`` free positions.
    """
    free = numel - taken.numel()
    if k > free or k < 0:
        raise ValueError(f"cannot grow {k} connections: {free} of {numel} positions are free")
    device = taken.device
    found = torch.empty(0, dtype=torch.int64, device=device)
    while found.numel() < k:
        need = k - found.numel()
        draws = math.ceil(need * numel / free * 1.25) + 16  # expected survivors ≥ need
        cand = torch.randint(numel, (draws,), generator=generator, device=device)
        cand = torch.unique(torch.cat([found, cand]))
        cand = cand[~kept_positions(taken, cand)]
        found = cand
    pick = torch.randperm(found.numel(), generator=generator, device=device)[:k]
    return torch.sort(found[pick]).values


def top_outer_abs(
    grad_y: Tensor, x: Tensor, k: int, exclude: Tensor, chunk_rows: int | None = None
) -> Tensor:
    """The ``k`` flat positions (sorted) of the largest |G|, G = grad_yᵀ x (out, in) the dense
    weight gradient of a linear layer, among those not in ``exclude`` (strictly increasing
    flat indices): RigL's growth criterion without an (out, in) tensor. G is formed
    ``chunk_rows`` rows at a time and a running top-k is merged per chunk, so memory is
    O(chunk_rows · in + k). Ties are broken as ``torch.topk`` breaks them within a chunk, and
    in favour of earlier chunks across chunks.

    Args:
        grad_y: (batch, out) gradient of the layer's output.
        x: (batch, in) the layer's input.
        k: how many positions to return (at most the free ones).
        exclude: positions that may not be chosen (the connections kept).
        chunk_rows: rows of G per chunk; None: about 4M entries per chunk.
    """
    n_out, n_in = grad_y.shape[1], x.shape[1]
    if k <= 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    rows = chunk_rows or max(1, (1 << 22) // max(n_in, 1))
    best_v = torch.empty(0, dtype=x.dtype, device=x.device)
    best_i = torch.empty(0, dtype=torch.int64, device=x.device)
    exclude = exclude.to(x.device)
    for r0 in range(0, n_out, rows):
        r1 = min(r0 + rows, n_out)
        g = (grad_y[:, r0:r1].T @ x).abs_().reshape(-1)
        base = r0 * n_in
        lo, hi = (int(i) for i in torch.searchsorted(exclude, torch.tensor([base, r1 * n_in])))
        g[exclude[lo:hi] - base] = -math.inf
        if best_v.numel() == k:  # only entries above the running k-th can enter
            i = (g > best_v[-1]).nonzero().squeeze(1)
            v = g[i]
        else:
            v, i = torch.topk(g, min(k, g.numel()))
        # the running top-k, sorted descending (its last entry is the k-th); on equal values
        # the earlier entries of the concatenation (earlier chunks) stay
        merged_v, merged_i = torch.cat([best_v, v]), torch.cat([best_i, i + base])
        best_v, order = torch.sort(merged_v, descending=True, stable=True)
        best_v, best_i = best_v[:k], merged_i[order[:k]]
    best_i = best_i[best_v > -math.inf]  # fewer free positions than k
    return torch.sort(best_i).values

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
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .pattern import SparsityPattern

SAMPLE = 1 << 14  # positions scored to estimate top_outer_abs's threshold


@dataclass(frozen=True)
class Match:
    """Where the positions of a new pattern sit in an old one: for each new position, ``pos``
    (its index among the old positions carried over) and ``kept`` (whether it was there);
    ``carried`` (bool over the old positions, or None for all) says which old positions carry
    their values over. Computed once per update and applied to every per-connection tensor."""

    pos: Tensor
    kept: Tensor
    carried: Tensor | None = None

    @classmethod
    def of(cls, old_flat: Tensor, new_flat: Tensor, carried: Tensor | None = None) -> Match:
        """Both index tensors strictly increasing; O(n_new log n_old)."""
        src = old_flat if carried is None else old_flat[carried]
        if src.numel() == 0:
            zeros = torch.zeros(new_flat.shape, dtype=torch.int64, device=new_flat.device)
            return cls(zeros, zeros.bool(), carried)
        pos = torch.searchsorted(src, new_flat).clamp_(max=src.numel() - 1)
        return cls(pos, src[pos] == new_flat, carried)

    def take(self, old: Tensor, fill: Tensor | float) -> Tensor:
        """Per-position values on the new pattern: ``old``'s (given on the old positions)
        where kept, ``fill`` (a scalar or one value per new position) where new."""
        src = old if self.carried is None else old[self.carried]
        fill_t = torch.as_tensor(fill, dtype=old.dtype, device=old.device).expand(self.kept.shape)
        if src.numel() == 0:
            return fill_t.clone()
        return torch.where(self.kept, src[self.pos], fill_t)


def remap(old_flat: Tensor, new_flat: Tensor, old: Tensor, fill: Tensor | float) -> Tensor:
    """Values on ``new_flat``: ``old``'s (given on ``old_flat``) where the position is in both,
    ``fill`` (a scalar or one value per new position) where it is new. Both index tensors
    strictly increasing; O((n_old + n_new) log n_old)."""
    return Match.of(old_flat, new_flat).take(old, fill)


def kept_positions(old_flat: Tensor, new_flat: Tensor) -> Tensor:
    """Bool (n_new,): which positions of ``new_flat`` are in ``old_flat`` (both sorted)."""
    return Match.of(old_flat, new_flat).kept


def _check_increasing(name: str, t: Tensor) -> None:
    if not isinstance(t, Tensor) or t.dim() != 1 or t.dtype.is_floating_point:
        raise ValueError(f"{name} must be a 1-D integer tensor of flat indices, got {t!r:.80}")
    if t.numel() > 1 and not bool((t[1:] > t[:-1]).all()):
        raise ValueError(f"{name} must be strictly increasing (sorted, no repeats)")


def smallest(scores: Tensor, k: int) -> Tensor:
    """Bool mask of the ``k`` smallest entries of the 1-D ``scores``, ties at the boundary
    going to the lower index: one ``kthvalue`` and a few passes, O(n) (a ``topk`` keeping
    most of a large tensor costs several times more)."""
    n = scores.numel()
    if bool(torch.isnan(scores).any()):
        raise ValueError("smallest: scores contain NaN (no order to choose by)")
    out = torch.zeros(n, dtype=torch.bool, device=scores.device)
    if k <= 0:
        return out
    if k >= n:
        return ~out
    t = torch.kthvalue(scores, k).values
    out = scores < t
    need = k - int(out.sum())
    out[(scores == t).nonzero().squeeze(1)[:need]] = True
    return out


def set_pattern(
    layer: nn.Module,
    new_flat: Tensor,
    new_values: Tensor | float = 0.0,
    optimizer: torch.optim.Optimizer | None = None,
    fresh: Tensor | None = None,
) -> Match:
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
        the :class:`Match` of the old pattern to the new (``.kept``: bool (nnz',), which
        positions were kept rather than grown; ``.take`` carries any other per-connection
        tensor over).

    Raises:
        ValueError: ``new_flat`` is not strictly increasing inside the layer's shape.
    """
    shape = (layer.out_features, layer.in_features)
    _check_increasing("new_flat", new_flat)
    if fresh is not None:
        _check_increasing("fresh", fresh)
    if isinstance(new_values, Tensor) and new_values.numel() not in (1, new_flat.numel()):
        raise ValueError(
            f"new_values must be a scalar or one value per position of new_flat "
            f"({new_flat.numel()}), got {new_values.numel()}"
        )
    # buffers made here must stay ordinary tensors even when called under inference mode
    with torch.inference_mode(False):
        return _set_pattern(layer, shape, new_flat, new_values, optimizer, fresh)


def _set_pattern(layer, shape, new_flat, new_values, optimizer, fresh) -> Match:
    # a copy: the buffers must not be the caller's tensor (an inference tensor, or one it
    # goes on changing)
    pattern = SparsityPattern.from_flat(shape, new_flat.to(layer.flat_index.device).clone())
    new_flat = pattern.flat_index
    old_param = layer.values
    # the old positions whose value and state carry over: all but the fresh ones
    carried = None
    if fresh is not None and fresh.numel():
        carried = ~Match.of(fresh.to(new_flat.device), layer.flat_index).kept
    match = Match.of(layer.flat_index, new_flat, carried)
    with torch.no_grad():
        values = match.take(old_param.detach(), new_values)
    state = optimizer.state.get(old_param, {}) if optimizer is not None else {}
    remapped = {
        k: match.take(v, 0.0)
        if isinstance(v, Tensor) and v.shape == old_param.shape and v.dim() == 1
        else v
        for k, v in state.items()
    }
    for name, t in pattern.tensors().items():
        setattr(layer, name, t)  # buffers: rebinding keeps them registered
    if values.numel() == old_param.numel():  # in place: the optimizer's reference holds
        with torch.no_grad():
            old_param.copy_(values)
        for k, v in remapped.items():
            if isinstance(v, Tensor) and k in state and state[k] is not v:
                state[k].copy_(v)
        return match
    new_param = nn.Parameter(values, requires_grad=old_param.requires_grad)
    layer.values = new_param
    if optimizer is not None:
        for group in optimizer.param_groups:
            group["params"] = [new_param if p is old_param else p for p in group["params"]]
        if old_param in optimizer.state:
            del optimizer.state[old_param]
            optimizer.state[new_param] = remapped
    return match


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
    _check_increasing("taken", taken)
    if not isinstance(k, int):
        raise ValueError(f"k must be an int, got {k!r}")
    free = numel - taken.numel()
    if k > free or k < 0:
        raise ValueError(f"cannot grow {k} connections: {free} of {numel} positions are free")
    device = taken.device
    gen_device = generator.device if generator is not None else device
    found = torch.empty(0, dtype=torch.int64, device=device)
    while found.numel() < k:
        need = k - found.numel()
        draws = math.ceil(need * numel / free * 1.25) + 16  # expected survivors ≥ need
        cand = torch.randint(numel, (draws,), generator=generator, device=gen_device).to(device)
        cand = torch.unique(torch.cat([found, cand]))
        cand = cand[~kept_positions(taken, cand)]
        found = cand
    pick = torch.randperm(found.numel(), generator=generator, device=gen_device)[:k].to(device)
    return torch.sort(found[pick]).values


def top_outer_abs(
    grad_y: Tensor, x: Tensor, k: int, exclude: Tensor, chunk_rows: int | None = None
) -> Tensor:
    """The ``k`` flat positions (sorted) of the largest |G|, G = grad_yᵀ x (out, in) the dense
    weight gradient of a linear layer, among those not in ``exclude`` (strictly increasing
    flat indices): RigL's growth criterion without an (out, in) tensor. Ties at the boundary
    go to the lower flat index.

    A uniformly random sample of 16,384 positions (fixed seed; the free ones kept) is scored
    first (one dot product over the batch each), and its quantile gives a threshold a little
    below the k-th largest; then G is formed ``chunk_rows`` rows at a time, the entries at or
    above the threshold (about k of them) are kept and the k are selected exactly among them
    (a threshold that proves too high is lowered and the pass repeated; with fewer than k
    positive scores, zeros fill up by lowest flat index). Memory O(chunk_rows · in + k); time
    about one dense weight gradient, where a running ``topk`` over the chunks cost several
    times more.

    Args:
        grad_y: (batch, out) gradient of the layer's output.
        x: (batch, in) the layer's input.
        k: how many positions to return (at most the free ones).
        exclude: positions that may not be chosen (the connections kept).
        chunk_rows: rows of G per chunk; None: about 4M entries per chunk.
    """
    _check_increasing("exclude", exclude)
    if chunk_rows is not None and chunk_rows < 1:
        raise ValueError(f"chunk_rows must be >= 1 or None, got {chunk_rows}")
    if not (bool(torch.isfinite(grad_y).all()) and bool(torch.isfinite(x).all())):
        raise ValueError("top_outer_abs: grad_y or x is not finite (no order to grow by)")
    n_out, n_in = grad_y.shape[1], x.shape[1]
    free = n_out * n_in - exclude.numel()
    k = min(k, free)
    if k <= 0:
        return torch.empty(0, dtype=torch.int64, device=x.device)
    rows = chunk_rows or max(1, (1 << 22) // max(n_in, 1))
    exclude = exclude.to(x.device)

    def chunks():  # (first flat index, |G| of the chunk's rows with excluded entries at -1)
        for r0 in range(0, n_out, rows):
            r1 = min(r0 + rows, n_out)
            g = (grad_y[:, r0:r1].T @ x).abs_().reshape(-1)
            base = r0 * n_in
            bounds = torch.tensor([base, r1 * n_in], device=exclude.device)
            lo, hi = (int(i) for i in torch.searchsorted(exclude, bounds))
            g[exclude[lo:hi] - base] = -1.0
            yield base, g

    if k == free:  # every free position
        return torch.cat([(g >= 0).nonzero().squeeze(1) + base for base, g in chunks()])
    # the sample's scores, each a dot product over the batch: uniformly random positions from
    # a fixed seed (deterministic; a strided sample can fall into a few columns when the
    # stride divides n_in, e.g. always-blank pixels)
    gen = torch.Generator().manual_seed(0)
    pos = torch.sort(torch.randint(n_out * n_in, (SAMPLE,), generator=gen)).values.to(x.device)
    pos = pos[~Match.of(exclude, pos).kept]
    sample = (grad_y[:, pos // n_in] * x[:, pos % n_in]).sum(0).abs_()
    # the rank of the k-th largest in the sample, lowered by a safety margin
    rank = min(sample.numel(), math.ceil(sample.numel() * k / free * 1.05) + 32)
    threshold = float(torch.topk(sample, rank).values[-1]) if sample.numel() else 0.0
    for attempt in range(3):
        vals, idx = [], []
        for base, g in chunks():  # above a positive threshold, or every positive score
            i = ((g >= threshold) if threshold > 0 else (g > 0)).nonzero().squeeze(1)
            vals.append(g[i])
            idx.append(i + base)
        cand_v, cand_i = torch.cat(vals), torch.cat(idx)
        if cand_v.numel() >= k:
            chosen = smallest(-cand_v, k)  # the k largest; in flat order, so lower first
            return cand_i[chosen]  # already increasing
        if threshold == 0.0:
            break
        threshold = threshold / 4 if attempt == 0 else 0.0  # too few: lower and repeat
    # fewer than k positive scores: all of them, then zeros by lowest flat index (O(k) memory)
    need, zeros = k - cand_i.numel(), []
    for base, g in chunks():
        z = (g == 0).nonzero().squeeze(1)[:need] + base
        zeros.append(z)
        need -= z.numel()
        if need == 0:
            break
    return torch.sort(torch.cat([cand_i, *zeros])).values

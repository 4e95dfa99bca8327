"""CHT: Cannistraci-Hebb Training (gradient-free regrowth by CH3-L3 link prediction)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from sparsebench.methods.dst.static import Static
from sparsebench.suite.pillars.classification.init import swi_std
from sparsebench.suite.pillars.classification.masks import top_mask
from sparsebench.suite.registry import register

# Scores closer than this fraction of a layer's best score are ties (broken at random): the
# path sums of equal scores can differ in the last bits with the summation order.
TIE_TOLERANCE = 1e-6


@torch.no_grad()
def ch3_l3_scores(
    adj: torch.Tensor, weights: torch.Tensor | None = None, max_elems: int = 1 << 23
) -> torch.Tensor:
    """CH3-L3 link-prediction scores of every non-link of one bipartite layer graph.

    The graph has the layer's inputs and outputs as nodes and its active connections as edges.
    For a candidate link (u, v), u an input and v an output not linked to u, the score sums over
    every path of length three u - o - i - v (o an output neighbour of u, i an input neighbour
    of v, i and o linked)::

        CH3-L3(u, v) = sum_{paths u-o-i-v}  1 / sqrt((1 + d_e(o)) * (1 + d_e(i)))

    where d_e(z) is the external degree of the intermediate node z: its links to nodes that are
    neither the seeds u, v nor in the local community (LC) of (u, v), the set of intermediate
    nodes of all those paths (the CH3 model on paths of length 3 of Muscoloni et al. 2022, as
    used by Zhang et al. 2024, Sec. 2, and computed by the authors' ``CH_scores_mex.c``:
    ``deg_e = deg - deg_i - links to seeds``, ``deg_i`` = links to LC nodes).
    In a bipartite graph the LC neighbours of o are exactly the common neighbours of o and v,
    and those of i the common neighbours of i and u, so
    ``1 + d_e(o) = deg(o) - |N(o) ∩ N(v)|`` and ``1 + d_e(i) = deg(i) - |N(i) ∩ N(u)|``: the
    score needs only the degrees and the co-neighbour counts ``A Aᵀ`` and ``Aᵀ A``. We sum the
    paths output by output with batched matmuls, costing about ``sum_o deg(o)^2 * n_out``
    multiply-adds (0.2 s on one CPU core for a 784x300 layer at density 0.1).

    With ``weights``, each path term is also multiplied by ``w(u,o) * w(i,o) * w(i,v)`` (the
    weights of its three links; ``cht_channel`` passes cube roots of normalised kernel
    magnitudes); the external degrees stay topological.

    Args:
        adj: bool ``(n_out, n_in)``, the layer's active connections in ``nn.Linear`` weight
            layout (row = output node, column = input node).
        weights: optional float ``(n_out, n_in)`` link weights (only read where ``adj``).
        max_elems: memory bound (in floats) of one batch of the path sum.
    Returns: float32 ``(n_out, n_in)`` scores on ``adj``'s device, 0 at existing links.
    """
    n_out, n_in = adj.shape
    dev = adj.device
    b = adj.t().to(torch.float32).contiguous()  # (n_in, n_out)
    w = b if weights is None else (weights.t().to(torch.float32) * b).contiguous()
    deg_in, deg_out = b.sum(1), b.sum(0)
    # beta[i, u] = (1 + d_e(i))^-1/2 = (deg(i) - |N(i) ∩ N(u)|)^-1/2; alpha[o, v] likewise.
    beta = torch.mm(b, b.t()).neg_().add_(deg_in[:, None]).clamp_min_(1.0).rsqrt_()
    alpha = torch.mm(b.t(), b).neg_().add_(deg_out[:, None]).clamp_min_(1.0).rsqrt_()
    scores = torch.zeros(n_in, n_out, device=dev)
    deg = deg_out.long()
    # Outputs by decreasing degree, so each batch pads its neighbour lists to a similar length.
    by_deg = torch.argsort(deg, descending=True, stable=True)
    # Each row: the output's input neighbours first (ascending), then padding.
    nbr_all = torch.argsort(adj.to(torch.uint8), dim=1, descending=True, stable=True)
    start = 0
    while start < n_out:
        d_max = int(deg[by_deg[start]])
        if d_max == 0:
            break
        step = max(1, max_elems // (d_max * (d_max + n_out)))
        outs = by_deg[start : start + step]
        start += step
        c = outs.numel()
        idx = nbr_all[outs, :d_max]  # (c, D) input neighbours of each output o
        valid = torch.arange(d_max, device=dev)[None, :] < deg[outs][:, None]
        w_no = w[idx, outs[:, None]] * valid  # (c, D) w(u, o) for u in N(o), 0 on padding
        # t[o, i, u] = beta[i, u] * w(i, o) * w(u, o) over pairs of neighbours of o.
        t = beta[idx[:, :, None], idx[:, None, :]]
        t.mul_(w_no[:, :, None]).mul_(w_no[:, None, :])
        w_iv = torch.index_select(w, 0, idx.reshape(-1)).view(c, d_max, n_out)  # w(i, v)
        g = torch.bmm(t.transpose(1, 2), w_iv)  # (c, D_u, n_out): sum_i of the path terms
        g.mul_(alpha[outs][:, None, :])  # alpha[o, v]
        scores.index_add_(0, idx.reshape(-1), g.view(-1, n_out))
    return scores.t().masked_fill(adj, 0.0)


def ch3_l3_flops(adj: torch.Tensor, weighted: bool = False) -> float:
    """FLOPs of CH3-L3 scoring as a sparse path-based implementation needs them (2 per
    multiply-add, the RigL-paper convention): the co-neighbour counts (``sum_o deg(o)^2 +
    sum_i deg(i)^2`` multiply-adds) and one multiply-add per path term (two with link
    weights), over the ``deg_outᵀ A deg_in`` length-3 walks through each link.

    Args: adj: bool ``(n_out, n_in)``; weighted: whether path terms carry link weights.
    """
    a = adj.to(torch.float64)
    deg_in, deg_out = a.sum(0), a.sum(1)
    walks = float(deg_out @ a @ deg_in)
    co = float((deg_out**2).sum() + (deg_in**2).sum())
    return 2.0 * co + 2.0 * walks * (2 if weighted else 1)


def top_k_random_ties(
    scores: torch.Tensor, candidates: torch.Tensor, k: int, generator: torch.Generator
) -> torch.Tensor:
    """Bool mask (``scores``' shape) of the ``k`` candidates with the largest scores; scores
    within ``TIE_TOLERANCE`` of the best score's magnitude are ties, broken uniformly at random
    with ``generator`` (a CPU generator). Raises ValueError if there are fewer than ``k``
    candidates."""
    n_cand = int(candidates.sum())
    if k > n_cand:
        raise ValueError(f"cannot grow {k} links among {n_cand} candidates")
    out = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    if k <= 0:
        return out.view_as(scores)
    s = scores.reshape(-1).to(torch.float64)
    top = float(s[candidates.reshape(-1)].abs().max())
    q = TIE_TOLERANCE * top if top > 0 else 1.0
    s = torch.where(candidates.reshape(-1), torch.round(s / q), -math.inf)
    perm = torch.randperm(s.numel(), generator=generator).to(s.device)
    order = torch.sort(s[perm], descending=True, stable=True).indices[:k]
    out[perm[order]] = True
    return out.view_as(scores)


@torch.no_grad()
def pooled_removal(weight: torch.Tensor, mask: torch.Tensor, zeta: float) -> torch.Tensor:
    """CHT's link removal (the authors' ``--remove_method weight_magnitude``): drop the
    ``int(zeta * nnz)`` active links of smallest ``|w|``, positive and negative weights ranked
    together. Returns the bool mask of the kept links (``weight``'s shape)."""
    scores = torch.where(mask, weight.detach().abs(), math.inf)
    return mask & ~top_mask(-scores, int(zeta * int(mask.sum())))


@torch.no_grad()
def per_sign_removal(weight: torch.Tensor, mask: torch.Tensor, zeta: float) -> torch.Tensor:
    """SET's link removal: drop the fraction ``zeta`` of the positive active weights closest
    to zero and the fraction ``zeta`` of the negative ones (``int(zeta * count)`` each; active
    zeros count as positive). Returns the bool mask of the kept links (``weight``'s shape)."""
    w = weight.detach()
    pos = mask & (w >= 0)
    neg = mask & (w < 0)
    inf = torch.full_like(w, math.inf)
    drop_pos = top_mask(torch.where(pos, -w, -inf), int(zeta * int(pos.sum())))
    drop_neg = top_mask(torch.where(neg, w, -inf), int(zeta * int(neg.sum())))
    return mask & ~drop_pos & ~drop_neg


def cosine_zeta(zeta: float, step: float, t_end: float) -> float:
    """The authors' adaptive removal fraction (``--adaptive_zeta``): ``zeta / 2 * (1 +
    cos(pi * step / t_end))`` at optimizer step ``step`` of a run whose evolution ends at step
    ``t_end``: ``zeta`` at step 0, decaying to 0 at ``t_end``, no floor."""
    return zeta / 2.0 * (1.0 + math.cos(math.pi * step / t_end))


def remove_inactive_neurons(
    masks: dict[str, torch.Tensor | None], chains: list[tuple[str, str]]
) -> None:
    """ESML's removal of inactive neurons (Zhang et al. 2024, Sec. 3.1), in place on the
    post-removal masks: for each consecutive pair (a, b) of ``chains`` (a's outputs feed b's
    inputs), from the last pair to the first a hidden neuron without outgoing links in b loses
    its incoming links in a; then from the first pair to the last a neuron without incoming
    links in a loses its outgoing links in b (as the reference ``remove_unactive_links_*``).

    Args:
        masks: layer name -> bool ``(out, in)`` mask (None = dense, left alone).
        chains: pairs of Linear layer names with ``a.out_features == b.in_features``.
    """
    for a, b in reversed(chains):
        if masks[a] is not None and masks[b] is not None:
            masks[a] = masks[a] & masks[b].any(dim=0)[:, None]
    for a, b in chains:
        if masks[a] is not None and masks[b] is not None:
            masks[b] = masks[b] & masks[a].any(dim=1)[None, :]


# Autograd nodes a hidden unit passes through on its own: unary elementwise ops (activations,
# dropout, copies) and views, which keep the unit's index in the last dimension.
_PASS_THROUGH = frozenset(
    {"Relu", "Gelu", "Tanh", "Sigmoid", "Silu", "Elu", "LeakyRelu", "Hardtanh", "Softplus"}
    | {"Mish", "NativeDropout", "Clone", "View", "UnsafeView", "Reshape", "ReshapeAlias", "Alias"}
)


def _passes_through(node) -> bool:
    return type(node).__name__.split("Backward")[0] in _PASS_THROUGH


def linear_chains(
    model: nn.Module, layers: dict[str, nn.Module], example: torch.Tensor
) -> list[tuple[str, str]]:
    """Pairs (a, b) of the Linear ``layers`` where b's input is a's output through unary
    elementwise ops and views only, and neither a's output nor anything between feeds another
    op: the pairs whose hidden units inactive-neuron removal may prune (a unit b does not read
    computes nothing, one a does not feed reads only its bias). Found from the autograd graph of
    one forward pass of ``model`` in eval mode on ``example`` (a batch), so a residual add, a
    norm, an attention product or a Linear called twice breaks the chain. Ordered by b, in the
    definition order of ``layers``."""
    linears = {n: m for n, m in layers.items() if isinstance(m, nn.Linear)}
    ins: dict[str, torch.Tensor] = {}
    outs: dict[str, torch.Tensor] = {}
    calls: dict[str, int] = dict.fromkeys(linears, 0)

    def pre(name):
        def hook(_m, args):
            ins[name] = args[0]
            calls[name] += 1

        return hook

    def post(name):
        return lambda _m, _args, out: outs.__setitem__(name, out)

    hooks = [m.register_forward_pre_hook(pre(n)) for n, m in linears.items()]
    hooks += [m.register_forward_hook(post(n)) for n, m in linears.items()]
    was_training = model.training
    model.eval()
    try:
        with torch.enable_grad():
            y = model(example)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    if not isinstance(y, torch.Tensor):
        raise ValueError(f"CHT chain removal needs a model returning one tensor, got {type(y)}")
    # How many ops consume each node's output, over the graph that reaches the model's output.
    consumers: dict = {}
    seen, stack = set(), [y.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        for parent, _ in node.next_functions:
            if parent is not None:
                consumers[parent] = consumers.get(parent, 0) + 1
                stack.append(parent)
    producer = {
        out.grad_fn: n for n, out in outs.items() if out.grad_fn is not None and calls[n] == 1
    }
    chains = []
    for b, x in ins.items():
        node = x.grad_fn
        while node is not None and node not in producer and consumers.get(node) == 1:
            parents = [p for p, _ in node.next_functions if p is not None]
            node = parents[0] if _passes_through(node) and len(parents) == 1 else None
        a = producer.get(node)
        if a is None or calls[b] != 1 or consumers.get(node) != 1:
            continue
        if linears[a].out_features == linears[b].in_features:
            chains.append((a, b))
    order = list(layers)
    return sorted(chains, key=lambda ab: order.index(ab[1]))


@register("cht", family="dst")
class CHT(Static):
    """Cannistraci-Hebb Training (Zhang, Zhao, Wu, Muscoloni, Cannistraci, ICLR 2024), with the
    defaults of the authors' CHT command (README of ``biomedical-cybernetics/
    Cannistraci-Hebb-training`` at commit ``d1677b55``: ``run.py --dst_scheduler --adaptive_zeta
    --zeta 0.3 --remove_method weight_magnitude --chain_removal --update_interval 1
    --early_stop --init_mode swi``, carried out by ``mlp_and_cnn/dst_scheduler.py``).

    1. Init: a random mask per layer (uniform density per layer, as the reference's random
       permutation), then Sparse Weight Initialisation (SWI, ``init="swi"``): every masked
       layer's weights are redrawn from N(0, 2 / fan_in_sparse), where fan_in_sparse =
       nnz / n_out is the mean number of links into an output (``sqrt(2 / ((1 - S) n_in))``).
    2. Topology evolution after every ``update_interval``-th epoch (1, i.e. every epoch) whose
       end, at optimizer step ``t``, comes before ``T_end = end_fraction x total_steps``
       (``t < T_end``; ``end_fraction`` = 0.75, the command's ``T_end = 0.75 x epochs``), in
       every masked layer: removal of the ``int(zeta_t x nnz)`` active links of smallest
       ``|w|``, positive and negative weights ranked together (``removal="pooled"``, the
       command's ``weight_magnitude``), with the cosine-decayed fraction
       ``zeta_t = zeta / 2 x (1 + cos(pi t / T_end))`` (``zeta_schedule="cosine"``, the
       command's ``--adaptive_zeta``; ``zeta`` = 0.3, no floor); then removal of inactive
       neurons (``remove_inactive``, the command's ``--chain_removal``): along chains of
       Linear layers (:func:`linear_chains`), links of hidden neurons left without outgoing
       (then incoming) links are removed too.
    3. Regrowth of as many links as were removed, by the top CH3-L3 scores
       (:func:`ch3_l3_scores`) on the layer's bipartite graph after removal; removed links are
       candidates too. New links start at zero (``regrowth_init="zero"``, the reference's zero
       grow tensor) with zero optimizer state; a link removed and regrown in the same update
       keeps its value and state, as in the reference (it was never gone).
    4. Early stop (``early_stop``): a layer signals when the overlap |removed ∩ regrown| /
       |regrown| exceeds ``early_stop_threshold`` = 0.9 (a layer that regrows nothing does not
       signal, as the reference skips it); topology evolution stops for good once every layer
       has signalled.

    Settings that reproduce our earlier variant: ``zeta_schedule="constant"`` (``zeta`` at every
    update, the command without ``--adaptive_zeta``), ``removal="per_sign"`` (SET's removal of
    the fraction ``zeta`` of the positive and of the negative weights closest to zero, as the
    reference's older ``sparse.py`` layer) and ``end_fraction=1.0`` (every epoch but the last).

    Our choices (departures from the command): masks start random, not from CSTI (correlated
    sparse topological initialisation, ``--self_correlated_sparse``, which needs hidden layers
    sized as multiples of the input); every prunable layer is sparse, including the classifier
    the reference keeps dense; Conv2d layers (the paper applies CHT to MLP layers) are
    bipartite between their ``in_channels * kh * kw`` flattened inputs and ``out_channels``
    outputs; chains are found from the autograd graph (:func:`linear_chains`), where the
    reference chains all its Linear layers in order; removal ranks the active links only (the
    reference ranks ``|w|`` over the whole matrix, so on a tie at 0 it may keep an inactive
    position); ties of the regrowth score (e.g. score 0 when fewer candidates have a path) are
    broken at random with the run generator, so every layer keeps its exact number of links
    (the reference grows every link with ``score >= thre`` and may grow more); the update
    follows the epoch's last optimizer step (the reference's scheduler skips the optimizer
    step of the batch on which it updates); biases keep PyTorch's init.

    Training FLOPs: ``3 f_S`` per example (Evci et al. 2020, Appendix H), plus each update's
    link prediction, which is gradient-free but not free: we add :func:`ch3_l3_flops` of every
    scored layer (co-neighbour counts and one multiply-add per path term); the O(nnz) removal
    is not counted, as for SET. ``regrowth_seconds`` records the wall-clock seconds of each
    update's regrowth (scoring and selection, all layers; ``regrowth_seconds_by_layer`` per
    layer), ``regrowth_seconds_total`` their sum; the record's ``regrowth_s`` /
    ``regrowth_updates`` time each whole update instead (removal and regrowth,
    ``MaskMethod.timed_update``). ``zetas`` lists the removal fraction of each update.

    Source: Zhang, Zhao, Wu, Muscoloni, Cannistraci 2024, "Epitopological learning and
    Cannistraci-Hebb network shape intelligence brain-inspired theory for ultra-sparse
    advantage in deep learning", ICLR, Sec. 2 (CH3-L3 of Muscoloni et al. 2022), Sec. 3.1
    (ESML: removal, regrowth, inactive neurons) and 3.2 (CHT: SWI, early stop); defaults from
    the authors' CHT command above: zeta = 0.3 cosine-decayed to T_end = 0.75 of the run,
    pooled magnitude removal, update every epoch, uniform layer density, SWI, zero regrowth
    init, chain removal, early stop at 0.9 overlap.
    """

    updates_masks = True  # mask updates timed into regrowth_s / regrowth_updates

    @dataclass
    class Params(Static.Params):
        distribution: Literal["erk", "uniform"] = "uniform"
        zeta: float = 0.3
        zeta_schedule: Literal["cosine", "constant"] = "cosine"
        removal: Literal["pooled", "per_sign"] = "pooled"
        update_interval: int = 1
        early_stop: bool = True
        early_stop_threshold: float = 0.9
        remove_inactive: bool = True
        init: Literal["default", "swi", "scaled"] = "swi"
        regrowth_init: Literal["zero", "swi"] = "zero"
        end_fraction: float = 0.75

        def validate(self) -> None:
            if not 0.0 < self.zeta < 1.0:
                raise ValueError(f"zeta must be in (0, 1), got {self.zeta}")
            if self.update_interval < 1:
                raise ValueError(f"update_interval must be >= 1 epoch, got {self.update_interval}")
            if not 0.0 < self.end_fraction <= 1.0:
                raise ValueError(f"end_fraction must be in (0, 1], got {self.end_fraction}")
            if not 0.0 <= self.early_stop_threshold <= 1.0:
                raise ValueError(
                    f"early_stop_threshold must be in [0, 1], got {self.early_stop_threshold}"
                )

    def __init__(self, params, sparsity, ctx):
        super().__init__(params, sparsity, ctx)
        self.regrowth_seconds: list[float] = []
        self.regrowth_seconds_by_layer: dict[str, list[float]] = {}
        self.overlaps: list[dict[str, float]] = []
        self.signalled: set[str] = set()
        self.evolution_stopped = False
        self.link_prediction_flops = 0.0
        self.zeta_now = params.zeta  # removal fraction of the update under way
        self.zetas: list[float] = []
        self.chains: list[tuple[str, str]] | None = None

    @property
    def regrowth_seconds_total(self) -> float:
        """Wall-clock seconds of all regrowth steps so far."""
        return float(sum(self.regrowth_seconds))

    # -- schedule ------------------------------------------------------------------------
    @classmethod
    def check_budget(
        cls, params: Params, total_steps: int, steps_per_epoch: int | None = None
    ) -> None:
        """Refuse a run with no topology update. Updates follow epochs k, 2k, ... (k =
        ``update_interval``) at step t = epochs done x steps_per_epoch while
        ``t < T_end = end_fraction x total_steps``; so k epochs must end before T_end. Without
        ``steps_per_epoch`` (spec validation) it assumes epochs of one step at least."""
        k = params.update_interval
        t_end = params.end_fraction * total_steps
        spe = steps_per_epoch or 1
        epochs = total_steps // spe
        if k * spe >= t_end:
            what = f"{epochs} epochs" if steps_per_epoch else f"{total_steps} steps"
            raise ValueError(
                f"{cls.method_name}: no topology update would happen in {what}: updates follow "
                f"every update_interval = {k}-th epoch that ends before T_end = end_fraction "
                f"x total_steps = {t_end:g} steps; train longer, lower update_interval or "
                "raise end_fraction"
            )

    def is_update_epoch(self, epoch: int) -> bool:
        """Whether the topology evolves at the end of 0-based ``epoch``: the reference's
        ``step % delta_T == 0 and step < T_end``."""
        done = epoch + 1
        t_end = self.params.end_fraction * self.ctx.total_steps
        return done % self.params.update_interval == 0 and done * self.ctx.steps_per_epoch < t_end

    def zeta_at(self, step: int) -> float:
        """Removal fraction of an update at optimizer step ``step``."""
        if self.params.zeta_schedule == "constant":
            return self.params.zeta
        return cosine_zeta(self.params.zeta, step, self.params.end_fraction * self.ctx.total_steps)

    # -- init ----------------------------------------------------------------------------
    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        self.check_budget(self.params, self.ctx.total_steps, self.ctx.steps_per_epoch)
        self.check_model(self.params, store.layers)
        self.init_masks(trainer, pl_module)  # init (SWI by default) follows: InitCallback

    def init_masks(self, trainer, pl_module) -> None:
        """Random masks at the layer densities (Static's init)."""
        Static.on_fit_start(self, trainer, pl_module)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if self.chains is None and self.params.remove_inactive:
            store = pl_module.masks
            # One example of the first batch: the trace needs the input's shape only.
            self.chains = linear_chains(store.model, store.layers, batch[0][:1])

    # -- topology evolution --------------------------------------------------------------
    def on_train_epoch_end(self, trainer, pl_module) -> None:
        epoch = trainer.current_epoch
        if self.evolution_stopped or not self.is_update_epoch(epoch):
            return
        self.zeta_now = self.zeta_at((epoch + 1) * self.ctx.steps_per_epoch)
        self.zetas.append(self.zeta_now)
        self.evolve(pl_module.masks)

    @torch.no_grad()
    def evolve(self, store) -> None:
        """One CHT update of every masked layer of ``store`` (a MaskStore), timed as one mask
        update (removal, regrowth and installation; the link-prediction FLOPs are counted
        after the timer stops, in the same order as before)."""
        with self.timed_update(store):
            overlaps = self._evolve(store)
        self.count_pending()  # outside the timers: bookkeeping, not regrowth
        if self.params.early_stop:
            thr = self.params.early_stop_threshold
            self.signalled |= {n for n, o in overlaps.items() if o > thr}
            self.evolution_stopped = bool(overlaps) and self.signalled >= set(overlaps)

    def _evolve(self, store) -> dict[str, float]:
        """Removal and regrowth of every masked layer; returns layer -> overlap."""
        old = {n: m for n, m in store.masks.items() if m is not None}
        kept: dict[str, torch.Tensor | None] = dict.fromkeys(store.masks)
        for name, mask in old.items():
            kept[name] = self.remove(name, store.weight(name), mask)
        if self.params.remove_inactive:
            remove_inactive_neurons(kept, self.chains or [])
        overlaps, seconds = {}, 0.0
        for name, mask in old.items():
            w = store.weight(name)
            if w.is_cuda:
                torch.cuda.synchronize(w.device)
            t0 = time.perf_counter()
            grow = self.regrow(name, w, mask, kept[name])
            if w.is_cuda:
                torch.cuda.synchronize(w.device)
            dt = time.perf_counter() - t0
            seconds += dt
            self.regrowth_seconds_by_layer.setdefault(name, []).append(dt)
            removed = mask & ~kept[name]
            n_grow = int(grow.sum())
            overlaps[name] = float((removed & grow).sum()) / n_grow if n_grow else math.nan
            new = kept[name] | grow
            fresh = grow & ~mask  # newly active: initial value, zero optimizer state
            if self.params.regrowth_init == "swi":
                draw = torch.randn(w.shape, generator=self.ctx.generator) * swi_std(new)
                w.data[fresh] = draw.to(device=w.device, dtype=w.dtype)[fresh]
            else:
                w.data[fresh] = 0.0
            store.set_mask(name, new)
        self.regrowth_seconds.append(seconds)
        self.overlaps.append(overlaps)
        return overlaps

    def remove(self, name: str, weight: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Links kept after the magnitude removal of the fraction ``zeta_now`` (bool, weight's
        shape)."""
        rule = pooled_removal if self.params.removal == "pooled" else per_sign_removal
        return rule(weight, mask, self.zeta_now)

    def regrow(
        self, name: str, weight: torch.Tensor, mask: torch.Tensor, kept: torch.Tensor
    ) -> torch.Tensor:
        """Links to grow (bool, weight's shape): ``mask.sum() - kept.sum()`` of the non-kept
        positions with the top CH3-L3 scores on the flattened ``(out, in*kh*kw)`` graph of
        ``kept``. Adds the scoring FLOPs to the run's counter."""
        adj = kept.reshape(kept.shape[0], -1)
        n_grow = int(mask.sum()) - int(kept.sum())
        scores = ch3_l3_scores(adj)
        self.count_later(adj)
        grow = top_k_random_ties(scores, ~adj, n_grow, self.ctx.generator)
        return grow.view_as(kept)

    def count_later(self, adj: torch.Tensor, weighted: bool = False) -> None:
        """Queue the link-prediction FLOPs of scoring ``adj`` (counted after the timed
        regrowth by :meth:`count_pending`, so the wall-clock times the regrowth only)."""
        if not hasattr(self, "_pending"):
            self._pending: list[tuple[torch.Tensor, bool]] = []
        self._pending.append((adj, weighted))

    def count_pending(self) -> None:
        for adj, weighted in getattr(self, "_pending", ()):
            self.add_link_prediction_flops(ch3_l3_flops(adj, weighted=weighted))
        self._pending = []

    def add_link_prediction_flops(self, flops: float) -> None:
        self.link_prediction_flops += flops
        self.ctx.flops.add(flops)

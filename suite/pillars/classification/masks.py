"""Mask bookkeeping: the only code that applies sparsity masks to weights, gradients and
optimizer state.

Prunable weights are the weight tensors of ``nn.Linear`` and ``nn.Conv2d`` layers; biases and
normalization parameters stay dense. Sparsity is counted over prunable weights only:
``sparsity = 1 - (sum of mask ones) / (number of prunable weights)``.

A :class:`MaskStore` keeps one boolean mask per prunable layer (``None`` = dense layer) and
enforces it in three places, so masked weights stay exactly zero with momentum and weight decay:

1. a gradient hook on each masked weight zeroes the gradient at masked positions (and can
   capture the dense gradient first, for RigL's regrowth criterion);
2. an optimizer step post-hook multiplies the weights by their masks after every step;
3. :meth:`MaskStore.set_mask` zeroes the optimizer state (momentum, Adam moments) at every
   position whose mask bit changed, so regrown weights start from a clean state.

A *straight-through* layer (:meth:`MaskStore.set_straight_through`: SR-STE, movement pruning)
is the exception: its weights are not zeroed (masked weights keep their values and may come
back), its mask applies in the forward only, through the method's own function of weight and
mask (:meth:`MaskStore.forward`), which also says what gradient reaches the weights, until
:meth:`MaskStore.end_straight_through` prunes the weights to their masks.

A *values-only* layer (:meth:`MaskStore.to_values_only`, the spec's ``execution: sparse``) is an
``nn.Linear`` replaced by a :class:`~sparsebench.kernels.SparseLinear` whose nnz values are its
only Parameter: no dense weight, no hook, no re-masking (off-pattern weights do not exist), and
per-connection bookkeeping of size nnz. Its topology changes through :meth:`MaskStore.set_pattern`.
Reading its entry of ``masks`` builds the dense mask from the pattern: O(out · in), on request
only (the structural probes at the start and end of training); the per-step queries (``nnz``,
``densities``) do not.

Layer-wise density allocation: :func:`uniform_densities` and :func:`erk_densities` (Evci et al.
2020, "Rigging the Lottery", Sec. 3 and the reference implementation's ``get_sparsities``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

import torch
from torch import nn

if TYPE_CHECKING:
    from sparsebench.kernels import SparseLinear

PRUNABLE_TYPES: tuple[type[nn.Module], ...] = (nn.Linear, nn.Conv2d)
# A straight-through layer's forward weight from its weight and mask (None: dense).
StraightThrough = Callable[[torch.Tensor, "torch.Tensor | None"], torch.Tensor]
DISTRIBUTIONS = ("erk", "uniform")
# Pruning methods may also rank all layers jointly (one global threshold).
ALLOCATIONS = (*DISTRIBUTIONS, "global")


def prunable_layers(model: nn.Module) -> dict[str, nn.Module]:
    """Prunable layers of ``model`` in definition order: name -> Linear/Conv2d module."""
    return {n: m for n, m in model.named_modules() if isinstance(m, PRUNABLE_TYPES)}


def uniform_densities(
    shapes: Mapping[str, Sequence[int]], density: float, dense_first_layer: bool = False
) -> dict[str, float]:
    """Every layer at ``density``; with ``dense_first_layer`` the first layer stays dense (as in
    Gale et al. 2019 and RigL's uniform baseline), so the global density is then a bit higher."""
    _check_density(density)
    out = {name: density for name in shapes}
    if dense_first_layer and out:
        out[next(iter(out))] = 1.0
    return out


def erk_densities(
    shapes: Mapping[str, Sequence[int]],
    density: float,
    dense_layers: Sequence[str] = (),
    power_scale: float = 1.0,
) -> dict[str, float]:
    """ERK layer densities: Erdős–Rényi scaled by each layer's receptive field (Evci et al.
    2020, Sec. 3 "Sparsity distribution").

    Layer l with weight shape ``(n_out, n_in, k_h, k_w)`` (or ``(n_out, n_in)`` for Linear, which
    is plain Erdős–Rényi as in Mocanu et al. 2018) gets density ``eps * (sum(shape) / prod(shape))``
    with one global ``eps`` chosen so that the total number of nonzeros equals ``density`` times
    the number of prunable weights. A layer whose density would exceed 1 is made dense and
    ``eps`` is solved again for the rest, repeatedly, as in RigL's ``get_sparsities``.

    Args:
        shapes: layer name -> weight shape.
        density: global target density in (0, 1].
        dense_layers: layers forced dense (their weights count toward the budget).
        power_scale: exponent on the raw ERK score (1.0 in the paper).

    Returns: layer name -> density in (0, 1].
    Raises: ValueError if ``density`` is outside (0, 1] or the dense layers alone exceed it.
    """
    _check_density(density)
    sizes = {n: math.prod(s) for n, s in shapes.items()}
    raw = {n: (sum(s) / math.prod(s)) ** power_scale for n, s in shapes.items()}
    dense = set(dense_layers)
    while True:
        # Budget of nonzeros left for the sparse layers after the dense ones take theirs.
        rhs = density * sum(sizes.values()) - sum(sizes[n] for n in dense)
        divisor = sum(raw[n] * sizes[n] for n in shapes if n not in dense)
        if rhs < 0 or (divisor == 0 and rhs > 0):
            raise ValueError(f"density {density} is too low for dense layers {sorted(dense)}")
        eps = rhs / divisor if divisor else 0.0
        over = [n for n in shapes if n not in dense and eps * raw[n] > 1.0]
        if not over:
            break
        # RigL makes every layer with the maximal raw score dense, then re-solves.
        top = max(raw[n] for n in over)
        dense.update(n for n in over if raw[n] == top)
    return {n: 1.0 if n in dense else eps * raw[n] for n in shapes}


def layer_densities(
    shapes: Mapping[str, Sequence[int]],
    density: float,
    distribution: str = "erk",
    dense_first_layer: bool = False,
) -> dict[str, float]:
    """Dispatch to :func:`erk_densities` or :func:`uniform_densities`. With
    ``dense_first_layer`` the first layer is dense and left out of the budget (both
    distributions), so the global density is slightly above ``density``.

    Raises ValueError for an unknown ``distribution`` (allowed: ``erk``, ``uniform``)."""
    if distribution == "erk":
        if not (dense_first_layer and len(shapes) > 1):
            return erk_densities(shapes, density)
        # As RigL's custom_sparsity_map: the dense first layer is outside the budget, the other
        # layers share the target density, so the global density ends a bit higher.
        first, *rest = shapes
        return {first: 1.0, **erk_densities({n: shapes[n] for n in rest}, density)}
    if distribution == "uniform":
        return uniform_densities(shapes, density, dense_first_layer)
    raise ValueError(f"unknown sparsity distribution {distribution!r}; allowed: {DISTRIBUTIONS}")


def _check_density(density: float) -> None:
    if not 0.0 < density <= 1.0:
        raise ValueError(f"density must be in (0, 1], got {density}")


def check_allocation(distribution: str, dense_first_layer: bool) -> None:
    """Refuse what :meth:`MaskStore.allocate` would refuse at fit start, at spec validation:
    a dense first layer needs per-layer densities, which a global ranking does not have."""
    if dense_first_layer and distribution == "global":
        raise ValueError("dense_first_layer needs distribution erk or uniform")


def n_keep(numel: int, density: float) -> int:
    """Number of nonzeros a layer of ``numel`` weights keeps at ``density`` (rounded, >= 1)."""
    return max(1, min(numel, int(round(density * numel))))


def top_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Boolean mask of the ``k`` largest entries of ``scores`` (same shape). Ties are broken by
    ``torch.topk``'s order, which is deterministic on CPU."""
    flat = scores.reshape(-1)
    mask = torch.zeros_like(flat, dtype=torch.bool)
    if k > 0:
        mask[torch.topk(flat, k, sorted=False).indices] = True
    return mask.view_as(scores)


class _Masks(MutableMapping):
    """name -> bool mask or None; a values-only layer's mask is built from its pattern at each
    read (O(out · in)) and cannot be assigned (its topology changes by ``set_pattern``)."""

    def __init__(self, store: MaskStore, names: Sequence[str]):
        self._store = store
        self._masks: dict[str, torch.Tensor | None] = dict.fromkeys(names)

    def __getitem__(self, name: str) -> torch.Tensor | None:
        layer = self._store.sparse.get(name)
        return layer.pattern.mask() if layer is not None else self._masks[name]

    def __setitem__(self, name: str, mask: torch.Tensor | None) -> None:
        if name in self._store.sparse:
            raise ValueError(
                f"layer {name!r} runs values-only (execution: sparse): its connections change "
                "through MaskStore.set_pattern, not by assigning a mask"
            )
        self._masks[name] = mask

    def __delitem__(self, name: str) -> None:
        del self._masks[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._masks)

    def __len__(self) -> int:
        return len(self._masks)

    def stored(self, name: str) -> torch.Tensor | None:
        """The mask held for a masked/dense layer (None for a values-only one): O(1)."""
        return self._masks[name]


class MaskStore:
    """One boolean mask per prunable layer of ``model``; see the module docstring.

    Attributes:
        layers: name -> prunable module (Linear or Conv2d).
        masks: name -> bool tensor of the weight's shape, or ``None`` for a dense layer.
        dense_grads: name -> captured dense gradient (filled only while ``capture_dense_grads``).
    """

    def __init__(self, model: nn.Module):
        self.model = model
        self.layers = prunable_layers(model)
        # values-only layers (execution: sparse): name -> SparseLinear, and the optimizer step
        # at which each of its connections last became active, (nnz,) in the pattern's order
        self.sparse: dict[str, SparseLinear] = {}
        self.born: dict[str, torch.Tensor] = {}
        self.masks: _Masks = _Masks(self, list(self.layers))
        self.capture_dense_grads = False
        self.dense_grads: dict[str, torch.Tensor] = {}
        # Optimizer step at which each connection last became active (-1: active since the
        # start); ``step`` is kept current by the pillar's FLOPs callback. See trained_density.
        self.step = 0
        self.active_since: dict[str, torch.Tensor] = {
            n: torch.full(m.weight.shape, -1, dtype=torch.int32) for n, m in self.layers.items()
        }
        # Steps at which some mask changed once training began (``begin_training``): the
        # record's ``mask_updates``, measured whatever the method's schedule says.
        self.counting = False
        self.update_steps: set[int] = set()
        self._optimizers: list[torch.optim.Optimizer] = []
        # Layers whose mask applies in the forward only (weights kept behind it) -> the
        # method's forward weight, a function of the weight and the mask.
        self.straight_through: dict[str, StraightThrough] = {}
        self._hooks = {
            name: layer.weight.register_hook(self._grad_hook(name))
            for name, layer in self.layers.items()
        }

    # -- queries -------------------------------------------------------------------------
    def weight(self, name: str) -> nn.Parameter:
        """Layer ``name``'s dense weight (a values-only layer has none: ValueError)."""
        if name in self.sparse:
            raise ValueError(
                f"layer {name!r} runs values-only (execution: sparse) and has no dense weight; "
                "use store.sparse[name].values (or .dense_weight(), O(out · in))"
            )
        return self.layers[name].weight

    def shape(self, name: str) -> tuple[int, ...]:
        layer = self.sparse.get(name)
        if layer is not None:
            return (layer.out_features, layer.in_features)
        return tuple(self.layers[name].weight.shape)

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: self.shape(n) for n in self.layers}

    def numel(self, name: str) -> int:
        return math.prod(self.shape(name))

    def nnz(self, name: str) -> int:
        """Active (unmasked) weights of layer ``name``."""
        if name in self.sparse:
            return self.sparse[name].nnz
        mask = self.masks.stored(name)
        return self.numel(name) if mask is None else int(mask.sum())

    def density(self, name: str) -> float:
        return self.nnz(name) / self.numel(name)

    def densities(self) -> dict[str, float]:
        return {n: self.density(n) for n in self.layers}

    @property
    def total(self) -> int:
        """Number of prunable weights."""
        return sum(self.numel(n) for n in self.layers)

    @property
    def total_nnz(self) -> int:
        return sum(self.nnz(n) for n in self.layers)

    def sparsity(self) -> float:
        """Global sparsity over prunable weights, from the masks."""
        return 1.0 - self.total_nnz / self.total if self.total else 0.0

    @property
    def is_sparse(self) -> bool:
        return bool(self.sparse) or any(self.masks.stored(n) is not None for n in self.masks)

    # -- setting masks -------------------------------------------------------------------
    @torch.no_grad()
    def set_mask(
        self, name: str, mask: torch.Tensor | None, reset: torch.Tensor | None = None
    ) -> None:
        """Install ``mask`` (bool, weight's shape) on layer ``name``, zero the masked weights and
        the optimizer state wherever the mask changed and at the extra positions ``reset``
        (e.g. connections that were removed and re-added in one update). ``None`` makes the
        layer dense."""
        w = self.weight(name)
        old = self.masks[name]
        if mask is not None:
            if mask.shape != w.shape:
                raise ValueError(
                    f"mask for {name} has shape {tuple(mask.shape)}, weight has {tuple(w.shape)}"
                )
            mask = mask.to(device=w.device, dtype=torch.bool)
            if name not in self.straight_through:
                w.mul_(mask)
        self.masks[name] = mask
        old_b = torch.ones_like(w, dtype=torch.bool) if old is None else old
        new_b = torch.ones_like(w, dtype=torch.bool) if mask is None else mask
        changed = old_b ^ new_b
        if self.counting and bool(changed.any()):
            self.update_steps.add(self.step)
        if reset is not None:
            changed |= reset.to(changed.device)
        if changed.any():
            if name not in self.straight_through:  # its weights and their state stay dense
                self._reset_optimizer_state(w, changed)
            born = (changed & new_b).cpu()
            self.active_since[name][born] = self.step

    def set_masks(self, masks: Mapping[str, torch.Tensor | None]) -> None:
        for name, mask in masks.items():
            self.set_mask(name, mask)

    @torch.no_grad()
    def random_masks(self, densities: Mapping[str, float], generator: torch.Generator) -> None:
        """Uniformly random mask per layer with exactly ``n_keep(numel, density)`` ones."""
        for name, d in densities.items():
            w = self.weight(name)
            if d >= 1.0:
                self.set_mask(name, None)
                continue
            scores = torch.rand(w.shape, generator=generator).to(w.device)
            self.set_mask(name, top_mask(scores, n_keep(w.numel(), d)))

    @torch.no_grad()
    def global_top_masks(self, density: float, scores: Mapping[str, torch.Tensor]) -> None:
        """Keep the ``density`` fraction of all prunable weights with the largest ``scores``,
        ranked jointly across layers (global pruning). Every layer keeps at least one weight."""
        names = list(self.layers)
        flat = torch.cat([scores[n].reshape(-1).float() for n in names])
        k = n_keep(flat.numel(), density)
        keep = top_mask(flat, k)
        start = 0
        for n in names:
            numel = self.weight(n).numel()
            m = keep[start : start + numel].view_as(self.weight(n))
            if not m.any():  # never disconnect a layer entirely
                m = top_mask(scores[n], 1)
            self.set_mask(n, m if not bool(m.all()) else None)
            start += numel

    @torch.no_grad()
    def allocate(
        self,
        density: float,
        scores: Mapping[str, torch.Tensor],
        distribution: str,
        dense_first_layer: bool = False,
    ) -> None:
        """Keep the largest ``scores`` at global ``density``: ranked jointly across layers
        (``global``) or per layer at the layer densities of ``erk``/``uniform``
        (:func:`layer_densities`). Used by the pruning methods, so that every method of a board
        can share one layer-wise allocation.

        Raises ValueError for an unknown ``distribution`` (allowed: :data:`ALLOCATIONS`)."""
        if distribution == "global":
            if dense_first_layer:
                raise ValueError("dense_first_layer needs distribution erk or uniform")
            self.global_top_masks(density, scores)
            return
        if distribution not in DISTRIBUTIONS:
            raise ValueError(f"unknown distribution {distribution!r}; allowed: {ALLOCATIONS}")
        densities = layer_densities(self.shapes, density, distribution, dense_first_layer)
        for name, d in densities.items():
            numel = self.weight(name).numel()
            self.set_mask(name, None if d >= 1.0 else top_mask(scores[name], n_keep(numel, d)))

    def begin_training(self) -> None:
        """From now on, count the steps at which a mask changes (the initial masks, installed
        before, are not updates)."""
        self.counting = True

    @property
    def mask_updates(self) -> int:
        """Distinct optimizer steps at which some mask changed since :meth:`begin_training`."""
        return len(self.update_steps)

    def trained_density(self, min_steps: int) -> float:
        """Share of prunable weights that are active and have been active for at least
        ``min_steps`` optimizer steps (connections active since the start always count).
        Nominal density counts a connection grown at the last update as if it were trained;
        this does not."""
        if not self.total:
            return 1.0
        kept = 0
        for born in self.born.values():
            kept += int(((born < 0) | (born <= self.step - min_steps)).sum())
        for name in self.layers:
            if name in self.sparse:
                continue
            mask, since = self.masks.stored(name), self.active_since[name]
            old = (since < 0) | (since <= self.step - min_steps)
            kept += int((old if mask is None else old & mask.cpu()).sum())
        return kept / self.total

    def apply(self) -> None:
        """Multiply every masked weight by its mask (idempotent); straight-through layers keep
        their dense weights."""
        with torch.no_grad():
            for name in self.layers:
                mask = self.masks.stored(name)
                if mask is not None and name not in self.straight_through:
                    self.weight(name).mul_(mask)

    # -- straight-through layers ---------------------------------------------------------
    def set_straight_through(self, name: str, forward: StraightThrough) -> None:
        """Keep layer ``name``'s weights behind its mask: the forward uses ``forward(W, M)``
        (M None while the layer is dense), whose backward decides what reaches W (SR-STE: the
        dense gradient, :mod:`.nm`; movement pruning: the masked one); the store neither zeroes
        the masked weights nor masks their gradient nor resets their optimizer state."""
        self.straight_through[name] = forward

    @torch.no_grad()
    def end_straight_through(self) -> None:
        """Prune every straight-through layer's weights to its mask and make it an ordinary
        masked layer (what is evaluated and recorded after training)."""
        layers, self.straight_through = self.straight_through, {}
        for name in layers:
            mask = self.masks[name]
            if mask is not None:
                self.weight(name).mul_(mask)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """The model's output, with straight-through layers' weights masked in the forward
        (the plain ``model(x)`` when there are none)."""
        if not self.straight_through:
            return self.model(x)
        from torch.func import functional_call

        weights = {
            f"{name}.weight": forward(self.weight(name), self.masks[name])
            for name, forward in self.straight_through.items()
        }
        return functional_call(self.model, weights, (x,))

    # -- enforcement ---------------------------------------------------------------------
    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        """Re-apply the masks after every ``optimizer.step()`` and let :meth:`set_mask` reset
        this optimizer's state for changed positions."""
        if optimizer in self._optimizers:
            return
        self._optimizers.append(optimizer)
        optimizer.register_step_post_hook(lambda *_: self.apply())

    def _grad_hook(self, name: str):
        def hook(grad: torch.Tensor) -> torch.Tensor:
            if self.capture_dense_grads:
                self.dense_grads[name] = grad.detach().clone()
            mask = self.masks.stored(name)
            if mask is None or name in self.straight_through:
                return grad
            return grad * mask

        return hook

    @torch.no_grad()
    def _reset_optimizer_state(self, param: torch.Tensor, positions: torch.Tensor) -> None:
        for opt in self._optimizers:
            for value in opt.state.get(param, {}).values():
                if torch.is_tensor(value) and value.shape == param.shape:
                    value.masked_fill_(positions, 0.0)

    def remove_hooks(self) -> None:
        for h in self._hooks.values():
            h.remove()
        self._hooks = {}

    # -- values-only layers --------------------------------------------------------------
    @torch.no_grad()
    def to_values_only(self, name: str, backend: str) -> SparseLinear:
        """Replace layer ``name`` (an ``nn.Linear`` with a mask) in the model by a
        :class:`~sparsebench.kernels.SparseLinear` on ``backend`` holding its weights on the
        mask, and swap its dense weight for the values in every attached optimizer (state
        gathered onto the pattern). From then on the layer has no dense weight, mask, hook
        or re-masking; returns the new layer.

        Raises:
            ValueError: the layer is not an ``nn.Linear``, has no mask, or is straight-through.
        """
        from sparsebench.kernels import SparseLinear

        layer, mask = self.layers[name], self.masks.stored(name)
        if type(layer) is not nn.Linear or mask is None or name in self.straight_through:
            raise ValueError(
                f"layer {name!r} cannot run values-only: it must be a masked nn.Linear "
                f"(it is a {type(layer).__name__}, "
                f"{'dense' if mask is None else 'masked'}"
                f"{', straight-through' if name in self.straight_through else ''})"
            )
        with torch.random.fork_rng(devices=[]):  # its throwaway init draws no run's numbers
            sparse = SparseLinear.from_dense(layer, mask, backend)
        if layer.bias is not None:  # the same bias Parameter: the optimizer's reference holds
            sparse.bias = layer.bias
        weight, values = layer.weight, sparse.values
        for opt in self._optimizers:
            for group in opt.param_groups:
                group["params"] = [values if p is weight else p for p in group["params"]]
            state = opt.state.pop(weight, None)
            if state is not None:
                opt.state[values] = {
                    k: sparse.pattern.gather(v)
                    if torch.is_tensor(v) and v.shape == weight.shape
                    else v
                    for k, v in state.items()
                }
        parent_name, _, child = name.rpartition(".")
        parent = self.model.get_submodule(parent_name) if parent_name else self.model
        setattr(parent, child, sparse)
        self._hooks.pop(name).remove()
        self.born[name] = sparse.pattern.gather(self.active_since.pop(name))
        self.layers[name] = sparse
        self.sparse[name] = sparse
        self.masks._masks[name] = None  # the pattern is the mask now
        return sparse

    @torch.no_grad()
    def set_pattern(
        self,
        name: str,
        new_flat: torch.Tensor,
        new_values: torch.Tensor | float = 0.0,
        fresh: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Move values-only layer ``name`` to the connections ``new_flat`` (sorted flat indices),
        new ones at ``new_values`` with zero optimizer state (and those in ``fresh``, dropped
        and regrown at once); kept ones keep value, state and age
        (:func:`sparsebench.kernels.topology.set_pattern`). Counts a mask update when the
        connections changed. Returns which new positions were kept."""
        from sparsebench.kernels.topology import set_pattern

        layer = self.sparse[name]
        old_flat, old_born = layer.flat_index, self.born[name]
        values = layer.values
        owner = next(
            (
                o
                for o in self._optimizers
                for g in o.param_groups
                for p in g["params"]
                if p is values
            ),
            None,
        )
        match = set_pattern(layer, new_flat, new_values, owner, fresh)
        kept, new_flat = match.kept, layer.flat_index
        self.born[name] = match.take(old_born, self.step)  # grown (and fresh): born now
        # as set_mask: a change of the connections, not a restart of some in place
        if self.counting and not torch.equal(old_flat, new_flat):
            self.update_steps.add(self.step)
        return kept

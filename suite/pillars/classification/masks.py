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

Layer-wise density allocation: :func:`uniform_densities` and :func:`erk_densities` (Evci et al.
2020, "Rigging the Lottery", Sec. 3 and the reference implementation's ``get_sparsities``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import torch
from torch import nn

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
        self.masks: dict[str, torch.Tensor | None] = dict.fromkeys(self.layers)
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
        self._hooks = [
            layer.weight.register_hook(self._grad_hook(name)) for name, layer in self.layers.items()
        ]

    # -- queries -------------------------------------------------------------------------
    def weight(self, name: str) -> nn.Parameter:
        return self.layers[name].weight

    @property
    def shapes(self) -> dict[str, tuple[int, ...]]:
        return {n: tuple(m.weight.shape) for n, m in self.layers.items()}

    def nnz(self, name: str) -> int:
        """Active (unmasked) weights of layer ``name``."""
        mask = self.masks[name]
        return self.weight(name).numel() if mask is None else int(mask.sum())

    def density(self, name: str) -> float:
        return self.nnz(name) / self.weight(name).numel()

    def densities(self) -> dict[str, float]:
        return {n: self.density(n) for n in self.layers}

    @property
    def total(self) -> int:
        """Number of prunable weights."""
        return sum(m.weight.numel() for m in self.layers.values())

    @property
    def total_nnz(self) -> int:
        return sum(self.nnz(n) for n in self.layers)

    def sparsity(self) -> float:
        """Global sparsity over prunable weights, from the masks."""
        return 1.0 - self.total_nnz / self.total if self.total else 0.0

    @property
    def is_sparse(self) -> bool:
        return any(m is not None for m in self.masks.values())

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
        for name, mask in self.masks.items():
            since = self.active_since[name]
            old = (since < 0) | (since <= self.step - min_steps)
            kept += int((old if mask is None else old & mask.cpu()).sum())
        return kept / self.total

    def apply(self) -> None:
        """Multiply every masked weight by its mask (idempotent); straight-through layers keep
        their dense weights."""
        with torch.no_grad():
            for name, mask in self.masks.items():
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
            mask = self.masks[name]
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
        for h in self._hooks:
            h.remove()
        self._hooks = []

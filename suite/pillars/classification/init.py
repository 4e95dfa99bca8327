"""Weight initialisation of sparse layers, an axis every DST and pruning method takes.

A sparse layer initialised as if it were dense has a smaller output variance, by its density,
than the dense layer; a method that rescales its initial weights can look better for that
reason alone (on LeNet-5 at 98 % CHT's sparse init is the whole of its gain over static). So
the rule is a setting of its own, ``init``, recorded with every run, and the claims can tell a
regrowth rule from an init:

- ``default``: the model's own (PyTorch's Kaiming-uniform, a = √5), masked.
- ``swi``: Sparse Weight Initialisation (Zhang et al. 2024, ICLR, Sec. 3.2): every masked
  layer redrawn from N(0, 2 / fan_in_sparse), fan_in_sparse = nnz / (outputs with a link),
  the mean number of links into an active output (for a Conv2d, kernel positions count). The
  fan-in is ours: the authors' code (``Cannistraci-Hebb-training`` at ``d1677b55``,
  ``reset_parameters``) divides by density x numel / in_features = density x out_features,
  which agrees on square layers and differs by √2 on a 784 -> 1568 first layer.
- ``scaled``: the default draw times 1/√d_l on each masked layer of density d_l, which restores
  the dense layer's output variance at the layer level (the per-unit rule of Evci, Ioannou,
  Keskin, Dauphin 2022, "Gradient Flow in Sparse Neural Networks and How Lottery Tickets
  Win", AAAI, Sec. 4, taken per layer: ours).

The rule acts once, right after the method's initial masks (:class:`InitCallback`), on the
layers that are masked then; dense layers, biases and a method that starts dense keep the
default. Weights grown later start as the method says (zero for most).
"""

from __future__ import annotations

import math

import torch

from sparsebench.suite.pillars.classification.masks import MaskStore

INITS: tuple[str, ...] = ("default", "swi", "scaled")


def swi_std(mask: torch.Tensor) -> float:
    """SWI standard deviation of a sparse layer: ``sqrt(2 / mean fan-in)``, the mean fan-in
    being ``nnz / n_active_outputs`` (Kaiming-normal at the fan-in of the sparse topology)."""
    rows = mask.reshape(mask.shape[0], -1)
    nnz = int(rows.sum())
    active = int(rows.any(dim=1).sum())
    return math.sqrt(2.0 * max(active, 1) / max(nnz, 1))


@torch.no_grad()
def apply_init(store: MaskStore, rule: str, generator: torch.Generator) -> None:
    """Re-initialise every masked layer of ``store`` by ``rule`` (one of :data:`INITS`);
    ``swi`` draws from ``generator`` (CPU), layer by layer in definition order.

    Raises: ValueError for an unknown rule."""
    if rule not in INITS:
        raise ValueError(f"unknown init {rule!r}; allowed: {', '.join(INITS)}")
    if rule == "default":
        return
    for name, mask in store.masks.items():
        if mask is None:
            continue
        w = store.weight(name)
        if rule == "swi":
            draw = torch.randn(w.shape, generator=generator) * swi_std(mask)
            w.copy_(draw.to(device=w.device, dtype=w.dtype) * mask)
        else:
            w.mul_(mask / math.sqrt(max(store.density(name), 1.0 / w.numel())))


def check_dense_start(init: str, why: str) -> None:
    """Refuse an ``init`` other than ``default`` for a setting that has no masked layer at fit
    start (``why`` says how it starts): the rule acts only then, so it would change nothing
    while the record said it ran.

    Raises: ValueError naming the value, why it is a no-op and what to set."""
    if init != "default":
        raise ValueError(
            f"init = {init!r} changes nothing here: {why}, and the init rule acts once, on the "
            "layers masked at fit start; set this method's own init: default (a section-level "
            "init fills every method that does not set its own)"
        )

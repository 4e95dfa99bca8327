"""Sparsity patterns a kernels cell can time: the section's ``patterns`` name them.

A pattern is a function ``(out_features, in_features, sparsity, generator) -> bool mask
(out, in)``, drawing its randomness from ``generator`` only (the cell's seed). ``random`` is the
default and the pattern of every cell that names none. Every backend and ``dense_mask`` of a
cell run on the cell's pattern (``semi_structured`` on its own 2:4 one), so a pattern's cell is
comparable with the ``random`` cell of the same shape, sparsity and batch.

A pattern that belongs to a method is built by that method's own code, so that the kernels
pillar times exactly the mask the method trains with.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sparsebench.suite.catalog import Catalog

if TYPE_CHECKING:
    import torch

DEFAULT = "random"
PatternFn = Callable[[int, int, float, "torch.Generator"], "torch.Tensor"]
PATTERNS: Catalog[PatternFn] = Catalog("kernels pattern")


@PATTERNS.register("random")
def random_mask(out_f: int, in_f: int, sparsity: float, gen: torch.Generator) -> torch.Tensor:
    """Unstructured uniform mask with exactly round((1 - sparsity)·out·in) ones (>= 1)."""
    import torch

    from sparsebench.suite.pillars.classification.masks import n_keep, top_mask

    return top_mask(torch.rand(out_f, in_f, generator=gen), n_keep(out_f * in_f, 1 - sparsity))


@PATTERNS.register("haste")
def haste_mask(out_f: int, in_f: int, sparsity: float, gen: torch.Generator) -> torch.Tensor:
    """HASTE's output layer (``methods/dst/haste.py``): groups of ``group_size`` (HASTE's
    default, 16) consecutive output units sharing one random set of ``fan_in =
    clamp(round((1 - sparsity)·in), 1, in)`` inputs, built by :meth:`HASTE.output_mask`.

    Its nnz is ``out · fan_in``, which equals ``random``'s ``round((1 - sparsity)·out·in)``
    whenever ``(1 - sparsity)·in`` is an integer (e.g. Linear(100, 1000) at 0.9 or 0.95)."""
    from sparsebench.methods.dst.haste import HASTE

    fan_in = HASTE.output_fan_in(1.0 - sparsity, in_f)
    return HASTE.output_mask(out_f, in_f, fan_in, HASTE.Params().group_size, gen)

"""Static sparse training: a random mask fixed at initialization."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sparsebench.methods.dst.base import MaskMethod
from sparsebench.suite.pillars.classification.masks import layer_densities
from sparsebench.suite.registry import register


@register("static", family="dst")
class Static(MaskMethod):
    """Static sparse training: a uniformly random mask per layer is drawn at initialization
    (layer densities by ERK or uniform) and never changes.

    Training FLOPs: ``3 * f_S`` per example (Evci et al. 2020, Appendix H).

    Every method built on these ``Params`` takes ``init`` (``default`` | ``swi`` | ``scaled``,
    :mod:`sparsebench.suite.pillars.classification.init`), applied to the initial masks.

    Source: Evci et al. 2020, "Rigging the Lottery: Making All Tickets Winners", ICML,
    Sec. 4 ("Static" baseline); ERK distribution from the same paper, Sec. 3.
    """

    values_only = True  # its masks never change: values-only layers need nothing more

    @dataclass
    class Params:
        distribution: Literal["erk", "uniform"] = "erk"
        dense_first_layer: bool = False
        init: Literal["default", "swi", "scaled"] = "default"

    def on_fit_start(self, trainer, pl_module) -> None:
        store = pl_module.masks
        densities = layer_densities(
            store.shapes, self.density, self.params.distribution, self.params.dense_first_layer
        )
        store.random_masks(densities, self.ctx.generator)

"""Dense baseline."""

from __future__ import annotations

from dataclasses import dataclass

from sparsebench.methods.dst.base import MaskMethod
from sparsebench.suite.registry import register


@register("dense", family="dst", sparse=False)
class Dense(MaskMethod):
    """Dense training: no mask, the reference every sparse method is compared with.

    It ignores the spec's ``sparsities`` and runs once per (task, seed) at sparsity 0; its
    FLOPs and wall-clock are the denominators of the ``*_rel_dense`` columns.

    Source: the standard dense baseline of Evci et al. 2020, "Rigging the Lottery", Table 1.
    """

    values_only = True  # no masks: its layers stay dense under every execution

    @dataclass
    class Params:
        pass

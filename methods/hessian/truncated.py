"""The colored Hessian on a pattern one hop short: an explicit approximation."""

from __future__ import annotations

from sparsebench.suite.registry import register

from .base import HessianMethod


@register("truncated", family="hessian")
class TruncatedHessian(HessianMethod):
    """Colored Hessian on a pattern one hop short (K − 1 hops): an explicit approximation,
    reported with its error, for potentials that reach more than one hop (for K = 1 there is
    nothing to truncate: the method is skipped). Our choice: the truncation depth is fixed at
    one hop, the smallest approximation that differs from exact.

    Source: the colored method on a truncated pattern (GTMP07 Alg. 4.1 coloring).
    """

    exact = False
    brief = "the colored Hessian on a pattern one hop short (an approximation)"

    def pattern_hops(self, hops: int) -> int | None:
        return hops - 1

    def skip(self, hops: int) -> str | None:
        return None if hops > 1 else "needs a potential reaching more than 1 hop"

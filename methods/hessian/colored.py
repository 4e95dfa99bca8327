"""The exact sparse Hessian by star coloring and compressed HVPs."""

from __future__ import annotations

from sparsebench.suite.registry import register

from .base import HessianMethod


@register("colored", family="hessian")
class ColoredHessianMethod(HessianMethod):
    """Exact sparse Hessian: the closed-form pattern of a K-hop local potential, a greedy star
    coloring of it (GTMP07 Algorithm 4.1) and C compressed HVPs, B = H S, with every nonzero
    read directly from B (star coloring's direct recovery, GMP05 Sec. 4). A colored Hessian
    further than 1e-8 (relative Frobenius) from its reference is a failed job.

    Source: Gebremedhin, Tarafdar, Manne, Pothen, SIAM J. Sci. Comput. 29(3), 2007, Alg. 4.1;
    Gebremedhin, Manne, Pothen, SIAM Review 47(4), 2005, Sec. 4.
    """

    exact = True
    brief = "exact sparse Hessians by star coloring and compressed HVPs"

    def pattern_hops(self, hops: int) -> int | None:
        return hops

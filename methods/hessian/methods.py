"""The hessian pillar's methods: how a job obtains the Hessian of a potential's energy.

Each method is registered in the ``hessian`` family with its (empty) ``Params``; the job
(:mod:`sparsebench.suite.pillars.hessian.job`) asks it which pattern it uses
(:meth:`pattern_hops`), whether it must be exact, and whether it applies to a potential.
"""

from __future__ import annotations

from sparsebench.suite.method import Method, NoParams
from sparsebench.suite.registry import register


@register("dense", family="hessian", sparse=False)
class DenseHessian(Method):
    """Dense Hessian: 3N forward-over-reverse HVPs against the identity (``jvp(grad(E))``,
    vmapped over chunks of tangents), the reference of every error and speed-up.

    Source: Pearlmutter, "Fast exact multiplication by the Hessian", Neural Computation 6(1),
    147-160, 1994 (the HVP); torch.func's jvp-of-grad composition.
    """

    Params = NoParams
    exact = True

    def pattern_hops(self, hops: int) -> int | None:
        """None: no pattern (all 3N columns)."""
        return None

    def applies(self, hops: int) -> bool:
        return True


@register("colored", family="hessian")
class ColoredHessianMethod(Method):
    """Exact sparse Hessian: the closed-form pattern of a K-hop local potential, a greedy star
    coloring of it (GTMP07 Algorithm 4.1) and C compressed HVPs, B = H S, with every nonzero
    read directly from B (star coloring's direct recovery, GMP05 Sec. 4). A colored Hessian
    further than 1e-8 (relative Frobenius) from its reference is a failed job.

    Source: Gebremedhin, Tarafdar, Manne, Pothen, SIAM J. Sci. Comput. 29(3), 2007, Alg. 4.1;
    Gebremedhin, Manne, Pothen, SIAM Review 47(4), 2005, Sec. 4.
    """

    Params = NoParams
    exact = True

    def pattern_hops(self, hops: int) -> int | None:
        return hops

    def applies(self, hops: int) -> bool:
        return True


@register("truncated", family="hessian")
class TruncatedHessian(Method):
    """Colored Hessian on a pattern one hop short (K − 1 hops): an explicit approximation,
    reported with its error, for potentials that reach more than one hop. Our choice: the
    truncation depth is fixed at one hop, the smallest approximation that differs from exact.

    Source: the colored method above on a truncated pattern (GTMP07 Alg. 4.1 coloring).
    """

    Params = NoParams
    exact = False

    def pattern_hops(self, hops: int) -> int | None:
        return hops - 1

    def applies(self, hops: int) -> bool:
        return hops > 1

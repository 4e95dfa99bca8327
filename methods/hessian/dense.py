"""The dense Hessian: the reference of every error and speed-up."""

from __future__ import annotations

from sparsebench.suite.registry import register

from .base import HessianMethod


@register("dense", family="hessian", sparse=False)
class DenseHessian(HessianMethod):
    """Dense Hessian: 3N forward-over-reverse HVPs against the identity (``jvp(grad(E))``,
    vmapped over chunks of tangents), the reference of every error and speed-up. Skipped above
    the section's ``dense_max_atoms`` (it is not sparse).

    Source: Pearlmutter, "Fast exact multiplication by the Hessian", Neural Computation 6(1),
    147-160, 1994 (the HVP); torch.func's jvp-of-grad composition.
    """

    exact = True
    brief = "the dense Hessian from vmapped HVPs against the identity"

    def pattern_hops(self, hops: int) -> int | None:
        """None: no pattern (all 3N columns)."""
        return None

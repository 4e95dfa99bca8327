"""The contract of a hessian method: how a job obtains the Hessian of a potential's energy.

A method is a :class:`HessianMethod` subclass in one file of this package under
``@register("name", family="hessian")`` (``sparse=False`` for a method that computes every
column, the reference of errors and speed-ups). The job
(:mod:`sparsebench.suite.pillars.hessian.job`) reads from it, for a potential whose Hessian
reaches K hops of the cutoff graph:

* :meth:`~HessianMethod.pattern_hops`: the hops of the sparsity pattern it colors, or None for
  no pattern (all 3N columns by HVPs against the identity);
* :attr:`~HessianMethod.exact`: whether its Hessian must equal the dense one (a job further than
  ``EXACT_RTOL`` from its reference fails) or is an approximation reported with its error;
* :meth:`~HessianMethod.skip`: why it does not apply to a potential of reach K (None when it
  does); the pillar makes no cell there and a job asked for one fails with the reason;
* :attr:`~HessianMethod.brief`: one line for the leaderboard's legend.
"""

from __future__ import annotations

from typing import ClassVar

from sparsebench.suite.method import Method, NoParams


class HessianMethod(Method):
    """Base of the hessian methods (no parameters unless a method declares some)."""

    Params = NoParams
    exact: ClassVar[bool] = True
    brief: ClassVar[str] = ""

    def pattern_hops(self, hops: int) -> int | None:
        """Hops of the pattern the method colors for a potential of reach ``hops`` (K); None:
        no pattern, every column computed."""
        raise NotImplementedError

    def skip(self, hops: int) -> str | None:
        """Why the method does not apply to a potential of reach ``hops`` (a phrase following
        the method's name, e.g. "needs ..."), or None when it applies (the default)."""
        return None

    def applies(self, hops: int) -> bool:
        """Whether the method applies to a potential of reach ``hops``."""
        return self.skip(hops) is None

"""Model-merging methods: pure functions (θ0, experts, params, optional data) -> merged trunk.

The registration order below is the order of the leaderboard's method listing.
"""

from . import task_arithmetic  # noqa: F401

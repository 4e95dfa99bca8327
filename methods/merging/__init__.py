"""Model-merging methods: pure functions (θ0, experts, params, optional data) -> merged trunk.

The registration order below is the order of the leaderboard's method listing.
"""

# isort: off
from . import averaging  # noqa: F401
from . import task_arithmetic  # noqa: F401
from . import ties  # noqa: F401
from . import dare  # noqa: F401
from . import fisher  # noqa: F401
from . import regmean  # noqa: F401
from . import adamerging  # noqa: F401
from . import tall_masks  # noqa: F401
from . import consensus  # noqa: F401
from . import cass  # noqa: F401
# isort: on

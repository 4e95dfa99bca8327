"""Sparse-autoencoder architectures (one file each), the shared training loop (:mod:`.module`),
metrics (:mod:`.metrics`) and synthetic ground truth (:mod:`.synthetic`).

The registration order below is the order of the leaderboard's method listing.
"""

# isort: off
from . import relu_l1  # noqa: F401
from . import topk  # noqa: F401
from . import batchtopk  # noqa: F401
from . import jumprelu  # noqa: F401
from . import gated  # noqa: F401
from . import matryoshka_batchtopk  # noqa: F401
from . import sign_aware_gated  # noqa: F401
# isort: on

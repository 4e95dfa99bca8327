"""Published peers used as oracles (the ``oracles`` extra, in ``.venv-oracles``: ``make
oracles``). Under ``make test`` a missing peer skips its tests; with ``SPARSEBENCH_ORACLES=1``
(set by ``make oracles``, which CI runs) a missing peer is an error, so the oracle tests cannot
pass by being skipped."""

from __future__ import annotations

import importlib
import os
from types import ModuleType

import pytest


def peer(module: str) -> ModuleType:
    """Import ``module`` of a peer; skip when it is absent, unless oracles are required."""
    if os.environ.get("SPARSEBENCH_ORACLES") == "1":
        return importlib.import_module(module)
    return pytest.importorskip(module)

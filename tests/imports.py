"""Which modules a statement imports, in a new interpreter (this one has imported everything)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence


def imported_by(statement: str, modules: Sequence[str]) -> list[str]:
    """The names in ``modules`` that are in ``sys.modules`` after ``statement`` ran."""
    names = list(modules)
    code = f"import sys; {statement}; print(','.join(m for m in {names!r} if m in sys.modules))"
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    return [m for m in got.stdout.strip().split(",") if m]

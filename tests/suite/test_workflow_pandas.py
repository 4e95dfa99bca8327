"""Snakemake's first finished job imports pandas (to hash the job's params): the workflow
starts that import when the run starts, off the way between its first jobs."""

from __future__ import annotations

import subprocess
import sys

from sparsebench.suite import workflow


def test_pandas_is_imported_in_a_thread_that_the_interpreter_waits_for():
    code = (
        "import sys\n"
        "from sparsebench.suite.workflow import import_pandas_meanwhile\n"
        "t = import_pandas_meanwhile()\n"
        "assert t is not None and not t.daemon\n"
        "t.join(60)\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_nothing_starts_without_pandas(monkeypatch):
    monkeypatch.setattr(workflow.importlib.util, "find_spec", lambda name: None)
    assert workflow.import_pandas_meanwhile() is None

"""The triton backend: its kernels under the interpreter (in a subprocess, because Triton fixes
the interpreter mode of its standard library at ``import triton``) and its availability."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from sparsebench.kernels import get_backend
from tests.kernels.conftest import make_case

REPO = Path(__file__).resolve().parents[2]
CASES = Path(__file__).with_name("triton_interpret_cases.py")


def test_triton_kernels_under_interpreter() -> None:
    pytest.importorskip("triton")
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(CASES)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "skipped" not in proc.stdout.splitlines()[-1]


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: triton runs compiled")
def test_triton_without_gpu_or_interpreter_is_unavailable(monkeypatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(RuntimeError, match="triton needs a CUDA GPU.*TRITON_INTERPRET=1"):
        get_backend("triton")


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is present: triton runs compiled")
def test_interpreter_flag_set_after_import_is_a_clear_error(monkeypatch) -> None:
    pytest.importorskip("triton")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    import triton  # noqa: F401  (compiled mode, as any earlier import in a process would be)

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    c = make_case(3, 4, 2, 0.5)
    with pytest.raises(RuntimeError, match="before anything imports triton"):
        get_backend("triton").forward(c.x, c.values, c.pattern)

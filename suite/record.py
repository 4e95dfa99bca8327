"""Run records: one JSON file per job, written atomically, with provenance.

A record is a flat dict whose keys are :data:`COMMON_COLUMNS` plus pillar columns. A failed or
diverged job still writes a record (``status`` and ``error`` set, metrics null), so a sweep never
loses the rows that did finish, and an existing finished record is never overwritten by a crash
(the file appears only through an atomic rename of a complete temporary file).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sparsebench.suite.atomic import write_atomic

STATUSES = ("ok", "failed", "diverged", "skipped")

# The columns of every record of every pillar: name -> python type of the value when present.
# Pillars add their own (``Pillar.columns``); see docs/architecture.md.
COMMON_COLUMNS: dict[str, type] = {
    "benchmark": str,
    "pillar": str,
    "cell_id": str,  # the cell's path under results/<bench>/<pillar>/runs/
    "label": str,  # readable one-line description of the cell
    "method": str,
    "params_json": str,  # all parameters of the method, JSON with sorted keys
    "setting_id": str,  # "default" or a hash of the non-default parameters
    "setting": str,  # the non-default parameters, readable: "default" or "zeta=0.1, ..."
    "seed": int,
    "status": str,  # ok | failed | diverged (| skipped, for rows of some pillars)
    "error": str,
    "device": str,
    "threads": int,  # torch intra-op threads of this job
    "parallel_jobs": int,  # jobs the scheduler could run at once (wall-clock context)
    "cell_s": float,  # seconds of this cell inside its job (no interpreter start-up)
    "torch_version": str,
    "package_version": str,
    "git_sha": str,
    "git_dirty": bool,
    "spec_hash": str,
    "trigger": str,  # hash of the cell's rerun trigger (its parameters besides the id)
    "started_at": str,
    "finished_at": str,
}


class Diverged(RuntimeError):
    """A run that diverged (non-finite loss, exploding values): status ``diverged``."""


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def git_info(cwd: str | Path | None = None) -> tuple[str, bool]:
    """(commit sha, whether the work tree has uncommitted changes); ("unknown", False) outside
    a git checkout."""
    cwd = cwd or Path(__file__).resolve().parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return sha, bool(dirty)
    except (OSError, subprocess.CalledProcessError):
        return "unknown", False


_PROVENANCE: dict[str, Any] = {}


def provenance() -> dict[str, Any]:
    """Environment columns shared by every record (computed once per process), and under
    SLURM the job's id and node (read at each call: a process may serve several jobs)."""
    return {**_process_provenance(), **_slurm_provenance()}


def _slurm_provenance() -> dict[str, Any]:
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return {}  # a local run's records carry no SLURM keys
    return {"slurm_job_id": job, "slurm_node": os.environ.get("SLURMD_NODENAME")}


def _process_provenance() -> dict[str, Any]:
    if _PROVENANCE:
        return dict(_PROVENANCE)
    import torch

    from sparsebench import __version__

    sha, dirty = git_info()
    _PROVENANCE.update(
        {
            "torch_version": torch.__version__,
            "package_version": __version__,
            "git_sha": sha,
            "git_dirty": dirty,
            "host": platform.node(),
        }
    )
    return dict(_PROVENANCE)


def write_json_atomic(path: str | Path, data: dict[str, Any]) -> None:
    """Write ``data`` as JSON to ``path`` atomically and flushed to disk (see
    :func:`~sparsebench.suite.atomic.write_atomic`): readers see the old file or the complete
    new one, never a torn one."""
    text = json.dumps(data, indent=2, sort_keys=True, default=_json_default)
    write_atomic(path, text, fsync=True)


def _json_default(o: Any) -> Any:
    if hasattr(o, "item"):
        return o.item()
    raise TypeError(f"not JSON serializable: {type(o).__name__}")


def read_record(path: str | Path) -> dict[str, Any]:
    with open(path) as f:
        return json.load(f)

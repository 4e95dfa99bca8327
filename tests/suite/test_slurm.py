"""The Snakefile through the SLURM executor plugin on a one-node SLURM started here
(:mod:`sparsebench.suite.slurm_local`): the records equal a local run's, provenance aside.

Marker ``slurm``: not part of ``make test``; ``make test-slurm`` runs them. They skip with the
reason (and the daemons' log tails) where SLURM cannot start, and fail instead under
``REQUIRE_SLURM=1``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sparsebench.suite import slurm_local

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
# what a run measures rather than computes, and where it ran
PROVENANCE = {"cell_s", "train_wall_s", "infer_ms", "regrowth_s", "started_at", "finished_at",
              "spec_hash", "slurm_job_id", "slurm_node"}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        reason = "the SLURM executor plugin is not installed (pip install -e '.[cluster]')"
        if os.environ.get("REQUIRE_SLURM") == "1":
            pytest.fail(reason)
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    try:
        yield slurm_local.start(folder)
    except slurm_local.SlurmUnavailable as e:
        if os.environ.get("REQUIRE_SLURM") == "1":
            pytest.fail(f"SLURM did not start: {e}")
        pytest.skip(f"SLURM cannot start here: {e}")
    finally:
        slurm_local.stop(folder)


def _spec(tmp_path: Path, benchmark: str) -> Path:
    spec = {
        "benchmark": benchmark,
        "data_root": str(ROOT / "data"),
        "classification": {
            "tasks": {
                "d": {
                    "dataset": "digits",
                    "model": "lenet300_100",
                    "recipe": {"epochs": 1, "batch_size": 64, "lr": 0.05},
                }
            },  # fmt: skip
            "methods": {"dense": {}, "rigl": {"update_interval": 5}},
            "sparsities": [0.9],
            "seeds": [0],
        },
    }
    path = tmp_path / f"{benchmark}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _snakemake(*args: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "snakemake", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)


def _records(benchmark: str) -> dict[str, dict]:
    runs = ROOT / "results" / benchmark / "classification" / "runs"
    return {str(p.relative_to(runs)): json.loads(p.read_text()) for p in runs.rglob("record.json")}


def test_a_spec_through_slurm_equals_a_local_run(cluster, tmp_path):
    tag = f"{os.getpid()}"
    names = {"slurm": f"slurm_test_{tag}", "local": f"slurm_local_{tag}"}
    try:
        run = _snakemake("--profile", "profiles/slurm", "--jobs", "2",
                         "--config", f"spec={_spec(tmp_path, names['slurm'])}")  # fmt: skip
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + cluster.log_tail()
        local = _snakemake("--cores", "2", "--config", f"spec={_spec(tmp_path, names['local'])}")
        assert local.returncode == 0, local.stderr[-3000:]
        a, b = _records(names["slurm"]), _records(names["local"])
        assert sorted(a) == sorted(b) and len(a) == 2
        for key in a:
            assert a[key]["status"] == "ok", a[key]["error"]
            # where it ran: a SLURM job on the node; a local record has neither key
            assert a[key]["slurm_job_id"].isdigit() and a[key]["slurm_node"] == "localhost"
            assert "slurm_job_id" not in b[key]
            same = {k: v for k, v in a[key].items() if k not in PROVENANCE and k != "benchmark"}
            other = {k: b[key].get(k) for k in same}
            assert same == other, {k: (same[k], other[k]) for k in same if same[k] != other[k]}
    finally:
        for name in names.values():
            shutil.rmtree(ROOT / "results" / name, ignore_errors=True)

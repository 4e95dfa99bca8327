"""The Snakefile through the SLURM executor plugin on a one-node SLURM started here
(:mod:`sparsebench.suite.slurm_local`): every pillar's records equal a local run's, measured
columns aside; a cancelled batch job loses only its unfinished cells, and the rerun submits
only those; a second run on the same folder is refused; a GPU cell on a cluster without GPUs
is refused before anything is queued.

They start daemons and take minutes, so they run only under ``REQUIRE_SLURM=1`` (``make
test-slurm``, which CI runs) and skip with that reason otherwise (``make test``). Under it, a
SLURM that cannot start fails them with the reason and the daemons' log tails. Every scheduler
call runs under a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sparsebench.suite import slurm_local
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars import BUILTIN

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]
# where and when it ran, besides each pillar's measured columns (Pillar.measured)
PROVENANCE = {"cell_s", "started_at", "finished_at", "spec_hash", "slurm_job_id", "slurm_node",
              "parallel_jobs"}  # fmt: skip


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if os.environ.get("REQUIRE_SLURM") != "1":
        pytest.skip("they start a one-node SLURM and take minutes: `make test-slurm` runs them "
                    "(REQUIRE_SLURM=1)")  # fmt: skip
    try:
        import snakemake_executor_plugin_slurm  # noqa: F401
    except ImportError:
        pytest.fail("the SLURM executor plugin is not installed (pip install -e '.[cluster]')")
    folder = tmp_path_factory.mktemp("slurm")
    try:
        yield slurm_local.start(folder)
    except slurm_local.SlurmUnavailable as e:
        pytest.fail(f"SLURM did not start: {e}")
    finally:
        slurm_local.stop(folder)


def _write_spec(folder: Path, sections: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    spec = {"benchmark": "t", "data_root": str(ROOT / "data"), **sections}
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def _snakemake(folder: Path, *args: str, timeout: float = 900, log: Path | None = None):
    """Snakemake on ``folder``'s spec; with ``log``, started in the background writing there."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "-d", str(folder),
           "--config", f"spec={folder / 'spec.yaml'}", *args]  # fmt: skip
    if log is not None:
        with log.open("w") as out:
            return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True)
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def _slurm(folder: Path, *args: str, **kw):
    # the profile's first status check after 20 s, a poll at least that often: 5 s on this
    # one-node cluster (MinJobAge 3600 keeps squeue's answers), or each step of the DAG waits
    profile = ["--profile", str(ROOT / "profiles" / "slurm")]
    return _snakemake(folder, *profile, "--slurm-init-seconds-before-status-checks", "5",
                      *args, **kw)  # fmt: skip


def _records(folder: Path) -> dict[tuple[str, str], dict]:
    out = {}
    for p in (folder / "results" / "t").glob("*/runs/**/record.json"):
        rec = json.loads(p.read_text())
        out[(rec["pillar"], rec["cell_id"])] = rec
    return out


def _computed(rec: dict) -> dict:
    """A record without what a run measures (its pillar's measured columns, also inside the
    rows of a record that holds several) or where and when it ran."""
    skip = PROVENANCE | set(get_pillar(rec["pillar"]).measured)
    out = {k: v for k, v in rec.items() if k not in skip}
    if isinstance(out.get("rows"), list):
        out["rows"] = [{k: v for k, v in r.items() if k not in skip} for r in out["rows"]]
    return out


def _ok_records(runs: Path) -> int:
    """Records that say ok (a running cell's record says failed, in flight, until it ends)."""
    n = 0
    for p in runs.rglob("record.json"):
        try:
            n += json.loads(p.read_text())["status"] == "ok"
        except (OSError, ValueError):
            pass
    return n


def _squeue(*fmt: str) -> list[str]:
    out = subprocess.run(["squeue", "-h", "-o", " ".join(fmt)], capture_output=True, text=True,
                         timeout=30)  # fmt: skip
    return out.stdout.split("\n") if out.stdout.strip() else []


def test_every_pillar_through_slurm_equals_a_local_run(cluster, tmp_path):
    sections = {}
    for name in BUILTIN:
        sections.update(get_pillar(name).example())
    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    _write_spec(on_slurm, sections)
    _write_spec(local, sections)
    run = _slurm(on_slurm)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:] + cluster.log_tail()
    done = _snakemake(local, "--cores", "2")
    assert done.returncode == 0, done.stderr[-3000:]
    a, b = _records(on_slurm), _records(local)
    assert sorted(a) == sorted(b)
    assert {pillar for pillar, _ in a} == set(BUILTIN)
    for key, rec in a.items():
        assert rec["status"] == "ok", (key, rec["error"])
        # where it ran: a SLURM job on the node; a local record has neither key
        assert rec["slurm_job_id"].isdigit() and rec["slurm_node"] == "localhost", key
        assert "slurm_job_id" not in b[key]
        same, other = _computed(rec), _computed(b[key])
        assert same == other, (key, {k: (same[k], other.get(k)) for k in same
                                     if same[k] != other.get(k)})  # fmt: skip
    # every pillar's board and the summary were made under SLURM too
    for name in BUILTIN:
        assert (on_slurm / "results" / "t" / name / "leaderboard.md").is_file(), name
    assert (on_slurm / "results" / "t" / "summary.md").is_file()


CELLS = 10  # of several seconds each, in one batch job
SLOW_BATCH = {
    "classification": {
        "tasks": {
            "d": {
                "dataset": "digits",
                "model": "lenet300_100",
                "recipe": {"epochs": 20, "batch_size": 16, "lr": 0.05},
            }
        },  # fmt: skip
        "methods": {"dense": {}},
        "seeds": list(range(CELLS)),
    }
}


def test_a_cancelled_job_loses_only_its_unfinished_cells_and_a_second_run_is_refused(
    cluster, tmp_path
):
    folder = tmp_path / "cancel"
    _write_spec(folder, SLOW_BATCH)
    log = tmp_path / "cancel.log"
    # one job of all cells: batches are split to fill the job slots, one here
    run = _slurm(folder, "--jobs", "1", log=log)
    try:
        runs = folder / "results" / "t" / "classification" / "runs"
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not list(runs.rglob("record.json")):
            assert run.poll() is None, log.read_text()[-3000:]
            time.sleep(0.5)
        # what the job asked for: its time limit (twice 10 cells of the pillar's 5 minutes, +5),
        # the pillar's memory, one CPU per thread, no GPU
        [request] = [line for line in _squeue("%l|%m|%C|%b") if line.strip()]
        assert request == "1:45:00|3000M|1|N/A", request
        # a second run on the same folder while the first holds it: refused
        second = _snakemake(folder, "--cores", "1", timeout=300)
        assert second.returncode != 0
        assert "cannot be locked" in second.stdout + second.stderr
        while time.monotonic() < deadline and not _ok_records(runs):
            time.sleep(0.2)
        [job] = [line.split()[0] for line in _squeue("%i") if line.strip()]
        subprocess.run(["scancel", job], check=True, timeout=30)
        run.wait(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
    out = log.read_text()
    assert run.returncode != 0 and "CANCELLED" in out, out[-3000:]
    recs = _records(folder)
    finished = {k: r for k, r in recs.items() if r["status"] == "ok"}
    assert 1 <= len(finished) < CELLS, {k: r["status"] for k, r in recs.items()}
    mtimes = {k: (folder / "results" / "t" / "classification" / "runs" / k[1] /
                  "record.json").stat().st_mtime_ns for k in finished}  # fmt: skip

    again = _slurm(folder)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    plan = json.loads((folder / "results" / "t" / "logs" / "plan.json").read_text())
    submitted = {c for b in plan["cells"]["classification"] for c in b["cells"]}
    assert submitted == {f"d/dense/default/s0/seed{s}" for s in range(CELLS)} - {
        k[1] for k in finished
    }  # fmt: skip
    recs = _records(folder)
    assert len(recs) == CELLS and all(r["status"] == "ok" for r in recs.values())
    for k, t in mtimes.items():  # the finished cells were not run again
        path = folder / "results" / "t" / "classification" / "runs" / k[1] / "record.json"
        assert path.stat().st_mtime_ns == t, k


def test_a_gpu_cell_on_a_cluster_without_gpus_is_refused_before_anything_is_queued(
    cluster, tmp_path
):
    folder = tmp_path / "gpu"
    kernels = get_pillar("kernels").example()
    kernels["kernels"]["device"] = "cuda"
    _write_spec(folder, kernels)
    before = _squeue("%i")
    run = _slurm(folder, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "1 cell(s) need a GPU" in out, out[-3000:]
    assert "partition 'cpu' has no GPU a job can use" in out
    assert _squeue("%i") == before
    assert not list(folder.glob("results/t/kernels/runs/**/record.json"))

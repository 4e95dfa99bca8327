"""A pillar defined only in the tests (tests/toy_pillar.py) runs end to end through the same
Snakefile: records, validated parquet, leaderboard, summary entry; a rerun does nothing and a
new value runs only its own cell."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]


def _snakemake(tmp_path, *args):
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        SPARSEBENCH_PLUGINS="tests.toy_pillar",
    )
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--config", f"spec={tmp_path / 'toy.yaml'}", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


TOY_CLAIMS = """
paper: {key: toy, authors: Nobody, year: 2026, title: Squares grow}
defaults: {pillar: toy, metric: square, stat: exact}
claims:
  - id: two-beats-one
    statement: 2² > 1²
    source: {where: arithmetic, setting: reals}
    why: exact arithmetic
    test: {kind: order, a: {value: 2}, b: {value: 1}, op: ">"}
  - id: over-a-failed-cell
    statement: (-1)² > 1²
    source: {where: arithmetic, setting: reals}
    why: the cell fails, so this cannot be judged
    test: {kind: order, a: {value: -1}, b: {value: 1}, op: ">"}
"""


def test_toy_pillar_runs_through_the_generic_rules(tmp_path):
    (tmp_path / "toy_claims.yaml").write_text(TOY_CLAIMS)
    (tmp_path / "toy.yaml").write_text(
        "benchmark: toyb\ntoy: {values: [1, 2, -1]}\nclaims: [toy_claims.yaml]\n"
    )
    run = _snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    folder = tmp_path / "results" / "toyb" / "toy"
    rec = json.loads((folder / "runs" / "v2" / "record.json").read_text())
    assert rec["status"] == "ok" and rec["square"] == 4.0 and rec["pillar"] == "toy"
    bad = json.loads((folder / "runs" / "v-1" / "record.json").read_text())
    assert bad["status"] == "failed" and "negative values" in bad["error"]
    runs = pl.read_parquet(folder / "runs.parquet")
    assert sorted(runs["cell_id"]) == ["v-1", "v1", "v2"]
    assert "2² = 4" in (folder / "leaderboard.md").read_text()
    summary = (tmp_path / "results" / "toyb" / "summary.md").read_text()
    assert "## Toy" in summary and "toy/leaderboard.md" in summary
    # the rule claims judged the spec's claim file from the records
    verdicts = json.loads((tmp_path / "results" / "toyb" / "claims.json").read_text())
    assert {c["id"]: c["verdict"] for c in verdicts["claims"]} == {
        "two-beats-one": "holds", "over-a-failed-cell": "inconclusive"}  # fmt: skip
    assert "1 holds / 0 fails / 1 inconclusive" in verdicts["badge"]
    tex = (tmp_path / "results" / "toyb" / "claims.tex").read_text()
    assert "\\newcommand{\\claimTwoBeatsOneVerdict}{holds}" in tex

    again = _snakemake(tmp_path, "-n", "--cores", "2")
    assert "Nothing to be done" in again.stdout + again.stderr
    # one self-contained HTML report: the board and the claims as pages, the captions
    report = tmp_path / "results" / "toyb" / "report.html"
    made = _snakemake(tmp_path, "--report", str(report))
    assert made.returncode == 0, made.stderr[-2000:]
    page = report.read_text()
    assert "leaderboard.html" in page and "claims.html" in page and "Claims" in page

    v1 = folder / "runs" / "v1" / "record.json"
    before = v1.stat().st_mtime_ns
    (tmp_path / "toy.yaml").write_text(
        "benchmark: toyb\ntoy: {values: [1, 2, 3, -1]}\nclaims: [toy_claims.yaml]\n"
    )
    more = _snakemake(tmp_path, "--cores", "2")
    assert more.returncode == 0, more.stderr[-2000:]
    assert v1.stat().st_mtime_ns == before  # only the new cell ran
    assert json.loads((folder / "runs" / "v3" / "record.json").read_text())["square"] == 9.0
    assert pl.read_parquet(folder / "runs.parquet").height == 4


def test_toy_spec_typo_names_the_key_and_the_allowed_ones(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {valeus: [1]}\n")
    run = _snakemake(tmp_path, "-n")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "toy.yaml" in out and "'valeus'" in out and "values" in out


def test_a_crashed_batch_keeps_finished_records_and_the_rerun_does_the_rest(tmp_path):
    """Value 99 kills its process: the cell before it keeps its record, the crashed cell gets
    a failed record (written before it ran), the cell after it runs on the next invocation."""
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 99, 2]}\n")
    first = _snakemake(tmp_path, "--cores", "1")  # one core: the three cells in one job
    assert first.returncode != 0
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    assert json.loads((runs / "v1" / "record.json").read_text())["status"] == "ok"
    crashed = json.loads((runs / "v99" / "record.json").read_text())
    assert crashed["status"] == "failed" and "process died" in crashed["error"]
    assert not (runs / "v2" / "record.json").exists()
    v1 = (runs / "v1" / "record.json").stat().st_mtime_ns
    second = _snakemake(tmp_path, "--cores", "1")
    assert second.returncode == 0, second.stderr[-2000:]
    assert (runs / "v1" / "record.json").stat().st_mtime_ns == v1
    table = pl.read_parquet(tmp_path / "results" / "toyb" / "toy" / "runs.parquet")
    assert dict(zip(table["cell_id"], table["status"])) == {"v1": "ok", "v2": "ok", "v99": "failed"}


def test_ctrl_c_keeps_finished_records_and_forgets_the_interrupted_cell(tmp_path):
    import signal
    import time

    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 77]}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPARSEBENCH_PLUGINS="tests.toy_pillar")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--config", f"spec={tmp_path / 'toy.yaml'}", "--cores", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    for _ in range(120):  # v1 done, v77 (two minutes) running
        if (runs / "v1" / "record.json").exists() and (runs / "v77").exists():
            break
        time.sleep(0.5)
    time.sleep(1)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in the terminal does
    proc.wait(timeout=60)
    assert json.loads((runs / "v1" / "record.json").read_text())["status"] == "ok"
    assert not (runs / "v77" / "record.json").exists()  # pending again, not a failed record


def test_a_broken_runs_table_is_named_by_the_cli_and_rebuilt_by_the_next_run(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 2]}\n")
    assert _snakemake(tmp_path, "--cores", "1").returncode == 0
    folder = tmp_path / "results" / "toyb" / "toy"
    table = folder / "runs.parquet"
    table.write_bytes(b"not a parquet file")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPARSEBENCH_PLUGINS="tests.toy_pillar")
    for cmd in (["board", str(folder.parent), "--pillar", "toy"], ["summary", str(folder.parent)]):
        run = subprocess.run([sys.executable, "-m", "sparsebench.suite.cli", *cmd], env=env,
                             capture_output=True, text=True, timeout=120)  # fmt: skip
        assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
        assert f"{table}: not a readable runs table" in run.stderr
    record = folder / "runs" / "v1" / "record.json"
    before = record.stat().st_mtime_ns
    again = _snakemake(tmp_path, "--cores", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "was not a readable table; rebuilding it" in again.stderr
    assert pl.read_parquet(table).height == 2 and record.stat().st_mtime_ns == before


def _start(tmp_path, env):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--config", f"spec={tmp_path / 'toy.yaml'}", "--cores", "1"]  # fmt: skip
    return subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip


def _wait_for(path, seconds=120):
    import time

    for _ in range(seconds * 2):
        if path.exists():
            return
        time.sleep(0.5)
    raise AssertionError(f"{path} did not appear")


@pytest.mark.slow
def test_kill_9_of_the_workflow_redoes_the_cell_in_flight_on_a_plain_rerun(tmp_path):
    """The whole process group killed (a power cut, an OOM killer taking Snakemake too): the
    cell in flight keeps an in-flight record, and the next plain run (after --unlock, the
    lock Snakemake leaves) redoes it and nothing else."""
    import signal

    from sparsebench.suite.job import IN_FLIGHT

    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 77]}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPARSEBENCH_PLUGINS="tests.toy_pillar")
    proc = _start(tmp_path, env)
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    _wait_for(runs / "v77" / "record.json")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert json.loads((runs / "v77" / "record.json").read_text())["error"] == IN_FLIGHT
    v1 = (runs / "v1" / "record.json").stat().st_mtime_ns
    assert _snakemake(tmp_path, "--unlock").returncode == 0
    env["TOY_SLEEP"] = "0"
    again = subprocess.run(
        [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
         "--config", f"spec={tmp_path / 'toy.yaml'}", "--cores", "1"],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((runs / "v77" / "record.json").read_text())["status"] == "ok"
    assert (runs / "v1" / "record.json").stat().st_mtime_ns == v1


@pytest.mark.slow
def test_kill_of_the_main_process_only_lets_its_jobs_finish_their_records(tmp_path):
    """Snakemake alone killed while a job runs: the job (its own process) finishes and writes
    its record; the next run, after --unlock, does only what is still missing."""
    import signal

    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [77, 5]}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPARSEBENCH_PLUGINS="tests.toy_pillar",
               TOY_SLEEP="6")  # fmt: skip
    proc = _start(tmp_path, env)
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    _wait_for(runs / "v77" / "record.json")
    os.kill(proc.pid, signal.SIGKILL)  # the main process, not its group
    proc.wait(timeout=60)
    import time

    for _ in range(60):
        if json.loads((runs / "v77" / "record.json").read_text())["status"] == "ok":
            break
        time.sleep(0.5)
    assert json.loads((runs / "v77" / "record.json").read_text())["status"] == "ok"
    assert _snakemake(tmp_path, "--unlock").returncode == 0
    again = _snakemake(tmp_path, "--cores", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    assert json.loads((runs / "v5" / "record.json").read_text())["square"] == 25.0


@pytest.mark.slow
def test_a_killed_artefact_build_leaves_nothing_half_made_and_is_rebuilt(tmp_path):
    """kill -9 of the workflow while an artefact is being built: no artefact (the sidecar,
    written last, marks it complete) and no temporary file; the next run builds it and runs
    the cells."""
    import signal

    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 2], base: 3}\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), SPARSEBENCH_PLUGINS="tests.toy_pillar",
               TOY_BUILD_SLEEP="60")  # fmt: skip
    proc = _start(tmp_path, env)
    log = tmp_path / "results" / "artefacts" / "toy" / "logs"
    _wait_for(log)
    import time

    for _ in range(120):  # the build job has started (its log names it)
        if any("building toy" in f.read_text() for f in log.glob("*.log")):
            break
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    folder = tmp_path / "results" / "artefacts" / "toy" / "base-3"
    assert not (folder / "meta.json").exists()
    assert not list(folder.glob(".*.tmp")) if folder.exists() else True
    assert _snakemake(tmp_path, "--unlock").returncode == 0
    again = _snakemake(tmp_path, "--cores", "1")
    assert again.returncode == 0, again.stderr[-2000:]
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    assert json.loads((runs / "v2" / "record.json").read_text())["square"] == 4.0


@pytest.mark.slow
def test_a_corrupted_artefact_fails_its_cells_naming_the_file(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1], base: 3}\n")
    assert _snakemake(tmp_path, "--cores", "1").returncode == 0
    tensors = tmp_path / "results" / "artefacts" / "toy" / "base-3" / "t.safetensors"
    import torch
    from safetensors.torch import save_file

    save_file({"w": torch.randn(3)}, str(tensors))  # noise of the same shape
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 5], base: 3}\n")
    _snakemake(tmp_path, "--cores", "1")
    runs = tmp_path / "results" / "toyb" / "toy" / "runs"
    bad = json.loads((runs / "v5" / "record.json").read_text())
    assert (
        bad["status"] == "failed" and "results/artefacts/toy/base-3/t.safetensors" in bad["error"]
    )
    assert "SHA-256 differs" in bad["error"] and "remove" in bad["error"]


def _tree(folder: Path) -> dict:
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}  # fmt: skip


def test_a_dry_run_writes_nothing(tmp_path):
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 2]}\n")
    dry = _snakemake(tmp_path, "-n")
    assert dry.returncode == 0, dry.stderr[-2000:]
    assert not (tmp_path / "results").exists()
    assert _snakemake(tmp_path, "--cores", "1").returncode == 0
    before = _tree(tmp_path / "results")
    (tmp_path / "toy.yaml").write_text("benchmark: toyb\ntoy: {values: [1, 2, 3]}\n")
    dry = _snakemake(tmp_path, "-n")
    assert dry.returncode == 0 and "v3" in dry.stdout + dry.stderr
    assert _tree(tmp_path / "results") == before


def test_a_one_pillar_run_writes_its_summary_in_the_board_job(tmp_path):
    # one job less on the way to the answer; a change of a record still remakes the summary
    (tmp_path / "toy.yaml").write_text("benchmark: toys\ntoy: {values: [1, 2]}\n")
    run = _snakemake(tmp_path, "--cores", "1")
    assert run.returncode == 0, run.stderr[-2000:]
    bench = tmp_path / "results" / "toys"
    assert "rule summary" not in run.stderr and "localrule summary" not in run.stderr
    assert not (bench / "logs" / "summary.log").exists()
    board_log = (bench / "toy" / "logs" / "board.log").read_text()
    assert board_log.splitlines()[-1] == "results/toys/summary.md"
    summary = (bench / "summary.md").read_text()
    assert "toy/leaderboard.md" in summary and "2 row(s)" in summary
    (tmp_path / "toy.yaml").write_text("benchmark: toys\ntoy: {values: [1, 2, 3]}\n")
    assert _snakemake(tmp_path, "--cores", "1").returncode == 0
    assert "3 row(s)" in (bench / "summary.md").read_text()
    (bench / "toy" / "leaderboard.md").unlink()  # a removed board file is remade
    assert _snakemake(tmp_path, "--cores", "1").returncode == 0
    assert (bench / "toy" / "leaderboard.md").is_file()

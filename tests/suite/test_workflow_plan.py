"""Which cells are pending and how they are batched (suite/workflow.py), without Snakemake."""

from __future__ import annotations

from pathlib import Path

from sparsebench.suite import paths, workflow
from sparsebench.suite.pillar import Cell
from sparsebench.suite.record import write_json_atomic


def _cells(n, batch="b", threads=1):
    return [
        Cell(
            "classification",
            f"t/m/default/s0.9/seed{i}",
            f"cell {i}",
            "m",
            seed=i,
            trigger={"x": 1},
            threads=threads,
            batch=batch,
        )  # fmt: skip
        for i in range(n)
    ]


def test_done_stale_and_missing_records(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    done, stale, missing = _cells(3)
    write_json_atomic(paths.record("B", "classification", done.id), {"trigger": done.trigger_hash})
    write_json_atomic(paths.record("B", "classification", stale.id), {"trigger": "old"})
    assert workflow.record_state(paths.record("B", "classification", done.id), done) == "done"
    assert workflow.record_state(paths.record("B", "classification", stale.id), stale) == "stale"
    assert workflow.record_state(paths.record("B", "classification", missing.id), missing) == (
        "missing"
    )
    [batch] = workflow.batches("B", {"classification": [done, stale, missing]}, cores=None)[
        "classification"
    ]
    assert [c.id for c in batch.cells] == [stale.id, missing.id]  # the done cell is no output
    assert batch.stale == (stale.id,)
    workflow.write_stale_markers("B", {"classification": [batch]})
    marker = workflow.stale_marker("B", "classification", stale.id)
    assert marker.read_text() == stale.trigger_hash
    assert str(marker) in batch.inputs("B")  # newer than the old record: Snakemake reruns it


def test_batches_respect_batch_max_and_fill_the_cores(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = _cells(30)  # classification: batch_max 12
    sizes = [len(b.cells) for b in workflow.batches("B", {"classification": cells}, 1)[
        "classification"]]  # fmt: skip
    assert sorted(sizes) == [10, 10, 10] and max(sizes) <= 12
    few = _cells(3)
    split = workflow.batches("B", {"classification": few}, cores=2)["classification"]
    assert len(split) == 2 and sum(len(b.cells) for b in split) == 3  # one job per core
    assert len({b.name for b in split}) == 2
    big = max(split, key=lambda b: len(b.cells))
    assert big.priority == len(big.cells)  # the biggest batch starts first


def test_cells_with_different_threads_never_share_a_batch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cells = _cells(2, threads=1) + [
        Cell("classification", "t/m/default/s0.9/seed9", "x", "m", threads=2, batch="b")
    ]
    out = workflow.batches("B", {"classification": cells}, cores=None)["classification"]
    assert sorted((b.threads, len(b.cells)) for b in out) == [(1, 2), (2, 1)]


def test_a_jobs_own_parse_reads_the_planned_batches_and_missing_artefacts(tmp_path, monkeypatch):
    """On a cluster node the artefacts built earlier in the run exist, and planning again would
    drop (or change) the rule of a job that is running: the saved plan is what counts."""
    from sparsebench.suite.pillar import Artefact

    monkeypatch.chdir(tmp_path)
    arts = {
        "classification": [
            Artefact("classification", f"a{i}", f"artefact {i}", (str(tmp_path / f"a{i}.bin"),),
                     batch="together")
            for i in range(2)
        ]
    }  # fmt: skip
    cells = {"classification": _cells(3)}
    planned = workflow.batches("b", cells, cores=2)
    missing = workflow.artefact_batches(arts)
    assert [len(b.artefacts) for b in missing] == [2]
    plan = tmp_path / "plan.json"
    workflow.save_plan(plan, planned, missing)
    (tmp_path / "a0.bin").write_bytes(b"built")  # one artefact done since the plan
    assert [len(b.artefacts) for b in workflow.artefact_batches(arts)] == [1]  # re-planning
    again = workflow.load_artefact_plan(plan, arts)
    assert [(b.name, [a.id for a in b.artefacts]) for b in again] == [
        (missing[0].name, ["a0", "a1"])
    ]
    loaded = workflow.load_plan(plan, cells)
    assert [[c.id for c in b.cells] for b in loaded["classification"]] == [
        [c.id for c in b.cells] for b in planned["classification"]
    ]
    assert workflow.load_artefact_plan(tmp_path / "none.json", arts) is None


def test_a_folder_the_user_cannot_write_is_named_before_any_job(tmp_path, monkeypatch):
    """A read-only results folder is named with the folder the run wanted; one still to be
    made inside a writable parent passes. os.access stands in for the permissions: the tests
    may run as root, who may write anywhere."""
    import os

    ro = tmp_path / "ro" / "results"
    ro.mkdir(parents=True)
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p) != ro and real(p, mode))
    message = workflow.unwritable([ro / "b" / "c"])
    assert message.startswith(
        f"{ro} is not writable by this user (the run writes {ro / 'b' / 'c'})"
    )
    assert workflow.unwritable([tmp_path / "ok" / "results" / "b"]) is None


def test_the_workflows_end_cancels_snakemakes_pending_timers_only():
    import threading

    def requeue():  # as Snakemake's scheduler queues its next round
        pass

    def other():
        pass

    requeue.__module__ = "snakemake.scheduling.job_scheduler"
    theirs, ours = threading.Timer(60, requeue), threading.Timer(60, other)
    theirs.start()
    ours.start()
    try:
        assert workflow.release_scheduler_timers() == 1
        theirs.join(timeout=5)
        assert not theirs.is_alive() and ours.is_alive()
    finally:
        ours.cancel()


def test_exit_without_teardown_keeps_the_code_the_log_and_the_streams(tmp_path):
    import subprocess
    import sys

    log = tmp_path / "x.log"
    code = (
        "import logging, sys; from sparsebench.suite.workflow import exit_without_teardown;"
        f"logging.basicConfig(filename={str(log)!r});"
        "exit_without_teardown(3); logging.warning('kept'); print('flushed', end='');"
        "sys.exit(0)"
    )
    got = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert got.returncode == 3 and got.stdout == "flushed", got.stderr
    assert "kept" in log.read_text()


def test_a_jobs_cluster_request_comes_from_earlier_records_else_the_pillar(tmp_path, monkeypatch):
    from sparsebench.suite.pillar import get_pillar

    monkeypatch.chdir(tmp_path)
    rerun, fresh, failed = _cells(3)
    # a cell rerun for a new trigger: its last ok record took 90 s
    write_json_atomic(paths.record("B", "classification", rerun.id),
                      {"trigger": "old", "status": "ok", "cell_s": 90.0})  # fmt: skip
    # a failed record's seconds say nothing of a whole cell: the pillar's estimate counts
    write_json_atomic(paths.record("B", "classification", failed.id),
                      {"trigger": "old", "status": "failed", "cell_s": 1.0})  # fmt: skip
    pillar = get_pillar("classification")
    assert workflow.expected_minutes("B", "classification", rerun) == 1.5
    assert workflow.expected_minutes("B", "classification", fresh) == pillar.cell_minutes
    assert workflow.expected_minutes("B", "classification", failed) == pillar.cell_minutes
    [batch] = workflow.batches("B", {"classification": [rerun, fresh, failed]}, None)[
        "classification"]  # fmt: skip
    assert batch.minutes == 1.5 + 2 * pillar.cell_minutes and batch.gpus == 0
    # twice the estimate and five minutes, the pillar's memory, the GPUs the cells need
    assert workflow.cluster_resources("classification", 1.5 + 10.0, 1) == {
        "mem_mb": pillar.job_mem_mb, "runtime": 28, "gpu": 1}  # fmt: skip
    plan = tmp_path / "plan.json"
    workflow.save_plan(plan, {"classification": [batch]})
    [loaded] = workflow.load_plan(plan, {"classification": [rerun, fresh, failed]})[
        "classification"]  # fmt: skip
    assert loaded.minutes == batch.minutes  # a job's own parse asks for the same


def test_a_batch_needs_the_gpus_of_its_cells(tmp_path, monkeypatch):
    from dataclasses import replace

    monkeypatch.chdir(tmp_path)
    cells = _cells(2)
    cells[1] = replace(cells[1], gpus=1)
    [batch] = workflow.batches("B", {"classification": cells}, None)["classification"]
    assert batch.gpus == 1

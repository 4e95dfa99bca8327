"""`sparsebench run`'s pieces without Snakemake: spec names, the progress lines read from the
files jobs write, the ETA, and the end of a run."""

import io
import json
import os
import time

import polars as pl
import pytest

from sparsebench.suite import paths
from sparsebench.suite.runner import (
    CellState,
    Progress,
    RunError,
    Watcher,
    clock,
    ending,
    metric_text,
    resolve_spec,
)
from sparsebench.suite.spec import BENCHMARKS_DIR


def test_a_spec_is_a_file_or_an_embedded_benchmark_and_a_typo_gets_a_suggestion(tmp_path):
    own = tmp_path / "mine.yaml"
    own.write_text("benchmark: x\n")
    assert resolve_spec(str(own)) == own
    assert resolve_spec("default") == BENCHMARKS_DIR / "default.yaml"
    with pytest.raises(RunError, match=r"defualt: no such file .*did you mean 'default'\?"):
        resolve_spec("defualt")
    with pytest.raises(RunError, match="a folder, not a spec file"):
        resolve_spec(str(tmp_path))
    with pytest.raises(RunError) as e:
        resolve_spec("zzzzqqqq")
    assert "did you mean" not in str(e.value) and "default, " in str(e.value)


def test_clock():
    assert clock(0) == "0:00"
    assert clock(65) == "1:05"
    assert clock(3723) == "1:02:03"


def test_the_headline_metric_of_an_ok_record_only():
    metric = {"name": "test_acc", "unit": "fraction", "higher": True}
    assert metric_text({"status": "ok", "test_acc": 0.971234}, metric) == "test_acc 97.12 %"
    assert metric_text({"status": "ok", "test_acc": 0.8}, metric) == "test_acc 80.00 %"
    assert metric_text({"status": "failed", "test_acc": None}, metric) == ""
    fvu = {"name": "speedup", "unit": "×", "higher": True}
    assert metric_text({"status": "ok", "speedup": 9.5}, fvu) == "speedup 9.5 ×"
    assert metric_text({"status": "ok", "speedup": True}, fvu) == ""


def _progress(estimates, start=0.0, cores=2):
    cells = [CellState("p", f"c{i}", f"job{i}", e) for i, e in enumerate(estimates)]
    return Progress("b", start, cells, {}, {}, cores)


def test_eta_is_the_work_left_at_the_rate_so_far_plus_the_start_ups_still_to_come():
    p = _progress([2.0, 2.0, 4.0, 1.0], start=100.0)
    p.cells[0].done, p.cells[0].seconds, p.cells[0].finished = True, 2.5, 112.5
    p.started_jobs = {("p", "job0"), ("p", "job1")}
    # the first cell began at 110 (10 s after the start: a job's start-up is taken as 5 s);
    # 2 s of estimated work done in 110 -> 114, i.e. 0.5 work-s per s; 7 s of work left:
    # 14 s, plus jobs 2 and 3 not started: 2 * 5 s over 2 cores
    assert p.eta(114.0) == pytest.approx(14.0 + 5.0)


def test_eta_before_any_cell_uses_the_estimates_over_the_cores_plus_start_up():
    p = _progress([3.0, 5.0], cores=2)
    # two jobs, each paying STARTUP_S (6 s): (3 + 5 + 2 * 6) / 2
    assert p.eta(0.0) == pytest.approx(10.0)


def test_eta_unknown_until_every_cell_left_has_an_estimate():
    p = _progress([None, None, 1.0], start=0.0)
    assert p.eta(5.0) is None
    other = CellState("q", "x", "jobq", None)  # another pillar: the mean of all stands in
    p.cells.append(other)
    p.cells[0].done, p.cells[0].seconds, p.cells[0].finished = True, 4.0, 4.0
    p.started_jobs = {("p", "job0"), ("p", "job1"), ("p", "job2")}
    p.started_jobs.add(("q", "jobq"))
    # began at 0; 4 s of work (c0) in 5 s: 0.8 per s; left: 4 (c1 by the pillar's mean) + 1
    # + 4 (the other pillar's cell, by the mean of every finished cell)
    assert p.eta(5.0) == pytest.approx(9.0 / 0.8)


def _record(status="ok", **extra):
    return {"status": status, "label": "task m s=0.9 seed=0", "cell_s": 1.5, **extra}


def test_the_watcher_prints_a_line_per_finished_cell_with_its_metric(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    start = time.time()
    plan = {
        "cells": {"toy": [{"name": "j1", "cells": ["a", "b"], "threads": 1, "stale": []}]},
        "artefacts": [],
        "pillars": {"toy": {"name": "square", "unit": "", "higher": True}},
    }
    plan_file = paths.bench_dir("b") / "logs" / "plan.json"
    plan_file.parent.mkdir(parents=True)
    out = io.StringIO()
    w = Watcher("b", start, 2, out)
    w.poll()
    assert out.getvalue() == ""  # no plan yet: nothing to say
    plan_file.write_text(json.dumps(plan))
    w.poll()
    assert "2 cell(s) to run in 1 job(s), 0 artefact(s) to build" in out.getvalue()
    rec = paths.record("b", "toy", "a")
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps(_record(square=4.0)))
    w.poll()
    w.poll()  # a cell is said once
    lines = out.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[1].startswith("[1/2 50%]  ok")
    assert "square 4" in lines[1] and "cell 1.5 s" in lines[1]
    rec_b = paths.record("b", "toy", "b")
    rec_b.parent.mkdir(parents=True)
    rec_b.write_text(json.dumps(_record("diverged", error="loss is nan at step 3")))
    w.poll()
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("[2/2 100%]  diverged") and "loss is nan at step 3" in last


def test_the_watcher_ignores_records_older_than_the_run_and_in_flight_ones(tmp_path, monkeypatch):
    from sparsebench.suite.job import IN_FLIGHT

    monkeypatch.chdir(tmp_path)
    start = time.time()
    plan = {"cells": {"toy": [{"name": "j", "cells": ["a"], "threads": 1, "stale": []}]}}
    plan_file = paths.bench_dir("b") / "logs" / "plan.json"
    plan_file.parent.mkdir(parents=True)
    plan_file.write_text(json.dumps(plan))
    rec = paths.record("b", "toy", "a")
    rec.parent.mkdir(parents=True)
    rec.write_text(json.dumps(_record()))
    os.utime(rec, (start - 100, start - 100))
    out = io.StringIO()
    w = Watcher("b", start, 1, out)
    w.poll()
    assert "[1/1" not in out.getvalue()
    rec.write_text(json.dumps(_record("failed", error=IN_FLIGHT)))
    w.poll()
    assert "[1/1" not in out.getvalue()


def test_the_ending_counts_failed_and_diverged_cells_and_names_the_files(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    table = paths.runs_table("b", "toy")
    table.parent.mkdir(parents=True)
    pl.DataFrame(
        {
            "cell_id": ["v1", "v2", "v-1", "v55"],
            "status": ["ok", "ok", "failed", "diverged"],
            "label": ["v1", "v2", "v-1", "v55"],
            "error": [None, None, "ValueError: negative", "loss is nan"],
        }
    ).write_parquet(table)
    paths.summary("b").write_text("# b: summary\n\n```\n- 2² = 4\n```\n")
    text, got = ending("b", ["toy"])
    assert got.counts == {"ok": 2, "failed": 1, "diverged": 1} and got.bad == 2
    assert "4 cell(s): 1 diverged, 1 failed, 2 ok; 2 failed / diverged" in text
    assert "[failed] toy v-1: ValueError: negative" in text
    assert "- 2² = 4" in text and "```" not in text
    assert "board   toy: results/b/toy/leaderboard.md" in text
    assert "report:" not in text  # none was made


def test_a_cell_of_several_rows_counts_once_with_its_worst_status():
    from sparsebench.suite.runner import per_cell

    runs = pl.DataFrame(
        {
            "cell_id": ["a", "a", "a", "b", "b", "c", "c"],
            "status": ["ok", "skipped", "ok", "ok", "failed", "skipped", "skipped"],
            "cell_s": [4.5, 4.5, 4.5, 2.0, 2.0, 1.0, 1.0],
        }
    )
    got = per_cell(runs)
    assert got["cell_id"].to_list() == ["a", "b", "c"]
    assert got["status"].to_list() == ["ok", "failed", "skipped"]
    assert got["cell_s"].to_list() == [4.5, 2.0, 1.0]  # once per cell, not per row


def test_files_of_an_earlier_run_that_are_not_ours_give_no_estimate_not_an_error(
    tmp_path, monkeypatch
):
    from sparsebench.suite.runner import _history, _plan_pillars

    monkeypatch.chdir(tmp_path)
    logs = paths.bench_dir("b") / "logs"
    logs.mkdir(parents=True)
    for text in ("[1, 2]", '{"p/a": NaN, "p/b": Infinity, "p/c": true, "p/d": 2.5}', "{"):
        (logs / "cell_times.json").write_text(text)
        (logs / "plan.json").write_text(text)
        got = _history("b")
        assert got in ({}, {"p/d": 2.5}), text
        assert _plan_pillars("b") == []


def test_a_benchmark_name_that_is_not_a_folder_name_is_refused_before_anything_is_written(
    tmp_path, monkeypatch
):
    from sparsebench.suite.runner import RunOptions, run

    monkeypatch.chdir(tmp_path)
    for name in ("/tmp/elsewhere", "../../outside", "a b", "123x" * 30):
        (tmp_path / "s.yaml").write_text(f"benchmark: {json.dumps(name)}\n")
        with pytest.raises(RunError, match="benchmark: .* is not allowed"):
            run(RunOptions("s.yaml"), io.StringIO())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]


def test_options_the_run_sets_itself_are_refused_in_snakemake_options(tmp_path):
    from sparsebench.suite.runner import snakemake_command

    spec = tmp_path / "s.yaml"
    for opt in ("--config", "--configfile=x.yaml", "-n", "--dry-run", "-d", "--report"):
        with pytest.raises(RunError, match=f"--snakemake: {opt.split('=')[0]} is set by"):
            snakemake_command(spec, 2, extra=[opt, "x"])
    cmd = snakemake_command(spec, 2, extra=["--keep-going"])
    assert f"spec={spec.resolve()}" in cmd and cmd[-1] == "--keep-going"


def test_the_run_log_is_appended_to_never_truncated(tmp_path):
    import sys

    from sparsebench.suite.runner import _run_snakemake

    log = tmp_path / "logs" / "snakemake.log"
    for word in ("first", "second"):
        assert _run_snakemake([sys.executable, "-c", f"print('{word}')"], log, lambda: None) == 0
    text = log.read_text()
    assert text.index("first") < text.index("second") and text.count("==== sparsebench run") == 2


def test_the_ending_without_any_table_says_so(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text, got = ending("b", ["toy"])
    assert "no runs table yet" in text and got.bad == 0


def test_a_failed_run_explains_itself_from_its_own_part_of_the_log(tmp_path):
    import io

    from sparsebench.suite.runner import _explain_failure

    log = tmp_path / "snakemake.log"
    log.write_text(
        "==== sparsebench run, earlier\nsparsebench: invalid spec: old.yaml: an old error\n"
        "==== sparsebench run, now\nsparsebench: invalid spec: new.yaml: this run's error\n"
    )
    out = io.StringIO()
    _explain_failure(log, out)
    assert out.getvalue() == "sparsebench: invalid spec: new.yaml: this run's error\n"

"""perf.overhead: the run's own work is its cells plus the artefacts it built (not cached ones)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from sparsebench.suite import paths, perf
from sparsebench.suite.record import write_json_atomic


def _record(bench, pillar, cell, cell_s, threads, started):
    write_json_atomic(
        paths.record(bench.name, pillar, cell, root=bench.parent),
        {"cell_s": cell_s, "threads": threads, "started_at": started},
    )


def test_overhead_counts_cells_and_this_runs_artefacts(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path / "artefacts"))
    bench = tmp_path / "bench"
    since = time.time()
    old, new = "2000-01-01T00:00:00+00:00", "2100-01-01T00:00:00+00:00"
    now = datetime.fromtimestamp(since + 10, UTC).isoformat(timespec="seconds")
    _record(bench, "toy", "a", 10.0, 1, new)
    _record(bench, "toy", "b", 5.0, 2, new)
    _record(bench, "toy", "c", 99.0, 1, old)  # an earlier run's cell
    write_json_atomic(
        paths.artefact_build_info("toy", "model/s0"),  # built during the run
        {"pillar": "toy", "build_s": 20.0, "threads": 1, "finished_at": now},
    )
    write_json_atomic(
        paths.artefact_build_info("toy", "model/s1"),  # cached: built by an earlier run
        {"pillar": "toy", "build_s": 500.0, "threads": 1, "finished_at": old},
    )
    write_json_atomic(
        paths.artefact_build_info("other", "model/s0"),  # a pillar this benchmark lacks
        {"pillar": "other", "build_s": 300.0, "threads": 1, "finished_at": now},
    )
    later = datetime.fromtimestamp(since + 100, UTC).isoformat(timespec="seconds")
    write_json_atomic(
        paths.artefact_build_info("toy", "model/s2"),  # built by another run after this one
        {"pillar": "toy", "build_s": 40.0, "threads": 1, "finished_at": later},
    )
    out = perf.overhead(bench, wall_s=30.0, cores=2, since=since)
    assert (out["cells"], out["cell_core_s"]) == (2, 20.0)
    assert (out["artefacts"], out["artefact_core_s"]) == (1, 20.0)
    assert out["ideal_wall_s"] == 20.0 and out["ratio"] == 1.5
    json.dumps(out)  # printable as the make bench line


def test_tables_generates_records_with_fragments_and_reports_every_step(tmp_path, monkeypatch):
    import tests.toy_pillar  # noqa: F401 - registers the toy pillar
    from sparsebench.suite.job import run_batch
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import validate

    toy = get_pillar("toy")
    monkeypatch.setattr(  # with a side table: its files are read and timed too
        type(toy), "side_tables", lambda self: {"sq": lambda r: r.select("source", "square")}
    )
    spec = validate({"benchmark": "b", "toy": {"values": [1, 2, 3]}}, source="t.yaml")
    run_batch(spec, toy, toy.cells(spec), root=tmp_path, progress=lambda m: None)
    out = perf.tables(tmp_path / "b", 40, chunk=7, json_limit=40)
    row = out["pillars"]["toy"]
    assert row["records"] == 40 and row["rows"] == 40  # the 1,000 new come after the count
    for step in ("polars_read_fragments_s", "aggregate_fragments_s", "aggregate_nothing_new_s",
                 "aggregate_1000_new_s", "board_s", "polars_read_json_s",
                 "aggregate_full_json_s"):  # fmt: skip
        assert row[step] >= 0.0, step
    assert out["all_pillars"]["board_s"] == row["board_s"]
    kept = perf.tables(tmp_path / "b", 40, keep=True, chunk=7, json_limit=0)
    import shutil

    shutil.move(kept["folder"], tmp_path / "kept")  # the test's folder, not the system's /tmp
    again = perf.tables(tmp_path / "b", 0, chunk=7, json_limit=0, reuse=tmp_path / "kept")
    # the kept folder holds the 40 records and the 1,000 new (for one pillar: all of them)
    assert again["pillars"]["toy"]["records"] == 1040
    assert again["pillars"]["toy"]["rows"] == 1040


def test_generated_records_are_named_in_the_manifest_before_they_are_written(tmp_path):
    """As a job does: so the manifest lists every record and no aggregation walks the folder."""
    import tests.toy_pillar  # noqa: F401 - registers the toy pillar
    from sparsebench.suite import fragments, tables
    from sparsebench.suite.pillar import get_pillar
    from tests.suite.test_fragments import _run

    real = _run(tmp_path / "real", [1])  # a record the toy's table takes
    template = json.loads(next((real / "runs").rglob("record.json")).read_text())
    folder = tmp_path / "toy"
    perf._generate([template], folder, 0, 7, 3)
    tail = fragments.read(folder)
    assert tail.lists_every_record
    named = [e for e in tail.entries if e.file is None]
    assert [len(e.sources) for e in named] == [3, 3, 1]
    assert {s for e in named for s in e.sources} == {
        p.relative_to(folder).as_posix() for p in paths.find_records(folder)
    }
    perf._generate([template], folder, 7, 2, 3)  # later records, another start
    runs = tables.aggregate(get_pillar("toy"), None, paths.runs_table_in(folder))
    assert runs.height == 9

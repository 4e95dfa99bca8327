"""Columnar fragments (suite/fragments.py) and the aggregation that reads them (suite/tables.py):
the rows a batch's fragment gives are the rows its JSON records give; the aggregation reads
only new manifest lines, falls back to JSON for a missing, altered or untyped fragment, and a
record's last line decides its rows."""

from __future__ import annotations

import json
import os
from pathlib import Path

import polars as pl
import pytest

import tests.toy_pillar  # noqa: F401 - registers the toy pillar
from sparsebench.suite import fragments, paths, tables
from sparsebench.suite.frames import TableError
from sparsebench.suite.job import confirm_deaths, run_batch
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.record import write_json_atomic
from sparsebench.suite.spec import validate

TOY = get_pillar("toy")
BOOKKEEPING = [*tables.STAT_KEY, tables.FRAGMENT]


def _run(tmp_path: Path, values: list[float]) -> Path:
    spec = validate({"benchmark": "b", "toy": {"values": values}}, source="t.yaml")
    run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
    return paths.pillar_dir("b", "toy", tmp_path)


def _content(runs: pl.DataFrame) -> pl.DataFrame:
    return runs.drop([c for c in BOOKKEEPING if c in runs.columns]).sort("cell_id")


@pytest.fixture
def reads(monkeypatch) -> list[str]:
    """The record files the aggregation reads as JSON."""
    seen: list[str] = []
    real = tables.read_records
    monkeypatch.setattr(tables, "read_records", lambda ps: seen.extend(map(str, ps)) or real(ps))
    return seen


def test_a_batch_writes_one_fragment_whose_rows_are_its_records(tmp_path, reads):
    folder = _run(tmp_path, [1, 2, -1])
    tail = fragments.read(folder)
    assert tail is not None and len(tail.entries) == 2
    opening, entry = tail.entries  # the batch's records named first, then their fragment
    assert opening.file is None and sorted(opening.sources) == sorted(entry.sources)
    assert sorted(entry.sources) == ["runs/v-1/record.json", "runs/v1/record.json",
                                     "runs/v2/record.json"]  # fmt: skip
    assert entry.rows == 3 and entry.sha256 == fragments.digest(folder / "fragments" / entry.file)
    reads.clear()
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert reads == [], "every row came from the fragment"
    assert dict(zip(runs["cell_id"], runs["status"])) == {"v1": "ok", "v2": "ok", "v-1": "failed"}
    full = tables.aggregate(TOY, None, folder / "runs.parquet", incremental=False)
    assert len(reads) == 3, "a full aggregation reads every JSON record"
    assert _content(full).equals(_content(runs))
    assert tables.verify(TOY, folder) == {"differ": [], "not_in_fragments": [], "gone": []}


def test_only_new_lines_are_read_and_the_last_line_of_a_record_decides(tmp_path, reads):
    folder = _run(tmp_path, [1, 2])
    out = folder / "runs.parquet"
    tables.aggregate(TOY, None, out)
    spec = validate({"benchmark": "b", "toy": {"values": [2, 3]}}, source="t.yaml")
    read_fragments: list[str] = []
    real = tables._fragment
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tables, "_fragment", lambda r, e: read_fragments.append(e.file) or real(r, e))
        run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
        reads.clear()
        runs = tables.aggregate(TOY, None, out)
    assert reads == [], "no JSON read"
    second = fragments.read(folder).entries[-1].file
    assert read_fragments == [second]
    assert sorted(runs["cell_id"]) == ["v1", "v2", "v3"]
    assert runs.filter(pl.col("cell_id") == "v2")[tables.FRAGMENT].item() == second


def test_a_missing_or_altered_fragment_falls_back_to_its_records(tmp_path, reads):
    folder = _run(tmp_path, [1, 2])
    entry = fragments.read(folder).entries[-1]
    path = folder / "fragments" / entry.file
    path.write_bytes(path.read_bytes()[:-1] + b"x")  # bytes that are not the digest's
    reads.clear()
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert sorted(Path(p).parent.name for p in reads) == ["v1", "v2"]
    assert runs[tables.FRAGMENT].null_count() == 2 and runs.height == 2
    path.unlink()
    reads.clear()
    runs = tables.aggregate(TOY, None, folder / "runs.parquet", incremental=False)
    assert len(reads) == 2 and runs.height == 2


def test_a_record_that_cannot_be_typed_names_its_file_from_the_json(tmp_path):
    folder = _run(tmp_path, [1])
    record = folder / "runs" / "v1" / "record.json"
    data = json.loads(record.read_text())
    write_json_atomic(record, {**data, "threads": "two"})
    entry = fragments.write(TOY, folder, [record], "toy")
    assert entry.file is None and entry.sources == ("runs/v1/record.json",)
    with pytest.raises(TableError, match=r"v1/record.json.*'threads' = 'two'"):
        tables.aggregate(TOY, None, folder / "runs.parquet")


def test_records_without_a_fragment_are_read_when_listed(tmp_path, reads):
    """A batch killed outright leaves records no fragment holds: the spec's list finds them."""
    folder = _run(tmp_path, [1])
    data = json.loads((folder / "runs" / "v1" / "record.json").read_text())
    extra = paths.record_in(folder, "v4")
    write_json_atomic(extra, {**data, "cell_id": "v4", "value": 4.0, "square": 16.0})
    listed = [folder / "runs" / "v1" / "record.json", extra]
    reads.clear()
    runs = tables.aggregate(TOY, listed, folder / "runs.parquet")
    assert [Path(p).parent.name for p in reads] == ["v4"] and runs.height == 2
    assert tables.verify(TOY, folder)["not_in_fragments"] == ["runs/v4/record.json"]
    # a record left out of the list leaves the table
    assert tables.aggregate(TOY, [extra], folder / "runs.parquet")["cell_id"].to_list() == ["v4"]


def test_a_hand_edit_is_seen_by_verify_and_a_full_aggregation(tmp_path):
    folder = _run(tmp_path, [1, 2])
    out = folder / "runs.parquet"
    tables.aggregate(TOY, None, out)
    record = folder / "runs" / "v2" / "record.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "square": 5.0}))
    assert tables.verify(TOY, folder)["differ"] == ["runs/v2/record.json"]
    assert 4.0 in tables.aggregate(TOY, None, out)["square"].to_list(), "fragments trusted"
    full = tables.aggregate(TOY, None, out, incremental=False)
    assert sorted(full["square"].to_list()) == [1.0, 5.0]
    os.remove(record)
    assert tables.verify(TOY, folder)["gone"] == ["runs/v2/record.json"]


def test_confirmed_deaths_get_a_fragment_line(tmp_path):
    folder = _run(tmp_path, [1])
    record = folder / "runs" / "v1" / "record.json"
    data = json.loads(record.read_text())
    from sparsebench.suite.job import DIED, IN_FLIGHT

    write_json_atomic(record, {**data, "status": "failed", "error": IN_FLIGHT, "square": None})
    assert confirm_deaths([record], 0.0) == [record]
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert runs["error"].to_list() == [DIED]
    assert tables.verify(TOY, folder)["differ"] == []


def test_a_duplicate_row_across_old_and_new_rows_is_refused(tmp_path):
    folder = _run(tmp_path, [1])
    out = folder / "runs.parquet"
    tables.aggregate(TOY, None, out)
    data = json.loads((folder / "runs" / "v1" / "record.json").read_text())
    twin = paths.record_in(folder, "w1")
    write_json_atomic(twin, data)  # another record with the same cell id
    fragments.write(TOY, folder, [twin], "toy")
    with pytest.raises(TableError, match="cell_id"):
        tables.aggregate(TOY, None, out)


def test_a_manifest_line_being_written_waits_and_a_torn_line_is_skipped(tmp_path):
    folder = _run(tmp_path, [1])
    manifest = fragments.manifest_of(folder)
    size = manifest.stat().st_size
    with open(manifest, "ab") as f:
        f.write(b'{"file": "x.parquet", "sha')  # no newline yet: a writer mid-line
    tail = fragments.read(folder)
    assert tail.end == size and len(tail.entries) == 2
    # the writer died there: the next line starts on a line of its own, the torn one is skipped
    fragments.append(folder, fragments.Entry(None, None, 0, ("runs/v1/record.json",)))
    entries = fragments.read(folder).entries
    assert len(entries) == 3 and entries[-1].sources == ("runs/v1/record.json",)


def test_a_rerun_killed_outright_shows_its_json_not_the_earlier_rows(tmp_path):
    import subprocess
    import sys

    folder = _run(tmp_path, [1, 2])
    out = folder / "runs.parquet"
    tables.aggregate(TOY, None, out)
    code = (
        "import tests.toy_pillar; from sparsebench.suite.job import run_batch; "
        "from sparsebench.suite.pillar import get_pillar; "
        "from sparsebench.suite.spec import validate; t = get_pillar('toy'); "
        "s = validate({'benchmark': 'b', 'toy': {'values': [1, 99]}}, source='t'); "
        f"run_batch(s, t, t.cells(s), root={str(tmp_path)!r}, progress=lambda m: None)"
    )
    root = Path(__file__).parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True)
    assert done.returncode == 3, done.stderr  # os._exit in the cell of 99: no fragment written
    fresh = json.loads((folder / "runs" / "v1" / "record.json").read_text())["started_at"]
    runs = tables.aggregate(TOY, None, out)
    assert runs.filter(pl.col("cell_id") == "v1")["started_at"].item() == fresh
    assert sorted(runs["cell_id"]) == ["v1", "v2", "v99"]  # v99: its in-flight record


def test_a_folder_named_like_a_pattern_reads_only_its_own_cache(tmp_path):
    a = _run(tmp_path / "run[1]", [1])
    b = _run(tmp_path / "run1", [5, 6])
    for _ in range(2):
        assert tables.aggregate(TOY, None, a / "runs.parquet")["cell_id"].to_list() == ["v1"]
        assert tables.aggregate(TOY, None, b / "runs.parquet").height == 2


def test_a_rewritten_manifest_is_read_again_from_the_folder(tmp_path):
    folder = _run(tmp_path, [1, 2])
    out = folder / "runs.parquet"
    tables.aggregate(TOY, None, out)
    manifest = fragments.manifest_of(folder)
    lines = manifest.read_bytes().splitlines(keepends=True)
    manifest.write_bytes(lines[0])  # shortened: the table must not trust its offset
    spec = validate({"benchmark": "b", "toy": {"values": [3]}}, source="t.yaml")
    run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
    assert sorted(tables.aggregate(TOY, None, out)["cell_id"]) == ["v1", "v2", "v3"]


def test_side_tables_follow_the_runs_table_incrementally(tmp_path, monkeypatch):
    made: list[int] = []

    def squares(rows: pl.DataFrame) -> pl.DataFrame:
        made.append(rows.height)
        return rows.select("source", (pl.col("square") + 1).alias("plus_one"))

    monkeypatch.setattr(type(TOY), "side_tables", lambda self: {"sq": squares})
    folder = _run(tmp_path, [1, 2])
    out = folder / "runs.parquet"
    runs = tables.aggregate(TOY, None, out)
    assert tables.side_table(folder, "sq", runs).equals(squares(runs))
    made.clear()
    spec = validate({"benchmark": "b", "toy": {"values": [2, 3]}}, source="t.yaml")
    run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
    assert made == [2], "the batch makes its rows' side rows, once"
    runs = tables.aggregate(TOY, None, out)
    assert made == [2], "the aggregation reads them from the fragment's side file"
    assert tables.side_table(folder, "sq", runs).equals(squares(runs))
    # a table of other rows does not get this side table
    assert tables.side_table(folder, "sq", runs.head(2)) is None


@pytest.mark.parametrize("damage", ["alter", "remove", "no side files"])
def test_a_side_file_missing_or_altered_is_made_from_the_fragments_rows(
    tmp_path, monkeypatch, damage
):
    made: list[int] = []

    def squares(rows: pl.DataFrame) -> pl.DataFrame:
        made.append(rows.height)
        return rows.select("source", (pl.col("square") + 1).alias("plus_one"))

    if damage != "no side files":  # else: fragments written before the pillar had the side
        monkeypatch.setattr(type(TOY), "side_tables", lambda self: {"sq": squares})
    folder = _run(tmp_path, [1, 2, 3])
    monkeypatch.setattr(type(TOY), "side_tables", lambda self: {"sq": squares})
    (entry,) = [e for e in fragments.read(folder).entries if e.file]
    side = folder / "fragments" / entry.file.replace(".parquet", ".sq.parquet")
    if damage == "alter":
        pl.DataFrame({"source": ["runs/v1/record.json"], "plus_one": [99]}).write_parquet(side)
    elif damage == "remove":
        side.unlink()
    else:
        assert not side.exists() and entry.sides == ()
    made.clear()
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert made == [3], "made again from the fragment's rows"
    got = tables.side_table(folder, "sq", runs)
    assert got.equals(squares(runs)) and sorted(got["plus_one"]) == [2, 5, 10]


def test_a_fragments_side_file_is_listed_with_its_digest(tmp_path, monkeypatch):
    def sq(rows: pl.DataFrame) -> pl.DataFrame:
        return rows.select("source", "square")

    monkeypatch.setattr(type(TOY), "side_tables", lambda self: {"sq": sq})
    folder = _run(tmp_path, [1, 2])
    (entry,) = [e for e in fragments.read(folder).entries if e.file]
    assert entry.side("sq", "another version") is None
    file, sha = entry.side("sq", fragments.side_version(sq))
    assert file == entry.file.replace(".parquet", ".sq.parquet")
    assert sha == fragments.digest(folder / "fragments" / file)
    assert pl.read_parquet(folder / "fragments" / file)["square"].sort().to_list() == [1, 4]


def test_retry_failed_takes_the_removed_records_out_of_the_table(tmp_path, capsys):
    from sparsebench.suite.cli import main

    folder = _run(tmp_path, [1, -1])
    out = folder / "runs.parquet"
    assert tables.aggregate(TOY, None, out).height == 2
    main(["retry-failed", str(folder.parent)])
    assert "removing [failed]" in capsys.readouterr().out
    assert tables.aggregate(TOY, None, out)["cell_id"].to_list() == ["v1"]
    assert tables.verify(TOY, folder) == {"differ": [], "not_in_fragments": [], "gone": []}


def test_verify_names_a_record_edited_into_one_the_table_refuses(tmp_path):
    folder = _run(tmp_path, [1, 2])
    record = folder / "runs" / "v1" / "record.json"
    record.write_text(json.dumps({**json.loads(record.read_text()), "threads": "two"}))
    assert tables.verify(TOY, folder)["differ"] == ["runs/v1/record.json"]


def test_a_manifest_begun_in_an_empty_folder_spares_the_first_aggregation_a_walk(
    tmp_path, monkeypatch
):
    folder = _run(tmp_path, [1, 2])
    first = json.loads(fragments.manifest_of(folder).read_text().splitlines()[0])
    assert first == {"manifest": 1, "lists_every_record": True}

    def walked(_folder):
        raise AssertionError("the folder was walked")

    with monkeypatch.context() as m:
        m.setattr(paths, "find_records", walked)
        runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert sorted(runs["cell_id"]) == ["v1", "v2"]
    # a full aggregation still reads every record found under the folder
    full = tables.aggregate(TOY, None, folder / "runs.parquet", incremental=False)
    assert sorted(full["cell_id"]) == ["v1", "v2"]


def test_records_older_than_the_manifest_are_found_by_a_walk(tmp_path):
    folder = _run(tmp_path, [1])
    import shutil

    shutil.rmtree(folder / "fragments")  # as if v1 was written before fragments existed
    spec = validate({"benchmark": "b", "toy": {"values": [2]}}, source="t.yaml")
    run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
    first = json.loads(fragments.manifest_of(folder).read_text().splitlines()[0])
    assert first["lists_every_record"] is False
    assert sorted(tables.aggregate(TOY, None, folder / "runs.parquet")["cell_id"]) == ["v1", "v2"]


def test_incremental_tables_equal_a_fresh_aggregation_row_for_row(tmp_path):
    """New records land between old ones (v1 < v15 < v2 < v25 < v3): the table kept sorted
    by inserting them equals the one aggregated from scratch, in the same order."""
    from polars.testing import assert_frame_equal

    out = _run(tmp_path, [1, 2, 3]) / "runs.parquet"
    tables.aggregate(TOY, None, out)
    for values in ([1.5, 2.5], [0.5, 2, 9]):  # new ones, and a rerun of v2
        spec = validate({"benchmark": "b", "toy": {"values": values}}, source="t.yaml")
        run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
        incremental = tables.aggregate(TOY, None, out)
        tables.cache_path(out).unlink()
        fresh = tables.aggregate(TOY, None, out)
        assert_frame_equal(incremental, fresh)
        assert incremental["source"].is_sorted()
    assert incremental.height == 7


def test_side_rows_made_by_other_code_are_made_again(tmp_path, monkeypatch):
    """The jobs wrote side files with one side function; the pillar's code changed since: the
    aggregation and the board use the current function's rows, not the files'."""
    monkeypatch.setattr(
        type(TOY),
        "side_tables",
        lambda self: {"sq": lambda r: r.select("source", (pl.col("square") + 1).alias("v"))},
    )
    folder = _run(tmp_path, [1, 2])
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")
    assert sorted(tables.side_table(folder, "sq", runs)["v"]) == [2, 5]

    def changed(rows: pl.DataFrame) -> pl.DataFrame:
        return rows.select("source", (pl.col("square") * 100).alias("v"))

    monkeypatch.setattr(type(TOY), "side_tables", lambda self: {"sq": changed})
    assert tables.side_table(folder, "sq", runs) is None, "the kept table is another code's"
    spec = validate({"benchmark": "b", "toy": {"values": [3]}}, source="t.yaml")
    run_batch(spec, TOY, TOY.cells(spec), root=tmp_path, progress=lambda m: None)
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")  # incremental
    assert sorted(tables.side_table(folder, "sq", runs)["v"]) == [100, 400, 900]
    tables.cache_path(folder / "runs.parquet").unlink()
    runs = tables.aggregate(TOY, None, folder / "runs.parquet")  # from the fragments
    assert sorted(tables.side_table(folder, "sq", runs)["v"]) == [100, 400, 900]


def test_a_side_version_is_the_same_in_every_process():
    """Made by a job and checked by an aggregation: another process must get the same."""
    import subprocess
    import sys

    code = (
        "from sparsebench.suite.fragments import side_version;"
        "from sparsebench.suite.pillars.merging.board import SIDE_TABLES;"
        "print([side_version(f) for f in SIDE_TABLES.values()])"
    )
    runs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        for _ in range(2)
    ]
    assert runs[0].stdout == runs[1].stdout and runs[0].stdout.startswith("['")

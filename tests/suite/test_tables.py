"""Incremental aggregation (suite/tables.py): only new or changed records are read again, also
after Snakemake deleted runs.parquet before rerunning its rule."""

from __future__ import annotations

import os
from pathlib import Path

import tests.toy_pillar  # noqa: F401 - registers the toy pillar
from sparsebench.suite import paths, tables
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.record import write_json_atomic


def _record(i: int, value: float) -> dict:
    return {
        "benchmark": "b", "pillar": "toy", "cell_id": f"v{i}", "label": f"value {i}",
        "method": "square", "params_json": "{}", "setting_id": "default", "seed": None,
        "status": "ok", "error": None, "threads": 1, "parallel_jobs": 1,
        "torch_version": "x", "package_version": "x", "git_sha": "x", "git_dirty": False,
        "spec_hash": "x", "trigger": "t", "started_at": "s", "finished_at": "f",
        "value": float(i), "square": value,
    }  # fmt: skip


def test_only_new_or_changed_records_are_read_again(tmp_path, monkeypatch):
    folder = tmp_path / "toy"
    for i in range(3):
        write_json_atomic(paths.record_in(folder, f"v{i}"), _record(i, float(i * i)))
    out = folder / "runs.parquet"
    pillar = get_pillar("toy")
    assert tables.aggregate(pillar, paths.find_records(folder), out).height == 3

    read: list = []
    real = tables.read_records
    monkeypatch.setattr(tables, "read_records", lambda ps: read.extend(ps) or real(ps))
    out.unlink()  # what Snakemake does to a rule's output before it reruns the rule
    write_json_atomic(paths.record_in(folder, "v3"), _record(3, 9.0))
    runs = tables.aggregate(pillar, paths.find_records(folder), out)
    assert runs.height == 4 and [Path(p).parent.name for p in read] == ["v3"]

    # Same size and mtime, new content: an atomic rewrite changes the inode, which is seen.
    old = paths.record_in(folder, "v1")
    st = old.stat()
    write_json_atomic(old, _record(1, 7.0))  # 7.0 and 1.0 print with the same length
    os.utime(old, ns=(st.st_atime_ns, st.st_mtime_ns))
    read.clear()
    runs = tables.aggregate(pillar, paths.find_records(folder), out)
    assert [Path(p).parent.name for p in read] == ["v1"]
    assert dict(zip(runs["cell_id"], runs["square"]))["v1"] == 7.0

    read.clear()
    again = tables.aggregate(pillar, paths.find_records(folder), out)
    assert read == [] and again.equals(runs) and out.is_file()

    # A record removed from the list leaves the table.
    fewer = [p for p in paths.find_records(folder) if p.parent.name != "v0"]
    assert sorted(tables.aggregate(pillar, fewer, out)["cell_id"]) == ["v1", "v2", "v3"]


def test_reading_tables_and_the_summary_do_not_import_pandera():
    from tests.imports import imported_by

    statement = "from sparsebench.suite import runner, tables"
    assert imported_by(statement, ["pandera", "pandas"]) == []


def test_publishing_a_table_that_is_already_the_cache_leaves_no_temporary_link(tmp_path):
    from sparsebench.suite.tables import _publish

    cache, out = tmp_path / ".runs.cache.parquet", tmp_path / "runs.parquet"
    cache.write_bytes(b"table")
    _publish(cache, out)
    _publish(cache, out)  # the same inode already: renaming onto it would keep the temporary
    assert sorted(p.name for p in tmp_path.iterdir()) == [".runs.cache.parquet", "runs.parquet"]
    assert out.read_bytes() == b"table"


def test_merge_by_source_equals_concatenating_and_sorting():
    import random

    import polars as pl
    from polars.testing import assert_frame_equal

    rng = random.Random(3)
    for _ in range(50):
        names = rng.sample([f"r{i:03d}/record.json" for i in range(60)], rng.randint(0, 40))
        cut = rng.randint(0, len(names))

        def frame(sources: list[str], extra: str, dtype) -> pl.DataFrame:
            rows = [(s, k) for s in sources for k in range(rng.randint(1, 3))]  # rows per record
            rng.shuffle(rows)
            return pl.DataFrame(
                {
                    "source": [s for s, _ in rows],
                    "row": [k for _, k in rows],
                    extra: pl.Series([k * 1.5 for _, k in rows]).cast(dtype),
                }
            ).sort("source", maintain_order=True)

        a = frame(names[:cut], "x", pl.Int64) if rng.random() < 0.9 else None
        b = frame(names[cut:], rng.choice(["x", "y"]), pl.Float64)
        got = tables.merge_by_source(a, b)
        parts = [f for f in (a, b) if f is not None]
        want = pl.concat(parts, how="diagonal_relaxed").sort("source", maintain_order=True)
        assert_frame_equal(got, want)
    unsorted = pl.DataFrame({"source": ["b", "a"], "row": [0, 0]})
    got = tables.merge_by_source(unsorted, pl.DataFrame({"source": ["c"], "row": [1]}))
    assert got["source"].to_list() == ["a", "b", "c"]

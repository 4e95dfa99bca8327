"""benchmarks/records_scale.py: perf tables' numbers as peer-board rows, ratios by hand."""

from __future__ import annotations

from benchmarks.peers.harness import Row
from benchmarks.records_scale import rows_of


def test_rows_hold_ours_and_polars_and_the_goals():
    perf = {
        "records": 10,
        "pillars": {"a": {"board_s": 0.5}, "b": {"board_s": 3.0}},
        "all_pillars": {
            "aggregate_fragments_s": 3.0,
            "polars_read_fragments_s": 2.0,
            "aggregate_full_json_s": 6.0,
            "polars_read_json_s": 8.0,
            "aggregate_1000_new_s": 1.0,
        },  # fmt: skip
    }
    rows = [Row.from_json(r) for r in rows_of(perf)]
    assert [r.ratio_median for r in rows] == [1.5, 0.75, 1.0 / 5.0, 3.0 / 2.0]
    assert rows[3].case.startswith("slowest board: b")
    assert {r.group for r in rows} == {"records"} and all(r.status == "ok" for r in rows)

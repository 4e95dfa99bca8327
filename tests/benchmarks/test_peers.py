"""The peer benchmark (benchmarks/peers, docs/performance.md): its ratios from hand numbers,
the board's row format, and a quick run end to end (tiny sizes, one repeat), whose peers are
"not installed" rows wherever a peer is absent (the main venv has none)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.peers import board
from benchmarks.peers.harness import PEERS, Row, Stats, Timing, ratio, summarize

REPO = Path(__file__).resolve().parents[2]


def test_ratio_and_summary_from_hand_numbers():
    assert ratio(3.0, 2.0) == 1.5
    assert ratio(1.0, 4.0) == 0.25
    assert ratio(None, 1.0) is None and ratio(1.0, None) is None and ratio(1.0, 0.0) is None
    assert summarize([0.3, 0.1, 0.2]) == Stats(0.1, 0.2)
    assert summarize([4.0, 1.0, 2.0, 3.0]) == Stats(1.0, 2.5)
    assert summarize([]) is None


def test_row_ratios_from_given_timings():
    row = Row("merging", "case", "ours", "peer")
    row.set_times(
        Timing([0.30, 0.10, 0.20], [0.6, 0.2, 0.4]), Timing([0.05, 0.20, 0.10], [0.1, 0.4, 0.2])
    )
    assert (row.ours_cpu_min, row.ours_cpu_median) == (0.10, 0.20)
    assert (row.peer_cpu_min, row.peer_cpu_median) == (0.05, 0.10)
    assert row.ratio_median == pytest.approx(2.0)  # 0.20 / 0.10
    assert row.ratio_min == pytest.approx(2.0)  # 0.10 / 0.05
    assert row.ratio_wall == pytest.approx(2.0)  # 0.4 / 0.2
    row.ours_peak_mb, row.peer_peak_mb = 30.0, 120.0
    assert row.ratio_memory == pytest.approx(0.25)
    alone = Row("sae", "case", "ours", "peer", status="not installed")
    alone.set_times(Timing([1.0], [1.0]), None)
    assert alone.ratio_median is None and alone.peer_cpu_median is None


def test_rows_round_trip_and_another_scripts_rows_fill_the_slot():
    row = Row("records", "records at scale", "tables", "polars", ours_cpu_min=2.0,
              ours_cpu_median=3.0, peer_cpu_min=1.0, peer_cpu_median=1.5)  # fmt: skip
    raw = json.loads(json.dumps(row.to_json()))
    assert raw["ratio_median"] == 2.0
    assert Row.from_json(raw) == row
    with pytest.raises(ValueError, match="unknown keys"):
        Row.from_json({**raw, "ours_cpu_medain": 1.0})
    rows = [Row("merging", "m", "o", "p"), *board.PLACEHOLDERS]
    assert [r.group for r in board.with_included(rows, [])] == ["merging", "records"]
    filled = board.with_included(rows, [row])
    assert [r.status for r in filled if r.group == "records"] == ["ok"]
    before = [Row("sae", "c", "o", "p 1", ours_cpu_median=4.0, peer_cpu_median=2.0).to_json()]
    after = Row("sae", "c", "o", "p 2", ours_cpu_median=1.0, peer_cpu_median=2.0)
    line = board.before_after(before, [after]).splitlines()[-1]
    assert line == "| sae | c | p 1 | 4.00 s / 2.00 s | 2.00× | 1.00 s / 2.00 s | 0.50× | 4.00× |"
    assert board.before_after(before).endswith("| 2.00× | – | – | – |")


def test_quick_run_writes_the_board(tmp_path):
    out = tmp_path / "peers"
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "benchmarks.peers", "--quick", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((out / "peers.json").read_text())
    assert {"commit", "date", "machine", "torch", "threads", "peers", "rows"} <= set(result)
    assert result["threads"] == 1 and result["quick"] and result["repeats"] == 1
    rows = [Row.from_json(r) for r in result["rows"]]
    assert {r.group for r in rows} == {"merging", "sae", "sparseprop", "records"}
    assert len([r for r in rows if r.group == "merging"]) == 6  # 3 methods x 2 trunks
    assert len([r for r in rows if r.group == "sae"]) == 8  # 4 cases x 2 peers
    for r in rows:
        if r.group == "records":
            assert r.status.startswith("pending")
            continue
        assert r.ours_cpu_median is not None and r.ours_cpu_median > 0
        dist = r.peer.split(" ")[0]
        if importlib.util.find_spec(PEERS[dist]) is None:
            assert r.status == "not installed" and r.ratio_median is None, r
        else:
            assert r.status == "ok" and r.ratio_median is not None, r
    assert all("FVU" in r.quality for r in rows if r.group == "sae")
    text = (out / "board.md").read_text()
    assert "not installed" in text or all(r.status == "ok" for r in rows if r.group != "records")
    assert (out / "board.csv").read_text().startswith("group,case,ours,peer,status")
    assert (out / "ratios.png").stat().st_size > 1000

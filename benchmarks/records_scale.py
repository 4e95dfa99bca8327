"""Records at scale against polars, as rows of the peer board (``benchmarks/peers``).

Runs ``python -m sparsebench.suite.perf tables`` (or reads its JSON output, ``--from-json``)
and writes its numbers as peer-board rows: the aggregation from the fragments without a cache
against polars' own read of the same fragment files, and the full aggregation from the JSON
records against polars reading the same JSON files (ours ÷ polars: the goal is ≤ 1.5); the
incremental aggregation with 1,000 new records and every board against their goals (5 s and
2 s, the "peer" column holding the goal). One timed run each (a million records take minutes
to generate): the steps are seconds long, so repeats would change little but the run's length.

    python -m benchmarks.records_scale --from results/default --records 1000000 --out R.json
    python -m benchmarks.peers --include R.json      # the peer board with these rows
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

GOALS = {"aggregate_1000_new_s": 5.0, "board_s": 2.0}


def rows_of(perf: dict[str, Any]) -> list[dict[str, Any]]:
    """Peer-board rows (``benchmarks.peers.harness.Row`` fields) from ``perf tables`` output."""
    n = perf["records"]
    total = perf["all_pillars"]
    pillars = perf["pillars"]

    def row(case: str, ours: float | None, peer: str, theirs: float | None, notes: str) -> dict:
        return {
            "group": "records",
            "case": case,
            "ours": "sparsebench.suite.tables",
            "peer": peer,
            "status": "ok" if ours is not None and theirs is not None else "not measured",
            "repeats": 1,
            "ours_cpu_median": ours,
            "ours_wall_median": ours,
            "peer_cpu_median": theirs,
            "peer_wall_median": theirs,
            "notes": notes,
            "extra": {"records": n, "pillars": {p: v for p, v in pillars.items()}},
        }

    scale = f"{n:,} records, {len(pillars)} pillars"
    out = [
        row(
            f"aggregation from the fragments, no cache ({scale})",
            total.get("aggregate_fragments_s"),
            "polars read_parquet of the same fragments",
            total.get("polars_read_fragments_s"),
            "ours also validates every row (pandera) and derives the side tables",
        ),
        row(
            f"full aggregation from the JSON records ({scale})",
            total.get("aggregate_full_json_s"),
            "polars read_json of the same files",
            total.get("polars_read_json_s"),
            "goal: ≤ 1.5× polars",
        ),
    ]
    for key, goal in GOALS.items():
        if key == "board_s":
            worst = max(pillars.items(), key=lambda kv: kv[1].get(key) or 0.0)
            case = f"slowest board: {worst[0]} ({scale})"
            out.append(row(case, worst[1].get(key), f"goal: {goal:g} s", goal,
                           "every board from runs.parquet alone"))  # fmt: skip
        else:
            case = f"incremental aggregation, 1,000 new records ({scale})"
            out.append(row(case, total.get(key), f"goal: {goal:g} s", goal,
                           "summed over the pillars"))  # fmt: skip
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--from", dest="source", help="a results folder whose records are cloned")
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--from-json", help="an earlier `perf tables` output instead of a run")
    ap.add_argument("--out", required=True, help="the rows' JSON (for --include)")
    args = ap.parse_args(argv)
    if args.from_json:
        perf = json.loads(Path(args.from_json).read_text())
    elif args.source:
        cmd = [sys.executable, "-m", "sparsebench.suite.perf", "tables", "--from", args.source,
               "--records", str(args.records)]  # fmt: skip
        perf = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)
    else:
        ap.error("give --from RESULTS or --from-json PERF.json")
    Path(args.out).write_text(json.dumps({"perf": perf, "rows": rows_of(perf)}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

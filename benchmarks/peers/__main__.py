"""Our methods against published peers, in one process at one thread: merging (FusionBench),
SAE training (SAELens, dictionary_learning), sparse training steps (SparseProp). Each
comparison alternates ours and the peer within every repeat on the same inputs and reports min
and median CPU time (and wall-clock), the ratio ours ÷ peer and how the results agree; a peer
that is not installed gives its rows as "not installed".

``make bench-peers`` (installs the peers into .venv-oracles first) or, with any venv,
``python -m benchmarks.peers [--quick] [--out DIR]``. Writes DIR/peers.json (with the commit),
board.md, board.csv and ratios.png; ``--before OLD.json`` adds the before/after table of
docs/performance.md, ``--include OTHER.json`` another script's rows (same row format).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

from . import board
from .harness import PEERS, Row, peer_version, unshadow

GROUPS = ("merging", "sae", "sparseprop")


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, Linux {platform.release()}"


def commit() -> str:
    from sparsebench.suite.record import git_info

    sha, dirty = git_info()
    return sha + ("+dirty" if dirty else "")


def run(groups: tuple[str, ...], repeats: int, quick: bool, memory: bool) -> list[Row]:
    rows: list[Row] = []
    if "merging" in groups:
        from . import merging

        rows += merging.compare(repeats, quick, memory)
    if "sae" in groups:
        from . import sae

        rows += sae.compare(repeats, quick)
    if "sparseprop" in groups:
        from . import sparseprop

        rows += sparseprop.compare(repeats, quick)
    return rows


def read_rows(path: str) -> list[Row]:
    return [Row.from_json(r) for r in json.loads(Path(path).read_text())["rows"]]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/peers")
    ap.add_argument("--quick", action="store_true", help="tiny sizes, one repeat (a smoke run)")
    ap.add_argument("--repeats", type=int, help="timed repeats (default 3; --quick: 1)")
    ap.add_argument("--only", default=",".join(GROUPS), help=f"comma-separated: {GROUPS}")
    ap.add_argument("--no-memory", action="store_true", help="skip the peak-memory processes")
    ap.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="JSON",
        help="rows of another script (its JSON's 'rows', same fields)",
    )
    ap.add_argument("--before", metavar="JSON", help="an earlier peers.json: before/after table")
    args = ap.parse_args(argv)
    groups = tuple(g for g in args.only.split(",") if g)
    if bad := [g for g in groups if g not in GROUPS]:
        ap.error(f"--only: unknown {bad}; allowed: {', '.join(GROUPS)}")
    repeats = args.repeats or (1 if args.quick else 3)
    if repeats < 1:
        ap.error(f"--repeats must be >= 1, got {repeats}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    import torch

    torch.set_num_threads(1)  # both sides alike: one thread
    t0 = time.perf_counter()
    rows = run(groups, repeats, args.quick, memory=not (args.no_memory or args.quick))
    rows = board.with_included(
        rows + list(board.PLACEHOLDERS), [r for path in args.include for r in read_rows(path)]
    )
    result: dict[str, Any] = {
        "commit": commit(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": machine(),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "quick": args.quick,
        "repeats": repeats,
        "peers": {p: peer_version(p) or "not installed" for p in PEERS},
        "seconds": round(time.perf_counter() - t0, 1),
        "rows": [r.to_json() for r in rows],
    }
    from sparsebench.suite.record import write_json_atomic

    write_json_atomic(out / "peers.json", result)
    board.frame(rows).write_csv(out / "board.csv")
    title = f"ours ÷ peer, median CPU time at one thread; commit {result['commit'][:8]}"
    board.plot(rows, out / "ratios.png", title)
    text = [
        f"# Peers at {result['commit']} ({result['date']}, {result['machine']})",
        "",
        board.markdown(rows),
        "",
        "Definitional differences:",
        "",
        board.differences(rows),
    ]
    if args.before:
        before = json.loads(Path(args.before).read_text())
        text += [
            "",
            f"Before ({before['commit']}) and after ({result['commit']}):",
            "",
            board.before_after(before["rows"], rows),
        ]
    (out / "board.md").write_text("\n".join(text) + "\n")
    print("\n".join(text))
    print(f"\n{out}/peers.json, board.md, board.csv, ratios.png ({result['seconds']} s)")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TQDM_DISABLE", "1")  # SAELens' progress bars, read at tqdm's import
    unshadow()
    sys.exit(main())

"""Benchmark scripts of the suite itself (not tests: they time things).

``python -m sparsebench.suite.perf tables --from results/<bench> --records N``
    clones the records of every pillar of a results folder into N generated records with their
    fragments (new seeds, so new cells) in a temporary folder and times, per pillar: the
    aggregation from the fragments against polars' own read of them, an incremental one with
    nothing new and with 1,000 new records, every board from ``runs.parquet`` alone, and (up
    to ``--json-limit`` records) the full aggregation from JSON against polars reading the
    same files.

``python -m sparsebench.suite.perf startup [--cores C]``
    ``sparsebench run`` on a one-cell spec in a new folder (with the warm job server and
    without) and again with nothing to do, against the cell's own time and a job's start-up
    (importing torch and Lightning); a first run on a new data root builds the data caches
    (reported apart) and the later runs share it.

``python -m sparsebench.suite.perf overhead results/<bench> [--wall S --cores C --since T]``
    the ratio of a run's Snakemake wall-clock ``S`` to the core-seconds of its own work (its
    cells, and the artefacts it built: models trained once and cached) divided by the cores
    (1.0: no start-up or scheduling overhead at all).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from sparsebench.suite import paths


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0


def _templates(source: Path) -> dict[str, list[dict]]:
    """Pillar -> its records under ``source`` (a results folder, or one pillar's folder)."""
    folders = paths.pillar_folders(source) or {source.name: source}
    out = {}
    for name, folder in folders.items():
        recs = [json.loads(p.read_text()) for p in paths.find_records(folder)]
        if recs:
            out[name] = recs
    if not out:
        raise SystemExit(f"no records under {source}; run a benchmark first (make bench)")
    return out


def _generate(templates: list[dict], folder: Path, start: int, n: int, chunk: int) -> None:
    """``n`` records cloned from ``templates`` (new cell ids and seeds) under ``folder``, with
    one fragment per ``chunk`` records, as the suite's jobs write them."""
    from sparsebench.suite import fragments
    from sparsebench.suite.pillar import get_pillar

    pillar = get_pillar(templates[0]["pillar"])

    def clone(i: int) -> dict:
        rec = dict(templates[i % len(templates)])
        copy = i // len(templates)
        rec["cell_id"] = f"{rec['cell_id']}/copy{copy}"
        if rec.get("seed") is not None:
            rec["seed"] = rec["seed"] + 1000 * copy
        return rec

    for first in range(start, start + n, chunk):
        recs = [clone(i) for i in range(first, min(first + chunk, start + n))]
        batch = [paths.record_in(folder, rec["cell_id"]) for rec in recs]
        # as a job: the chunk's records named in the manifest before they are written
        names = tuple(p.relative_to(folder).as_posix() for p in batch)
        fragments.append(folder, fragments.Entry(None, None, 0, names))
        for rec, path in zip(recs, batch, strict=True):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(rec, indent=2, sort_keys=True))  # generated: no fsync
        fragments.write(pillar, folder, batch, "perf")


def _time_pillar(
    recs: list[dict], folder: Path, n: int, added: int, chunk: int, json: bool
) -> dict[str, float]:
    """The timings of :func:`tables` for one pillar's generated folder."""
    import polars as pl

    from sparsebench.suite import fragments
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.tables import aggregate, cache_path, write_board

    pillar = get_pillar(recs[0]["pillar"])
    table = paths.runs_table_in(folder)
    # what our aggregation reads: the fragments, and each side table's files
    entries = [e for e in fragments.read(folder).entries if e.file]
    kinds: dict[str, list[Path]] = {"rows": [fragments.folder_of(folder) / e.file for e in entries]}
    for e in entries:
        for name, file, *_ in e.sides:
            kinds.setdefault(name, []).append(fragments.folder_of(folder) / file)
    row: dict[str, float] = {"records": n}
    # a process's first validation imports every method (torch with them): once per process,
    # not a cost of the table's size
    _, row["import_methods_s"] = _timed(pillar.method_names)

    def polars_fragments() -> list[pl.DataFrame]:
        return [
            pl.concat([pl.read_parquet(f, glob=False) for f in files], how="diagonal_relaxed")
            for files in kinds.values()
        ]

    _, row["polars_read_fragments_s"] = _timed(polars_fragments)
    runs, row["aggregate_fragments_s"] = _timed(lambda: aggregate(pillar, None, table))
    row["rows"] = runs.height
    _, row["aggregate_nothing_new_s"] = _timed(lambda: aggregate(pillar, None, table))
    _generate(recs, folder, n, added, chunk)
    _, row["aggregate_1000_new_s"] = _timed(lambda: aggregate(pillar, None, table))
    _, row["board_s"] = _timed(lambda: write_board(pillar, table))
    if json:
        records = paths.find_records(folder)

        def polars_json() -> pl.DataFrame:
            return pl.concat([pl.read_json(p) for p in records], how="diagonal_relaxed")

        _, row["polars_read_json_s"] = _timed(polars_json)
        cache_path(table).unlink()
        _, row["aggregate_full_json_s"] = _timed(
            lambda: aggregate(pillar, records, table, incremental=False)
        )
    return {k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}


def _forget_tables(folder: Path) -> int:
    """Remove what the timings make in a generated pillar folder (tables, side tables, boards)
    and return how many records it holds (the manifest names each one)."""
    from sparsebench.suite import fragments

    for f in folder.iterdir():
        if f.is_file() and (f.suffix in (".parquet", ".csv", ".md", ".json", ".html", ".png")):
            f.unlink()
    return len({s for e in fragments.read(folder).entries for s in e.sources})


def tables(
    source: Path,
    n: int,
    keep: bool = False,
    chunk: int = 100,
    json_limit: int = 100_000,
    reuse: Path | None = None,
) -> dict[str, object]:
    """Generate ``n`` records (shared evenly by the pillars found under ``source``, cloned from
    their records) with their fragments (one per ``chunk`` records, as a job writes them), and
    time, per pillar: the aggregation from the fragments without a cache (and polars' own read
    of the same fragment files), an incremental one with nothing new, one after 1,000 new
    records (shared by the pillars), the board from ``runs.parquet`` alone; and, up to
    ``json_limit`` records, the full aggregation from the JSON records against polars reading
    the same JSON files. With ``reuse``, a folder an earlier call generated (and kept) is timed
    again instead (its records, without its tables). Returns the seconds of each step, per
    pillar and summed."""
    found = _templates(source)
    share = {name: n // len(found) + (i < n % len(found)) for i, name in enumerate(found)}
    added = {name: 1000 // len(found) + (i < 1000 % len(found)) for i, name in enumerate(found)}
    out: dict[str, object] = {"records": n, "pillars": {}}
    t0 = time.perf_counter()
    if reuse is None:
        tmp = Path(tempfile.mkdtemp(prefix="sparsebench-perf-"))
        for name, recs in found.items():
            _generate(recs, tmp / name, 0, share[name], chunk)
        out["generate_s"] = round(time.perf_counter() - t0, 1)
    else:  # a folder generated before (--keep): its tables and boards go, its records stay
        tmp = Path(reuse)
        for name in found:
            share[name] = _forget_tables(tmp / name)
        out["records"] = sum(share.values())
        out["reused"] = str(tmp)
    sums: dict[str, float] = {}
    for name, recs in found.items():
        row = _time_pillar(recs, tmp / name, share[name], added[name], chunk, n <= json_limit)
        out["pillars"][name] = row
        for k, v in row.items():
            if k.endswith("_s"):
                sums[k] = round(sums.get(k, 0.0) + v, 3)
    out["all_pillars"] = sums
    if not keep and reuse is None:
        shutil.rmtree(tmp)
    else:
        out["folder"] = str(tmp)
    return out


def startup(cores: int = 2, keep: bool = False, repeat: int = 3) -> dict[str, float]:
    """Time ``sparsebench run`` on the one-cell spec (``suite/benchmarks/one_cell.yaml``) in a
    new folder, with the warm job server (the default) and without it (``--no-warm``, as plain
    ``snakemake``), then again with nothing to do: the wall-clock of each against the cell's own
    seconds. Its reference: ``python -c 'import torch, lightning.pytorch'``, the start-up every
    job pays on its own.

    The first run, on a new data root, builds what the spec's data caches (once per data root,
    shared by every later run, as the trained models are) and is reported apart; the runs after
    it share that data root, so they measure what every run after the first pays.

    Each measurement after the first is repeated ``repeat`` times, in turn, and reported as its
    median with its range: one sample of a few seconds on a shared machine moves by a second."""
    import subprocess

    import yaml

    from sparsebench.suite.spec import BENCHMARKS_DIR

    tmp = Path(tempfile.mkdtemp(prefix="sparsebench-startup-"))
    spec = yaml.safe_load((BENCHMARKS_DIR / "one_cell.yaml").read_text())

    def timed(cmd: list[str], folder: Path) -> float:
        t0 = time.perf_counter()
        subprocess.run(cmd, cwd=folder, check=True, capture_output=True)
        return time.perf_counter() - t0

    def run(folder: Path, data_root: Path, *extra: str) -> float:
        folder.mkdir(exist_ok=True)
        (folder / "one.yaml").write_text(yaml.safe_dump({**spec, "data_root": str(data_root)}))
        cmd = [sys.executable, "-m", "sparsebench.suite.cli", "run", "one.yaml"]
        return timed([*cmd, "--cores", str(cores), *extra], folder)

    data = tmp / "data"
    new_data = run(tmp / "new_data", data)  # builds the data caches under tmp/data
    samples: dict[str, list[float]] = {"imports": [], "cold": [], "first": [], "again": []}
    cells: list[float] = []
    for i in range(repeat):
        samples["imports"].append(
            timed([sys.executable, "-c", "import torch, lightning.pytorch"], tmp)
        )
        samples["cold"].append(run(tmp / f"cold{i}", data, "--no-warm"))
        samples["first"].append(run(tmp / f"warm{i}", data))
        samples["again"].append(run(tmp / f"warm{i}", data))
        record = next((tmp / f"warm{i}" / "results" / spec["benchmark"]).rglob("record.json"))
        cells.append(json.loads(record.read_text())["cell_s"])
    med = {k: statistics.median(v) for k, v in samples.items()}
    cell_s = statistics.median(cells)
    out = {
        "repeat": repeat,
        "one_cell_wall_s": round(med["first"], 2),
        "one_cell_wall_range_s": [round(min(samples["first"]), 2), round(max(samples["first"]), 2)],
        "one_cell_no_warm_wall_s": round(med["cold"], 2),
        "one_cell_new_data_root_wall_s": round(new_data, 2),
        "cell_s": round(cell_s, 3),
        "job_startup_s": round(med["imports"], 2),
        "job_startup_range_s": [
            round(min(samples["imports"]), 2),
            round(max(samples["imports"]), 2),
        ],
        "one_cell_goal_s": round(3 * cell_s + med["imports"], 2),
        "noop_rerun_s": round(med["again"], 2),
        "noop_goal_s": 10.0,
    }
    if keep:
        out["folder"] = str(tmp)
    else:
        shutil.rmtree(tmp)
    return out


def overhead(bench: Path, wall_s: float, cores: int, since: float = 0.0) -> dict[str, float]:
    """Snakemake wall-clock against the run's own work in core-seconds / cores: every pillar's
    records that started at or after ``since`` (Unix seconds: the run's own cells) and the
    artefacts of the benchmark's pillars (``build.json`` under the artefact root, which every
    benchmark shares) that finished between ``since`` and ``since + wall_s`` (the models this
    run trained; a cached artefact, or one another run built meanwhile, is not this run's
    work). Without ``since`` every record and artefact of those pillars counts."""
    from datetime import datetime

    def after(stamp: str | None) -> bool:
        return not stamp or datetime.fromisoformat(stamp).timestamp() >= since - 1

    def during(stamp: str) -> bool:
        t = datetime.fromisoformat(stamp).timestamp()
        return since - 1 <= t <= (since + wall_s + 1 if since else float("inf"))

    cell_core_s = 0.0
    cells = 0
    folders = paths.pillar_folders(bench)
    for folder in folders.values():
        for p in paths.find_records(folder):
            rec = json.loads(p.read_text())
            if after(rec.get("started_at")) and rec.get("cell_s") is not None:
                cell_core_s += rec["cell_s"] * (rec.get("threads") or 1)
                cells += 1
    artefact_core_s = 0.0
    artefacts = 0
    for p in paths.find_artefact_build_infos():
        info = json.loads(p.read_text())
        if (
            info.get("pillar") in folders
            and info.get("finished_at")
            and during(info["finished_at"])
        ):
            artefact_core_s += info["build_s"] * (info.get("threads") or 1)
            artefacts += 1
    ideal = (cell_core_s + artefact_core_s) / cores
    return {
        "cells": cells,
        "cell_core_s": round(cell_core_s, 1),
        "artefacts": artefacts,
        "artefact_core_s": round(artefact_core_s, 1),
        "ideal_wall_s": round(ideal, 1),
        "wall_s": round(wall_s, 1),
        "ratio": round(wall_s / ideal, 3) if ideal else float("nan"),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m sparsebench.suite.perf", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables", help="time aggregation and boards on generated records")
    t.add_argument(
        "--from", dest="source", required=True, help="a results folder (or a pillar folder)"
    )
    t.add_argument("--records", type=int, default=100_000, help="records in all (default 100,000)")
    t.add_argument("--chunk", type=int, default=100, help="records per fragment (default 100)")
    t.add_argument(
        "--json-limit",
        type=int,
        default=100_000,
        help="time the full aggregation from JSON only up to this many records",
    )
    t.add_argument("--keep", action="store_true", help="keep the generated folder")
    t.add_argument("--reuse", help="time a folder kept by an earlier --keep run again")
    st = sub.add_parser("startup", help="a one-cell run and a no-op rerun vs the cell's time")
    st.add_argument("--cores", type=int, default=2)
    st.add_argument("--keep", action="store_true", help="keep the run's folder")
    st.add_argument("--repeat", type=int, default=3, help="samples per measurement (median)")
    o = sub.add_parser("overhead", help="wall-clock vs the cells' own time")
    o.add_argument("bench_dir")
    o.add_argument(
        "--wall",
        type=float,
        help="seconds the snakemake run took (default: the last `sparsebench run`'s, from "
        "results/<bench>/logs/run.json, with its cores and start)",
    )
    o.add_argument("--cores", type=int)
    o.add_argument("--since", type=float, default=0.0, help="Unix time the run started")
    args = p.parse_args(argv)
    if args.cmd == "tables":
        result = tables(
            Path(args.source), args.records, args.keep, args.chunk, args.json_limit,
            Path(args.reuse) if args.reuse else None,
        )  # fmt: skip
    elif args.cmd == "startup":
        if args.repeat < 1:
            p.error(f"--repeat {args.repeat}: give 1 or more samples")
        result = startup(args.cores, args.keep, args.repeat)
    else:
        wall, cores, since = args.wall, args.cores, args.since
        if wall is None:
            last = Path(args.bench_dir) / "logs" / "run.json"
            try:
                run = json.loads(last.read_text())
            except (OSError, ValueError):
                p.error(f"give --wall and --cores: {last} (written by `sparsebench run`) is "
                        "missing or unreadable")  # fmt: skip
            wall, cores, since = run["wall_s"], cores or run["cores"], run["started"]
        if cores is None:
            p.error("give --cores")
        result = overhead(Path(args.bench_dir), wall, cores, since)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

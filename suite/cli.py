"""The ``sparsebench`` command line.

sparsebench run SPEC [--cores N] [--report] [--strict] [-n]   # a benchmark, start to answer
sparsebench validate SPEC                  # check a spec, list its cells
sparsebench leaderboard results/<bench>    # records -> every board + summary.md, no job rerun
sparsebench claims results/<bench> [FILE ...]   # judge claim files -> claims.{md,json,tex}
sparsebench claims --check FILE [FILE ...]      # validate claim files, no results needed
sparsebench curves results/<bench> --pillar P --cells GLOB   # learning curves of cells
sparsebench retry-failed results/<bench>   # forget failed cells so the next run reruns them
sparsebench pillars                        # registered pillars, their spec keys and metrics
sparsebench methods                        # registered methods, parameters, defaults, sources
sparsebench aggregate results/<bench>      # records -> validated runs.parquet, every pillar
sparsebench board results/<bench> --pillar P   # runs.parquet -> one pillar's board
sparsebench summary results/<bench>        # every pillar's tables -> summary.md
sparsebench cells PILLAR --cell ID [--cell ID ...]   # cells in this process (the workflow's jobs)
sparsebench build PILLAR --artefact ID     # build artefacts (models cells read)

Pillars may add their own commands (``Pillar.add_commands``); `sparsebench -h` lists them.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
from pathlib import Path


def _cmd_run(args: argparse.Namespace) -> int:
    import shlex

    from sparsebench.suite.runner import RunOptions, run

    try:
        extra = tuple(shlex.split(args.snakemake))
    except ValueError as e:
        raise SystemExit(f"sparsebench run: --snakemake {args.snakemake!r}: {e}") from None
    opts = RunOptions(
        args.spec, args.cores, args.report, args.strict, args.dry_run, extra, not args.no_warm
    )
    return run(opts)


def _cmd_curves(args: argparse.Namespace) -> int:
    from sparsebench.suite.curves import find_curves, plot_curves

    curves = find_curves(Path(args.bench_dir), args.pillar, args.cells)
    out = Path(args.out or Path(args.bench_dir) / (args.pillar or "") / "curves.png")
    plot_curves(curves, args.metric, out)
    print(f"{out}: {args.metric} of {len(curves)} cell(s)")
    return 0


def _cmd_cells(args: argparse.Namespace) -> int:
    from sparsebench.suite.job import run_batch
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import load

    if not args.spec:
        raise SystemExit("sparsebench cells: give --spec FILE (or set SPARSEBENCH_SPEC)")
    pillar = get_pillar(args.pillar)
    spec = load(args.spec)
    if pillar.name not in spec.pillars:
        raise SystemExit(
            f"{args.spec} has no {pillar.name} section ({', '.join(pillar.spec_keys)})"
        )
    cells = {c.id: c for c in pillar.cells(spec)}
    wanted = list(cells) if args.all else list(dict.fromkeys(args.cell))  # each once
    if not wanted:
        raise SystemExit("sparsebench cells: give --cell ID (one or more) or --all")
    unknown = [c for c in wanted if c not in cells]
    if unknown:
        from sparsebench.suite.catalog import did_you_mean

        some = ", ".join(list(cells)[:5])
        raise SystemExit(
            f"no {pillar.name} cell {unknown[0]!r} in {args.spec}"
            f"{did_you_mean(unknown[0], cells)}; its {len(cells)} cells are e.g. {some} "
            f"(`sparsebench validate {args.spec}` lists them)"
        )
    missing = sorted({i for c in wanted for i in cells[c].inputs if not Path(i).is_file()})
    if missing:  # no failed records: they would count as done and block the artefacts' rules
        raise SystemExit(
            f"sparsebench cells: {len(missing)} input(s) of these cells do not exist yet, e.g. "
            f"{missing[0]}; build them first: sparsebench run {args.spec} (it makes them), or "
            f"`sparsebench build {pillar.name} --artefact ID --spec "
            f"{args.spec}`"
        )
    run_batch(
        spec, pillar, [cells[c] for c in wanted], args.parallel_jobs, args.root,
        threads=args.threads,
    )  # fmt: skip
    return 0


def _cmd_build(args: argparse.Namespace) -> int:
    from sparsebench.suite.job import build_artefact
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import load

    if not args.spec:
        raise SystemExit("sparsebench build: give --spec FILE (or set SPARSEBENCH_SPEC)")
    pillar = get_pillar(args.pillar)
    spec = load(args.spec)
    arts = {a.id: a for a in pillar.artefacts(spec)} if pillar.name in spec.pillars else {}
    unknown = [a for a in args.artefact if a not in arts]
    if unknown:
        from sparsebench.suite.catalog import did_you_mean

        some = ", ".join(list(arts)[:5]) or "none"
        raise SystemExit(
            f"no {pillar.name} artefact {unknown[0]!r} in {args.spec}"
            f"{did_you_mean(unknown[0], arts)}; its artefacts are e.g. {some}"
        )
    for i, artefact_id in enumerate(args.artefact, 1):
        print(f"[{i}/{len(args.artefact)}]", end=" ", flush=True)
        build_artefact(spec, pillar, arts[artefact_id], args.threads)
    return 0


def _verify(pillar: str, folder: Path) -> None:
    """``--verify``: the fragments against the JSON records; exits non-zero naming the
    records where they disagree."""
    from sparsebench.suite import tables

    found = tables.verify(pillar, folder)
    bad = {k: v for k, v in found.items() if v}
    if not bad:
        print(f"{folder}: the fragments and the JSON records agree")
        return
    lines = [f"{folder}: the fragments and the JSON records do not agree:"]
    what = {
        "differ": "rows differ from the record",
        "not_in_fragments": "record in no fragment",
        "gone": "fragment row of a record that is gone",
    }
    for key, sources in bad.items():
        lines.append(f"  {len(sources)} {what[key]}, e.g. {', '.join(sources[:3])}")
    lines.append("  `sparsebench aggregate --full` rebuilds the table from the JSON records")
    raise SystemExit("\n".join(lines))


def _cmd_aggregate(args: argparse.Namespace) -> int:
    from sparsebench.suite import fragments, paths, tables
    from sparsebench.suite.pillar import all_pillars

    bench = Path(args.bench_dir)
    folders = {n: f for n, f in paths.pillar_folders(bench).items() if n in all_pillars()}
    if args.pillar:
        folders = {args.pillar: bench / args.pillar}
    if not folders:
        _no_records(bench)
    for name, folder in folders.items():
        if args.spec:  # exactly the spec's records (what the Snakemake rule aggregates)
            from sparsebench.suite.pillar import get_pillar
            from sparsebench.suite.spec import load

            cells = get_pillar(name).cells(load(args.spec))
            records = [paths.record_in(folder, c.id) for c in cells]
        elif args.full or not fragments.manifest_of(folder).is_file():
            records = paths.find_records(folder)
        else:
            records = None  # the ones the manifest lists (no walk over the folder)
        table = paths.runs_table_in(folder)
        if args.verify:
            _verify(name, folder)
        runs = tables.aggregate(name, records, table, incremental=not args.full)
        n = runs.get_column("source").n_unique() if records is None else len(records)
        print(f"wrote {table} ({runs.height} rows from {n} records)")
        if args.board:
            files = tables.write_board(name, table)
            print("\n".join(dict.fromkeys(str(f) for f in files.values())))
    if args.summary:
        print(tables.write_summary(bench))
    return 0


def _cmd_board(args: argparse.Namespace) -> int:
    from sparsebench.suite import paths, tables

    folder = Path(args.bench_dir) / args.pillar
    files = tables.write_board(args.pillar, paths.runs_table_in(folder))
    print("\n".join(dict.fromkeys(str(f) for f in files.values())))
    return 0


def paths_of(bench: Path) -> list[Path]:
    """Pillar folders of a results folder that hold a runs table."""
    from sparsebench.suite import paths

    return [f for f in paths.pillar_folders(bench).values() if paths.runs_table_in(f).is_file()]


def _cmd_summary(args: argparse.Namespace) -> int:
    from sparsebench.suite import tables

    if not any(paths_of(Path(args.bench_dir))):
        _no_records(Path(args.bench_dir))
    print(tables.write_summary(Path(args.bench_dir), top=args.top))
    return 0


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from sparsebench.suite import paths, tables

    bench = Path(args.bench_dir)
    tables.rebuild(bench, incremental=not args.full)
    summary = paths.summary_in(bench)
    print("\n".join(ln for ln in summary.read_text().splitlines() if ln != "```"))
    for folder in paths_of(bench):
        print(f"board   {folder.name}: {folder / 'leaderboard.md'} (also .csv, .json, plots)")
    print(f"summary: {summary}")
    return 0


def _no_records(bench: Path) -> None:
    """Raise the error for a results folder without any record of any pillar."""
    from sparsebench.suite.frames import TableError
    from sparsebench.suite.pillar import all_pillars

    state = "" if bench.is_dir() else " (the folder does not exist)"
    raise TableError(
        f"no records found under {bench}{state}: searched <pillar>/runs/**/record.json for "
        f"the pillars {', '.join(all_pillars())}. Run the benchmark first "
        "(`sparsebench run SPEC`)."
    )


def _cmd_retry_failed(args: argparse.Namespace) -> int:
    from sparsebench.suite import paths
    from sparsebench.suite.pillar import all_pillars

    bench = Path(args.bench_dir)
    folders = {n: f for n, f in paths.pillar_folders(bench).items() if n in all_pillars()}
    records = [p for f in folders.values() for p in paths.find_records(f)]
    if not records:
        _no_records(bench)
    failed = [(p, st) for p in records if (st := _record_status(p)) != "ok"]
    if not failed:
        print(f"no failed, diverged or unreadable records under {bench}")
        return 0
    for path, status in failed:
        print(f"{'would remove' if args.dry_run else 'removing'} [{status}] {path}")
        if not args.dry_run:
            path.unlink()
    if not args.dry_run:  # a manifest line without a file: their rows leave the tables
        from sparsebench.suite import fragments

        for folder in folders.values():
            gone = [p for p, _ in failed if p.is_relative_to(folder)]
            if gone and fragments.manifest_of(folder).is_file():
                sources = tuple(p.relative_to(folder).as_posix() for p in gone)
                fragments.append(folder, fragments.Entry(None, None, 0, sources))
    if not args.dry_run:
        print("now run the same snakemake command again: only these cells rerun")
    return 0


def _record_status(path: Path) -> str:
    """The record's ``status`` (``ok``, ``failed``, ``diverged``), or ``unreadable``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return "unreadable"
    return data.get("status") or "unreadable" if isinstance(data, dict) else "unreadable"


def _cmd_claims(args: argparse.Namespace) -> int:
    from sparsebench.suite import claims, paths

    if args.check:
        found = {f: claims.load_file(f) for f in args.check}
        claims.load_files(args.check)  # ids and macro names unique across the files
        for f, got in found.items():  # only once every check has passed
            print(f"{f}: {len(got)} claim(s) valid: {', '.join(c.id for c in got)}")
        return 0
    if not args.bench_dir:
        raise SystemExit("sparsebench claims: give results/<bench> (or --check FILE)")
    files = args.files
    if not files and args.spec:
        from sparsebench.suite.spec import load

        files = load(args.spec).claim_files()
    if not files:
        files = sorted(map(str, claims.BUILTIN.glob("*.yaml")))
    bench = Path(args.bench_dir)
    if not bench.is_dir():
        _no_records(bench)
    from sparsebench.suite.pillar import all_pillars
    from sparsebench.suite.workflow import parquet_intact

    pillars = all_pillars()
    if not any(parquet_intact(paths.runs_table_in(bench / p)) for p in pillars):
        # verdicts over no table at all would only say "not run"
        from sparsebench.suite.frames import TableError

        raise TableError(
            f"no readable runs table under {bench} (<pillar>/runs.parquet for the pillars "
            f"{', '.join(pillars)}) to judge claims on: run the "
            f"benchmark first (`sparsebench run SPEC`), or `sparsebench aggregate {bench}` if "
            "it has records"
        )
    if args.looks < 1:
        raise SystemExit(f"sparsebench claims --looks: {args.looks} is not allowed; 1 or more")
    loaded = claims.load_files(files)
    if args.extend_seeds is not None:
        return _extend_seeds(args, bench, loaded)
    if args.looks != 1:
        from sparsebench.suite.claims.extend import looks_level

        for c in loaded:  # the pages show each verdict's level
            c.test["level"] = looks_level(c.test["level"], args.looks)
    verdicts = claims.judge_all(loaded, bench)
    out = claims.write(verdicts, bench)
    for v in verdicts:
        print(f"{v.verdict:>12}  {v.claim.id}: {v.reason}")
    print(claims.badge(verdicts))
    print("wrote " + ", ".join(str(p) for p in out.values()))
    return 0


def _extend_seeds(args: argparse.Namespace, bench: Path, loaded: list) -> int:
    from sparsebench.suite.claims.extend import extend_seeds

    if not args.spec:
        raise SystemExit("sparsebench claims --extend-seeds: give --spec, the spec of the run")
    from sparsebench.suite import paths
    from sparsebench.suite.spec import load

    home = paths.bench_dir(load(args.spec).benchmark)
    if bench.resolve() != home.resolve():  # the workflow writes to results/<benchmark>
        raise SystemExit(
            f"sparsebench claims --extend-seeds: {bench} is not {home}, where the spec "
            f"{args.spec} writes its records; the new seeds would land there and this folder "
            "would be judged again without them"
        )
    looks = args.looks + 1  # this extension is one more look
    out = bench / "extend-seeds.yaml"
    ext = extend_seeds(args.spec, bench, loaded, args.extend_seeds, out)
    for why in ext.skipped:
        print(f"  not extended: {why}")
    listing = bench / "extend-seeds.targets"
    if not ext.targets:
        listing.unlink(missing_ok=True)  # an earlier list would run again by mistake
        if ext.claims:  # the new seeds' records are there already
            print(f"the records of seeds {ext.seeds} are all there: judge with --looks {looks}")
        else:
            print("no undecided claim says how many seeds it needs: nothing to extend")
        return 0
    for v in ext.claims:
        print(f"  {v.claim.id}: about {v.seeds_needed} seeds per cell would decide it")
    listing.write_text("".join(f"{t}\n" for t in ext.targets))
    new = "; ".join(f"{p} seeds {s[0]}-{s[-1]}" for p, s in ext.seeds.items())
    print(
        f"wrote {out} ({new}) and {listing} ({len(ext.targets)} records). Run them, then "
        f"judge once more, at {looks} looks:"
    )
    # the targets before --config, which would take them as more KEY=VALUE items
    print(f"  snakemake --cores 2 $(cat {listing}) --config spec={out}")
    import shlex

    # the same claim files as this command (given ones, or the spec's own list)
    named = " ".join(shlex.quote(str(f)) for f in (args.files or []))
    print(
        f"  sparsebench aggregate {bench} && sparsebench claims {bench} "
        f"{named + ' ' if named else ''}--spec {args.spec} --looks {looks}"
    )
    return 0


def _cmd_pillars(args: argparse.Namespace) -> int:
    from sparsebench.suite.pillar import all_pillars
    from sparsebench.suite.record import COMMON_COLUMNS

    for name, p in all_pillars().items():
        print(f"{name}: {p.title}")
        print(f"  spec keys: {', '.join(p.spec_keys)}")
        print(f"  method families: {', '.join(p.families)}")
        for m in p.metrics:
            better = "higher" if m.higher_is_better else "lower"
            print(f"  metric {m.name} [{m.unit or 'count'}, {better} is better]: {m.description}")
        print(f"  columns: {', '.join(sorted(p.columns))}")
    print(f"common columns of every pillar: {', '.join(COMMON_COLUMNS)}")
    return 0


def _cmd_methods(args: argparse.Namespace) -> int:
    from sparsebench.suite.pillar import families_of

    families = set(families_of(args.pillar)) if args.pillar else None
    from sparsebench.suite import registry

    for info in registry.all_methods().values():
        if families and info.family not in families:
            continue
        print(f"{info.name}  [{info.family}]")
        if info.source:
            print(f"    source: {info.source}")
        hints = typing.get_type_hints(info.params_cls)
        for f in dataclasses.fields(info.params_cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            print(f"    {f.name}: {registry.describe_type(hints[f.name])} = {default!r}")
        if not dataclasses.fields(info.params_cls):
            print("    (no parameters)")
    return 0


def _cmd_validate(args: argparse.Namespace) -> int:
    from sparsebench.suite import paths
    from sparsebench.suite.runner import resolve_spec
    from sparsebench.suite.spec import load

    spec = load(resolve_spec(args.spec))
    cells = spec.cells()
    per = ", ".join(f"{p}: {sum(c.pillar == p for c in cells)}" for p in spec.pillars)
    print(f"{args.spec}: valid; benchmark {spec.benchmark!r}, {len(cells)} cells ({per})")
    for c in cells[: args.show]:
        print(f"  {paths.record(spec.benchmark, c.pillar, c.id)}  ({c.label})")
    if len(cells) > args.show:
        print(f"  ... and {len(cells) - args.show} more (--show N)")
    gpu_cells = [c for c in cells if c.gpus]
    if gpu_cells:
        from sparsebench.suite.gpus import local_problem

        why = local_problem()
        where = f"{why}: a local run is refused at its start" if why else "this machine has one"
        print(
            f"note: {len(gpu_cells)} cell(s) need a GPU; {where} (under SLURM the cluster's "
            "partitions are asked when the run starts)"
        )
    return 0


def count(text: str, low: int = 1, high: int = 1024) -> int:
    """An argparse type: a whole number from ``low`` to ``high`` (threads, jobs, rows)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if not low <= value <= high:
        raise argparse.ArgumentTypeError(f"{value} is outside {low} to {high}")
    return value


def listed(text: str) -> int:
    """An argparse type: how many lines to list, 0 or more."""
    return count(text, 0, 10**9)


def _embedded() -> list[str]:
    from sparsebench.suite.spec import BENCHMARKS_DIR

    return sorted(p.stem for p in BENCHMARKS_DIR.glob("*.yaml"))


BENCH_DIR_HELP = "a benchmark's results folder, results/<bench>"


def build_parser() -> argparse.ArgumentParser:
    from sparsebench import __version__

    p = argparse.ArgumentParser(
        prog="sparsebench",
        description="sparsebench: benchmarks of sparse neural networks, their boards and the "
        "claims of papers judged against them. `sparsebench run SPEC` runs a benchmark; the "
        "other commands check specs, list what is registered, rebuild boards and judge claims "
        "from the records. `sparsebench COMMAND -h` describes each.",
    )
    # every subcommand's page opens with a description: its one-line help unless it has more
    p.add_argument("--version", action="version", version=f"sparsebench {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    add_parser = sub.add_parser

    def described(name: str, **kw: object) -> argparse.ArgumentParser:
        kw.setdefault("description", f"{str(kw.get('help', '')).capitalize()}.")
        return add_parser(name, **kw)  # type: ignore[arg-type]

    sub.add_parser = described  # type: ignore[method-assign]

    r = sub.add_parser(
        "run",
        help="run a benchmark spec end to end: jobs, boards, summary, claims (and report)",
        description="Run a benchmark spec through Snakemake: every missing artefact and cell, "
        "then the boards, summary.md and the claims. One line per finished cell (status, "
        "headline metric, time, ETA); the end names the boards and the report and counts the "
        "failed and diverged cells. A rerun does only what is missing or changed. Snakemake's "
        "own output goes to results/<bench>/logs/snakemake.log.",
    )
    r.add_argument(
        "spec",
        help=f"a spec file, or an embedded benchmark's name ({', '.join(_embedded())})",
    )
    r.add_argument(
        "--cores",
        type=count,
        default=os.cpu_count() or 1,
        help="CPU cores the jobs may use together (default: all of this machine's)",
    )
    r.add_argument(
        "--report",
        action="store_true",
        help="then write results/<bench>/report.html (Snakemake's report: front page, "
        "boards, plots, claims)",
    )
    r.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 when a cell failed or diverged (for CI; default: exit 0, counted)",
    )
    r.add_argument(
        "-n",
        "--dry-run",
        action="store_true",
        help="say what would run (cells, artefacts, earlier times); write nothing",
    )
    r.add_argument(
        "--snakemake",
        default="",
        metavar="OPTIONS",
        help="more Snakemake options, quoted as one argument (e.g. --snakemake "
        "'--profile profiles/slurm'; one option alone needs '=': --snakemake=--unlock)",
    )
    r.add_argument(
        "--no-warm",
        action="store_true",
        help="each job imports torch and Lightning itself (as under plain snakemake) instead "
        "of forking from one interpreter that imported them once for the run",
    )
    r.set_defaults(func=_cmd_run)

    ce = sub.add_parser(
        "cells",
        help="run cells of one pillar in this process, one record each (the workflow's jobs)",
        description="Run cells of one pillar of a spec in this process, writing one record "
        "each. The workflow's jobs call this; `sparsebench run SPEC` is the command for a whole "
        "benchmark.",
    )
    ce.add_argument("pillar", help="a registered pillar (`sparsebench pillars`)")
    ce.add_argument("--cell", action="append", default=[], help="cell id (repeatable)")
    ce.add_argument("--all", action="store_true", help="every cell of the pillar in the spec")
    ce.add_argument(
        "--spec",
        default=os.environ.get("SPARSEBENCH_SPEC"),
        help="benchmark spec (YAML); default $SPARSEBENCH_SPEC",
    )
    ce.add_argument("--root", default="results", help="results folder (default: results)")
    ce.add_argument(
        "--parallel-jobs",
        type=count,
        default=os.environ.get("SPARSEBENCH_PARALLEL_JOBS", "1"),  # a string: checked by type
        help="jobs running at once, recorded with the wall-clock figures (default "
        "$SPARSEBENCH_PARALLEL_JOBS or 1)",
    )
    ce.add_argument(
        "--threads",
        type=count,
        help="torch threads, overriding the spec's (the Snakefile passes Snakemake's threads)",
    )
    ce.set_defaults(func=_cmd_cells)

    cu = sub.add_parser(
        "curves",
        help="plot the learning curves of chosen cells (metrics.csv beside their records)",
        description="Plot a logged metric against the epoch for every cell of a pillar whose "
        "id matches a glob (cells that train with Lightning keep metrics.csv beside their "
        "record).",
    )
    cu.add_argument("bench_dir", help=BENCH_DIR_HELP)
    cu.add_argument("--pillar", help="only this pillar's cells (default: every pillar's)")
    cu.add_argument(
        "--cells",
        default="*",
        help="glob over cell ids, e.g. '<task>/<method>/*' (default: every cell)",
    )
    cu.add_argument("--metric", default="val_acc", help="a logged column (default: val_acc)")
    cu.add_argument(
        "--out", help="the PNG (default: curves.png in the pillar's folder, or the results folder)"
    )
    cu.set_defaults(func=_cmd_curves)

    bd = sub.add_parser("build", help="build artefacts of a pillar (models that cells read)")
    bd.add_argument("pillar", help="a registered pillar (`sparsebench pillars`)")
    bd.add_argument(
        "--artefact",
        action="append",
        required=True,
        help="artefact id: its folder under results/artefacts/<pillar>/ (e.g. "
        "mlp-025bec1d/seed0/base); repeatable; a wrong id lists the spec's",
    )
    bd.add_argument("--spec", default=os.environ.get("SPARSEBENCH_SPEC"), help="the spec (YAML)")
    bd.add_argument("--threads", type=count, default=None, help="torch threads")
    bd.set_defaults(func=_cmd_build)

    pl_ = sub.add_parser("pillars", help="list registered pillars, spec keys and metrics")
    pl_.set_defaults(func=_cmd_pillars)

    a = sub.add_parser("aggregate", help="validate the records into runs.parquet")
    a.add_argument("bench_dir", help=BENCH_DIR_HELP)
    a.add_argument("--pillar", help="only this pillar")
    a.add_argument("--spec", help="only the records of this spec's cells (default: every one)")
    a.add_argument("--board", action="store_true", help="then write each pillar's board")
    a.add_argument("--summary", action="store_true", help="then write summary.md (3 rows each)")
    a.add_argument(
        "--full",
        action="store_true",
        help="read every JSON record (not the fragments): after editing records by hand",
    )
    a.add_argument(
        "--verify",
        action="store_true",
        help="first check that the fragments agree with the JSON records (fails if not)",
    )
    a.set_defaults(func=_cmd_aggregate)

    b = sub.add_parser("board", help="write one pillar's board from its runs.parquet")
    b.add_argument("bench_dir", help=BENCH_DIR_HELP)
    b.add_argument("--pillar", required=True, help="a pillar with a runs.parquet there")
    b.set_defaults(func=_cmd_board)

    sm = sub.add_parser("summary", help="write results/<bench>/summary.md from the tables")
    sm.add_argument("bench_dir", help=BENCH_DIR_HELP)
    sm.add_argument("--top", type=count, default=3, help="rows per board (default: 3)")
    sm.set_defaults(func=_cmd_summary)

    lb = sub.add_parser("leaderboard", help="rebuild every board and summary.md from records")
    lb.add_argument("bench_dir", help=BENCH_DIR_HELP)
    lb.add_argument("--full", action="store_true", help="re-read every record (not incremental)")
    lb.set_defaults(func=_cmd_leaderboard)

    rf = sub.add_parser(
        "retry-failed", help="delete failed/diverged records so the next run redoes them"
    )
    rf.add_argument("bench_dir", help=BENCH_DIR_HELP)
    rf.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    rf.set_defaults(func=_cmd_retry_failed)

    m = sub.add_parser("methods", help="list registered methods")
    m.add_argument("--pillar", help="only this pillar's (or method family's) methods")
    m.set_defaults(func=_cmd_methods)

    v = sub.add_parser("validate", help="validate a spec and list its cells")
    v.add_argument("spec", help="a spec file, or an embedded benchmark's name")
    v.add_argument("--show", type=listed, default=10, help="cells to list (default: 10)")
    v.set_defaults(func=_cmd_validate)

    c = sub.add_parser(
        "claims", help="judge papers' claims against a benchmark's records (no job rerun)"
    )
    c.add_argument("bench_dir", nargs="?", help=BENCH_DIR_HELP)
    c.add_argument(
        "files",
        nargs="*",
        help="claim files (default: the spec's `claims`, else every file in claims/)",
    )
    c.add_argument("--spec", help="take the claim files from this spec's `claims` list")
    c.add_argument("--check", nargs="+", metavar="FILE", help="only validate claim files")
    c.add_argument(
        "--looks",
        type=int,
        default=1,
        help="how many times these claims have been judged on growing seeds (after "
        "--extend-seeds: 2); each is judged at 1 - (1 - level) / LOOKS (Bonferroni); with "
        "--extend-seeds, the looks so far (the next judgement is one more)",
    )
    c.add_argument(
        "--extend-seeds",
        type=int,
        metavar="N",
        help="with --spec: write results/<bench>/extend-seeds.yaml, the spec with N new seeds "
        "for the undecided claims' pillars, and the records of exactly the cells they read",
    )
    c.set_defaults(func=_cmd_claims)

    from sparsebench.suite.pillar import all_pillars

    for pillar in all_pillars().values():
        pillar.add_commands(sub)
    return p


def _terminate(signum, frame):
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    from sparsebench.suite import warm

    # A workflow job under `sparsebench run`: fork it from the run's warm interpreter, before
    # importing anything else (this process only waits for the job)
    delegated = warm.delegate(sys.argv[1:] if argv is None else argv)
    if delegated is not None:
        return delegated
    import signal

    from sparsebench.suite import registry
    from sparsebench.suite.pillar import PillarError
    from sparsebench.suite.runner import Interrupted
    from sparsebench.suite.spec import SpecError

    # SIGTERM (Snakemake stopping a job) unwinds like Ctrl-C, so that no temporary file of an
    # atomic write stays behind; `run` and the cells' jobs set their own
    previous = signal.getsignal(signal.SIGTERM)
    if previous is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except (SpecError, registry.RegistryError, PillarError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # TableError and other input errors: message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    except Interrupted:
        print("stopped (SIGTERM): finished records are kept; the same command runs the rest",
              file=sys.stderr)  # fmt: skip
        return 143
    except KeyboardInterrupt:
        print("interrupted: finished records are kept; the same command runs the rest",
              file=sys.stderr)  # fmt: skip
        return 130
    except BrokenPipeError:
        # The reader closed the pipe (`sparsebench validate spec.yaml | head`): not an error;
        # point stdout at /dev/null so the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    finally:
        if previous is signal.SIG_DFL and signal.getsignal(signal.SIGTERM) is _terminate:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())

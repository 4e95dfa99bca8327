"""The ``sparsebench`` command line.

sparsebench run <pillar> [--spec FILE] --task T --method M [--params JSON] --sparsity S
                --seed N --out record.json [--threads K] [--parallel-jobs J]
sparsebench run-hessian ... / run-kernels ...   # one job of the hessian / kernels pillar
sparsebench kernels                        # sparse-kernel backends and whether they run here
sparsebench aggregate results/<bench>      # records -> validated runs.parquet
sparsebench leaderboard results/<bench>    # records -> leaderboard files, no job rerun
sparsebench retry-failed results/<bench>   # forget failed jobs so snakemake reruns them
sparsebench methods                        # registered methods, parameters, defaults, sources
sparsebench validate FILE                  # check a spec, list its jobs
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import typing
from pathlib import Path

from sparsebench.suite import registry


def _cmd_run(args: argparse.Namespace) -> int:
    from sparsebench.suite.run import JobArgs, run_and_record
    from sparsebench.suite.spec import load

    if not args.spec:
        raise SystemExit("sparsebench run: give --spec FILE (or set SPARSEBENCH_SPEC)")
    spec = load(args.spec)
    info = registry.get_method(args.method)
    if info.pillar != args.pillar:
        raise SystemExit(
            f"method {args.method!r} belongs to pillar {info.pillar!r}, not {args.pillar!r}"
        )
    try:
        params = json.loads(args.params)
    except json.JSONDecodeError as e:
        raise SystemExit(f"--params is not valid JSON ({e}): {args.params!r}") from None
    job = JobArgs(
        args.task, args.method, params, args.sparsity, args.seed, args.threads, args.parallel_jobs
    )
    record = run_and_record(spec, job, args.out)
    acc = record.get("test_acc")
    summary = f"test_acc={acc:.4f}" if acc is not None else f"error={record['error']}"
    print(
        f"[{record['status']}] {args.task} {args.method} s={args.sparsity:g} "
        f"seed={args.seed}: {summary} -> {args.out}"
    )
    return 0


def _cmd_run_hessian(args: argparse.Namespace) -> int:
    from sparsebench.suite.hessian_run import run_and_record_hessian
    from sparsebench.suite.spec import load

    if not args.spec:
        raise SystemExit("sparsebench run hessian: give --spec FILE (or set SPARSEBENCH_SPEC)")
    spec = load(args.spec)
    cells = [
        c
        for c in spec.hessian_cells()
        if c.record_path.endswith(
            f"/{args.system}/{args.potential_tag}/{args.method}/n{args.size}/record.json"
        )
    ]
    if not cells:
        raise SystemExit(
            f"no hessian job {args.system}/{args.potential_tag}/{args.method}/"
            f"n{args.size} in {args.spec}"
        )
    r = run_and_record_hessian(spec, cells[0], args.out, args.threads, args.parallel_jobs)
    summary = (
        f"wall {r['wall_s']:.3f} s, {r['n_hvps']} HVPs, rel_err {r['rel_err']}"
        if r["status"] == "ok"
        else f"error={r['error']}"
    )
    print(
        f"[{r['status']}] {args.system} n={args.size} {args.potential_tag} {args.method}: "
        f"{summary} -> {args.out}"
    )
    return 0


def _cmd_run_kernels(args: argparse.Namespace) -> int:
    from sparsebench.suite.kernels_run import run_and_record_kernels
    from sparsebench.suite.spec import load

    if not args.spec:
        raise SystemExit("sparsebench run-kernels: give --spec FILE (or set SPARSEBENCH_SPEC)")
    spec = load(args.spec)
    want = (args.out_features, args.in_features, args.batch)
    cells = [
        c
        for c in spec.kernel_cells()
        if (c.out_features, c.in_features, c.batch) == want
        and abs(c.sparsity - args.sparsity) < 1e-12
    ]
    if not cells:
        k = spec.data.get("kernels")
        if not k:
            raise SystemExit(f"{args.spec} has no `kernels:` section")
        raise SystemExit(
            f"no kernels job {args.out_features}x{args.in_features} s{args.sparsity:g} "
            f"b{args.batch} in {args.spec}; its shapes {k['shapes']}, sparsities "
            f"{k['sparsities']}, batches {k['batches']}"
        )
    rows = run_and_record_kernels(spec, cells[0], args.out, args.threads, args.parallel_jobs)
    for r in rows:
        if r["status"] == "ok":
            ratio = f"{r['speedup_vs_dense']:.2f}x dense" if r["speedup_vs_dense"] else ""
            print(f"  {r['backend']:16s} {r['op']:8s} {r['ms_median']:9.3f} ms  {ratio}")
        else:
            print(f"  {r['backend']:16s} {r['op']:8s} [{r['status']}] {r['error']}")
    print(f"-> {args.out}")
    return 0


def _cmd_kernels(args: argparse.Namespace) -> int:
    from sparsebench.kernels import BACKENDS

    for name, be in BACKENDS.items():
        ok, why = be.available()
        print(f"{name:16s} {'available' if ok else 'unavailable: ' + why}")
        print(f"    {be.description}")
    return 0


def _cmd_aggregate(args: argparse.Namespace) -> int:
    from sparsebench.suite.leaderboard import aggregate, find_records

    bench = Path(args.bench_dir)
    out = aggregate(find_records(bench), bench / "runs.parquet")
    print(f"wrote {bench / 'runs.parquet'} ({out.height} runs)")
    return 0


def _cmd_leaderboard(args: argparse.Namespace) -> int:
    from sparsebench.suite import hessian_board, kernels_board
    from sparsebench.suite.leaderboard import aggregate, find_records, print_top, write_leaderboard

    bench = Path(args.bench_dir)
    hessian_records = sorted((bench / "hessian").glob("**/record.json"))
    kernel_records = sorted((bench / "kernels").glob("**/record.json"))
    has_runs = any((bench / "runs").glob("**/record.json"))
    # As the Snakefile: a pillar's tables get a prefix only next to another pillar's.
    several = sum(map(bool, (has_runs, hessian_records, kernel_records))) > 1
    if not (has_runs or hessian_records or kernel_records):
        _no_records(bench)
    if has_runs:
        runs = aggregate(find_records(bench), bench / "runs.parquet")
        write_leaderboard(runs, bench)
        print(f"leaderboard: {bench / 'leaderboard.md'} (also .csv, .json, pareto.png)")
        print(print_top(bench, n=args.top))
    if kernel_records:
        prefix = "kernels_" if several else ""
        kruns = kernels_board.aggregate(kernel_records, bench / f"{prefix}runs.parquet")
        files = kernels_board.write_leaderboard(kruns, bench, prefix)
        print(f"kernels leaderboard: {files['md']} (also .csv, .json, {files['png'].name})")
        print(kernels_board.summary(kruns))
    if hessian_records:
        prefix = "hessian_" if several else ""
        hruns = hessian_board.aggregate(hessian_records, bench / f"{prefix}runs.parquet")
        files = hessian_board.write_leaderboard(hruns, bench, prefix)
        print(f"hessian leaderboard: {files['md']} (also .csv, .json, {files['png'].name})")
        print(hessian_board.summary(hruns))
    return 0


def _no_records(bench: Path) -> None:
    """Raise the error for a results folder without any record of any pillar."""
    from sparsebench.suite.schemas import TableError

    state = "" if bench.is_dir() else " (the folder does not exist)"
    raise TableError(
        f"no records found under {bench}{state}: searched runs/, hessian/ and kernels/ "
        "**/record.json. Run the benchmark first (`snakemake --cores N --configfile SPEC`)."
    )


def _record_status(path: Path) -> str:
    """``ok`` or why a record is to be retried: its status (``failed``, ``diverged``), a
    kernels cell with a failed row (``failed``; ``skipped`` rows are not failures), or
    ``unreadable``."""
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return "unreadable"
    if "rows" in data:  # a kernels cell
        statuses = {r.get("status") for r in data["rows"]}
        return "failed" if statuses - {"ok", "skipped"} else "ok"
    return data.get("status") or "unreadable"


# Tables derived from the records; removed by retry-failed so that Snakemake rebuilds them (it
# does not rerun jobs whose downstream tables exist, even when a record is gone).
DERIVED = ("*runs.parquet", "*leaderboard.md", "*leaderboard.csv", "*leaderboard.json")
DERIVED_PLOTS = ("pareto.png", "*scaling.png", "*speedup.png")


def _cmd_retry_failed(args: argparse.Namespace) -> int:
    bench = Path(args.bench_dir)
    records = [
        p
        for pillar in ("runs", "hessian", "kernels")
        for p in (bench / pillar).glob("**/record.json")
    ]
    if not records:
        _no_records(bench)
    failed = [(p, st) for p in sorted(records) if (st := _record_status(p)) != "ok"]
    if not failed:
        print(f"no failed, diverged or unreadable records under {bench}")
        return 0
    for path, status in failed:
        print(f"{'would remove' if args.dry_run else 'removing'} [{status}] {path}")
        if not args.dry_run:
            path.unlink()
    if not args.dry_run:
        for pattern in DERIVED + DERIVED_PLOTS:
            for table in bench.glob(pattern):
                table.unlink()
        print("now run the same snakemake command again: only these jobs rerun")
    return 0


def _cmd_methods(args: argparse.Namespace) -> int:
    for name, info in registry.all_methods().items():
        print(f"{name}  [{info.pillar}]")
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
    from sparsebench.suite.spec import load

    spec = load(args.spec)
    paths = [j.record_path for j in spec.jobs()] + [c.record_path for c in spec.hessian_cells()]
    paths += [c.record_path for c in spec.kernel_cells()]
    print(f"{args.spec}: valid; benchmark {spec.benchmark!r}, {len(paths)} jobs")
    for path in paths[: args.show]:
        print(f"  {path}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="sparsebench", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)

    r = sub.add_parser("run", help="run one job and write its record")
    r.add_argument("pillar", choices=["dst", "pruning"])
    r.add_argument(
        "--spec",
        default=os.environ.get("SPARSEBENCH_SPEC"),
        help="benchmark spec (YAML); default $SPARSEBENCH_SPEC (set by the Snakefile)",
    )
    r.add_argument("--task", required=True)
    r.add_argument("--method", required=True)
    r.add_argument("--params", default="{}", help="method parameters as JSON")
    r.add_argument("--sparsity", type=float, required=True)
    r.add_argument("--seed", type=int, required=True)
    r.add_argument("--out", required=True, help="record path (written atomically)")
    r.add_argument("--threads", type=int, default=1, help="torch threads for this job")
    r.add_argument(
        "--parallel-jobs",
        type=int,
        default=int(os.environ.get("SPARSEBENCH_PARALLEL_JOBS", "1")),
        help="jobs running at once (recorded with the wall-clock figures)",
    )
    r.set_defaults(func=_cmd_run)

    rh = sub.add_parser("run-hessian", help="run one hessian job and write its record")
    rh.add_argument("--spec", default=os.environ.get("SPARSEBENCH_SPEC"))
    rh.add_argument("--system", required=True)
    rh.add_argument("--size", type=int, required=True)
    rh.add_argument("--potential-tag", required=True, help="e.g. pair, or pair-<hash>")
    rh.add_argument("--method", required=True)
    rh.add_argument("--out", required=True)
    rh.add_argument("--threads", type=int, default=1)
    rh.add_argument(
        "--parallel-jobs", type=int, default=int(os.environ.get("SPARSEBENCH_PARALLEL_JOBS", "1"))
    )
    rh.set_defaults(func=_cmd_run_hessian)

    rk = sub.add_parser("run-kernels", help="run one kernels job and write its record")
    rk.add_argument("--spec", default=os.environ.get("SPARSEBENCH_SPEC"))
    rk.add_argument("--out-features", type=int, required=True, help="rows of W (a spec shape)")
    rk.add_argument("--in-features", type=int, required=True, help="columns of W")
    rk.add_argument("--sparsity", type=float, required=True, help="one of the spec's sparsities")
    rk.add_argument("--batch", type=int, required=True, help="one of the spec's batches")
    rk.add_argument("--out", required=True, help="record path (written atomically)")
    rk.add_argument("--threads", type=int, default=1, help="torch threads for this job")
    rk.add_argument(
        "--parallel-jobs",
        type=int,
        default=int(
            os.environ.get(
                "SPARSEBENCH_KERNELS_PARALLEL_JOBS",
                os.environ.get("SPARSEBENCH_PARALLEL_JOBS", "1"),
            )
        ),
    )
    rk.set_defaults(func=_cmd_run_kernels)

    kb = sub.add_parser("kernels", help="list sparse-kernel backends and whether they run here")
    kb.set_defaults(func=_cmd_kernels)

    a = sub.add_parser("aggregate", help="validate the records into runs.parquet")
    a.add_argument("bench_dir")
    a.set_defaults(func=_cmd_aggregate)

    lb = sub.add_parser("leaderboard", help="rebuild the leaderboard from the records")
    lb.add_argument("bench_dir")
    lb.add_argument("--top", type=int, default=3, help="rows per (task, sparsity) to print")
    lb.set_defaults(func=_cmd_leaderboard)

    rf = sub.add_parser(
        "retry-failed", help="delete failed/diverged records so the next snakemake reruns them"
    )
    rf.add_argument("bench_dir")
    rf.add_argument("--dry-run", action="store_true", help="only list what would be removed")
    rf.set_defaults(func=_cmd_retry_failed)

    m = sub.add_parser("methods", help="list registered methods")
    m.set_defaults(func=_cmd_methods)

    v = sub.add_parser("validate", help="validate a spec and list its jobs")
    v.add_argument("spec")
    v.add_argument("--show", type=int, default=10, help="jobs to list")
    v.set_defaults(func=_cmd_validate)
    return p


def main(argv: list[str] | None = None) -> int:
    from sparsebench.suite.spec import SpecError

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (SpecError, registry.RegistryError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except ValueError as e:  # TableError and other input errors: message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""``sparsebench run SPEC``: one command from a spec to its answer.

It runs the workflow with Snakemake (a subprocess: the same Snakefile, profiles and executors
as a plain ``snakemake`` call, whose whole output goes to ``results/<bench>/logs/snakemake.log``)
and shows its progress as one line per cell, read from what the jobs write (the plan saved when
the run starts, each cell's record, the artefacts' build notes, the tables): a display that
needs nothing from Snakemake's own log format and works the same under any executor. The end
names the boards, the summary, the claims and the report, and counts the cells that failed or
diverged (a non-zero exit with ``--strict``).

Nothing here imports torch or Lightning: the jobs do.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from sparsebench.suite import paths

# The workflow's Snakefile: the checkout's (an editable install; the repo is the package).
SNAKEFILE = Path(__file__).resolve().parents[1] / "Snakefile"
# A first estimate of a job's start-up (interpreter, torch, Lightning), before any is measured.
STARTUP_S = 6.0
POLL_S = 0.5
# Set for the Snakemake it runs: the workflow's own ending is then left to this command.
RUN_ENV = "SPARSEBENCH_RUN"


class RunError(ValueError):
    """A spec or option the run cannot start with."""


def resolve_spec(text: str) -> Path:
    """The spec file ``text`` names: a path, or the name of an embedded benchmark
    (``default``, ``dst``, ... in suite/benchmarks/)."""
    from sparsebench.suite.spec import BENCHMARKS_DIR

    path = Path(text)
    if path.is_file():
        return path
    embedded = BENCHMARKS_DIR / f"{text}.yaml"
    if "/" not in text and embedded.is_file():
        return embedded
    from sparsebench.suite.catalog import did_you_mean

    names = sorted(p.stem for p in BENCHMARKS_DIR.glob("*.yaml"))
    hint = did_you_mean(text, names)
    what = "a folder, not a spec file" if path.is_dir() else "no such file"
    raise RunError(
        f"{text}: {what} (looked in {Path.cwd()}){hint or '.'} Give a spec file or an embedded "
        f"benchmark: {', '.join(names)}"
    )


def benchmark_name(spec: Path) -> str:
    """The spec's ``benchmark`` name, read without validating the spec (Snakemake's parse
    validates it and says what is wrong)."""
    from sparsebench.suite.spec import NAME_MAX_LEN, NAME_REGEX, SpecError, read_yaml

    try:
        data = read_yaml(spec, "spec", SpecError)
    except SpecError as e:
        raise RunError(str(e)) from None

    name = data.get("benchmark") if isinstance(data, dict) else None
    if name is None:
        raise RunError(f"{spec}: benchmark: missing; give the benchmark a name (its folder)")
    # checked here too: its folder is where this command writes its log, before Snakemake
    # has read the spec
    if not isinstance(name, str) or not re.match(NAME_REGEX, name) or len(name) > NAME_MAX_LEN:
        raise RunError(
            f"{spec}: benchmark: {str(name)[:80]!r} is not allowed; a name of letters, digits, "
            f"'_', '.', '-' (not starting with '.' or '-'), at most {NAME_MAX_LEN} characters"
        )
    return name


def snakemake_command(
    spec: Path, cores: int, extra: Sequence[str] = (), report: Path | None = None
) -> list[str]:
    """The Snakemake call ``sparsebench run`` makes (the one a user would type)."""
    if not SNAKEFILE.is_file():
        raise RunError(
            f"the workflow's Snakefile is not at {SNAKEFILE}: sparsebench runs from a checkout "
            "(pip install -e .)"
        )
    for opt in extra:
        name = opt.split("=", 1)[0]
        if name in OWN_OPTIONS:
            raise RunError(
                f"--snakemake: {name} is set by sparsebench run itself ({OWN_OPTIONS[name]})"
            )
    cmd = [sys.executable, "-m", "snakemake", "-s", str(SNAKEFILE), "-d", str(Path.cwd())]
    # the absolute path: Snakemake reads a --config value that looks like a number as one
    cmd += ["--cores", str(cores), "--config", f"spec={spec.resolve()}"]
    if report is not None:
        cmd += ["--report", str(report)]
    return cmd + list(extra)


# Snakemake options `sparsebench run` sets, and what to use instead.
OWN_OPTIONS = {
    "--config": "the spec is its argument",
    "-C": "the spec is its argument",
    "--configfile": "the spec is its argument",
    "--configfiles": "the spec is its argument",
    "-s": "the suite's Snakefile",
    "--snakefile": "the suite's Snakefile",
    "-d": "the current folder; run it from where results/ should be",
    "--directory": "the current folder; run it from where results/ should be",
    "-n": "use sparsebench run -n",
    "--dry-run": "use sparsebench run -n",
    "--dryrun": "use sparsebench run -n",
    "--cores": "use --cores",
    "-c": "use --cores",
    "--report": "use --report",
}


def clock(seconds: float) -> str:
    """``1:05`` for 65 s, ``1:02:03`` past an hour."""
    s = int(round(max(seconds, 0.0)))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


# ---------------------------------------------------------------- what the run has done


@dataclass
class CellState:
    pillar: str
    cell_id: str
    job: str
    estimate: float | None = None  # seconds, from an earlier record of the same cell
    done: bool = False
    seconds: float | None = None
    finished: float | None = None  # when its record landed (the file's mtime)


@dataclass
class Progress:
    """The run's cells and artefacts from its plan, and what has finished so far."""

    bench: str
    start: float
    cells: list[CellState]
    artefacts: dict[tuple[str, str], bool]  # (pillar, artefact id) -> built
    metrics: dict[str, dict[str, Any]]  # pillar -> {name, unit, higher}
    cores: int
    boards: dict[str, float] = field(default_factory=dict)  # pillar -> table mtime at start
    started_jobs: set[tuple[str, str]] = field(default_factory=set)  # a cell of it started

    @classmethod
    def from_plan(cls, bench: str, plan: dict[str, Any], start: float, cores: int) -> Progress:
        history = _history(bench)
        cells = [
            CellState(pillar, cid, b["name"], history.get(f"{pillar}/{cid}"))
            for pillar, bs in plan.get("cells", {}).items()
            for b in bs
            for cid in b["cells"]
        ]
        arts = {(a["pillar"], i): False for a in plan.get("artefacts", []) for i in a["ids"]}
        boards = {}
        for pillar in plan.get("pillars", {}):
            table = paths.runs_table(bench, pillar)
            boards[pillar] = table.stat().st_mtime if table.is_file() else 0.0
        return cls(bench, start, cells, arts, plan.get("pillars", {}), cores, boards)

    def eta(self, now: float) -> float | None:
        """Seconds left, once every cell left has an estimate (its earlier time, else its
        pillar's mean so far, else the mean of every cell finished so far): the work left at
        the rate work has been done since the first cell started (which counts the cores and
        the jobs' start-ups as they come), plus a start-up for each job none of whose cells
        has started, at the cores' parallelism (a job's start-up taken as half the wait for
        the first cell, which also held the workflow's own parse). Before any cell has
        finished: the estimates over the cores."""
        finished = [c for c in self.cells if c.done and c.seconds is not None]
        mean: dict[str, float] = {}
        for p in {c.pillar for c in finished}:
            got = [c.seconds for c in finished if c.pillar == p]
            mean[p] = sum(got) / len(got)

        overall = sum(c.seconds for c in finished) / len(finished) if finished else None

        def est(c: CellState) -> float | None:
            if c.estimate is not None:
                return c.estimate
            # a pillar none of whose cells has finished: the mean of every finished cell
            return mean.get(c.pillar, overall)

        left = [est(c) for c in self.cells if not c.done]
        if not left:
            return 0.0
        if any(e is None for e in left):
            return None
        idle = {(c.pillar, c.job) for c in self.cells} - self.started_jobs
        began = [c.finished - c.seconds for c in finished if c.finished is not None]
        done = sum(e for c in self.cells if c.done and (e := est(c)) is not None)
        if began and done > 0:
            first = min(began)
            rate = done / max(now - first, 1e-3)  # work-seconds per second
            startup = max(first - self.start, 0.0) / 2
            return sum(left) / rate + len(idle) * startup / self.cores
        return (sum(left) + len(idle) * STARTUP_S) / self.cores


def _history(bench: str) -> dict[str, float]:
    """Earlier cell times: ``pillar/cell id`` -> seconds (kept by :func:`remember`)."""
    try:
        data = json.loads(_history_file(bench).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}  # not ours (a hand edit, a broken disk): no estimate rather than an error
    return {
        k: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < 1e7
    }


def _history_file(bench: str) -> Path:
    return paths.bench_dir(bench) / "logs" / "cell_times.json"


def remember(progress: Progress) -> None:
    """Add this run's cell times to the history the next run's estimate reads."""
    from sparsebench.suite.record import write_json_atomic

    data = _history(progress.bench)
    data.update({f"{c.pillar}/{c.cell_id}": c.seconds for c in progress.cells if c.seconds})
    write_json_atomic(_history_file(progress.bench), dict(sorted(data.items())))


def read_record(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def metric_text(record: dict[str, Any], metric: dict[str, Any] | None) -> str:
    """The cell's headline metric as the boards show it: a share of a whole in percent
    (``test_acc 97.12 %``), anything else to 4 significant digits with its unit."""
    if not metric or record.get("status") != "ok":
        return ""
    value = record.get(metric["name"])
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    unit = metric.get("unit") or ""
    if unit == "fraction":
        return f"{metric['name']} {100 * value:.2f} %"
    unit = "" if unit == "count" else f" {unit}"
    return f"{metric['name']} {value:.4g}{unit}"


class Watcher:
    """Prints one line per finished cell, built artefact and written board."""

    def __init__(self, bench: str, start: float, cores: int, out: TextIO = sys.stdout) -> None:
        self.bench = bench
        self.start = start
        self.cores = cores
        self.out = out
        self.progress: Progress | None = None
        self.plan = paths.bench_dir(bench) / "logs" / "plan.json"

    def say(self, text: str) -> None:
        print(text, file=self.out, flush=True)

    def poll(self) -> None:
        if self.progress is None:
            if not self.plan.is_file() or self.plan.stat().st_mtime < self.start - 1:
                return  # the run has not started its jobs yet (or plans nothing)
            try:
                plan = json.loads(self.plan.read_text())
            except (OSError, ValueError):
                return
            self.progress = Progress.from_plan(self.bench, plan, self.start, self.cores)
            self._announce()
        self._artefacts()
        self._cells()
        self._boards()

    def _announce(self) -> None:
        p = self.progress
        assert p is not None
        jobs = len({(c.pillar, c.job) for c in p.cells})
        eta = p.eta(time.time())
        guess = f", about {clock(eta)} from earlier times" if eta is not None else ""
        self.say(
            f"{len(p.cells)} cell(s) to run in {jobs} job(s), {len(p.artefacts)} artefact(s) "
            f"to build{guess}"
        )

    def _artefacts(self) -> None:
        p = self.progress
        assert p is not None
        for (pillar, aid), built in p.artefacts.items():
            info = paths.artefact_build_info(pillar, aid)
            if not built and info.is_file() and info.stat().st_mtime >= self.start - 1:
                p.artefacts[(pillar, aid)] = True
                n = sum(p.artefacts.values())
                elapsed = clock(time.time() - p.start)
                self.say(
                    f"[artefact {n}/{len(p.artefacts)}] {pillar} {aid} built  elapsed {elapsed}"
                )

    def _cells(self) -> None:
        p = self.progress
        assert p is not None
        from sparsebench.suite.job import IN_FLIGHT

        for c in p.cells:
            if c.done:
                continue
            path = paths.record(self.bench, c.pillar, c.cell_id)
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if mtime < self.start - 1:
                continue
            p.started_jobs.add((c.pillar, c.job))  # in flight or done: its job has started
            record = read_record(path)
            if record is None or record.get("error") == IN_FLIGHT:
                continue
            c.done, c.finished = True, mtime
            took = record.get("cell_s")
            c.seconds = float(took) if isinstance(took, int | float) else None
            self.say(self.cell_line(c, record))

    def cell_line(self, c: CellState, record: dict[str, Any]) -> str:
        p = self.progress
        assert p is not None
        n = sum(x.done for x in p.cells)
        total = len(p.cells)
        now = time.time()
        status = str(record.get("status", "?"))
        took = f"cell {c.seconds:.1f} s" if c.seconds is not None else ""
        eta = p.eta(now)
        left = f"ETA {clock(eta)}" if eta is not None and n < total else ""
        what = metric_text(record, p.metrics.get(c.pillar))
        if status != "ok":
            what = " ".join(str(record.get("error") or "").split())[:100]
        label = str(record.get("label") or c.cell_id)
        parts = [f"[{n}/{total} {100 * n // total}%]", f"{status:<8}", c.pillar, label, what]
        parts += [took, f"elapsed {clock(now - p.start)}", left]
        return "  ".join(x for x in parts if x)

    def _boards(self) -> None:
        p = self.progress
        assert p is not None
        for pillar, before in list(p.boards.items()):
            table = paths.runs_table(self.bench, pillar)
            if table.is_file() and table.stat().st_mtime > max(before, self.start - 1):
                del p.boards[pillar]
                board = paths.pillar_dir(self.bench, pillar) / "leaderboard.md"
                self.say(f"[board] {pillar}: {board}")


# ---------------------------------------------------------------- the end of a run


@dataclass
class Outcome:
    """What the spec's cells ended with, from the pillars' runs tables."""

    counts: dict[str, int]  # status -> cells
    problems: list[tuple[str, str, str, str]]  # (pillar, status, label, error)
    pillars: list[str]

    @property
    def bad(self) -> int:
        return self.counts.get("failed", 0) + self.counts.get("diverged", 0)


def per_cell(runs: Any) -> Any:
    """One row per cell of a runs table (a cell may have several rows: one per backend and
    op of a timing pillar, one per trial): its ``status``, the worst of its rows'
    (diverged, then failed; skipped only when every row was), and its ``cell_s`` (the same on
    every row of a cell: the cell's own time, counted once)."""
    import polars as pl

    status = (
        pl.when(pl.col("status").is_in(["diverged"]).any())
        .then(pl.lit("diverged"))
        .when(pl.col("status").is_in(["failed"]).any())
        .then(pl.lit("failed"))
        .when((pl.col("status") == "skipped").all())
        .then(pl.lit("skipped"))
        .otherwise(pl.lit("ok"))
    )
    cell_s = pl.col("cell_s").first() if "cell_s" in runs.columns else pl.lit(None)
    return runs.group_by("cell_id", maintain_order=True).agg(
        status.alias("status"), cell_s.alias("cell_s")
    )


def outcome(bench: str, pillars: Sequence[str]) -> Outcome:
    """Cells by status over the runs tables of ``pillars`` (exactly the spec's cells: the
    board rule aggregates exactly those), and the rows that failed or diverged."""
    import polars as pl

    from sparsebench.suite.tables import read_runs

    counts: dict[str, int] = {}
    problems = []
    present = []
    for pillar in pillars:
        table = paths.runs_table(bench, pillar)
        if not table.is_file():
            continue
        present.append(pillar)
        runs = read_runs(table)
        for status, n in per_cell(runs).group_by("status").len().iter_rows():
            counts[status] = counts.get(status, 0) + n
        bad = runs.filter(pl.col("status").is_in(["failed", "diverged"]))
        for row in bad.select("status", "label", "error").iter_rows():
            problems.append((pillar, *(str(v) if v is not None else "" for v in row)))
    return Outcome(counts, problems, present)


def ending(bench: str, pillars: Sequence[str], top_lines: int = 60) -> tuple[str, Outcome]:
    """The text a finished run ends with: the summary's top rows, where the boards, claims
    and report are, and the cells that failed or diverged."""
    got = outcome(bench, pillars)
    folder = paths.bench_dir(bench)
    lines = []
    summary = paths.summary(bench)
    if summary.is_file():
        # the Markdown's code fences are noise on a terminal
        text = [ln for ln in summary.read_text().rstrip("\n").splitlines() if ln != "```"]
        lines += text[:top_lines]
        if len(text) > top_lines:
            lines.append(f"... ({len(text) - top_lines} more lines in {summary})")
        lines.append("")
    for pillar in got.pillars:
        lines.append(f"board   {pillar}: {paths.pillar_dir(bench, pillar) / 'leaderboard.md'}")
    if summary.is_file():
        lines.append(f"summary: {summary}")
    claims = folder / "claims.md"
    if claims.is_file():
        lines.append(f"claims:  {claims}")
    report = folder / "report.html"
    if report.is_file():
        lines.append(f"report:  {report}")
    total = sum(got.counts.values())
    states = ", ".join(f"{n} {s}" for s, n in sorted(got.counts.items()))
    if got.pillars:
        lines.append(f"{total} cell(s): {states}; {got.bad} failed / diverged")
    else:
        lines.append("no runs table yet: the run stopped before its boards")
    for pillar, status, label, error in got.problems[:10]:
        lines.append(f"  [{status}] {pillar} {label}: {' '.join(error.split())[:200]}")
    if len(got.problems) > 10:
        lines.append(f"  ... and {len(got.problems) - 10} more (sparsebench retry-failed)")
    return "\n".join(lines), got


# ---------------------------------------------------------------- the command


@dataclass
class RunOptions:
    spec: str
    cores: int = 2
    report: bool = False
    strict: bool = False
    dry_run: bool = False
    snakemake_args: tuple[str, ...] = ()
    warm: bool = True  # jobs fork from one interpreter that imported torch once (suite/warm.py)


class Interrupted(Exception):
    """The run was stopped (Ctrl-C, SIGTERM): Snakemake and its jobs were stopped too."""


# Snakemake options that send jobs elsewhere than this machine: no warm server then.
REMOTE_OPTIONS = ("--executor", "-e", "--profile", "--workflow-profile", "--cluster", "--slurm")


class WarmServer:
    """The run's warm job server (suite/warm.py): started before Snakemake so that its
    imports overlap the workflow's parse, stopped with the run. Its log is
    ``results/<bench>/logs/warm.log``."""

    def __init__(self, log: Path, pillars: Sequence[str]) -> None:
        import tempfile

        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as fh:
            self.folder = Path(tempfile.mkdtemp(prefix="sparsebench-warm-"))  # mode 0700
            self.socket = self.folder / "jobs.sock"
            fh.write(f"\n==== warm job server, {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
            fh.flush()
            # A session of its own: a signal to the run's group (Ctrl-C, a hang-up, `timeout`)
            # reaches Snakemake and the jobs, which stop their cells; the server is stopped
            # after them, by this command (or when it notices this command is gone).
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "sparsebench.suite.warm", str(self.socket),
                 "--parent", str(os.getpid()), "--pillars", ",".join(pillars)],
                stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip

    def env(self) -> dict[str, str]:
        from sparsebench.suite.warm import ENV

        return {**os.environ, ENV: str(self.socket)}

    def terminate(self) -> None:
        """Ask the server to stop (its teardown then overlaps what the run does next)."""
        if self.proc.poll() is None:
            self.proc.terminate()

    def stop(self) -> None:
        import shutil

        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


def builtin_pillars_of(spec: Path) -> list[str]:
    """The built-in pillars whose sections the spec has (read without validating it: the
    warm server preloads what their jobs import)."""
    from sparsebench.suite.pillar import builtin_pillars
    from sparsebench.suite.spec import SpecError, read_yaml

    try:
        data = read_yaml(spec, "spec", SpecError)
    except SpecError:
        return []
    if not isinstance(data, dict):
        return []
    return [p.name for p in builtin_pillars() if p.present(data)]


def wants_warm(opts: RunOptions) -> bool:
    """A warm server serves local jobs only: not with --no-warm or options that send the
    jobs to a scheduler (whose jobs would not reach it anyway, see suite/warm.py)."""
    names = {a.split("=", 1)[0] for a in opts.snakemake_args}
    remote = names.intersection(REMOTE_OPTIONS) or os.environ.get("SNAKEMAKE_PROFILE")
    return opts.warm and not remote


def _run_snakemake(
    cmd: list[str], log: Path, on_tick: Callable[[], None], env: dict[str, str] | None = None
) -> int:
    """Run ``cmd`` with its output appended to ``log``, calling ``on_tick`` while it runs.

    Snakemake runs in a process group of its own, and whatever ends this function early (Ctrl-C,
    SIGTERM, a closed pipe, an error in ``on_tick``) stops it as Ctrl-C would: SIGINT to the
    group, so that the jobs stop too (their cells run again next time) and nothing runs on
    unattended holding the workflow's lock. The log is appended to, never truncated: a second
    run started beside a first (which Snakemake's lock refuses) must not erase its log."""
    import signal

    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        fh = open(log, "a")  # noqa: SIM115 - closed below, after the process
    except OSError as e:
        raise RunError(f"cannot write the run's log {log}: {e.strerror or e}") from None
    fh.write(f"\n==== sparsebench run, {time.strftime('%Y-%m-%d %H:%M:%S')}: {' '.join(cmd)}\n")
    fh.flush()

    def stop(signum, frame):  # SIGTERM ends this command like Ctrl-C
        raise Interrupted()

    old = signal.signal(signal.SIGTERM, stop)
    proc = subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True, env=env
    )
    try:
        while True:
            on_tick()
            try:  # returns as soon as Snakemake exits, not at the next tick
                proc.wait(timeout=POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
        on_tick()
    except BaseException:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        raise
    finally:
        signal.signal(signal.SIGTERM, old)
        fh.close()
    return proc.returncode


def _explain_failure(log: Path, out: TextIO) -> None:
    """The lines of Snakemake's log that say why it stopped."""
    try:  # this run's part of the log: every run appends to it
        text = log.read_text(errors="replace").rsplit("==== sparsebench run", 1)[-1]
    except OSError:
        return
    text = text.splitlines()
    own = [ln for ln in text if ln.startswith(("sparsebench:", "error:"))]
    errors = [i for i, ln in enumerate(text) if ln.startswith(("Error in rule", "WorkflowError"))]
    shown = own or (text[errors[0] : errors[0] + 15] if errors else text[-15:])
    print("\n".join(shown), file=out)


def run(opts: RunOptions, out: TextIO = sys.stdout) -> int:
    spec = resolve_spec(opts.spec)
    if opts.dry_run:
        return dry_run(spec, opts.cores, out)
    bench = benchmark_name(spec)
    log = paths.bench_dir(bench) / "logs" / "snakemake.log"
    start = time.time()
    print(f"sparsebench: running {spec} on {opts.cores} core(s); Snakemake's log: {log}",
          file=out, flush=True)  # fmt: skip
    watcher = Watcher(bench, start, opts.cores, out)
    cmd = snakemake_command(spec, opts.cores, extra=opts.snakemake_args)
    warm = None
    if wants_warm(opts):
        try:
            warm = WarmServer(log.with_name("warm.log"), builtin_pillars_of(spec))
        except OSError as e:  # the jobs then start on their own, as with --no-warm
            print(f"sparsebench: no warm job server ({e}); every job imports torch itself",
                  file=out)  # fmt: skip
    try:
        env = {**(warm.env() if warm else os.environ), RUN_ENV: "1"}
        code = _run_snakemake(cmd, log, watcher.poll, env)
    except BaseException:
        if warm is not None:
            warm.stop()
        raise
    if warm is not None:
        warm.terminate()
    try:
        return _finish(opts, spec, bench, log, start, code, watcher, out)
    finally:
        if warm is not None:
            warm.stop()


def _finish(
    opts: RunOptions,
    spec: Path,
    bench: str,
    log: Path,
    start: float,
    code: int,
    watcher: Watcher,
    out: TextIO,
) -> int:
    """After the workflow: the run's record, the report when asked, the ending."""
    wall = time.time() - start
    if watcher.progress is not None:
        remember(watcher.progress)
        from sparsebench.suite.record import write_json_atomic

        # the workflow's own wall-clock (no report), for `perf overhead`
        run_file = paths.bench_dir(bench) / "logs" / "run.json"
        write_json_atomic(run_file, {"started": start, "wall_s": wall, "cores": opts.cores})
    elif code == 0:
        said = _nothing_to_do(log)
        print(said or f"no job ran (Snakemake's output: {log})", file=out)
    if code != 0:
        print(f"sparsebench: the run stopped (Snakemake exit {code}); from {log}:", file=out)
        _explain_failure(log, out)
        return code
    if opts.report:
        report = paths.bench_dir(bench) / "report.html"
        print(f"writing the report {report} ...", file=out, flush=True)
        code = _run_snakemake(
            snakemake_command(spec, opts.cores, report=report),
            paths.bench_dir(bench) / "logs" / "report.log",
            lambda: None,
        )
        if code != 0:
            print(f"sparsebench: the report failed (exit {code})", file=out)
            _explain_failure(paths.bench_dir(bench) / "logs" / "report.log", out)
            return code
    pillars = _plan_pillars(bench) or sorted(paths.pillar_folders(paths.bench_dir(bench)))
    text, got = ending(bench, pillars)
    print(f"\n{text}\nfinished in {clock(time.time() - start)}", file=out)
    return 1 if opts.strict and got.bad else 0


def _nothing_to_do(log: Path) -> str | None:
    """The message for a run Snakemake found complete (from this run's part of its log)."""
    try:
        tail = log.read_text(errors="replace").rsplit("==== sparsebench run", 1)[-1]
    except OSError:
        return None
    return (
        "nothing to run: every cell's record is up to date"
        if "Nothing to be done" in tail
        else None
    )


def _plan_pillars(bench: str) -> list[str]:
    try:
        plan = json.loads((paths.bench_dir(bench) / "logs" / "plan.json").read_text())
    except (OSError, ValueError):
        return []
    pillars = plan.get("pillars") if isinstance(plan, dict) else None
    return [p for p in pillars if isinstance(p, str)] if isinstance(pillars, dict) else []


def dry_run(spec: Path, cores: int, out: TextIO = sys.stdout) -> int:
    """What a run would do, from the suite's own plan: writes nothing."""
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.spec import load
    from sparsebench.suite.workflow import artefact_batches, batches

    loaded = load(spec)
    bench = loaded.benchmark
    pillars = {name: get_pillar(name) for name in loaded.pillars}
    cells = {name: p.cells(loaded) for name, p in pillars.items()}
    plan = batches(bench, cells, cores)  # the batches a run on `cores` would make
    arts = artefact_batches({name: p.artefacts(loaded) for name, p in pillars.items()})
    history = _history(bench)
    total_s = 0.0
    known = True
    print(f"{spec}: benchmark {bench!r} (dry run: nothing is written)", file=out)
    for name, bs in plan.items():
        todo = [c for b in bs for c in b.cells]
        stale = sum(len(b.stale) for b in bs)
        print(
            f"  {name}: {len(cells[name])} cell(s), {len(cells[name]) - len(todo)} done, "
            f"{len(todo)} to run ({stale} changed since their record) in {len(bs)} job(s)",
            file=out,
        )
        for c in todo:
            est = history.get(f"{name}/{c.id}")
            known &= est is not None
            total_s += est or 0.0
    n_arts = sum(len(b.artefacts) for b in arts)
    print(f"  artefacts to build: {n_arts} in {len(arts)} job(s)", file=out)
    if known and total_s:
        print(f"  earlier runs of these cells took {clock(total_s)} of cell time", file=out)
    return 0

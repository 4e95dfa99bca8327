# Spec loading and validation (before any job starts), the cells of every pillar of the spec,
# and the pending ones in batches (suite/workflow.py). Nothing here names a pillar.
import json
import os
from pathlib import Path
import shlex
import sys
import time

from sparsebench.suite import paths
from sparsebench.suite.job import confirm_deaths
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.front import CONFIG_KEY as FRONT_KEY, FrontPage
from sparsebench.suite.runner import RUN_ENV, ending
from sparsebench.suite.spec import DEFAULT_SPEC, SpecError, load
from sparsebench.suite.workflow import (
    artefact_batches,
    batches,
    cluster_resources,
    drop_broken_tables,
    exit_without_teardown,
    import_pandas_meanwhile,
    load_artefact_plan,
    load_plan,
    release_scheduler_timers,
    save_plan,
    unwritable,
    write_stale_markers,
)


def _spec_path():
    """The spec's path, given as `--config spec=PATH`; the embedded default without it.

    The spec goes to the suite's own loader as a path, never to Snakemake as a config file:
    `--configfile` makes Snakemake parse the file itself before any of this runs, with its
    own YAML rules and error messages, and evaluate the `?expressions` of a file whose first
    key is `__use_yte__` (YTE templating, i.e. run code from the spec). By the time the suite
    sees such a file, that has happened, so it is refused with the safe command."""
    if workflow.overwrite_configfiles:
        given = " ".join(str(f) for f in workflow.overwrite_configfiles)
        sys.exit(
            f"sparsebench: give the spec as `--config spec={given}`, not `--configfile {given}`: "
            "--configfile has Snakemake read the file as its own config first (and evaluate "
            "it as a template when its first key is __use_yte__); the suite reads specs itself"
        )
    extra = sorted(set(config) - {"spec"})
    if extra:
        sys.exit(
            f"sparsebench: --config {extra[0]}=...: unknown key; the only one is spec=PATH "
            "(the spec file; everything else is in the spec)"
        )
    if "spec" not in config:
        return DEFAULT_SPEC
    given = config["spec"]
    if not isinstance(given, str) or not given:
        sys.exit(f"sparsebench: --config spec={given!r}: give the path of a spec file")
    return given


def _load_spec(path):
    try:
        # The suite's own YAML loader: 1e-3 is a float, duplicate keys, aliases past a bound
        # and files past a size are errors, and every message names the file and the key.
        return load(path)
    except (SpecError, ValueError) as e:
        sys.exit(f"sparsebench: invalid spec: {e}")


def _cores():
    """Snakemake's --cores; None when not given (dry runs, --report), where it refuses to tell."""
    try:
        cores = workflow.cores
    except Exception:
        return None
    return cores if isinstance(cores, int) else None


def _job_slots():
    """Jobs that may run at once: the local cores, or a cluster executor's `--jobs` (the SLURM
    profile's 100) where that is more (`sparsebench run` passes --cores to a profile's run
    too), so that batches are split to fill the cluster as they fill the cores."""
    try:
        nodes = workflow.nodes
    except Exception:
        nodes = None
    given = [n for n in (CORES, nodes) if isinstance(n, int) and n > 0]
    return max(given) if given else None


SPEC_FILE = str(_spec_path())
SPEC = _load_spec(SPEC_FILE)
BENCH = SPEC.benchmark
CORES = _cores()
SLOTS = _job_slots()
# The interpreter that runs Snakemake runs the jobs: `.venv/bin/snakemake` works without
# activating the venv (a bare `sparsebench` would not be on PATH).
# Under --software-deployment-method conda the rules' environment provides `python`.
_CONDA = any("conda" in str(m).lower() for m in workflow.deployment_settings.deployment_method)
PYTHON = "python" if _CONDA else shlex.quote(sys.executable)
PILLARS = {name: get_pillar(name) for name in SPEC.pillars}
CELLS = {name: p.cells(SPEC) for name, p in PILLARS.items()}
ARTEFACTS = {name: p.artefacts(SPEC) for name, p in PILLARS.items()}
RECORDS = {
    name: sorted(str(paths.record(BENCH, name, c.id)) for c in cells)
    for name, cells in CELLS.items()
}
# The main process plans the batches (cells and missing artefacts) and saves the plan; a job's
# own parse (another process, or another machine under an executor plugin) reuses it: its rule
# must exist as planned.
PLAN = paths.bench_dir(BENCH) / "logs" / "plan.json"
if workflow.is_main_process:
    _blocked = unwritable(
        [paths.bench_dir(BENCH), *(paths.pillar_dir(BENCH, n) for n in PILLARS), paths.artefact_root()]
    )
    if _blocked:
        sys.exit(f"sparsebench: {_blocked}")
    for _table in drop_broken_tables(BENCH, PILLARS):
        print(f"sparsebench: {_table} was not a readable table; rebuilding it", file=sys.stderr)
    # A report plans every cell's job, done or not, so that its job graph and runtime
    # statistics show the jobs that made the records (--report runs nothing).
    BATCHES = batches(BENCH, CELLS, SLOTS, everything="--report" in sys.argv)
    ARTEFACT_BATCHES = artefact_batches(ARTEFACTS)
    write_stale_markers(BENCH, BATCHES)  # inputs of the DAG: a dry run needs them too
else:
    BATCHES = load_plan(PLAN, CELLS) or batches(BENCH, CELLS, SLOTS)
    ARTEFACT_BATCHES = load_artefact_plan(PLAN, ARTEFACTS)
    if ARTEFACT_BATCHES is None:
        ARTEFACT_BATCHES = artefact_batches(ARTEFACTS)
RUN_START = time.time()
# The report's front page (suite/rules/report/workflow.rst), rendered only by --report.
config[FRONT_KEY] = FrontPage(BENCH, SPEC_FILE, tuple(PILLARS), CORES)


def refuse_unplaceable_gpu_cells():
    """Before anything is submitted (Snakemake's onstart, which knows the executor): refuse the
    run when pending cells need a GPU that the executor's machines do not have (this machine
    for local runs; the cluster's partitions under SLURM), rather than fail each job or wait
    in a queue forever."""
    if not workflow.is_main_process:
        return
    from sparsebench.suite.gpus import refusal

    needing = [c.id for bs in BATCHES.values() for b in bs if b.gpus for c in b.cells]
    plugin = workflow.executor_plugin
    executor = plugin.name if plugin is not None else "local"
    message = refusal(executor, needing, _default_resource("slurm_partition"))
    if message:
        sys.exit(message)


def _default_resource(name):
    """A `--default-resources NAME=VALUE` as given (the profile's), unquoted; None if not."""
    args = getattr(workflow.resource_settings.default_resources, "args", None) or []
    for arg in args:
        key, _, value = str(arg).partition("=")
        if key.strip() == name:
            return value.strip().strip("'\"") or None
    return None


def save_run_plan():
    """The plan the jobs' own parses reuse, saved when a run starts (Snakemake's onstart:
    never in a dry run or --lint, which write nothing)."""
    save_plan(PLAN, BATCHES, ARTEFACT_BATCHES, {n: headline(p) for n, p in PILLARS.items()})


def headline(pillar):
    """The pillar's headline metric (the column every ok row carries) for progress lines."""
    name = pillar.ok_metric
    found = [m for m in pillar.metrics if m.name == name]
    unit = found[0].unit if found else ""
    higher = found[0].higher_is_better if found else None
    return {"name": name, "unit": unit, "higher": higher}


def print_ending():
    """Where the answer is, and how many cells failed or diverged (Snakemake itself ends
    "100% done" and exit 0 when a cell's record says failed)."""
    if workflow.dryrun or os.environ.get(RUN_ENV):  # `sparsebench run` prints it itself
        return
    try:
        text = ending(BENCH, list(PILLARS))[0]
    except ValueError as e:  # a table the failed run left unreadable: say so, not a traceback
        text = f"sparsebench: {e}"
    print(f"\n{text}", flush=True)


def end_of_run(code):
    """What the workflow's end does besides the ending: release Snakemake's scheduler timers
    and, under `sparsebench run`, skip the interpreter's teardown."""
    release_scheduler_timers()
    if os.environ.get(RUN_ENV):
        exit_without_teardown(code)


def confirm_in_flight():
    if not workflow.dryrun:
        confirm_deaths(PENDING, RUN_START)


# Captions of the report's generic items (pillars' plot captions live with the pillars).
REPORT_CAPTIONS = Path(paths.__file__).parent / "rules" / "report"
# The environment of every rule under --use-conda (the same packages as the pip install).
CONDA_ENV = "../../envs/sparsebench.yaml"


def parallel_jobs(threads):
    """Jobs of `threads` threads Snakemake can run at once, locally or on a cluster (recorded
    next to wall-clock)."""
    return max(1, SLOTS // threads) if SLOTS else 1


def board_outputs(name):
    """A pillar's leaderboard files and plots (the HTML board and the plots flagged for
    --report)."""
    pillar = PILLARS[name]
    folder = paths.pillar_dir(BENCH, name)
    files = [str(f) for f in paths.board_files(BENCH, name) if f.suffix != ".html"]
    caption_dir = os.path.dirname(sys.modules[type(pillar).__module__].__file__)
    flag = report  # Snakemake's report() flag; a line may not start with the word
    plots = [
        flag(
            str(folder / plot.file),
            caption=os.path.join(caption_dir, plot.caption),
            category=pillar.title or name,
        )
        for plot in pillar.plots
    ]
    page = flag(
        str(folder / "leaderboard.html"),
        caption=str(REPORT_CAPTIONS / "leaderboard.rst"),
        category=pillar.title or name,
    )
    return files + [page] + plots


# Pending records are targets of `all` too: Snakemake does not remake a missing intermediate
# file while the files made from it exist, so a record removed by retry-failed (or a new cell)
# would otherwise be skipped. Their mtime then reruns the tables downstream.
PENDING = sorted(r for bs in BATCHES.values() for b in bs for r in b.records(BENCH))
ALL_BOARDS = [f for name in PILLARS for f in paths.board_files(BENCH, name)]
# Targets too, for the same reason: a table removed because it was broken is remade.
RUNS_TABLES = [str(paths.runs_table(BENCH, name)) for name in PILLARS]
SUMMARY = str(paths.summary(BENCH))
# The spec's claim files (judged by the rule claims at the end) and what that rule writes
# (claims.html flagged for --report).
CLAIM_FILES = SPEC.claim_files()
CLAIMS_OUT = (
    [str(paths.bench_dir(BENCH) / f"claims.{ext}") for ext in ("md", "json", "tex", "html")]
    if CLAIM_FILES
    else []
)


def claims_outputs():
    """CLAIMS_OUT with claims.html flagged for --report."""
    page = report(  # Snakemake's report() flag
        CLAIMS_OUT[-1], caption=str(REPORT_CAPTIONS / "claims.rst"), category="Claims"
    )
    return CLAIMS_OUT[:-1] + [page]

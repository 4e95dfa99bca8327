# Spec loading and validation (before any job starts) and job expansion.
import json
import os
import sys

from sparsebench.suite.spec import DEFAULT_SPEC, SpecError, load


def _load_spec():
    cli_files = [str(f) for f in workflow.overwrite_configfiles]
    if len(cli_files) > 1:
        sys.exit(f"sparsebench: give one --configfile (a whole spec), got {cli_files}")
    try:
        # Read the file with the suite's own YAML loader (1e-3 is a float, duplicate keys are
        # errors) rather than Snakemake's `config`, which would keep "1e-3" as a string.
        return load(cli_files[0] if cli_files else DEFAULT_SPEC)
    except SpecError as e:
        sys.exit(f"sparsebench: invalid spec: {e}")


SPEC = _load_spec()
BENCH = SPEC.benchmark
JOBS = {job.record_path: job for job in SPEC.jobs()}
SPEC_FILE = (
    str(workflow.overwrite_configfiles[-1]) if workflow.overwrite_configfiles else str(DEFAULT_SPEC)
)
THREADS = SPEC.data["threads"]


def _parallel_jobs(threads):
    """Jobs of `threads` threads Snakemake can run at once (recorded next to wall-clock
    figures); 1 when no --cores was given (dry runs, --report), where Snakemake refuses to tell
    the core count."""
    try:
        cores = workflow.cores
    except Exception:
        return 1
    return max(1, cores // threads) if isinstance(cores, int) else 1


PARALLEL_JOBS = _parallel_jobs(THREADS)
KERNEL_THREADS = SPEC.data.get("kernels", {}).get("threads", THREADS)
RECORDS = sorted(JOBS)
HESSIAN_CELLS = {cell.record_path: cell for cell in SPEC.hessian_cells()}
HESSIAN_RECORDS = sorted(HESSIAN_CELLS)
KERNEL_CELLS = {cell.record_path: cell for cell in SPEC.kernel_cells()}
KERNEL_RECORDS = sorted(KERNEL_CELLS)
# A spec with one pillar writes runs.parquet / leaderboard.md; next to another pillar the
# hessian and kernels tables get a prefix so the pillars' files do not collide.
_SEVERAL = sum(map(bool, (JOBS, HESSIAN_CELLS, KERNEL_CELLS))) > 1
HESSIAN_PREFIX = "hessian_" if _SEVERAL else ""
KERNELS_PREFIX = "kernels_" if _SEVERAL else ""
# Handed to `sparsebench run` through the environment, not the shell string: Snakemake reruns a
# job whose shell code changed, and neither the spec's path nor --cores changes a job's result.
os.environ["SPARSEBENCH_SPEC"] = SPEC_FILE
os.environ["SPARSEBENCH_PARALLEL_JOBS"] = str(PARALLEL_JOBS)
os.environ["SPARSEBENCH_KERNELS_PARALLEL_JOBS"] = str(_parallel_jobs(KERNEL_THREADS))
LEADERBOARD_FILES = (
    expand(
        "results/{bench}/{name}",
        bench=BENCH,
        name=["leaderboard.md", "leaderboard.csv", "leaderboard.json", "pareto.png"],
    )
    if JOBS
    else []
)
HESSIAN_FILES = (
    expand(
        "results/{bench}/{prefix}{name}",
        bench=BENCH,
        prefix=HESSIAN_PREFIX,
        name=["leaderboard.md", "leaderboard.csv", "leaderboard.json", "scaling.png"],
    )
    if HESSIAN_CELLS
    else []
)

KERNEL_FILES = (
    expand(
        "results/{bench}/{prefix}{name}",
        bench=BENCH,
        prefix=KERNELS_PREFIX,
        name=["leaderboard.md", "leaderboard.csv", "leaderboard.json", "speedup.png"],
    )
    if KERNEL_CELLS
    else []
)


def job_of(wildcards):
    path = (
        f"results/{wildcards.bench}/runs/{wildcards.task}/{wildcards.method}/"
        f"{wildcards.setting}/s{wildcards.sparsity}/seed{wildcards.seed}/record.json"
    )
    if path not in JOBS:
        raise ValueError(f"{path} is not a job of benchmark {BENCH!r} in {SPEC_FILE}")
    return JOBS[path]


def job_params(wildcards):
    """What defines a job's result: its method parameters, its task and how its sparse layers
    run (`execution`). A change to any reruns just the affected jobs (Snakemake's `params`
    rerun trigger)."""
    job = job_of(wildcards)
    task = SPEC.task(job.task)
    return json.dumps(
        {
            "method_params": json.loads(job.params_json),
            "task": task,
            "execution": SPEC.data["execution"],
        },
        sort_keys=True,
    )

# Hessian pillar: one Lightning job per (system, size, potential, method), then its own table,
# leaderboard and scaling plot.


def hessian_cell(wildcards):
    path = (
        f"results/{wildcards.bench}/hessian/{wildcards.system}/{wildcards.potential}/"
        f"{wildcards.method}/n{wildcards.size}/record.json"
    )
    if path not in HESSIAN_CELLS:
        raise ValueError(f"{path} is not a hessian job of benchmark {BENCH!r} in {SPEC_FILE}")
    return HESSIAN_CELLS[path]


def hessian_params(wildcards):
    """What defines a hessian job's result: its cell and the section's settings."""
    cell = hessian_cell(wildcards)
    section = {k: v for k, v in SPEC.data["hessian"].items() if k not in ("systems", "potentials")}
    return json.dumps({"params": cell.potential_params_json, **section}, sort_keys=True)


# Only with cells: with one pillar its tables are unprefixed, and the rules must not clash.
if HESSIAN_CELLS:

    rule hessian_job:
        output:
            "results/{bench}/hessian/{system}/{potential}/{method}/n{size}/record.json",
        log:
            "results/{bench}/logs/hessian/{system}/{potential}/{method}/n{size}.log",
        params:
            job=hessian_params,
        threads: THREADS
        shell:
            "sparsebench run-hessian --system {wildcards.system} --size {wildcards.size} "
            "--potential-tag {wildcards.potential} --method {wildcards.method} --out {output} "
            "--threads {threads} > {log} 2>&1"


    rule hessian_aggregate:
        input:
            HESSIAN_RECORDS,
        output:
            f"results/{{bench}}/{HESSIAN_PREFIX}runs.parquet",
        run:
            from sparsebench.suite.hessian_board import aggregate

            aggregate([Path(p) for p in input], Path(output[0]))


    rule hessian_leaderboard:
        input:
            f"results/{{bench}}/{HESSIAN_PREFIX}runs.parquet",
        output:
            md=f"results/{{bench}}/{HESSIAN_PREFIX}leaderboard.md",
            csv=f"results/{{bench}}/{HESSIAN_PREFIX}leaderboard.csv",
            json=f"results/{{bench}}/{HESSIAN_PREFIX}leaderboard.json",
            png=report(
                f"results/{{bench}}/{HESSIAN_PREFIX}scaling.png",
                caption="report/scaling.rst",
                category="Hessian",
            ),
        run:
            import polars as pl

            from sparsebench.suite.hessian_board import write_leaderboard

            write_leaderboard(pl.read_parquet(input[0]), Path(output.md).parent, HESSIAN_PREFIX)

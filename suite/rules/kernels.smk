# Kernels pillar: one Lightning job per (layer shape, sparsity, batch) timing every backend
# against dense and dense_mask in one process, then its own table, leaderboard and plot.


def kernel_cell(wildcards):
    path = (
        f"results/{wildcards.bench}/kernels/{wildcards.out_f}x{wildcards.in_f}/"
        f"s{wildcards.sparsity}/b{wildcards.batch}/record.json"
    )
    if path not in KERNEL_CELLS:
        raise ValueError(f"{path} is not a kernels job of benchmark {BENCH!r} in {SPEC_FILE}")
    return KERNEL_CELLS[path]


def kernel_params(wildcards):
    """What defines a kernels job's result besides its coordinates: the section's settings."""
    from sparsebench.suite.kernels_run import cell_params_json

    kernel_cell(wildcards)
    return cell_params_json(SPEC)


# Only with cells: with one pillar its tables are unprefixed, and the rules must not clash.
if KERNEL_CELLS:

    rule kernels_job:
        output:
            "results/{bench}/kernels/{out_f}x{in_f}/s{sparsity}/b{batch}/record.json",
        log:
            "results/{bench}/logs/kernels/{out_f}x{in_f}/s{sparsity}/b{batch}.log",
        params:
            job=kernel_params,
        threads: KERNEL_THREADS
        shell:
            "sparsebench run-kernels --out-features {wildcards.out_f} --in-features {wildcards.in_f} "
            "--sparsity {wildcards.sparsity} --batch {wildcards.batch} --out {output} "
            "--threads {threads} > {log} 2>&1"


    rule kernels_aggregate:
        input:
            KERNEL_RECORDS,
        output:
            f"results/{{bench}}/{KERNELS_PREFIX}runs.parquet",
        run:
            from sparsebench.suite.kernels_board import aggregate

            aggregate([Path(p) for p in input], Path(output[0]))


    rule kernels_leaderboard:
        input:
            f"results/{{bench}}/{KERNELS_PREFIX}runs.parquet",
        output:
            md=f"results/{{bench}}/{KERNELS_PREFIX}leaderboard.md",
            csv=f"results/{{bench}}/{KERNELS_PREFIX}leaderboard.csv",
            json=f"results/{{bench}}/{KERNELS_PREFIX}leaderboard.json",
            png=report(
                f"results/{{bench}}/{KERNELS_PREFIX}speedup.png",
                caption="report/speedup.rst",
                category="Kernels",
            ),
        run:
            import polars as pl

            from sparsebench.suite.kernels_board import write_leaderboard

            write_leaderboard(pl.read_parquet(input[0]), Path(output.md).parent, KERNELS_PREFIX)

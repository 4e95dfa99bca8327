# Records -> validated runs.parquet (pandera) -> leaderboard files and Pareto plot (polars).

# Only with dst/pruning tasks: a hessian-only spec writes its own runs.parquet.
if JOBS:

    rule aggregate:
        input:
            RECORDS,
        output:
            "results/{bench}/runs.parquet",
        run:
            from sparsebench.suite.leaderboard import aggregate

            aggregate([Path(p) for p in input], Path(output[0]))


    rule leaderboard:
        input:
            "results/{bench}/runs.parquet",
        output:
            md="results/{bench}/leaderboard.md",
            csv="results/{bench}/leaderboard.csv",
            json="results/{bench}/leaderboard.json",
            png=report(
                "results/{bench}/pareto.png",
                caption="report/pareto.rst",
                category="Leaderboard",
            ),
        run:
            import polars as pl

            from sparsebench.suite.leaderboard import write_leaderboard

            write_leaderboard(pl.read_parquet(input[0]), Path(output.md).parent)

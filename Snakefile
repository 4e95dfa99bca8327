# sparsebench workflow: spec -> every pillar's cells -> pending cells in batches (one job each,
# one record per cell) -> validated runs.parquet -> leaderboards -> summary.md. Thin on
# purpose: the pillars live in suite/pillars/, the generic rules in suite/rules/.
#
#   sparsebench run my_spec.yaml --cores 2               # the suite's command (progress, end)
#   snakemake --cores 2                                  # the embedded default spec
#   snakemake --cores 2 --config spec=my_spec.yaml        # your own spec
#   snakemake -n                                         # list the jobs


report: "suite/rules/report/workflow.rst"


include: "suite/rules/common.smk"
include: "suite/rules/pillars.smk"


rule all:
    input:
        SUMMARY,
        PENDING,
        RUNS_TABLES,
        # targets too: a one-pillar run's summary does not read the boards (its board job
        # writes it), and a removed board file must still be remade
        ALL_BOARDS,
        CLAIMS_OUT,
    default_target: True


onstart:
    refuse_unplaceable_gpu_cells()
    save_run_plan()
    import_pandas_meanwhile()


# The workflow is alive at its end: a cell still "in flight" died on its own (a crash, an
# out-of-memory kill), so its record stays failed. One killed together with the workflow never
# reaches this, and the next run redoes it.
onsuccess:
    confirm_in_flight()
    print_ending()
    end_of_run(0)


onerror:
    confirm_in_flight()
    print_ending()
    end_of_run(1)

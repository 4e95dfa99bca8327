# sparsebench workflow: spec -> every pillar's cells -> pending cells in batches (one job each,
# one record per cell) -> validated runs.parquet -> leaderboards -> summary.md. Thin on
# purpose: the pillars live in suite/pillars/, the generic rules in suite/rules/.
#
#   snakemake --cores 2                                  # the embedded default spec
#   snakemake --cores 2 --config spec=my_spec.yaml        # your own spec
#   snakemake -n                                         # list the jobs


include: "suite/rules/common.smk"
include: "suite/rules/pillars.smk"


rule all:
    input:
        SUMMARY,
        PENDING,
        CLAIMS_OUT,
    default_target: True

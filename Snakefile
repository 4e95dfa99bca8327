# sparsebench workflow: spec -> one job per (task x method setting x sparsity x seed), hessian
# cell and kernels cell -> records -> validated runs.parquet -> leaderboards. Thin on purpose:
# the logic lives in suite/.
#
#   snakemake --cores 2                                  # the embedded default spec
#   snakemake --cores 2 --configfile my_spec.yaml        # your own spec
#   snakemake -n                                         # list the jobs

include: "suite/rules/common.smk"
include: "suite/rules/classification.smk"
include: "suite/rules/aggregate.smk"
include: "suite/rules/hessian.smk"
include: "suite/rules/kernels.smk"


rule all:
    input:
        LEADERBOARD_FILES,
        HESSIAN_FILES,
        KERNEL_FILES,
    default_target: True

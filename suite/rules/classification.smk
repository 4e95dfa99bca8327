# One Lightning job per (task, method setting, sparsity, seed) of the dst and pruning pillars.


rule run_job:
    output:
        "results/{bench}/runs/{task}/{method}/{setting}/s{sparsity}/seed{seed}/record.json",
    log:
        "results/{bench}/logs/{task}/{method}/{setting}/s{sparsity}/seed{seed}.log",
    params:
        job=job_params,
        pillar=lambda wc: job_of(wc).pillar,
        method_params=lambda wc: job_of(wc).params_json,
    threads: THREADS
    shell:
        "sparsebench run {params.pillar} --task {wildcards.task} --method {wildcards.method} "
        "--params '{params.method_params}' --sparsity {wildcards.sparsity} "
        "--seed {wildcards.seed} --out {output} --threads {threads} > {log} 2>&1"

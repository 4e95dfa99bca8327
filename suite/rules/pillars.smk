# The generic rules of every pillar: its artefacts (models cells read, made once), its pending
# cells in batches (one job each, one record per cell), then board (runs table and
# leaderboard) per pillar, then summary.md. Expanded from the pillar registry; no rule
# names a pillar.

# Every missing artefact has a rule (artefacts of one batch key share a job); Snakemake runs it
# only when a pending cell (or another artefact) needs one of its files.
for _ab in ARTEFACT_BATCHES:

    rule:
        name:
            _ab.name
        input:
            _ab.inputs,
        output:
            _ab.outputs,
        log:
            str(paths.artefact_log(_ab.pillar, _ab.name)),
        params:
            artefacts=" ".join(f"--artefact {shlex.quote(a.id)}" for a in _ab.artefacts),
            pillar=_ab.pillar,
            python=PYTHON,
            spec=shlex.quote(SPEC_FILE),
        threads: _ab.threads
        resources:
            **cluster_resources(
                _ab.pillar, len(_ab.artefacts) * PILLARS[_ab.pillar].artefact_minutes, 0
            ),
        priority: 100  # before any cell: cells wait on artefacts
        conda:
            CONDA_ENV
        shell:
            "{params.python} -m sparsebench.suite.cli build {params.pillar} {params.artefacts} "
            "--spec {params.spec} --threads {threads} >> {log} 2>&1"


for _pillar, _batches in BATCHES.items():
    for _batch in _batches:

        rule:
            name:
                f"run_{_pillar}_{_batch.name}"
            input:
                _batch.inputs(BENCH),
            output:
                _batch.records(BENCH),
            log:
                str(paths.log(BENCH, _pillar, _batch.name)),
            params:
                trigger=_batch.trigger,
                cells=" ".join(f"--cell {shlex.quote(c.id)}" for c in _batch.cells),
                pillar=_pillar,
                parallel_jobs=parallel_jobs(_batch.threads),
                python=PYTHON,
                spec=shlex.quote(SPEC_FILE),
            threads: _batch.threads
            resources:
                **cluster_resources(_pillar, _batch.minutes, _batch.gpus),
            priority: _batch.priority
            conda:
                CONDA_ENV
            shell:
                "{params.python} -m sparsebench.suite.cli cells {params.pillar} {params.cells} "
                "--spec {params.spec} --parallel-jobs {params.parallel_jobs} "
                "--threads {threads} >> {log} 2>&1"


# A spec of one pillar: its board job writes the summary too (one job less on the way to the
# answer, and another start of polars and pandera saved).
ONE_BOARD = len(PILLARS) == 1

for _pillar in PILLARS:

    # Exactly the spec's records (not every record under the folder: a cell removed from
    # the spec leaves the table) -> runs.parquet -> the board, in one job: a second job
    # per pillar would pay another start (polars, pandera) for the board, which reads only
    # the table this job has just written. The job computes the record list from the spec
    # (the same list as the rule's input): a command line could not hold it.
    rule:
        name:
            f"board_{_pillar}"
        input:
            RECORDS[_pillar],
        output:
            str(paths.runs_table(BENCH, _pillar)),
            board_outputs(_pillar),
            [SUMMARY] if ONE_BOARD else [],
        log:
            str(paths.log(BENCH, _pillar, "board")),
        params:
            bench=lambda w, output: os.path.dirname(os.path.dirname(output[0])),
            pillar=_pillar,
            python=PYTHON,
            spec=shlex.quote(SPEC_FILE),
            summary="--summary" if ONE_BOARD else "",
        conda:
            CONDA_ENV
        shell:
            "{params.python} -m sparsebench.suite.cli aggregate {params.bench:q} "
            "--pillar {params.pillar} --spec {params.spec} --board {params.summary} "
            "> {log} 2>&1"


if not ONE_BOARD:

    rule summary:
        input:
            ALL_BOARDS,
        output:
            SUMMARY,
        log:
            str(paths.bench_dir(BENCH) / "logs" / "summary.log"),
        params:
            bench=lambda w, output: os.path.dirname(output[0]),
            python=PYTHON,
        conda:
            CONDA_ENV
        shell:
            "{params.python} -m sparsebench.suite.cli summary {params.bench:q} > {log} 2>&1"


# Papers' claims judged against every pillar's table (only when the spec lists claim files).
if CLAIM_FILES:

    rule claims:
        input:
            tables=[str(paths.runs_table(BENCH, name)) for name in PILLARS],
            files=CLAIM_FILES,
        output:
            claims_outputs(),
        log:
            str(paths.bench_dir(BENCH) / "logs" / "claims.log"),
        params:
            bench=lambda w, output: os.path.dirname(output[0]),
            python=PYTHON,
        conda:
            CONDA_ENV
        shell:
            "{params.python} -m sparsebench.suite.cli claims {params.bench:q} {input.files:q} "
            "> {log} 2>&1"

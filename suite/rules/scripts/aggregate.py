# Snakemake script of the rules aggregate_<pillar>: exactly the spec's records -> runs.parquet.
# A script, not `run:` (which re-parses the whole workflow in a new process) nor the CLI (the
# record list can be longer than a command line).
from pathlib import Path

from sparsebench.suite.tables import aggregate

sm = snakemake  # noqa: F821 - injected by Snakemake
runs = aggregate(sm.params.pillar, [Path(p) for p in sm.input], Path(sm.output[0]))
Path(sm.log[0]).write_text(f"{runs.height} rows from {len(sm.input)} records\n")

# Snakemake script of the rules aggregate_<pillar>: exactly the spec's records -> runs.parquet.
# A script, not `run:` (which re-parses the whole workflow in a new process) nor the CLI (the
# record list can be longer than a command line).
import sys
from pathlib import Path

from sparsebench.suite.schemas import TableError
from sparsebench.suite.tables import aggregate

sm = snakemake  # noqa: F821 - injected by Snakemake
try:
    runs = aggregate(sm.params.pillar, [Path(p) for p in sm.input], Path(sm.output[0]))
    Path(sm.log[0]).write_text(f"{runs.height} rows from {len(sm.input)} records\n")
except TableError as e:  # a clean message in the log and on the terminal, no traceback
    Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(sm.log[0]).write_text(f"error: {e}\n")
    sys.exit(f"error: {e}")

# Snakemake script of the rules board_<pillar>: exactly the spec's records -> runs.parquet ->
# the pillar's board. A script, not `run:` (which re-parses the whole workflow in a new
# process) nor the CLI (the record list can be longer than a command line).
import sys
from pathlib import Path

from sparsebench.suite.schemas import TableError
from sparsebench.suite.tables import aggregate, write_board

sm = snakemake  # noqa: F821 - injected by Snakemake
try:
    table = Path(sm.output[0])
    runs = aggregate(sm.params.pillar, [Path(p) for p in sm.input], table)
    files = write_board(sm.params.pillar, table)
    Path(sm.log[0]).write_text(
        f"{runs.height} rows from {len(sm.input)} records\n"
        + "\n".join(map(str, files.values()))
        + "\n"
    )
except TableError as e:  # a clean message in the log and on the terminal, no traceback
    Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(sm.log[0]).write_text(f"error: {e}\n")
    sys.exit(f"error: {e}")

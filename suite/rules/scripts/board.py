# Snakemake script of the rules leaderboard_<pillar>: runs.parquet -> the pillar's board.
import sys
from pathlib import Path

from sparsebench.suite.schemas import TableError
from sparsebench.suite.tables import write_board

sm = snakemake  # noqa: F821 - injected by Snakemake
try:
    write_board(sm.params.pillar, Path(sm.input[0]), log=sm.log[0])
except TableError as e:  # a clean message in the log and on the terminal, no traceback
    Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(sm.log[0]).write_text(f"error: {e}\n")
    sys.exit(f"error: {e}")

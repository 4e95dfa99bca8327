# Snakemake script of the rule summary: every pillar's table -> results/<bench>/summary.md.
import sys
from pathlib import Path

from sparsebench.suite.schemas import TableError
from sparsebench.suite.tables import write_summary

sm = snakemake  # noqa: F821 - injected by Snakemake
try:
    write_summary(Path(sm.output[0]).parent, log=sm.log[0])
except TableError as e:  # a clean message in the log and on the terminal, no traceback
    Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(sm.log[0]).write_text(f"error: {e}\n")
    sys.exit(f"error: {e}")

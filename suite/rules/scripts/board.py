# Snakemake script of the rules leaderboard_<pillar>: runs.parquet -> the pillar's board.
from pathlib import Path

from sparsebench.suite.tables import write_board

sm = snakemake  # noqa: F821 - injected by Snakemake
write_board(sm.params.pillar, Path(sm.input[0]), log=sm.log[0])

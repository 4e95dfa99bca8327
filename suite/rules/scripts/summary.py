# Snakemake script of the rule summary: every pillar's table -> results/<bench>/summary.md.
from pathlib import Path

from sparsebench.suite.tables import write_summary

sm = snakemake  # noqa: F821 - injected by Snakemake
write_summary(Path(sm.output[0]).parent, log=sm.log[0])

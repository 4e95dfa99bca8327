"""Paper reproduction checks: claim files -> verdicts against a benchmark's runs tables.

``claims/<paper>.yaml`` (format: docs/claims.md, schema: ``claim.schema.json``) states a
paper's claims over leaderboard cells; :func:`judge_all` judges each one ``holds``, ``fails``
or ``inconclusive`` from the records alone, and :func:`write` writes ``claims.{md,json,tex}``
into ``results/<bench>/``. ``sparsebench claims`` and the Snakemake rule ``claims`` call them;
:func:`judge_pillar` judges the shipped claims about one pillar for its board.
"""

from pathlib import Path

from .judge import VERDICTS, CellStat, Verdict, judge, judge_all, judge_pillar
from .outputs import badge, macro_name, write
from .parse import Claim, ClaimError, load_file, load_files

# The claim files that ship with the suite (claims/ at the top of the checkout).
BUILTIN = Path(__file__).resolve().parents[2] / "claims"

__all__ = [
    "BUILTIN",
    "VERDICTS",
    "CellStat",
    "Claim",
    "ClaimError",
    "Verdict",
    "badge",
    "judge",
    "judge_all",
    "judge_pillar",
    "load_file",
    "load_files",
    "macro_name",
    "write",
]

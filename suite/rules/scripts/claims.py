# Snakemake script of the rule claims: the spec's claim files + every pillar's runs table ->
# results/<bench>/claims.{md,json,tex} (verdicts from the records alone).
import sys
from pathlib import Path

from sparsebench.suite import claims

sm = snakemake  # noqa: F821 - injected by Snakemake
try:
    bench = Path(sm.output[0]).parent
    verdicts = claims.judge_all(claims.load_files(list(sm.input.files)), bench)
    claims.write(verdicts, bench)
    Path(sm.log[0]).write_text(
        "\n".join(f"{v.verdict}: {v.claim.id}: {v.reason}" for v in verdicts)
        + f"\n{claims.badge(verdicts)}\n"
    )
except claims.ClaimError as e:  # a clean message in the log and on the terminal
    Path(sm.log[0]).parent.mkdir(parents=True, exist_ok=True)
    Path(sm.log[0]).write_text(f"error: {e}\n")
    sys.exit(f"error: {e}")

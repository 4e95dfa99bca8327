"""Whether the machines that will run a spec's jobs have a GPU.

A cell that needs one (:attr:`Cell.gpus`) runs where the executor puts it: on this machine
for Snakemake's local executor, on a cluster's nodes under the SLURM executor, where the
machine that submits (a login node) usually has none. So the question is asked when a run
starts, of the executor's machines, and a run whose GPU cells cannot be placed is refused
then with the reason, instead of failing one job at a time or, on a cluster without GPUs,
waiting in the queue forever.
"""

from __future__ import annotations

import shutil
import subprocess

# Executors whose jobs run on this machine.
LOCAL = ("local", "dryrun", "touch")


def local_problem() -> str | None:
    """Why this machine cannot run a GPU cell (None: it can)."""
    import torch

    if torch.cuda.is_available():
        return None
    return "torch sees no CUDA GPU on this machine"


def parse_gres(lines: str) -> list[str]:
    """The GPU entries of ``sinfo -h -o '%P %G'`` output (one ``PARTITION GRES`` line per
    partition and node group; GRES ``(null)`` when a node has none, else comma-separated
    ``name[:type]:count[(S:...)]`` entries)."""
    found = []
    for line in lines.splitlines():
        parts = line.split(None, 1)
        if len(parts) < 2:
            continue
        for entry in parts[1].split(","):
            if entry.strip().split(":", 1)[0] == "gpu":
                found.append(f"{parts[0]} {entry.strip()}")
    return found


def slurm_problem(timeout: float = 30) -> str | None:
    """Why the SLURM cluster cannot run a GPU cell (None: a partition has GPU nodes)."""
    if shutil.which("sinfo") is None:
        return "sinfo is not installed here, so the cluster's GPUs cannot be listed"
    try:
        out = subprocess.run(["sinfo", "-h", "-o", "%P %G"], capture_output=True, text=True,
                             timeout=timeout)  # fmt: skip
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {timeout:g} s"
    if out.returncode != 0:
        return f"sinfo failed: {out.stderr.strip() or out.returncode}"
    if parse_gres(out.stdout):
        return None
    seen = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return (
        "the SLURM cluster has no GPU: no partition lists a gpu GRES "
        f"(sinfo -o '%P %G': {'; '.join(seen) or 'no partitions'})"
    )


def problem(executor: str) -> str | None:
    """Why ``executor``'s machines cannot run a GPU cell, or None."""
    if executor in LOCAL:
        return local_problem()
    if executor == "slurm":
        return slurm_problem()
    return None  # another cluster executor: its own scheduler says


def refusal(executor: str, cells: list[str]) -> str | None:
    """The message that refuses a run whose ``cells`` (ids) need a GPU, or None."""
    if not cells:
        return None
    why = problem(executor)
    if why is None:
        return None
    shown = ", ".join(cells[:5]) + (f" and {len(cells) - 5} more" if len(cells) > 5 else "")
    return (
        f"sparsebench: {len(cells)} cell(s) need a GPU ({shown}), but {why}; nothing was "
        "started. Run them where there is one (a GPU partition: profiles/slurm's "
        "slurm_partition), or use a CPU setting (kernels.device: cpu; classification "
        "execution: cpu or dense_mask)"
    )

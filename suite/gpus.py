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

# The executor whose jobs run on this machine (dry runs start nothing, so never ask).
LOCAL = "local"
# Node states (sinfo %t) in which a node takes no job: its GPUs do not count.
UNUSABLE = ("down", "drain", "drng", "fail", "failg", "maint", "unk", "inval", "futr", "boot")


def local_problem() -> str | None:
    """Why this machine cannot run a GPU cell (None: it can)."""
    import torch

    if torch.cuda.is_available():
        return None
    return "torch sees no CUDA GPU on this machine"


def gpu_entries(gres: str) -> list[str]:
    """The GPU entries of one ``sinfo`` GRES field: ``(null)`` when a node has none, else
    comma-separated ``name[:type]:count[(S:...)]`` entries, a socket list possibly holding
    commas of its own (``gpu:a100:4(S:0,2)``)."""
    entries, depth, current = [], 0, ""
    for ch in gres:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            entries.append(current)
            current = ""
        else:
            current += ch
    entries.append(current)
    return [e.strip() for e in entries if e.strip().split(":", 1)[0] == "gpu"]


def parse_sinfo(lines: str) -> list[str]:
    """The usable GPU groups of ``sinfo -h -o '%P %a %t %G'`` output (one line per partition
    and node state: PARTITION AVAIL STATE GRES): a partition that is ``up``, nodes that take
    jobs (not down, drained, failing, ...) and a ``gpu`` GRES."""
    found = []
    for line in lines.splitlines():
        parts = line.split(None, 3)
        if len(parts) < 4:
            continue
        partition, avail, state, gres = parts
        if avail != "up" or state.rstrip("*~#!%$@^-") in UNUSABLE:
            continue
        found += [f"{partition.rstrip('*')} {entry}" for entry in gpu_entries(gres)]
    return found


def slurm_problem(partition: str | None = None, timeout: float = 30) -> str | None:
    """Why the SLURM cluster cannot run a GPU cell in ``partition`` (the jobs' partition;
    None: the cluster's default, so any) -- None when an up partition has usable GPU nodes."""
    if shutil.which("sinfo") is None:
        return "sinfo is not installed here, so the cluster's GPUs cannot be listed"
    cmd = ["sinfo", "-h", "-o", "%P %a %t %G"] + (["-p", partition] if partition else [])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"sinfo did not answer within {timeout:g} s"
    if out.returncode != 0:
        return f"sinfo failed: {out.stderr.strip() or out.returncode}"
    if parse_sinfo(out.stdout):
        return None
    where = f"partition {partition!r}" if partition else "the SLURM cluster"
    seen = sorted({line.strip() for line in out.stdout.splitlines() if line.strip()})
    return (
        f"{where} has no GPU a job can use: no up partition with nodes taking jobs lists a "
        f"gpu GRES (sinfo -o '%P %a %t %G'{' -p ' + partition if partition else ''}: "
        f"{'; '.join(seen) or 'nothing'})"
    )


def problem(executor: str, partition: str | None = None) -> str | None:
    """Why ``executor``'s machines cannot run a GPU cell, or None."""
    if executor == LOCAL:
        return local_problem()
    if executor == "slurm":
        return slurm_problem(partition)
    return None  # another cluster executor: its own scheduler says


def refusal(executor: str, cells: list[str], partition: str | None = None) -> str | None:
    """The message that refuses a run whose ``cells`` (ids) need a GPU, or None."""
    if not cells:
        return None
    why = problem(executor, partition)
    if why is None:
        return None
    shown = ", ".join(cells[:5]) + (f" and {len(cells) - 5} more" if len(cells) > 5 else "")
    return (
        f"sparsebench: {len(cells)} cell(s) need a GPU ({shown}), but {why}; nothing was "
        "started. Run them where there is one (a GPU partition: profiles/slurm's "
        "slurm_partition), or choose the CPU setting of their pillar's section "
        "(`sparsebench validate SPEC` names the GPU cells)"
    )

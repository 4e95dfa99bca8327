"""Whether the machines that run the jobs have a GPU (suite/gpus.py), and which cells ask."""

from __future__ import annotations

import subprocess

import pytest

from sparsebench.suite import gpus
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.spec import validate

# sinfo -h -o '%P %a %t %G' as Slurm 22.05 prints it: a CPU partition, GPU nodes (typed GRES,
# a socket list with a comma of its own) of which some are drained, and a partition that is down
SINFO = """cpu* up idle (null)
gpu up mix gpu:a100:4(S:0,2),shard:8
gpu up drain gpu:2
old down idle gpu:v100:1
"""


def test_gpu_entries_are_read_from_sinfos_gres_column():
    assert gpus.gpu_entries("gpu:a100:4(S:0,2),shard:8") == ["gpu:a100:4(S:0,2)"]
    assert gpus.gpu_entries("(null)") == [] and gpus.gpu_entries("tmpdisk:100,gpux:1") == []
    assert gpus.gpu_entries("gpu:2,gpu:t4:1") == ["gpu:2", "gpu:t4:1"]
    # only up partitions, and nodes that take jobs (not drained, down, ...)
    assert gpus.parse_sinfo(SINFO) == ["gpu gpu:a100:4(S:0,2)"]
    assert gpus.parse_sinfo("gpu up drain* gpu:2\ngpu up down~ gpu:2\n\n") == []
    assert gpus.parse_sinfo("gpu* up idle gpu:2\n") == ["gpu gpu:2"]


def _sinfo(monkeypatch, stdout, code=0, stderr=""):
    asked = []

    def fake(cmd, **kw):
        asked.append(cmd)
        return subprocess.CompletedProcess(cmd, code, stdout=stdout, stderr=stderr)

    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(gpus.subprocess, "run", fake)
    return asked


def test_a_partition_without_usable_gpus_is_named_with_what_sinfo_said(monkeypatch):
    asked = _sinfo(monkeypatch, "cpu up idle (null)\n")
    why = gpus.slurm_problem("cpu")
    assert asked[-1] == ["sinfo", "-h", "-o", "%P %a %t %G", "-p", "cpu"]  # the jobs' partition
    assert why == (
        "partition 'cpu' has no GPU a job can use: no up partition with nodes taking jobs lists "
        "a gpu GRES (sinfo -o '%P %a %t %G' -p cpu: cpu up idle (null))"
    )
    message = gpus.refusal("slurm", [f"c{i}" for i in range(7)], "cpu")
    assert message.startswith("sparsebench: 7 cell(s) need a GPU (c0, c1, c2, c3, c4 and 2 more)")
    assert why in message and "nothing was started" in message
    assert gpus.refusal("slurm", [], "cpu") is None  # no GPU cell: nothing to ask
    # no partition named: the cluster's, every partition counts
    _sinfo(monkeypatch, "gpu up drain gpu:2\n")
    assert gpus.slurm_problem().startswith("the SLURM cluster has no GPU a job can use")
    _sinfo(monkeypatch, SINFO)
    assert gpus.slurm_problem() is None and gpus.refusal("slurm", ["c0"]) is None


def test_sinfo_that_fails_or_is_missing_is_a_reason(monkeypatch):
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert "sinfo is not installed" in gpus.slurm_problem()
    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/sinfo")

    def hangs(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, kw["timeout"])

    monkeypatch.setattr(gpus.subprocess, "run", hangs)
    assert gpus.slurm_problem(timeout=3) == "sinfo did not answer within 3 s"
    down = "slurm_load_partitions: Unable to contact slurm controller"
    _sinfo(monkeypatch, "", 1, down)
    assert gpus.slurm_problem() == f"sinfo failed: {down}"


def test_local_runs_ask_torch_and_other_executors_their_scheduler(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpus.problem("local") == "torch sees no CUDA GPU on this machine"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpus.problem("local") is None
    assert gpus.problem("kubernetes") is None  # another cluster's scheduler answers itself


@pytest.mark.parametrize(
    ("pillar", "change", "needs"),
    [
        ("kernels", {"device": "cuda"}, 1),
        ("kernels", {"device": "cpu"}, 0),
        ("classification", {"execution": "triton"}, 1),
        ("classification", {"execution": "cpu"}, 0),
        ("classification", {}, 0),
    ],
)
def test_cells_that_need_a_gpu_say_so_and_validate_on_a_machine_without_one(
    pillar, change, needs, monkeypatch
):
    """The spec is valid on a machine without a GPU (a cluster's submitting machine); the
    cells carry the need, which the run's start checks where the jobs will run."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    p = get_pillar(pillar)
    section = p.example()
    section[pillar].update(change)
    spec = validate({"benchmark": "g", "data_root": "/nonexistent", **section}, source="g.yaml")
    assert {c.gpus for c in p.cells(spec)} == {needs}

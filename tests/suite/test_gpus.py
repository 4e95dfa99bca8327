"""Whether the machines that run the jobs have a GPU (suite/gpus.py), and which cells ask."""

from __future__ import annotations

import subprocess

import pytest

from sparsebench.suite import gpus
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.spec import validate

# sinfo -h -o '%P %G' as Slurm 22.05 prints it: a CPU partition, a GPU one with typed GRES
SINFO = "cpu* (null)\ngpu gpu:a100:4(S:0-1),shard:8\nbig tmpdisk:100\n"


def test_gpu_entries_are_read_from_sinfos_gres_column():
    assert gpus.parse_gres(SINFO) == ["gpu gpu:a100:4(S:0-1)"]
    assert gpus.parse_gres("cpu* (null)\nbig tmpdisk:100,gpux:1\n\n") == []


def test_a_cluster_without_gpus_is_named_with_what_sinfo_said(monkeypatch):
    def fake(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 0, stdout="cpu* (null)\n", stderr="")

    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/" + name)
    monkeypatch.setattr(gpus.subprocess, "run", fake)
    why = gpus.slurm_problem()
    assert why == "the SLURM cluster has no GPU: no partition lists a gpu GRES " \
        "(sinfo -o '%P %G': cpu* (null))"  # fmt: skip
    message = gpus.refusal("slurm", [f"c{i}" for i in range(7)])
    assert message.startswith("sparsebench: 7 cell(s) need a GPU (c0, c1, c2, c3, c4 and 2 more)")
    assert why in message and "nothing was started" in message
    assert gpus.refusal("slurm", []) is None  # no GPU cell: nothing to ask

    monkeypatch.setattr(gpus.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, stdout=SINFO, stderr=""))  # fmt: skip
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
    answer = subprocess.CompletedProcess(["sinfo"], 1, "", down)
    monkeypatch.setattr(gpus.subprocess, "run", lambda cmd, **kw: answer)
    assert gpus.slurm_problem() == f"sinfo failed: {down}"


def test_local_runs_ask_torch_and_other_executors_their_scheduler(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gpus.problem("local") == "torch sees no CUDA GPU on this machine"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert gpus.problem("local") is None
    assert gpus.problem("kubernetes") is None


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

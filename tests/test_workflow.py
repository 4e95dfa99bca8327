"""End to end: a tiny spec through Snakemake, in a temporary folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[1]
TINY = """
benchmark: tiny
data_root: {data}
classification:
  infer: {{batch_size: 8, repeats: 2}}
  tasks:
    digits_mlp:
      dataset: digits
      model: lenet300_100
      recipe: {{epochs: 1, batch_size: 64, lr: 0.05}}
  methods:
    dense: {{}}
    rigl: {{update_interval: 5}}
  sparsities: [0.9]
  seeds: [0]
"""


def _snakemake(tmp_path, *args):
    """Snakemake as `.venv/bin/snakemake` without an activated venv: the venv's bin folder is
    *not* on PATH, so the jobs must run through the interpreter that runs Snakemake."""
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d",
           str(tmp_path), "--config", f"spec={tmp_path / 'tiny.yaml'}", *args]  # fmt: skip
    return subprocess.run(
        cmd, capture_output=True, text=True, env=dict(os.environ, PATH=path), timeout=300
    )


HESSIAN = """
hessian:
  systems: {alkane: {sizes: [3, 6]}}
  potentials: {pair: {}, schnet: {}}
  methods: [dense, colored, truncated]
"""

KERNELS = """
kernels:
  shapes: [[64, 32]]
  sparsities: [0.5, 0.9]
  batches: [4]
  backends: [torch_csr, cpu, semi_structured]
  repeats: 3
  warmup: 1
"""


def _mtimes(folder):
    return {p: p.stat().st_mtime_ns for p in folder.glob("*/runs/**/record.json")}


# A minute of three pillars' jobs: in `make test-slow` (CI runs it), which keeps `make test`
# under five minutes; the toy pillar's tests cover reruns within `make test`.
@pytest.mark.slow
def test_mixed_spec_end_to_end_reruns_nothing_then_only_what_changed(tmp_path):
    """Classification (with execution: cpu) + hessian + kernels in one spec: each pillar's
    files in its own folder; a rerun does nothing; a changed parameter reruns only its cells;
    retry-failed reruns only the failed cell."""
    tiny = TINY.format(data=tmp_path / "data").replace(
        "  seeds: [0]\n", "  seeds: [0]\n  execution: cpu\n"
    )
    spec = tiny + HESSIAN + KERNELS
    (tmp_path / "tiny.yaml").write_text(spec)
    run = _snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    bench = tmp_path / "results" / "tiny"
    assert sorted(p.name for p in bench.iterdir()) == [
        "classification", "hessian", "kernels", "logs", "summary.md"]  # fmt: skip
    plots = {"classification": "pareto.png", "hessian": "scaling.png", "kernels": "speedup.png"}
    for pillar, plot in plots.items():
        for name in ["runs.parquet", "leaderboard.md", "leaderboard.csv", "leaderboard.json", plot]:
            assert (bench / pillar / name).is_file(), (pillar, name)
    assert not list(bench.glob("*_*"))  # no prefixed files
    summary = (bench / "summary.md").read_text()
    for pillar in plots:
        assert f"{pillar}/leaderboard.md" in summary

    # classification
    folder = bench / "classification"
    runs = pl.read_parquet(folder / "runs.parquet")
    assert sorted(runs["method"]) == ["dense", "rigl"] and runs["status"].to_list() == ["ok"] * 2
    assert set(runs["pillar"]) == {"classification"} and set(runs["family"]) == {"dst"}
    assert set(runs["execution"]) == {"cpu"}
    rec = json.loads(next(folder.glob("runs/**/rigl/**/record.json")).read_text())
    assert rec["parallel_jobs"] == 2 and rec["threads"] == 1
    assert rec["cell_id"] == "digits_mlp/rigl/" + rec["setting_id"] + "/s0.9/seed0"
    assert "rigl" in (folder / "leaderboard.md").read_text()
    # the cell's learning curve beside its record: one epoch of losses and accuracy
    curve = pl.read_csv(next(folder.glob("runs/**/rigl/**/metrics.csv")))
    assert {"epoch", "train_loss", "val_loss", "val_acc", "test_acc"} <= set(curve.columns)
    assert curve["val_acc"].drop_nulls().len() == 1  # epochs: 1
    # hessian
    h = pl.read_parquet(bench / "hessian" / "runs.parquet")
    assert h.height == 10 and set(h["status"]) == {"ok"}
    assert h.filter(pl.col("method") == "colored")["rel_err"].max() <= 1e-10
    # kernels: 2 cells x (dense, dense_mask, torch_csr, cpu, semi_structured) x 3 ops
    k = pl.read_parquet(bench / "kernels" / "runs.parquet")
    assert k.height == 2 * 5 * 3
    ok = k.filter(pl.col("status") == "ok")
    assert set(ok["backend"]) == {"dense", "dense_mask", "torch_csr", "cpu"}
    assert ok.filter(pl.col("backend") != "dense")["max_abs_err"].max() < 1e-4
    skipped = k.filter(pl.col("backend") == "semi_structured")
    assert set(skipped["status"]) == {"skipped"} and skipped["error"].is_not_null().all()

    again = _snakemake(tmp_path, "-n", "--cores", "2")
    assert "Nothing to be done" in again.stdout + again.stderr

    # One rerun checks both kinds of "only what is missing" (one Snakemake run less than two):
    # a changed method parameter is a new setting, so only its cell runs (the old record stays
    # on disk but leaves the table: Snakemake aggregates the spec's records); a failed cell
    # removed by retry-failed runs again, and no other record is rewritten.
    path = bench / "hessian" / "runs" / "alkane" / "schnet" / "colored" / "n6" / "record.json"
    rec = json.loads(path.read_text())
    rec.update(status="failed", error="simulated", wall_s=None)
    path.write_text(json.dumps(rec))
    before = _mtimes(bench)
    from sparsebench.suite.cli import main

    assert main(["retry-failed", str(bench)]) == 0
    assert not path.exists() and (bench / "hessian" / "runs.parquet").exists()  # tables kept
    (tmp_path / "tiny.yaml").write_text(spec.replace("update_interval: 5", "update_interval: 4"))
    rerun = _snakemake(tmp_path, "--cores", "2")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(path.read_text())["status"] == "ok"
    after = _mtimes(bench)
    new = sorted(str(p.relative_to(bench)) for p in set(after) - set(before) - {path})
    assert len(new) == 1 and new[0].startswith("classification/runs/digits_mlp/rigl/")
    assert {p for p in after if after[p] != before.get(p)} == {path, bench / new[0]}
    runs = pl.read_parquet(folder / "runs.parquet")
    assert runs.height == 2 and new[0].split("/")[4] in set(runs["setting_id"])
    assert set(pl.read_parquet(bench / "hessian" / "runs.parquet")["status"]) == {"ok"}


def test_bad_spec_stops_before_any_job(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(data="d").replace("rigl:", "rigel:"))
    run = _snakemake(tmp_path, "-n")
    assert run.returncode != 0
    assert "unknown method 'rigel'" in run.stderr + run.stdout
    assert "tiny.yaml" in run.stderr + run.stdout


def test_snakemake_lint_is_clean():
    run = subprocess.run(
        [sys.executable, "-m", "snakemake", "--lint", "-s", str(REPO / "Snakefile")],
        capture_output=True, text=True, cwd=REPO, timeout=300,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Lints for" not in run.stdout + run.stderr


def test_a_spec_is_data_whatever_it_holds(tmp_path):
    """The workflow reads the spec through the suite's loader only: a YTE template's
    expression is never evaluated and an alias bomb is refused at once."""
    marker = tmp_path / "ran"
    (tmp_path / "tiny.yaml").write_text(
        "__use_yte__: true\n"
        f"benchmark: ?__import__('pathlib').Path({str(marker)!r}).touch() or 'tiny'\n"
        + TINY.format(data="d").split("\n", 2)[2]
    )
    run = _snakemake(tmp_path, "-n")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "unknown key '__use_yte__'" in out and "tiny.yaml" in out
    assert not marker.exists()
    bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]\n" for i in range(1, 9)
    )
    (tmp_path / "tiny.yaml").write_text(bomb)
    run = _snakemake(tmp_path, "-n")
    out = run.stdout + run.stderr
    assert run.returncode != 0 and "tiny.yaml" in out and "aliases" in out


def test_configfile_and_unknown_config_keys_are_refused_with_the_safe_command(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(data="d"))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d",
           str(tmp_path), "-n", "--configfile", str(tmp_path / "tiny.yaml")]  # fmt: skip
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    out = run.stdout + run.stderr
    assert run.returncode != 0 and f"--config spec={tmp_path / 'tiny.yaml'}" in out
    run = _snakemake(tmp_path, "lr=3", "-n")  # one more KEY=VALUE after spec=
    assert run.returncode != 0 and "--config lr=...: unknown key" in run.stdout + run.stderr


def test_a_gpu_cell_on_a_machine_without_one_is_refused_before_any_job(tmp_path):
    """The run's start asks the executor's machines (here: this one) for the GPU its cells
    need; nothing runs and no record is written."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    (tmp_path / "tiny.yaml").write_text(
        "benchmark: tiny\nkernels:\n  shapes: [[16, 8]]\n  sparsities: [0.5]\n  batches: [2]\n"
        "  backends: [torch_csr]\n  device: cuda\n  repeats: 3\n"
    )
    run = _snakemake(tmp_path, "--cores", "1")
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "1 cell(s) need a GPU (16x8/s0.5/b2), but torch sees no CUDA GPU on this machine" in out
    assert not list(tmp_path.glob("results/tiny/kernels/runs/**/record.json"))

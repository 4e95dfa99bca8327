"""End to end: a tiny spec through Snakemake, in a temporary folder."""

import json
import os
import subprocess
import sys
from pathlib import Path

import polars as pl

REPO = Path(__file__).resolve().parents[1]
TINY = """
benchmark: tiny
data_root: {data}
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
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-s",
            str(REPO / "Snakefile"),
            "-d",
            str(tmp_path),
            "--configfile",
            str(tmp_path / "tiny.yaml"),
            *args,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_tiny_spec_runs_end_to_end_and_reruns_nothing(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(data=tmp_path / "data"))
    run = _snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    bench = tmp_path / "results" / "tiny"
    for name in [
        "runs.parquet",
        "leaderboard.md",
        "leaderboard.csv",
        "leaderboard.json",
        "pareto.png",
    ]:
        assert (bench / name).is_file(), name
    runs = pl.read_parquet(bench / "runs.parquet")
    assert sorted(runs["method"]) == ["dense", "rigl"]
    assert runs["status"].to_list() == ["ok", "ok"]
    rec = json.loads(next(bench.glob("runs/**/rigl/**/record.json")).read_text())
    assert rec["parallel_jobs"] == 2 and rec["threads"] == 1
    assert "rigl" in (bench / "leaderboard.md").read_text()

    again = _snakemake(tmp_path, "-n", "--cores", "1")
    assert "Nothing to be done" in again.stdout + again.stderr

    # A failed job is retried by retry-failed + the same command, and only that job reruns.
    path = next(bench.glob("runs/**/rigl/**/record.json"))
    rec.update(status="failed", error="simulated", test_acc=None)
    path.write_text(json.dumps(rec))
    dense_record = next(bench.glob("runs/**/dense/**/record.json"))
    dense_mtime = dense_record.stat().st_mtime
    from sparsebench.suite.cli import main

    assert main(["retry-failed", str(bench)]) == 0
    rerun = _snakemake(tmp_path, "--cores", "2")
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(path.read_text())["status"] == "ok"
    assert dense_record.stat().st_mtime == dense_mtime
    assert pl.read_parquet(bench / "runs.parquet")["status"].to_list() == ["ok", "ok"]


def test_bad_spec_stops_before_any_job(tmp_path):
    (tmp_path / "tiny.yaml").write_text(TINY.format(data="d").replace("rigl:", "rigel:"))
    run = _snakemake(tmp_path, "-n")
    assert run.returncode != 0
    assert "unknown method 'rigel'" in run.stderr + run.stdout
    assert "tiny.yaml" in run.stderr + run.stdout


HESSIAN = """
benchmark: hess
hessian:
  systems: {alkane: {sizes: [3, 6]}}
  potentials: {pair: {}, schnet: {}}
  methods: [dense, colored, truncated]
"""


def test_hessian_spec_runs_end_to_end(tmp_path):
    (tmp_path / "tiny.yaml").write_text(HESSIAN)
    run = _snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    bench = tmp_path / "results" / "hess"
    for name in [
        "runs.parquet",
        "leaderboard.md",
        "leaderboard.csv",
        "leaderboard.json",
        "scaling.png",
    ]:
        assert (bench / name).is_file(), name
    runs = pl.read_parquet(bench / "runs.parquet")
    assert runs.height == 10 and set(runs["status"]) == {"ok"}
    exact = runs.filter(pl.col("method") == "colored")
    assert exact["rel_err"].max() <= 1e-10


KERNELS = """
kernels:
  shapes: [[64, 32]]
  sparsities: [0.5, 0.9]
  batches: [4]
  backends: [torch_csr, cpu, semi_structured]
  repeats: 3
  warmup: 1
"""


def test_tasks_with_cpu_execution_and_a_kernels_section(tmp_path):
    spec = TINY.format(data=tmp_path / "data") + "execution: cpu\n" + KERNELS
    (tmp_path / "tiny.yaml").write_text(spec)
    run = _snakemake(tmp_path, "--cores", "2")
    assert run.returncode == 0, run.stderr[-3000:]
    bench = tmp_path / "results" / "tiny"
    runs = pl.read_parquet(bench / "runs.parquet")
    assert set(runs["status"]) == {"ok"} and set(runs["execution"]) == {"cpu"}
    for name in ["runs.parquet", "leaderboard.md", "leaderboard.json", "speedup.png"]:
        assert (bench / f"kernels_{name}").is_file(), name  # prefixed next to the tasks' tables
    k = pl.read_parquet(bench / "kernels_runs.parquet")
    # 2 cells x (dense, dense_mask, torch_csr, cpu, semi_structured) x 3 ops
    assert k.height == 2 * 5 * 3
    ok = k.filter(pl.col("status") == "ok")
    assert set(ok["backend"]) == {"dense", "dense_mask", "torch_csr", "cpu"}
    assert ok.filter(pl.col("backend") != "dense")["max_abs_err"].max() < 1e-4
    skipped = k.filter(pl.col("backend") == "semi_structured")
    assert set(skipped["status"]) == {"skipped"} and skipped["error"].is_not_null().all()

"""The truly-sparse-training benchmark's script runs end to end (tiny width, no timing claims:
performance is what the benchmark itself reports, never a test)."""

from __future__ import annotations

import json

import pytest
import torch

from sparsebench.kernels import SparseLinear
from sparsebench.kernels.bench_training import Runner, Setting, main


def test_every_variant_trains_on_its_own_representation():
    s = Setting(0.9, 8, "adam", width=32)
    x, y = torch.randn(8, 784), torch.randint(10, (8,))
    for variant in ("dense", "dense_mask", "cpu", "sparse", "sparse_set", "sparse_rigl"):
        run = Runner(variant, s)
        before = {n: p.detach().clone() for n, p in run.model.named_parameters()}
        phases = run.step(x, y, update=False)
        assert set(phases) == {"forward", "backward", "optimizer", "topology"}
        moved = [n for n, p in run.model.named_parameters() if not torch.equal(p, before[n])]
        assert moved, variant
        values_only = any(isinstance(m, SparseLinear) for m in run.model.modules())
        assert values_only == variant.startswith("sparse"), variant
        if variant in ("sparse_set", "sparse_rigl"):
            nnz = {n: layer.nnz for n, layer in run.store.sparse.items()}
            flat = {n: layer.flat_index.clone() for n, layer in run.store.sparse.items()}
            assert run.step(x, y, update=True)["topology"] > 0
            assert {n: layer.nnz for n, layer in run.store.sparse.items()} == nnz
            assert any(not torch.equal(flat[n], layer.flat_index)
                       for n, layer in run.store.sparse.items())  # fmt: skip


def test_the_script_writes_its_json_and_tables(tmp_path, capsys):
    assert main(["--quick", "--width", "16", "--no-memory", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "bench.json").read_text())
    variants = {r["variant"] for r in result["steps"]}
    assert {"dense", "dense_mask", "cpu", "sparse", "sparse_set", "sparse_rigl"} <= variants
    assert all(r["step_ms"] > 0 for r in result["steps"])
    assert {r["width"] for r in result["width_sweep"]} == {4, 8, 16, 32}
    assert result["commit"] == "unknown" or len(result["commit"].split("+")[0]) == 40
    out = capsys.readouterr().out
    assert "sparse ÷ dense" in out and "update share over ΔT = 100" in out
    assert "peak memory not measured: --no-memory" in out and "| sparsity (batch 64" not in out


@pytest.mark.parametrize(
    ("argv", "match"),
    [
        (["--threads", "0"], "--threads must be >= 1"),
        (["--width", "3"], "--width must be >= 16"),
        (["--out", "/proc/nope/x"], "--out /proc/nope/x: cannot write there"),
    ],
)
def test_bad_arguments_are_refused_before_any_timing(argv, match, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    assert match in capsys.readouterr().err

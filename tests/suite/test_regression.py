"""Fixed-seed regression: cells of the default spec give, bit for bit on CPU, the metrics that
the commit before the pillar refactor (6a0c107) recorded for the same cells. A change of any
of these numbers is a change of results, to be explained, never re-pinned silently."""

from __future__ import annotations

from pathlib import Path

from sparsebench.suite.job import run_batch
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.spec import load

DEFAULT = Path(__file__).parents[2] / "suite/benchmarks/default.yaml"

# From results of 6a0c107 (records of `make bench`'s cells, torch 2.14.1, CPU).
RIGL_090_SEED0 = {"test_acc": 0.9319999814033508, "test_loss": 0.3150685131549835,
                  "train_flops": 11425729920.0, "actual_sparsity": 0.9}  # fmt: skip
COLORED_ALKANE10_PAIR = {"n_colors": 33, "nnz": 3186, "n_atoms": 32, "max_row_atoms": 15}


def _run(tmp_path, pillar_name, cell_id):
    spec = load(DEFAULT)
    spec.data["data_root"] = str(tmp_path / "data")
    pillar = get_pillar(pillar_name)
    cell = next(c for c in pillar.cells(spec) if c.id == cell_id)
    [record] = run_batch(spec, pillar, [cell], root=tmp_path, progress=lambda m: None)
    assert record["status"] == "ok", record["error"]
    return record


def test_rigl_cell_of_the_default_spec_is_unchanged(tmp_path):
    rec = _run(tmp_path, "classification", "mnist5k_lenet300/rigl/default/s0.9/seed0")
    assert {k: rec[k] for k in RIGL_090_SEED0} == RIGL_090_SEED0


def test_colored_hessian_cell_of_the_default_spec_is_unchanged(tmp_path):
    rec = _run(tmp_path, "hessian", "alkane/pair/colored/n10")
    assert {k: rec[k] for k in COLORED_ALKANE10_PAIR} == COLORED_ALKANE10_PAIR
    assert rec["rel_err"] < 1e-14 and rec["err_reference"] == "dense"

"""Fixed-seed regression: cells of the default spec give, bit for bit on CPU, the metrics that
the commit before the pillar refactor (6a0c107) recorded for the same cells. A change of any
of these numbers is a change of results, to be explained, never re-pinned silently."""

from __future__ import annotations

from pathlib import Path

from sparsebench.suite.job import run_batch
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.spec import load

DEFAULT = Path(__file__).parents[2] / "suite/benchmarks/default.yaml"

# From results of 6a0c107 (records of `make bench`'s cells, torch 2.14.1, CPU), re-pinned on
# 2026-12-01 for one explained change: RigL's update iterations moved from 0-based iteration
# ΔT-1, 2ΔT-1, ... to 0, ΔT, 2ΔT, ... as in the reference (issue 11). With that shift undone
# (iteration and drop fraction offset by one) the cell still gave the 6a0c107 numbers bit for
# bit (test_acc 0.9319999814033508, test_loss 0.3150685131549835, train_flops 11425729920.0).
# Bit for bit holds on one CPU, not across CPU models: MKL and oneDNN take other code paths
# (and so other float summation orders) on other CPUs. Each entry is the exact result on a
# machine this suite has run on; any other value fails. The second was measured on 2026-12-02
# on an AMD EPYC (AVX-512) machine, at the commit the first was pinned for (291a867, from a
# clean clone): test_acc and train_flops agree, test_loss differs by 0.3 % (0.32263 vs
# 0.32368). A new machine may add its entry only with the same check (the earlier commit's
# cell reproduced on it first). The third is CI's machine and an Intel Xeon (AVX-512) of
# 2026-12-02, which agree bit for bit with each other (test_acc 0.9330, one test image of
# 1,000, test_loss 0.32751); the check stood in for: on 2026-12-03, on an AMD EPYC, this
# test at b62584c gave the second entry bit for bit, so the code path is the one pinned at
# 291a867 and the change is the CPU's.
RIGL_090_SEED0 = (
    {"test_acc": 0.9340000152587891, "test_loss": 0.3236812949180603,
     "train_flops": 11456396160.0, "actual_sparsity": 0.9},
    {"test_acc": 0.9340000152587891, "test_loss": 0.3226286768913269,
     "train_flops": 11456396160.0, "actual_sparsity": 0.9},
    {"test_acc": 0.9330000281333923, "test_loss": 0.32750651240348816,
     "train_flops": 11456396160.0, "actual_sparsity": 0.9},
)  # fmt: skip
COLORED_ALKANE10_PAIR = {"n_colors": 33, "nnz": 3186, "n_atoms": 32, "max_row_atoms": 15}


def _run(tmp_path, pillar_name, cell_id, methods=None):
    spec = load(DEFAULT)
    spec.data["data_root"] = str(tmp_path / "data")
    if methods is not None:
        spec.data["classification"]["methods"] = methods
    pillar = get_pillar(pillar_name)
    cell = next(c for c in pillar.cells(spec) if c.id == cell_id)
    [record] = run_batch(spec, pillar, [cell], root=tmp_path, progress=lambda m: None)
    assert record["status"] == "ok", record["error"]
    return record


def test_rigl_cell_of_the_default_spec_is_unchanged(tmp_path):
    """RigL at its defaults (ERK, update at step 0) on the default spec's task."""
    methods = {"rigl": {}}
    spec = load(DEFAULT)
    spec.data["classification"]["methods"] = methods
    [cell] = [c for c in get_pillar("classification").cells(spec) if c.id.endswith("s0.9/seed0")]
    rec = _run(tmp_path, "classification", cell.id, methods)
    assert {k: rec[k] for k in RIGL_090_SEED0[0]} in RIGL_090_SEED0


def test_colored_hessian_cell_of_the_default_spec_is_unchanged(tmp_path):
    rec = _run(tmp_path, "hessian", "alkane/pair/colored/n10")
    assert {k: rec[k] for k in COLORED_ALKANE10_PAIR} == COLORED_ALKANE10_PAIR
    assert rec["rel_err"] < 1e-14 and rec["err_reference"] == "dense"

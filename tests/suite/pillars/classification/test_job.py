import json

import pytest

from sparsebench.suite import paths
from sparsebench.suite.job import run_batch, run_one
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.record import write_json_atomic
from sparsebench.suite.spec import validate

METRICS = [
    "test_acc",
    "test_loss",
    "val_acc",
    "val_loss",
    "actual_sparsity",
    "train_flops",
    "inference_flops",
    "params_nonzero",
    "steps",
]
PILLAR = get_pillar("classification")


def spec_data(tmp_path, **recipe) -> dict:
    """A one-epoch RigL spec on digits (LeNet-300-100, 90 %, seeds 0, 3, 4), as a dict."""
    r = {"epochs": 1, "batch_size": 64, "lr": 0.05, **recipe}
    return {
        "benchmark": "t",
        "data_root": str(tmp_path / "data"),
        "classification": {
            "infer": {"batch_size": 8, "repeats": 2},
            "tasks": {
                "d": {"dataset": "digits", "model": "lenet300_100", "recipe": r},
            },
            "methods": {"rigl": {"update_interval": 5}},
            "sparsities": [0.9],
            "seeds": [0, 3, 4],
        },
    }


def _spec(tmp_path, **recipe):
    spec = validate(spec_data(tmp_path, **recipe), source="test.yaml")
    # A task whose files vanish after validation (validation itself refuses a missing dataset).
    tasks = spec.data["classification"]["tasks"]
    tasks["m"] = {**tasks["d"], "dataset": "mnist"}
    return spec


def _cell(spec, task, seed, method="rigl", sparsity=0.9):
    cells = {c.id: c for c in PILLAR.cells(spec)}
    setting = next(c.setting_id for c in cells.values() if c.method == method)
    return cells[f"{task}/{method}/{setting}/s{sparsity:g}/seed{seed}"]


def _run(spec, cell, out):
    return run_one(spec, PILLAR, cell, state=None, out=out, parallel_jobs=1)


def test_same_seed_gives_identical_metrics(tmp_path):
    spec = _spec(tmp_path)
    cell = _cell(spec, "d", seed=3)
    assert json.loads(cell.params_json)["update_interval"] == 5
    a = _run(spec, cell, tmp_path / "a.json")
    b = _run(spec, cell, tmp_path / "b.json")
    assert a["status"] == "ok", a["error"]
    assert {k: a[k] for k in METRICS} == {k: b[k] for k in METRICS}
    c = _run(spec, _cell(spec, "d", seed=4), tmp_path / "c.json")
    assert c["test_loss"] != a["test_loss"]
    assert a["actual_sparsity"] == pytest.approx(0.9, abs=0.005)
    assert a["train_flops_rel_dense"] < 0.2 and a["inference_flops_rel_dense"] < 0.2
    assert json.loads((tmp_path / "a.json").read_text())["test_acc"] == a["test_acc"]
    # The record carries the cell's identity next to its metrics.
    assert a["pillar"] == "classification" and a["family"] == "dst"
    assert a["cell_id"] == cell.id and a["label"] == cell.label
    assert a["trigger"] == cell.trigger_hash and a["cell_s"] > 0
    # What the run ended with: RigL keeps its start's ERK layer counts, changes its masks at
    # every scheduled update, and its effective density is at most its density.
    assert a["distribution"] == a["allocation"] == "erk" and a["init"] == "default"
    assert a["allocation_shift"] < 1e-3
    assert a["mask_updates"] == a["regrowth_updates"] >= 2
    assert 0 < a["effective_density"] <= 1 - a["actual_sparsity"] + 1e-12


def test_missing_dataset_writes_a_failed_record(tmp_path):
    spec = _spec(tmp_path)
    rec = _run(spec, _cell(spec, "m", seed=0), tmp_path / "f.json")
    assert rec["status"] == "failed"
    assert "DatasetNotFoundError" in rec["error"] and str(tmp_path / "data") in rec["error"]
    assert rec["test_acc"] is None
    assert json.loads((tmp_path / "f.json").read_text())["status"] == "failed"


def test_missing_dataset_in_a_batch_fails_only_its_cells(tmp_path):
    # The batch's shared set-up (prepare) loads each task's data once; a task that cannot be
    # loaded fails its own cells, not the batch's others.
    spec = _spec(tmp_path)
    cells = [_cell(spec, "m", seed=0), _cell(spec, "d", seed=0)]
    records = run_batch(spec, PILLAR, cells, root=tmp_path / "results", progress=lambda m: None)
    assert [r["status"] for r in records] == ["failed", "ok"]
    assert "DatasetNotFoundError" in records[0]["error"]
    for cell, rec in zip(cells, records):
        on_disk = paths.record("t", "classification", cell.id, tmp_path / "results")
        assert json.loads(on_disk.read_text())["status"] == rec["status"]


def test_diverging_run_writes_a_diverged_record(tmp_path):
    spec = _spec(tmp_path, lr=1e12, momentum=0.0)
    rec = _run(spec, _cell(spec, "d", seed=0), tmp_path / "d.json")
    assert rec["status"] == "diverged"
    assert "training loss is" in rec["error"]
    assert rec["test_acc"] is None


def test_atomic_write_keeps_the_old_record_when_writing_fails(tmp_path):
    path = tmp_path / "r.json"
    write_json_atomic(path, {"status": "ok"})
    with pytest.raises(TypeError):
        write_json_atomic(path, {"status": object()})
    assert json.loads(path.read_text()) == {"status": "ok"}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left behind


def test_records_carry_the_mask_update_wall_clock(tmp_path):
    """regrowth_s / regrowth_updates: the seconds and the number of the method's mask updates
    (as its schedule says), null for a method that never updates its masks."""
    spec = validate(
        {
            "benchmark": "t",
            "data_root": str(tmp_path / "data"),
            "classification": {
                "infer": {"batch_size": 8, "repeats": 2},
                "tasks": {
                    "d": {
                        "dataset": "digits",
                        "model": "lenet300_100",
                        "recipe": {"epochs": 3, "batch_size": 64, "lr": 0.05},
                    }
                },
                "methods": {
                    "cht": {"early_stop": False},
                    "rigl": {"update_interval": 5},
                    "static": {},
                },
                "sparsities": [0.9],
                "seeds": [0],
            },
        },
        source="test.yaml",
    )
    cells = PILLAR.cells(spec)
    recs = {r["method"]: r for r in run_batch(spec, PILLAR, cells, root=tmp_path)}
    assert all(r["status"] == "ok" for r in recs.values()), [r["error"] for r in recs.values()]
    cht, rigl, static = recs["cht"], recs["rigl"], recs["static"]
    # CHT evolves at the end of every epoch but the last: epochs 1 and 2 of 3.
    assert cht["regrowth_updates"] == 2
    assert isinstance(cht["regrowth_s"], float) and 0.0 <= cht["regrowth_s"] < cht["train_wall_s"]
    # RigL: iterations 0, 5, 10, ... < T_end = int(0.75 * steps).
    assert rigl["regrowth_updates"] == len(range(0, int(0.75 * rigl["steps"]), 5))
    assert rigl["regrowth_s"] >= 0.0
    assert static["regrowth_s"] is None and static["regrowth_updates"] is None


def test_allocation_shift_is_the_largest_move_away_from_the_start_allocation():
    import torch
    from torch import nn

    from sparsebench.suite.pillars.classification.job import allocation_shift
    from sparsebench.suite.pillars.classification.masks import MaskStore

    store = MaskStore(nn.Sequential(nn.Linear(10, 10), nn.Linear(10, 10)))
    assert allocation_shift(store, "uniform", 0.5) is None  # dense
    a = torch.zeros(10, 10, dtype=torch.bool)
    a[:, :5] = True
    b = a.clone()
    store.set_masks({"0": a, "1": b})
    assert allocation_shift(store, "uniform", 0.5) == 0.0
    b = torch.zeros(10, 10, dtype=torch.bool)
    b[:, :2] = True
    a[:, 5:8] = True  # 80 and 20 of 100: the global density stays 0.5
    store.set_masks({"0": a, "1": b})
    assert allocation_shift(store, "uniform", 0.5) == pytest.approx(0.3)
    assert allocation_shift(store, "global", 0.5) is None

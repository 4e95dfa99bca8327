import json

import pytest

from sparsebench.suite.record import write_json_atomic
from sparsebench.suite.run import JobArgs, run_and_record
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


def _spec(tmp_path, **recipe):
    r = {"epochs": 1, "batch_size": 64, "lr": 0.05, **recipe}
    spec = validate(
        {
            "benchmark": "t",
            "data_root": str(tmp_path / "data"),
            "infer": {"batch_size": 8, "repeats": 2},
            "tasks": {
                "d": {"dataset": "digits", "model": "lenet300_100", "recipe": r},
            },
            "methods": {"rigl": {"update_interval": 5}},
            "sparsities": [0.9],
        },
        source="test.yaml",
    )
    # A task whose files vanish after validation (validation itself refuses a missing dataset).
    spec.data["tasks"]["m"] = {**spec.data["tasks"]["d"], "dataset": "mnist"}
    return spec


def test_same_seed_gives_identical_metrics(tmp_path):
    spec = _spec(tmp_path)
    job = JobArgs("d", "rigl", {"update_interval": 5}, 0.9, seed=3)
    a = run_and_record(spec, job, tmp_path / "a.json")
    b = run_and_record(spec, job, tmp_path / "b.json")
    assert a["status"] == "ok", a["error"]
    assert {k: a[k] for k in METRICS} == {k: b[k] for k in METRICS}
    c = run_and_record(
        spec, JobArgs("d", "rigl", {"update_interval": 5}, 0.9, seed=4), tmp_path / "c.json"
    )
    assert c["test_loss"] != a["test_loss"]
    assert a["actual_sparsity"] == pytest.approx(0.9, abs=0.005)
    assert a["train_flops_rel_dense"] < 0.2 and a["inference_flops_rel_dense"] < 0.2
    assert json.loads((tmp_path / "a.json").read_text())["test_acc"] == a["test_acc"]


def test_missing_dataset_writes_a_failed_record(tmp_path):
    rec = run_and_record(_spec(tmp_path), JobArgs("m", "rigl", {}, 0.9, 0), tmp_path / "f.json")
    assert rec["status"] == "failed"
    assert "DatasetNotFoundError" in rec["error"] and str(tmp_path / "data") in rec["error"]
    assert rec["test_acc"] is None
    assert json.loads((tmp_path / "f.json").read_text())["status"] == "failed"


def test_diverging_run_writes_a_diverged_record(tmp_path):
    rec = run_and_record(
        _spec(tmp_path, lr=1e12, momentum=0.0),
        JobArgs("d", "rigl", {"update_interval": 5}, 0.9, 0),
        tmp_path / "d.json",
    )
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

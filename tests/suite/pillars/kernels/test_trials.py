"""Trials of the kernels pillar: each cell measured in several independent jobs, one record
each, the medians over them on the board and the trials themselves in the claims."""

import json

import polars as pl
import pytest
import yaml

from sparsebench.suite import claims, paths, tables, workflow
from sparsebench.suite.job import run_one
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.kernels.board import (
    break_even,
    leaderboard,
    speedup_pivot,
    write_leaderboard,
)
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("kernels")


def _spec(**kernels):
    section = {
        "shapes": [[24, 40]],
        "sparsities": [0.5, 0.9],
        "batches": [3],
        "backends": ["torch_csr"],
        "ops": ["forward"],
        "repeats": 3,
        "warmup": 0,
        **kernels,
    }
    return validate({"benchmark": "k-trials", "kernels": section}, source="k.yaml")


def test_trials_are_cells_of_their_own_with_the_same_configuration():
    cells = _spec(trials=3).cells("kernels")
    assert [c.id for c in cells] == [
        "24x40/s0.5/b3",
        "24x40/s0.5/b3/trial1",
        "24x40/s0.5/b3/trial2",
        "24x40/s0.9/b3",
        "24x40/s0.9/b3/trial1",
        "24x40/s0.9/b3/trial2",
    ]
    assert [c.label for c in cells[:3]] == [
        "24x40 sparsity 0.5 batch 3",
        "24x40 sparsity 0.5 batch 3 trial 1",
        "24x40 sparsity 0.5 batch 3 trial 2",
    ]
    assert [c.columns["trial"] for c in cells] == [0, 1, 2, 0, 1, 2]
    # the same configuration: seed, trigger (so weights, inputs and masks) and columns
    assert {c.seed for c in cells} == {0} and len({c.trigger_hash for c in cells}) == 1
    same = {k: v for k, v in cells[0].columns.items() if k != "trial"}
    assert all({k: v for k, v in c.columns.items() if k != "trial"} == same for c in cells[:3])
    # each trial a job of its own (independent processes), never two trials in one
    assert [c.batch for c in cells[:3]] == ["kernels", "kernels/trial1", "kernels/trial2"]
    jobs = workflow.batches("k-trials-nowhere", {"kernels": cells}, cores=None)["kernels"]
    assert sorted(len({c.columns["trial"] for c in b.cells}) for b in jobs) == [1, 1, 1]


def test_one_trial_keeps_todays_ids_labels_and_triggers():
    for spec in (_spec(), _spec(trials=1)):
        cells = spec.cells("kernels")
        assert [c.id for c in cells] == ["24x40/s0.5/b3", "24x40/s0.9/b3"]
        assert [c.label for c in cells] == [
            "24x40 sparsity 0.5 batch 3",
            "24x40 sparsity 0.9 batch 3",
        ]
        assert [c.batch for c in cells] == ["kernels", "kernels"]
        assert [c.columns["trial"] for c in cells] == [0, 0]
        # trials is no part of a cell's trigger: raising it reruns no existing record
        assert "trials" not in cells[0].trigger
    assert (
        _spec().cells("kernels")[0].trigger_hash == _spec(trials=3).cells("kernels")[0].trigger_hash
    )


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, "k.yaml: kernels.trials: 0 is less than the minimum of 1"),
        (-2, "k.yaml: kernels.trials: -2 is less than the minimum of 1"),
        (1.5, "k.yaml: kernels.trials: expected integer, got 1.5"),
    ],
)
def test_trials_below_one_are_refused(value, expected):
    with pytest.raises(SpecError) as e:
        _spec(trials=value)
    assert expected in str(e.value), str(e.value)


def test_trial_records_make_one_validated_table(tmp_path):
    spec = _spec(sparsities=[0.5], trials=2)
    records = []
    for cell in spec.cells("kernels"):
        out = paths.record_in(tmp_path, cell.id)
        rec = run_one(spec, PILLAR, cell, state=None, out=out, parallel_jobs=1)
        assert rec["status"] == "ok", rec["error"]
        records.append(out)
    assert json.loads(records[1].read_text())["trial"] == 1
    runs = tables.aggregate("kernels", records, tmp_path / "runs.parquet")
    # dense, dense_mask and torch_csr forward, in each of the 2 trials
    assert runs.height == 2 * 3 and sorted(set(runs["trial"])) == [0, 1]
    assert runs.schema["trial"] == pl.Int64
    # a record from before trials is trial 0
    old = {"cell_id": "24x40/s0.5/b3", "rows": [{"backend": "cpu", "op": "forward"}]}
    assert PILLAR.table_rows(old)[0]["trial"] == 0


def _row(trial: int, backend: str, sparsity: float, speedup: float, ms: float) -> dict:
    """A kernels row of 4096 x 4096, batch 64, forward, 2 threads: trial ``trial``."""
    suffix = (f"/trial{trial}", f" trial {trial}") if trial else ("", "")
    return {"benchmark": "k", "pillar": "kernels",
            "cell_id": f"4096x4096/s{sparsity}/b64{suffix[0]}",
            "label": f"4096x4096 sparsity {sparsity} batch 64{suffix[1]}", "trial": trial,
            "seed": 0, "backend": backend, "op": "forward", "batch": 64, "in_features": 4096,
            "out_features": 4096, "pattern": "random", "sparsity": sparsity, "nnz": 100,
            "status": "ok", "error": None, "device": "cpu", "threads": 2, "dtype": "float32",
            "ms_median": ms, "ms_p10": ms, "ms_p90": ms, "dense_ms": ms * speedup,
            "dense_mask_ms": 2 * ms * speedup, "speedup_vs_dense": speedup,
            "speedup_vs_dense_mask": 2 * speedup, "speedup_vs_torch_csr": 2.0,
            "gflops_effective": 1.0, "max_abs_err": 1e-6 * (trial + 1)}  # fmt: skip


def test_the_board_shows_the_median_over_trials_and_judges_the_trials(tmp_path, monkeypatch):
    # cpu at 95 %: 9, 10, 11 (ms 1.1, 1.0, 0.9); dense_mask at 95 %: 1 in each trial
    runs = pl.DataFrame(
        [
            _row(t, "cpu", 0.95, x, ms)
            for t, x, ms in ((0, 9.0, 1.1), (1, 10.0, 1.0), (2, 11.0, 0.9))
        ]
        + [_row(t, "dense_mask", 0.95, 1.0, 5.0) for t in range(3)]
    )
    board = leaderboard(runs)
    assert board.height == 2  # one line per configuration, not per trial
    cpu = board.filter(pl.col("backend") == "cpu").row(0, named=True)
    assert cpu["trials"] == 3 and cpu["speedup_vs_dense"] == 10.0 and cpu["ms_median"] == 1.0
    assert cpu["max_abs_err"] == pytest.approx(3e-6)  # the worst trial's
    assert speedup_pivot(runs)["cpu"].to_list() == [10.0]
    assert break_even(runs).filter(pl.col("backend") == "cpu")["break_even_sparsity"][0] == 0.95
    # the board's claims: a claim file of our own (the shipped ones are judged elsewhere)
    claim = {"id": "k-1", "statement": "s", "source": {"where": "T1", "setting": "x"},
             "why": "w", "test": {"kind": "value", "a": {"backend": "cpu", "sparsity": 0.95},
                                  "op": ">", "bound": 5.0}}  # fmt: skip
    folder = tmp_path / "claims"
    folder.mkdir()
    (folder / "k.yaml").write_text(yaml.safe_dump({
        "paper": {"key": "k2026", "authors": "A", "year": 2026, "title": "T"},
        "defaults": {"pillar": "kernels", "metric": "speedup_vs_dense"},
        "claims": [claim],
    }))  # fmt: skip
    monkeypatch.setattr(claims, "BUILTIN", folder)
    files = write_leaderboard(runs, tmp_path)
    md = files["md"].read_text()
    assert "medians over the trials" in md
    data = json.loads(files["json"].read_text())
    assert len(data["rows"]) == 2 and {r["trials"] for r in data["rows"]} == {3}
    # judged on the 3 trials: 10 ± 4.3027 / sqrt(3) = 10 ± 2.484, above 5
    [verdict] = data["claims"]
    assert verdict["verdict"] == "holds" and verdict["estimate"] == pytest.approx(10.0)
    assert "[7.516, 12.48]" in verdict["test"]

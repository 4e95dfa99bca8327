"""Trials of the hessian pillar: each cell timed in several independent jobs, one record each,
the medians over them on the board."""

import json

import polars as pl
import pytest

from sparsebench.suite import paths, tables
from sparsebench.suite.job import run_one
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.hessian.board import (
    leaderboard,
    scaling_exponents,
    write_leaderboard,
)
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("hessian")


def _spec(**hessian):
    section = {
        "systems": {"alkane": {"sizes": [3]}},
        "potentials": {"pair": {}},
        "methods": ["dense", "colored"],
        **hessian,
    }
    return validate({"benchmark": "h-trials", "hessian": section}, source="h.yaml")


def test_trials_are_cells_of_their_own_with_the_same_configuration():
    cells = _spec(trials=2).cells("hessian")
    assert [c.id for c in cells] == [
        "alkane/pair/dense/n3",
        "alkane/pair/dense/n3/trial1",
        "alkane/pair/colored/n3",
        "alkane/pair/colored/n3/trial1",
    ]
    assert [c.label for c in cells[:2]] == [
        "alkane n=3 pair dense",
        "alkane n=3 pair dense trial 1",
    ]
    assert [c.columns["trial"] for c in cells] == [0, 1, 0, 1]
    assert {c.seed for c in cells} == {0} and len({c.trigger_hash for c in cells}) == 1
    # trial 1 of the (system, potential) runs in a process of its own
    assert [c.batch for c in cells] == ["alkane/pair", "alkane/pair/trial1"] * 2


def test_one_trial_keeps_todays_ids_and_triggers():
    for spec in (_spec(), _spec(trials=1)):
        cells = spec.cells("hessian")
        assert [c.id for c in cells] == ["alkane/pair/dense/n3", "alkane/pair/colored/n3"]
        assert [c.label for c in cells] == ["alkane n=3 pair dense", "alkane n=3 pair colored"]
        assert [c.columns["trial"] for c in cells] == [0, 0] and "trials" not in cells[0].trigger
    assert _spec().cells()[0].trigger_hash == _spec(trials=4).cells()[0].trigger_hash


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, "h.yaml: hessian.trials: 0 is less than the minimum of 1"),
        ("3", "h.yaml: hessian.trials: expected integer, got '3'"),
    ],
)
def test_trials_below_one_are_refused(value, expected):
    with pytest.raises(SpecError) as e:
        _spec(trials=value)
    assert expected in str(e.value), str(e.value)


def test_trial_records_table_and_a_board_of_medians(tmp_path):
    spec = _spec(methods=["colored"], trials=3)
    records = []
    for cell in spec.cells("hessian"):
        out = paths.record_in(tmp_path, cell.id)
        rec = run_one(spec, PILLAR, cell, state=None, out=out, parallel_jobs=1)
        assert rec["status"] == "ok", rec["error"]
        records.append(out)
    runs = tables.aggregate("hessian", records, tmp_path / "runs.parquet")
    assert runs["trial"].to_list() == [0, 1, 2]
    board = leaderboard(runs)
    assert board.height == 1 and board["trials"].to_list() == [3]
    assert board["wall_s"][0] == pytest.approx(runs["wall_s"].median())
    files = write_leaderboard(runs, tmp_path)
    assert "medians over the trials" in files["md"].read_text()
    assert len(json.loads(files["json"].read_text())["rows"]) == 1
    assert PILLAR.table_rows({"cell_id": "x"})[0]["trial"] == 0  # written before trials


def test_the_scaling_fit_uses_one_point_per_size():
    # 3 trials per size, medians 1, 2, 4 at 400, 800, 1600 atoms: exponent 1
    rows = [
        {"system": "a", "potential": "p", "method": "colored", "status": "ok", "trial": t,
         "n_atoms": n, "wall_s": w * f, "n_hvps": 30}
        for n, w in ((400, 1.0), (800, 2.0), (1600, 4.0))
        for t, f in enumerate((0.5, 1.0, 3.0))
    ]  # fmt: skip
    expo = scaling_exponents(pl.DataFrame(rows))
    assert expo["exponent"][0] == pytest.approx(1.0) and expo["sizes"][0] == 3

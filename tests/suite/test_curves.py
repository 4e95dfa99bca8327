"""Learning curves: metrics.csv files as Lightning's CSVLogger writes them, gathered per cell."""

import json

import pytest

from sparsebench.suite import paths
from sparsebench.suite.curves import CurveError, find_curves, plot_curves

# CSVLogger writes one row per log call: validation and training metrics of an epoch on
# separate rows, the test metrics on a row of their own after the last epoch
CSV = """epoch,step,test_acc,train_loss,val_acc
0,19,,,0.5
0,19,,2.0,
1,39,,,0.75
1,39,,1.5,
2,40,0.7,,
"""


def _cell(bench, cell_id, label, csv=CSV):
    record = paths.record_in(bench / "classification", cell_id)
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"label": label, "status": "ok"}))
    if csv is not None:
        (record.parent / "metrics.csv").write_text(csv)


def test_curves_merge_an_epochs_rows_and_follow_the_glob(tmp_path):
    bench = tmp_path / "results" / "b"
    _cell(bench, "t/rigl/default/s0.9/seed0", "t rigl s=0.9 seed=0")
    _cell(bench, "t/set/default/s0.9/seed0", "t set s=0.9 seed=0")
    _cell(bench, "t/dense/default/s0/seed0", "t dense", csv=None)  # no curve: not listed
    curves = find_curves(bench, "classification", "t/rigl/*")
    assert [c.label for c in curves] == ["t rigl s=0.9 seed=0"]
    frame = curves[0].frame
    assert frame["epoch"].to_list() == [0, 1, 2]
    assert frame["val_acc"].to_list() == [0.5, 0.75, None]
    assert frame["train_loss"].to_list() == [2.0, 1.5, None]
    assert frame["test_acc"].to_list() == [None, None, 0.7]
    assert len(find_curves(bench, "classification")) == 2
    assert len(find_curves(bench)) == 2  # every pillar folder when none is named
    out = plot_curves(find_curves(bench, "classification"), "val_acc", tmp_path / "c.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curves_say_what_is_missing(tmp_path):
    bench = tmp_path / "results" / "b"
    with pytest.raises(CurveError, match="no such folder"):
        find_curves(bench, "classification")
    _cell(bench, "t/rigl/default/s0.9/seed0", "x")
    with pytest.raises(CurveError, match="no learning curve .* matching 'nope\\*'"):
        find_curves(bench, "classification", "nope*")
    curves = find_curves(bench, "classification")
    with pytest.raises(CurveError, match="'val_loss' is not in the curves; .*train_loss, val_acc"):
        plot_curves(curves, "val_loss", tmp_path / "c.png")

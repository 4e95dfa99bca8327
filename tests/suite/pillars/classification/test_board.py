"""Records -> runs table -> leaderboard: statistics checked by hand on a tiny sweep, the written
files, and the errors for missing or bad records."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from sparsebench.suite import paths as layout
from sparsebench.suite import tables
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.classification.board import (
    LEADERBOARD_SCHEMA,
    build_leaderboard,
    read_leaderboard,
    summary,
    write_leaderboard,
)
from sparsebench.suite.pillars.classification.table import COLUMNS
from sparsebench.suite.record import COMMON_COLUMNS, write_json_atomic
from sparsebench.suite.schemas import COMMON_DTYPES, TableError, polars_dtype

TASK = "digits_mlp"
PILLAR = get_pillar("classification")
DTYPES = {**COMMON_DTYPES, **{c: polars_dtype(t) for c, t in COLUMNS.items()}}


def collect_records(paths: list[Path]) -> pl.DataFrame:
    return tables.collect(PILLAR, paths)


def aggregate(paths: list[Path], out: Path) -> pl.DataFrame:
    return tables.aggregate("classification", paths, out)


@pytest.fixture
def sweep(make_record) -> list[dict[str, Any]]:
    """dense × 2 seeds, rigl and set at 0.9 × 2 seeds, one failed set seed, one all-diverged
    snip cell, and a second task without a dense baseline."""
    r = make_record
    return [
        r(method="dense", seed=0, test_acc=0.95, train_wall_s=2.0, infer_ms=1.0),
        r(method="dense", seed=1, test_acc=0.97, train_wall_s=4.0, infer_ms=3.0),
        r(method="rigl", seed=0, test_acc=0.90, train_wall_s=1.5, infer_ms=0.4),
        r(method="rigl", seed=1, test_acc=0.92, train_wall_s=1.5, infer_ms=0.6),
        r(method="set", seed=0, test_acc=0.80, train_wall_s=3.0),
        r(method="set", seed=1, test_acc=0.84, train_wall_s=6.0),
        r(method="set", seed=2, status="failed", error="RuntimeError: out of memory"),
        r(method="snip", seed=0, status="diverged", error="loss is nan at step 3"),
        r(task="other", method="rigl", seed=0, test_acc=0.70, train_wall_s=1.0),
    ]


def write_records(root: Path, records: list[dict[str, Any]]) -> list[Path]:
    """Each record at its cell's place under the pillar folder ``root``."""
    paths = []
    for rec in records:
        path = layout.record_in(root, rec["cell_id"])
        write_json_atomic(path, rec)
        paths.append(path)
    return paths


@pytest.fixture
def runs(sweep) -> pl.DataFrame:
    return pl.from_dicts(sweep, schema_overrides=DTYPES, infer_schema_length=None)


def cell(board: pl.DataFrame, method: str, task: str = TASK) -> dict[str, Any]:
    rows = board.filter((pl.col("task") == task) & (pl.col("method") == method)).to_dicts()
    assert len(rows) == 1
    return rows[0]


# ---------------------------------------------------------------------------- build_leaderboard


def test_statistics_by_hand(runs) -> None:
    board = build_leaderboard(runs)
    assert board.schema == pl.Schema(LEADERBOARD_SCHEMA)

    rigl = cell(board, "rigl")
    assert rigl["n"] == 2 and rigl["n_failed"] == 0
    assert rigl["test_acc_mean"] == pytest.approx(0.91)
    assert rigl["test_acc_std"] == pytest.approx(math.sqrt(2 * 0.01**2 / 1))  # ddof=1
    assert rigl["infer_ms_median"] == pytest.approx(0.5)
    assert rigl["train_flops_rel_dense_mean"] == pytest.approx(0.1)
    assert rigl["actual_sparsity_mean"] == pytest.approx(0.9)

    dense = cell(board, "dense")
    assert dense["target_sparsity"] == 0.0 and dense["rank"] == 1
    assert dense["test_acc_mean"] == pytest.approx(0.96)
    assert dense["infer_ms_median"] == pytest.approx(2.0)


def test_rank_within_task_and_sparsity(runs) -> None:
    board = build_leaderboard(runs)
    assert cell(board, "rigl")["rank"] == 1
    # rigl 0.90/0.92 against set 0.80/0.84: Welch t = 0.09 / sqrt(0.0002/2 + 0.0008/2) = 4.02
    # on 1.47 degrees of freedom, p ≈ 0.09 > 0.05: inside the noise of two seeds, a shared rank.
    assert cell(board, "set")["rank"] == 1
    assert cell(board, "rigl")["tied"] and cell(board, "set")["tied"]
    assert cell(board, "snip")["rank"] is None  # all its runs diverged
    assert cell(board, "rigl", task="other")["rank"] == 1
    # Sorted by task, sparsity, rank; unranked last.
    order = board.select("task", "target_sparsity", "method").rows()
    assert order == [
        (TASK, 0.0, "dense"),
        (TASK, 0.9, "rigl"),
        (TASK, 0.9, "set"),
        (TASK, 0.9, "snip"),
        ("other", 0.9, "rigl"),
    ]


def test_single_seed_rows_are_never_ranked_apart(make_record) -> None:
    recs = [
        make_record(method="rigl", test_acc=0.9),
        make_record(method="set", test_acc=0.9),
        make_record(method="snip", test_acc=0.8),
    ]
    board = build_leaderboard(pl.from_dicts(recs, schema_overrides=DTYPES))
    ranks = dict(board.select("method", "rank").rows())
    assert ranks == {"rigl": 1, "set": 1, "snip": 1}  # one seed each: no spread to test
    assert board["tied"].to_list() == [True, True, True]


def test_separated_rows_get_their_own_rank_and_close_ones_share_it(make_record) -> None:
    r = make_record
    recs = [
        *(r(method="rigl", seed=s, test_acc=a) for s, a in enumerate((0.90, 0.91, 0.92))),
        *(r(method="set", seed=s, test_acc=a) for s, a in enumerate((0.895, 0.905, 0.915))),
        *(r(method="snip", seed=s, test_acc=a) for s, a in enumerate((0.50, 0.51, 0.52))),
    ]
    board = build_leaderboard(pl.from_dicts(recs, schema_overrides=DTYPES))
    got = {m: (k, t) for m, k, t in board.select("method", "rank", "tied").rows()}
    # rigl vs set: means 0.910 and 0.905, both std 0.01, t = 0.005 / sqrt(2 * 0.0001 / 3)
    # = 0.61: not significant. rigl vs snip: t = 0.4 / 0.00816 = 49: separated.
    assert got == {"rigl": (1, True), "set": (1, True), "snip": (3, False)}


def test_train_wall_relative_to_dense(runs) -> None:
    board = build_leaderboard(runs)
    # dense mean wall = (2 + 4) / 2 = 3 s
    assert cell(board, "dense")["train_wall_rel_dense"] == pytest.approx(1.0)
    assert cell(board, "rigl")["train_wall_s_mean"] == pytest.approx(1.5)
    assert cell(board, "rigl")["train_wall_rel_dense"] == pytest.approx(0.5)
    assert cell(board, "set")["train_wall_rel_dense"] == pytest.approx(1.5)
    assert cell(board, "rigl", task="other")["train_wall_rel_dense"] is None  # no dense there


def test_failed_rows_counted_and_excluded(runs) -> None:
    board = build_leaderboard(runs)
    s = cell(board, "set")
    assert s["n"] == 2 and s["n_failed"] == 1
    assert s["test_acc_mean"] == pytest.approx(0.82)  # the failed seed is not a zero
    assert s["train_wall_s_mean"] == pytest.approx(4.5)
    snip = cell(board, "snip")
    assert snip["n"] == 0 and snip["n_failed"] == 1
    assert snip["test_acc_mean"] is None and snip["test_acc_std"] is None


def test_single_seed_has_null_std(runs) -> None:
    other = cell(build_leaderboard(runs), "rigl", task="other")
    assert other["n"] == 1 and other["test_acc_std"] is None


def test_settings_are_separate_rows(make_record) -> None:
    recs = [
        make_record(method="rigl", setting_id="default", test_acc=0.9),
        make_record(method="rigl", setting_id="a1b2", test_acc=0.95),
    ]
    board = build_leaderboard(pl.from_dicts(recs, schema_overrides=DTYPES))
    # one seed each: not ranked apart, the better mean listed first
    assert board.select("setting_id", "rank").rows() == [("a1b2", 1), ("default", 1)]


# ---------------------------------------------------------------------------- records -> table


def test_find_and_collect_records(tmp_path, sweep) -> None:
    written = write_records(tmp_path, sweep)
    found = layout.find_records(tmp_path)
    assert found == sorted(written)
    assert [layout.cell_id_of(p, tmp_path) for p in written] == [r["cell_id"] for r in sweep]
    df = collect_records(found)
    assert df.height == len(sweep)
    declared = [*COMMON_COLUMNS, *COLUMNS]
    assert df.columns[: len(declared)] == declared
    assert "host" in df.columns[len(declared) :]  # extra keys kept, after the declared ones
    for col, dtype in DTYPES.items():
        assert df.schema[col] == dtype, col


def test_all_null_column_keeps_its_type(tmp_path, make_record) -> None:
    paths = write_records(tmp_path, [make_record(seed=0), make_record(seed=1)])
    df = collect_records(paths)
    assert df.get_column("error").null_count() == 2
    assert df.schema["error"] == pl.String
    assert df.schema["test_acc"] == pl.Float64


def test_int_in_float_column_accepted(tmp_path, make_record) -> None:
    paths = write_records(tmp_path, [make_record(train_flops=123456)])
    df = collect_records(paths)
    assert df.schema["train_flops"] == pl.Float64 and df["train_flops"][0] == 123456.0


def test_wrong_type_names_file_and_column(tmp_path, make_record) -> None:
    paths = write_records(tmp_path, [make_record(test_acc="0.9")])
    with pytest.raises(TableError, match=r"record\.json: column 'test_acc' = '0\.9'"):
        collect_records(paths)


def test_unreadable_record(tmp_path) -> None:
    bad = tmp_path / "runs" / "t" / "record.json"
    bad.parent.mkdir(parents=True)
    bad.write_text("{not json")
    with pytest.raises(TableError, match="cannot read record"):
        collect_records([bad])


def test_aggregate_writes_parquet(tmp_path, sweep) -> None:
    paths = write_records(tmp_path, sweep)
    out = tmp_path / "runs.parquet"
    runs = aggregate(paths, out)
    back = pl.read_parquet(out)
    assert back.equals(runs)
    assert back.schema["error"] == pl.String and back.height == len(sweep)


def test_aggregate_refuses_invalid_and_names_file(tmp_path, sweep) -> None:
    sweep[2]["test_acc"] = 1.5
    paths = write_records(tmp_path, sweep)
    out = tmp_path / "runs.parquet"
    with pytest.raises(TableError) as info:
        aggregate(paths, out)
    msg = str(info.value)
    assert "column 'test_acc' = 1.5" in msg and "method=rigl" in msg
    assert str(paths[2]) in msg
    assert not out.exists()


# ---------------------------------------------------------------------------- no records


def test_no_records_in_folder(tmp_path) -> None:
    (tmp_path / "classification" / "runs").mkdir(parents=True)
    assert layout.find_records(tmp_path / "classification") == []
    with pytest.raises(TableError, match="sparsebench run") as info:
        tables.rebuild(tmp_path)
    assert str(tmp_path) in str(info.value)
    assert "<pillar>/runs/**/record.json" in str(info.value)


def test_missing_folder(tmp_path) -> None:
    with pytest.raises(TableError, match="does not exist"):
        tables.rebuild(tmp_path / "nope")


def test_empty_record_list(tmp_path) -> None:
    with pytest.raises(TableError, match="no classification records"):
        aggregate([], tmp_path / "runs.parquet")


# ---------------------------------------------------------------------------- outputs


def test_write_leaderboard_files(tmp_path, runs) -> None:
    paths = write_leaderboard(runs, tmp_path / "out")
    for kind in ("md", "csv", "json", "png"):
        assert paths[kind].is_file() and paths[kind].stat().st_size > 0, kind
    assert paths["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    board = build_leaderboard(runs)
    assert read_leaderboard(tmp_path / "out").equals(board)
    csv = pl.read_csv(paths["csv"])
    assert csv.height == board.height and csv.columns == board.columns
    data = json.loads(paths["json"].read_text())
    assert len(data["rows"]) == board.height
    # Each column's unit and direction: accuracy is a fraction, higher is better; seconds lower.
    assert data["columns"]["test_acc_mean"]["unit"] == "fraction"
    assert data["columns"]["test_acc_mean"]["better"] == "higher"
    assert data["columns"]["train_wall_s_mean"] == {
        "unit": "s", "better": "lower", "header": "train time (s)"
    }  # fmt: skip
    assert set(data["columns"]) == set(board.columns)


def test_markdown_content(tmp_path, runs) -> None:
    md = write_leaderboard(runs, tmp_path)["md"].read_text(encoding="utf-8")
    assert f"## Task `{TASK}`" in md and "## Task `other`" in md
    # dense reference comes before the per-sparsity tables of the task
    assert md.index("**Dense reference**") < md.index("### Sparsity 90 %")
    assert "96.00 ± 1.41" in md  # dense: mean of 95 and 97 %, std sqrt(2) points
    assert "91.00 ± 1.41" in md  # rigl
    assert "70.00 (n=1)" in md and "70.00 ±" not in md  # single seed: its value and n=1
    assert "| =1 | `rigl` |" in md and "| =1 | `set` |" in md  # inside the noise (p ≈ 0.09)
    # units in the headers, no snake_case header
    assert "| rank | method | setting | test acc (%) | seeds | val acc (%) |" in md
    assert "train time (s)" in md and "inference (ms)" in md
    assert "0.10× / " not in md and "| 0.10× |" in md  # pivot: one sparsity, one ratio
    assert "| 1.50 |" in md  # seconds with 3 significant digits
    assert "1 torch thread(s) per job and 2 concurrent job(s)" in md
    assert "## Failed runs (2)" in md
    assert "RuntimeError: out of memory" in md and "loss is nan at step 3" in md


def test_markdown_has_no_python_list_and_links_a_method_to_its_source(make_record, tmp_path):
    recs = [
        make_record(method="gmp", seed=s, test_acc=a, threads=1, device="cpu")
        for s, a in enumerate((0.9, 0.92))
    ]
    md = write_leaderboard(pl.from_dicts(recs, schema_overrides=DTYPES), tmp_path)["md"]
    text = md.read_text(encoding="utf-8")
    # gmp's registered source names arXiv:1710.01878
    assert "[`gmp`](https://arxiv.org/abs/1710.01878)" in text
    assert "**Sources**" in text and "To prune, or not to prune" in text
    assert not re.search(r"\[(?:'|\d)", text)  # no ['cpu'] or [1] from a Python list
    assert "device: cpu;" in text


def test_summary(tmp_path, runs) -> None:
    write_leaderboard(runs, tmp_path)
    text = summary(tmp_path, top=1)
    assert f"{TASK} @ sparsity 90%" in text and f"{TASK} @ dense reference" in text
    assert "rigl" in text and "set" not in text.split(f"{TASK} @ sparsity 90%")[1].split("\n")[1]
    assert summary(runs, top=1) == text  # a runs frame gives the same text
    with pytest.raises(TableError, match="no leaderboard"):
        summary(tmp_path / "empty")


def test_settings_are_shown_by_their_parameters(make_record, tmp_path) -> None:
    recs = [
        make_record(method="dense", seed=0, test_acc=0.95),
        make_record(method="set", test_acc=0.90, setting_id="pa", setting="zeta=0.1"),
        make_record(method="set", test_acc=0.80),
    ]
    runs = aggregate(write_records(tmp_path, recs), tmp_path / "runs.parquet")
    board = build_leaderboard(runs)
    assert set(board["setting"]) == {"default", "zeta=0.1"}
    write_leaderboard(runs, tmp_path)
    md = (tmp_path / "leaderboard.md").read_text()
    assert "| zeta=0.1 |" in md and "| pa |" not in md


def test_board_shows_allocation_trained_density_and_the_lowest_reach(make_record, tmp_path):
    r = make_record
    records = [
        r(method="static", seed=0, trained_density=0.10, reachable_outputs_init=0.5),
        r(method="static", seed=1, trained_density=0.08, reachable_outputs=0.2),
    ]
    board = build_leaderboard(collect_records(write_records(tmp_path, records)))
    [row] = board.to_dicts()
    assert row["distribution"] == "erk"
    assert row["trained_density_mean"] == pytest.approx(0.09)
    assert row["reachable_outputs_min"] == pytest.approx(0.2)
    # A runs table from before these columns existed still builds, with nulls.
    old = collect_records(write_records(tmp_path / "old", records)).drop(
        "distribution", "trained_density", "reachable_outputs_init", "reachable_outputs"
    )
    assert build_leaderboard(old)["reachable_outputs_min"].to_list() == [None]


def test_an_n_m_row_names_its_pattern_even_at_its_default_setting(make_record) -> None:
    recs = [
        make_record(method="sr_ste", setting="default", setting_id="default", pattern="2:4"),
        make_record(method="sr_ste", setting="decay=0.0", setting_id="pd", pattern="2:4"),
        make_record(method="sr_ste", setting="pattern=4:8", setting_id="p48", pattern="4:8"),
        make_record(method="rigl"),
    ]
    board = build_leaderboard(pl.from_dicts(recs, schema_overrides=DTYPES))
    labels = dict(board.select("setting_id", "setting").rows())
    assert labels["default"] == "pattern=2:4" and labels["pd"] == "pattern=2:4, decay=0.0"
    assert labels["p48"] == "pattern=4:8"
    assert board.filter(pl.col("method") == "rigl")["setting"].item() == "default"


def test_activation_sparsity_rows_stand_with_dense_and_show_their_measured_density(
    tmp_path, make_record
) -> None:
    r = make_record
    recs = [
        r(method="dense", seed=0, test_acc=0.95),
        *[
            r(method="topk_activation", seed=s, test_acc=0.93, target_sparsity=0.0,
              pattern="activation", activation_density=d, setting="k_fraction=0.1",
              setting_id="k01", cell_id=f"{TASK}/topk_activation/k01/s0/seed{s}")
            for s, d in ((0, 0.09), (1, 0.1))
        ],
    ]  # fmt: skip
    runs = pl.from_dicts(recs, schema_overrides=DTYPES, infer_schema_length=None)
    md = write_leaderboard(runs, tmp_path)["md"].read_text(encoding="utf-8")
    assert "**Dense reference**: test acc (%) `dense` 95.00 (n=1)" in md  # not the top-k row
    assert "### Dense weights" in md
    assert "(k\\_fraction=0.1) 9.5 %" in md

"""The Hessian board in the shared style: readable headers with units, counts with thousands
separators (never 1.25e+03), no Python list in the text, method links, the JSON columns
block, and a scaling plot; expectations written by hand from the rows below."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl

from sparsebench.suite.pillars.hessian.board import summary, write_leaderboard


def hessian_runs(sizes: tuple[int, ...] = (100, 400, 1600)) -> pl.DataFrame:
    """colored and dense on one system: colored's time linear in atoms, dense quadratic."""
    rows = []
    for n in sizes:
        for method, wall in (("colored", n / 400), ("dense", (n / 400) ** 2 * 5)):
            rows.append({
                "benchmark": "b", "status": "ok", "error": None, "system": "alkane",
                "size": n // 3, "n_atoms": n, "potential": "pair", "potential_params_json": "{}",
                "method": method, "order": "natural", "threads": 1, "parallel_jobs": 2,
                "K": 2, "n_colors": 39 if method == "colored" else 3 * n,
                "max_row_atoms": 15 if method == "colored" else n,
                "n_hvps": 39 if method == "colored" else 3 * n, "nnz": 9 * n * 15,
                "fill": 15 / n, "t_pattern_s": 0.01, "t_coloring_s": 0.02, "t_hvp_s": wall,
                "t_decompress_s": 0.001, "wall_s": wall, "dense_wall_s": (n / 400) ** 2 * 5,
                "speedup_vs_dense": (n / 400) * 5 if method == "colored" else 1.0,
                "max_abs_err": 2.7e-16, "rel_err": 6.4e-16, "err_reference": "dense",
                "peak_mem_mb": 1250.0,
            })  # fmt: skip
    return pl.DataFrame(rows)


def test_board_reads_alike_and_declares_its_columns(tmp_path: Path) -> None:
    files = write_leaderboard(hessian_runs(), tmp_path)
    md = files["md"].read_text(encoding="utf-8")
    assert "| atoms | method | reach K (hops) | colors | densest row (atoms) | HVPs |" in md
    assert "| total (s) | dense (s) | speed-up vs dense | peak memory (MiB) | trials |" in md
    assert not re.search(r"\| [a-z]+_[a-z_]+ \|", md)  # no snake_case header
    # 1600 atoms: nnz 9 · 1600 · 15 = 216,000; dense HVPs 4,800; memory 1,250 MiB
    assert "| 1,600 | `dense` |" in md and "216,000" in md and "| 4,800 |" in md
    assert "1,250" in md and "e+0" not in md
    assert "6.4e-16" in md  # an error next to zero keeps its exponent
    # colored is 4 × 5 = 20 times faster at 1,600 atoms
    assert "| 20.0× |" in md
    assert "1 thread(s) per job and 2 concurrent job(s)" in md
    assert not re.search(r"\[(?:'|\d)", md)  # no [1] or ['cpu']
    assert "**Sources**" in md and "`colored`" in md
    data = json.loads(files["json"].read_text(encoding="utf-8"))
    assert data["columns"]["wall_s"] == {"unit": "s", "better": "lower", "header": "total (s)"}
    assert data["columns"]["speedup_vs_dense"]["better"] == "higher"
    assert data["columns"]["fill"]["unit"] == "fraction"
    assert data["columns"]["exponent"]["header"] == "exponent p"
    # 400 → 1600 atoms at 1 → 4 s: slope 1 (log 4 / log 4)
    assert data["scaling"][0]["exponent"] == 1.0 or abs(data["scaling"][0]["exponent"] - 1) < 1e-9
    assert files["scaling.png"].read_bytes()[:4] == b"\x89PNG"


def test_summary_lists_values_not_python_lists() -> None:
    text = summary(hessian_runs())
    assert "colors 39 / 39 at 400 / 1,600 atoms (densest row 15 / 15)" in text
    assert "[" not in text

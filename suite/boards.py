"""Board helpers shared by every pillar: Markdown tables of polars frames and the atomic
writing of a board's files (``leaderboard.{md,csv,json}`` and its plots)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite.record import atomic_write, write_json_atomic


def fmt(value: Any) -> str:
    """A table cell: ``–`` for null, 3 significant digits for a float, else ``str``."""
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def md_table(df: pl.DataFrame) -> list[str]:
    """The Markdown lines of ``df`` (header, rule, one line per row; cells by :func:`fmt`)."""
    lines = ["| " + " | ".join(df.columns) + " |", "|" + "---|" * len(df.columns)]
    lines += ["| " + " | ".join(fmt(v) for v in row) + " |" for row in df.iter_rows()]
    return lines


def write_board_files(
    out_dir: Path,
    markdown: str,
    table: pl.DataFrame,
    json_data: dict[str, Any] | None = None,
    plots: dict[str, Callable[[Path], None]] | None = None,
) -> dict[str, Path]:
    """Write ``leaderboard.md`` (``markdown``), ``leaderboard.csv`` (``table``),
    ``leaderboard.json`` (``json_data``, default the table's rows) and each plot
    (file name -> ``draw(path)``; the path may be a temporary name: pass ``format="png"``),
    every file atomically. Returns the paths by kind: md, csv, json, png (the first plot) and
    each plot's file name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {k: out_dir / f"leaderboard.{k}" for k in ("md", "csv", "json")}
    atomic_write(files["md"], lambda p: Path(p).write_text(markdown, encoding="utf-8"))
    atomic_write(files["csv"], table.write_csv)
    if json_data is None:
        atomic_write(files["json"], table.write_json)
    else:
        write_json_atomic(files["json"], json_data)
    for i, (name, draw) in enumerate((plots or {}).items()):
        files[name] = out_dir / name
        if i == 0:
            files["png"] = files[name]
        atomic_write(files[name], lambda p, draw=draw: draw(Path(p)))
    return files


def failed_lines(runs: pl.DataFrame) -> list[str]:
    """Markdown lines listing the cells of ``runs`` whose status is not ``ok`` (with their
    error), or nothing when every cell finished."""
    failed = runs.filter(pl.col("status") != "ok")
    if not failed.height:
        return []
    lines = [f"{failed.height} cell(s) did not finish:", ""]
    lines += [
        f"- `{r['cell_id']}` ({r['status']}): {r['error']}" for r in failed.iter_rows(named=True)
    ]
    return [*lines, ""]

"""Board helpers shared by every pillar: Markdown tables of polars frames and the atomic
writing of a board's files (``leaderboard.{md,html,csv,json}`` and its plots)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite.atomic import write_atomic
from sparsebench.suite.record import write_json_atomic


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


_PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; max-width: 110em; }}
table {{ border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; vertical-align: top; }}
th {{ background: #f3f3f3; }}
code {{ background: #f6f6f6; padding: 0 0.2em; }}
</style></head><body>
{body}
</body></html>
"""


def html_page(markdown_text: str, title: str) -> str:
    """A self-contained HTML page of a Markdown document (tables included), for
    ``snakemake --report``, which shows HTML results inline. Rendered by the ``markdown``
    package with its ``tables`` extension; ``title`` is HTML-escaped."""
    import html

    import markdown

    body = markdown.markdown(markdown_text, extensions=["tables"])
    return _PAGE.format(title=html.escape(title), body=body)


def write_board_files(
    out_dir: Path,
    markdown: str,
    table: pl.DataFrame,
    json_data: dict[str, Any] | None = None,
    plots: dict[str, Callable[[Path], None]] | None = None,
) -> dict[str, Path]:
    """Write ``leaderboard.md`` (``markdown``), ``leaderboard.html`` (the same as a page, for
    ``snakemake --report``), ``leaderboard.csv`` (``table``),
    ``leaderboard.json`` (``json_data``, default the table's rows) and each plot
    (file name -> ``draw(path)``; the path may be a temporary name: pass ``format="png"``),
    every file atomically. Returns the paths by kind: md, csv, json, png (the first plot) and
    each plot's file name."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {k: out_dir / f"leaderboard.{k}" for k in ("md", "html", "csv", "json")}
    write_atomic(files["md"], markdown)
    page = html_page(markdown, f"{out_dir.name} leaderboard")
    write_atomic(files["html"], page)
    write_atomic(files["csv"], table.write_csv)
    if json_data is None:
        write_atomic(files["json"], table.write_json)
    else:
        write_json_atomic(files["json"], json_data)
    for i, (name, draw) in enumerate((plots or {}).items()):
        files[name] = out_dir / name
        if i == 0:
            files["png"] = files[name]
        write_atomic(files[name], draw)
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

"""The board: the rows as a table (polars: CSV and markdown), a bar chart of the ratios
ours ÷ peer, and the before/after table of docs/performance.md."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import polars as pl

from .harness import Row, ratio

# The slot another script fills: its JSON's rows replace these placeholders (same group).
PLACEHOLDERS = (
    Row(
        "records",
        "records at scale (read, filter, aggregate)",
        "sparsebench.suite.tables",
        "polars",
        status="pending: python -m benchmarks.records_scale --out R.json, then --include R.json",
    ),
)


def with_included(rows: list[Row], included: Sequence[Row]) -> list[Row]:
    """``rows`` plus another script's rows; a group it provides replaces its placeholders."""
    groups = {r.group for r in included}
    kept = [r for r in rows if not (r.group in groups and r.status.startswith("pending"))]
    return kept + list(included)


def _seconds(v: float | None) -> str:
    if v is None:
        return "–"
    return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.2f} s"


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def frame(rows: Sequence[Row]) -> pl.DataFrame:
    """One line per row: the numbers (seconds, MiB) and the ratios ours ÷ peer."""
    return pl.DataFrame([r.to_json() for r in rows]).drop("extra")


def markdown(rows: Sequence[Row]) -> str:
    """The board as a markdown table (min / median CPU time per side, ratios of the medians
    and of the minima, wall-clock ratio, extra peak memory)."""
    head = (
        "| comparison | case | peer | ours CPU min / median | peer CPU min / median "
        "| ours ÷ peer (median) | (min) | (wall) | peak MiB ours / peer | check |"
    )
    lines = [head, "|" + "---|" * 10]
    for r in rows:
        if r.status != "ok" and r.peer_cpu_median is None:
            peer_cell = r.status
        else:
            peer_cell = f"{_seconds(r.peer_cpu_min)} / {_seconds(r.peer_cpu_median)}"
        ours_cell = (
            f"{_seconds(r.ours_cpu_min)} / {_seconds(r.ours_cpu_median)}"
            if r.ours_cpu_median is not None
            else "–"
        )
        mem = (
            "–"
            if r.ours_peak_mb is None
            else f"{r.ours_peak_mb:.0f} / "
            + ("–" if r.peer_peak_mb is None else f"{r.peer_peak_mb:.0f}")
        )
        lines.append(
            f"| {r.group} | {r.case} | {r.peer} | {ours_cell} | {peer_cell} | "
            f"{_x(r.ratio_median)} | {_x(r.ratio_min)} | {_x(r.ratio_wall)} | {mem} | "
            f"{r.quality or '–'} |"
        )
    return "\n".join(lines)


def differences(rows: Sequence[Row]) -> str:
    """The definitional differences, one bullet per (our entry point, peer)."""
    seen: dict[str, None] = {}
    for r in rows:
        if r.notes:
            seen.setdefault(f"- **{r.ours.split(' (')[0]} vs {r.peer}**: {r.notes}")
    return "\n".join(seen)


def _label(r: Row) -> str:
    return f"{r.case.split(' (')[0]} vs {r.peer.split(' ')[0]}"


def plot(rows: Sequence[Row], path: Path, title: str) -> None:
    """Horizontal bars of ours ÷ peer (median CPU time), 1.0 marked: left of it ours is
    faster. Rows without a ratio (peer not installed, pending) are listed as such."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [_label(r) for r in rows]
    values = [r.ratio_median for r in rows]
    fig, ax = plt.subplots(figsize=(9, 0.38 * len(rows) + 1.4))
    ys = range(len(rows))[::-1]
    colors = ["tab:green" if v is not None and v <= 1 else "tab:red" for v in values]
    ax.barh(list(ys), [v or 0 for v in values], color=colors)
    finite = [v for v in values if v is not None]
    right = max([1.0, *finite]) * 1.25
    for y, v, r in zip(ys, values, rows):
        text = f"{v:.2f}×" if v is not None else r.status.split(":")[0]
        ax.text((v or 0) + right * 0.01, y, text, va="center", fontsize=8)
    ax.axvline(1.0, color="black", lw=1)
    ax.set_yticks(list(ys), labels, fontsize=8)
    ax.set_xlim(0, right)
    ax.set_xlabel("ours ÷ peer, median CPU time (< 1: ours faster)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def before_after(before: Sequence[dict[str, Any]], after: Sequence[Row] = ()) -> str:
    """docs/performance.md's table: per row of the earlier run (a results JSON's rows), our and
    the peer's median CPU time and the ratio ours ÷ peer before, and after (this run; "–"
    where it has no such row), and how much faster ours got (before ÷ after)."""
    new = {(r.case, r.peer.split(" ")[0]): r for r in after}
    lines = [
        "| comparison | case | peer | before: ours / peer (median CPU) | ours ÷ peer "
        "| after: ours / peer | ours ÷ peer | ours before ÷ after |",
        "|" + "---|" * 8,
    ]
    for raw in before:
        b = Row.from_json(raw)
        a = new.get((b.case, b.peer.split(" ")[0]))
        peer_b = _seconds(b.peer_cpu_median) if b.peer_cpu_median is not None else b.status
        after_cells = "– | – | –"
        if a is not None:
            peer_a = _seconds(a.peer_cpu_median) if a.peer_cpu_median is not None else a.status
            after_cells = (
                f"{_seconds(a.ours_cpu_median)} / {peer_a} | {_x(a.ratio_median)} | "
                f"{_x(ratio(b.ours_cpu_median, a.ours_cpu_median))}"
            )
        lines.append(
            f"| {b.group} | {b.case} | {b.peer} | {_seconds(b.ours_cpu_median)} / {peer_b} | "
            f"{_x(b.ratio_median)} | {after_cells} |"
        )
    return "\n".join(lines)

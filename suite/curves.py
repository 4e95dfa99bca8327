"""Learning curves: the ``metrics.csv`` Lightning's ``CSVLogger`` keeps beside each trained
cell's record (one row per logged epoch), gathered for a chosen set of cells and plotted."""

from __future__ import annotations

import fnmatch
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from sparsebench.suite import paths

CURVE_FILE = "metrics.csv"


class CurveError(ValueError):
    """No curve matches, or the metric is not in the curves."""


@dataclass(frozen=True)
class Curve:
    cell_id: str
    label: str
    frame: pl.DataFrame  # epoch, step and the logged columns, one row per epoch


def _label(record: Path, cell_id: str) -> str:
    try:
        return str(json.loads(record.read_text()).get("label") or cell_id)
    except (OSError, ValueError, AttributeError):
        return cell_id


def _per_epoch(raw: pl.DataFrame) -> pl.DataFrame:
    """One row per epoch: Lightning writes a row per log call (train and validation metrics
    of one epoch may sit on separate rows), so the rows of an epoch are merged."""
    if "epoch" not in raw.columns:
        return raw
    values = [c for c in raw.columns if c not in ("epoch", "step")]
    return (
        raw.group_by("epoch")
        .agg(pl.col("step").max(), *(pl.col(c).drop_nulls().last() for c in values))
        .sort("epoch")
    )


def find_curves(bench_dir: Path, pillar: str | None = None, pattern: str = "*") -> list[Curve]:
    """The curves of the cells whose id matches the glob ``pattern``, of ``pillar`` (None:
    of every pillar folder of the results folder)."""
    bench_dir = Path(bench_dir)
    if pillar is None:
        folders = list(paths.pillar_folders(bench_dir).values())
    else:
        folders = [bench_dir / pillar]
        if not folders[0].is_dir():
            raise CurveError(
                f"{folders[0]}: no such folder (is {pillar!r} a pillar of this benchmark?)"
            )
    curves = []
    for folder in folders:
        for record in paths.find_records(folder):
            cell_id = paths.cell_id_of(record, folder)
            csv = record.parent / CURVE_FILE
            if fnmatch.fnmatchcase(cell_id, pattern) and csv.is_file():
                try:
                    frame = pl.read_csv(csv)
                    if "epoch" not in frame.columns:
                        raise ValueError("no epoch column")
                except (OSError, ValueError, pl.exceptions.PolarsError) as e:
                    # one unreadable curve leaves the others plotted
                    print(f"skipped {csv}: not a learning curve ({e})", file=sys.stderr)
                    continue
                curves.append(Curve(cell_id, _label(record, cell_id), _per_epoch(frame)))
    if not curves:
        where = folders[0] if pillar else bench_dir
        raise CurveError(
            f"no learning curve under {where} for cells matching {pattern!r}: curves are kept "
            f"by cells that train with Lightning ({CURVE_FILE} beside their record.json)"
        )
    return curves


def plot_curves(curves: list[Curve], metric: str, out: Path) -> Path:
    """One line per cell: ``metric`` against the epoch. Returns ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sparsebench.suite.atomic import write_atomic

    if out.is_dir() or out.suffix.lower() != ".png":
        raise CurveError(f"--out {out}: give the path of a .png file")
    have = [c for c in curves if metric in c.frame.columns]
    if not have:
        known = sorted({col for c in curves for col in c.frame.columns} - {"epoch", "step"})
        raise CurveError(f"metric {metric!r} is not in the curves; they hold: {', '.join(known)}")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for c in have:
        f = c.frame.filter(pl.col(metric).is_not_null())
        ax.plot(f["epoch"] + 1, f[metric], marker="o", markersize=3, label=c.label)
    ax.set_xlabel("epoch")
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if len(have) <= 12:
        ax.legend(fontsize=7)
    ax.set_title(f"{metric} per epoch ({len(have)} cell(s))", fontsize=10)
    fig.tight_layout()
    write_atomic(out, lambda tmp: fig.savefig(tmp, format="png", dpi=110))
    plt.close(fig)
    return out

"""Every path of the results layout, built in one place (the same for every pillar):

``results/<bench>/<pillar>/runs/<cell id>/record.json``   one record per cell
``results/<bench>/<pillar>/runs.parquet``                 validated runs table
``results/<bench>/<pillar>/leaderboard.{md,html,csv,json}`` the board, and its plots ``*.png``
``results/<bench>/<pillar>/logs/<batch>.log``             the log of one job (a batch of cells)
``results/<bench>/summary.md``                            every pillar's board, top rows
``results/artefacts/<pillar>/<artefact id>/...``           models and data cells read, made once
                                                          and shared by every benchmark
                                                          (elsewhere: $SPARSEBENCH_ARTEFACTS)
"""

from __future__ import annotations

from pathlib import Path

RESULTS = "results"
RECORD = "record.json"
RUNS_TABLE = "runs.parquet"
SUMMARY = "summary.md"
ARTEFACTS = "artefacts"  # results/artefacts/: not a benchmark name (spec.py refuses it)
ARTEFACTS_ENV = "SPARSEBENCH_ARTEFACTS"
BOARD_FILES = ("leaderboard.md", "leaderboard.html", "leaderboard.csv", "leaderboard.json")


def bench_dir(bench: str, root: str | Path = RESULTS) -> Path:
    return Path(root) / bench


def pillar_dir(bench: str, pillar: str, root: str | Path = RESULTS) -> Path:
    return bench_dir(bench, root) / pillar


def check_cell_id(cell_id: str) -> str:
    """``cell_id`` if it is a relative ``/``-separated path without ``.``/``..`` parts;
    ValueError otherwise (a record must stay inside its pillar's ``runs/``)."""
    parts = cell_id.split("/")
    if not cell_id or cell_id.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid cell id {cell_id!r}: a relative path without '.' or '..'")
    return cell_id


def record(bench: str, pillar: str, cell_id: str, root: str | Path = RESULTS) -> Path:
    return pillar_dir(bench, pillar, root) / "runs" / check_cell_id(cell_id) / RECORD


def record_in(pillar_folder: Path, cell_id: str) -> Path:
    return Path(pillar_folder) / "runs" / check_cell_id(cell_id) / RECORD


def cell_id_of(record_path: str | Path, pillar_folder: str | Path) -> str:
    """The cell id of ``record_path`` (inverse of :func:`record_in`)."""
    rel = Path(record_path).relative_to(Path(pillar_folder) / "runs")
    return rel.parent.as_posix()


def runs_table(bench: str, pillar: str, root: str | Path = RESULTS) -> Path:
    return runs_table_in(pillar_dir(bench, pillar, root))


def runs_table_in(pillar_folder: str | Path) -> Path:
    return Path(pillar_folder) / RUNS_TABLE


def board_files(bench: str, pillar: str, plots=(), root: str | Path = RESULTS) -> list[Path]:
    folder = pillar_dir(bench, pillar, root)
    return [folder / name for name in (*BOARD_FILES, *plots)]


def log(bench: str, pillar: str, batch: str, root: str | Path = RESULTS) -> Path:
    return pillar_dir(bench, pillar, root) / "logs" / f"{batch}.log"


def artefact_root() -> Path:
    """``results/artefacts``, or ``$SPARSEBENCH_ARTEFACTS`` (tests, or a shared cache)."""
    import os

    return Path(os.environ.get(ARTEFACTS_ENV) or Path(RESULTS) / ARTEFACTS)


def artefact(pillar: str, artefact_id: str, name: str = "") -> Path:
    """The folder of artefact ``artefact_id`` of ``pillar`` (or the file ``name`` in it)."""
    folder = artefact_root() / pillar / check_cell_id(artefact_id)
    return folder / name if name else folder


ARTEFACT_BUILD_INFO = "build.json"


def artefact_build_info(pillar: str, artefact_id: str) -> Path:
    """``build.json`` in an artefact's folder: its build seconds and threads (perf overhead)."""
    return artefact(pillar, artefact_id, ARTEFACT_BUILD_INFO)


def find_artefact_build_infos() -> list[Path]:
    """Every artefact's ``build.json`` under :func:`artefact_root`, sorted."""
    import os

    out = []
    for dirpath, _dirs, files in os.walk(artefact_root()):
        if ARTEFACT_BUILD_INFO in files:
            out.append(Path(dirpath) / ARTEFACT_BUILD_INFO)
    return sorted(out)


def artefact_log(pillar: str, job_name: str) -> Path:
    return artefact_root() / pillar / "logs" / f"{job_name}.log"


def summary(bench: str, root: str | Path = RESULTS) -> Path:
    return summary_in(bench_dir(bench, root))


def summary_in(bench_folder: str | Path) -> Path:
    return Path(bench_folder) / SUMMARY


def find_records(pillar_folder: str | Path) -> list[Path]:
    """Every ``runs/**/record.json`` under a pillar folder, sorted (stable row order).
    os.walk rather than Path.glob: a third of the time on 100,000 records."""
    import os

    root = Path(pillar_folder) / "runs"
    out = []
    for dirpath, _dirs, files in os.walk(root):
        if RECORD in files:
            out.append(Path(dirpath) / RECORD)
    return sorted(out)


def pillar_folders(bench_folder: str | Path) -> dict[str, Path]:
    """Pillar name -> folder for every subfolder of a results folder holding a runs/ folder."""
    folder = Path(bench_folder)
    if not folder.is_dir():
        return {}
    return {p.name: p for p in sorted(folder.iterdir()) if (p / "runs").is_dir()}

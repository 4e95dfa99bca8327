"""Records -> validated runs table (incremental) -> every pillar's board and ``summary.md``.

:func:`aggregate` reads a pillar's JSON records into one typed polars frame (the common columns
and the pillar's, with their dtypes; other keys with inferred dtypes), validates it with the
pillar's pandera model and writes ``runs.parquet`` atomically. It is incremental: the table
keeps each row's record file (``source``, relative to the pillar folder) with the file's size
and modification time, and a rebuild re-reads only records that are new or changed (one
``stat`` per record otherwise); rows of records that are gone are dropped. Boards are a
function of ``runs.parquet`` alone (:func:`write_boards`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import polars as pl

from sparsebench.suite import paths
from sparsebench.suite.atomic import atomic_path, write_atomic
from sparsebench.suite.frames import TableError, polars_dtype
from sparsebench.suite.pillar import Pillar, all_pillars, get_pillar
from sparsebench.suite.record import COMMON_COLUMNS

# Bookkeeping columns of the incremental rebuild (not record keys).
SOURCE, MTIME, SIZE, INODE = "source", "source_mtime_ns", "source_size", "source_inode"
STAT_KEY = [SOURCE, MTIME, SIZE, INODE]


def cache_path(out_parquet: Path) -> Path:
    """The hidden copy of ``runs.parquet`` that the incremental rebuild reads: Snakemake
    deletes a rule's outputs before running it, so the cache cannot be the output itself (the
    output is a hard link to it, no second copy on disk)."""
    return Path(out_parquet).with_name(f".{Path(out_parquet).stem}.cache.parquet")


def _publish(cache: Path, out: Path) -> None:
    """``out`` becomes (atomically) a hard link to ``cache``, or a copy where links fail."""
    import os
    import shutil

    try:  # already that file: a rename onto the same inode would leave the temporary link
        if os.path.samefile(cache, out):
            return
    except OSError:
        pass
    with atomic_path(out) as tmp:
        try:
            os.link(cache, tmp)
        except OSError:
            shutil.copyfile(cache, tmp)


def _convert(value: Any, py_type: type, column: str, path: Path) -> Any:
    """``value`` as ``py_type`` (None stays None); TableError if it cannot be, without guessing."""
    if value is None:
        return None
    # bool is an int subclass in Python: only a bool column takes a bool.
    if py_type is bool:
        ok = isinstance(value, bool)
    elif py_type is float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        value = float(value) if ok else value
    elif py_type is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        if isinstance(value, float) and value.is_integer():  # e.g. 3.0 written by a float sum
            value, ok = int(value), True
    else:
        ok = isinstance(value, py_type)
    if not ok:
        raise TableError(
            f"{path}: column {column!r} = {value!r} ({type(value).__name__}) is not "
            f"{py_type.__name__}"
        )
    return value


def _extra_series(name: str, values: list[Any]) -> pl.Series:
    """A column for a key outside the declared columns: inferred dtype, JSON text if types are
    mixed (so an odd column never drops values or fails the whole table)."""
    try:
        return pl.Series(name, values, strict=True)
    except (TypeError, ValueError, pl.exceptions.PolarsError):
        text = [None if v is None else json.dumps(v, sort_keys=True, default=str) for v in values]
        return pl.Series(name, text, dtype=pl.String())


def read_records(paths_: Sequence[Path]) -> list[dict[str, Any]]:
    """The JSON objects of ``paths_``; TableError naming a file that is unreadable or not an
    object."""
    out = []
    for path in paths_:
        try:
            with open(path) as f:
                rec = json.load(f)
        except (OSError, json.JSONDecodeError) as e:
            raise TableError(f"cannot read record {path}: {e}") from None
        if not isinstance(rec, dict):
            raise TableError(f"record {path} is not a JSON object but {type(rec).__name__}")
        out.append(rec)
    return out


def columns_of(pillar: Pillar) -> dict[str, type]:
    return {**COMMON_COLUMNS, **pillar.columns}


def collect(pillar: Pillar, paths_: Iterable[Path], root: Path | None = None) -> pl.DataFrame:
    """Read records into one frame (a record may give several rows, :meth:`Pillar.table_rows`).

    Declared columns come first, in order, with explicit dtypes (so a column that is null in
    every record still has its type); other keys follow sorted by name. With ``root``, the
    ``source``/``source_mtime_ns``/``source_size`` bookkeeping columns are added (paths
    relative to ``root``). Raises TableError for an unreadable or mistyped record.
    """
    paths_ = [Path(p) for p in paths_]
    rows: list[dict[str, Any]] = []
    row_paths: list[Path] = []
    # stat before reading: a record rewritten meanwhile then looks changed next time
    stats = [p.stat() for p in paths_] if root is not None else [None] * len(paths_)
    for path, st, rec in zip(paths_, stats, read_records(paths_)):
        for row in pillar.table_rows(rec):
            if st is not None:
                row = {**row, SOURCE: path.relative_to(root).as_posix(), MTIME: st.st_mtime_ns,
                       SIZE: st.st_size, INODE: st.st_ino}  # fmt: skip
            rows.append(row)
            row_paths.append(path)
    declared = columns_of(pillar)
    series = [
        pl.Series(
            c,
            [_convert(r.get(c), t, c, p) for r, p in zip(rows, row_paths)],
            dtype=polars_dtype(t),
            strict=True,
        )
        for c, t in declared.items()
    ]
    extras = sorted({k for r in rows for k in r} - declared.keys())
    series += [_extra_series(c, [r.get(c) for r in rows]) for c in extras]
    return pl.DataFrame(series)


def aggregate(
    pillar: Pillar | str, records: Iterable[Path], out_parquet: Path, incremental: bool = True
) -> pl.DataFrame:
    """Validate ``records`` as the pillar's runs table and write ``out_parquet``; return it.

    With ``incremental`` and a previous table (its hidden cache, :func:`cache_path`), only
    records whose (size, mtime, inode) changed are read again; atomic rewrites change the
    inode. Raises :class:`TableError` if there are no records, one is
    unreadable or mistyped, or the table fails the pillar's schema (the message names the row,
    its record file, the column and the check); nothing is written then.
    """
    pillar = get_pillar(pillar) if isinstance(pillar, str) else pillar
    out_parquet = Path(out_parquet)
    root = out_parquet.parent
    paths_ = [Path(p) for p in records]
    if not paths_:
        raise TableError(
            f"no {pillar.name} records to aggregate under {root}; run the benchmark first "
            "(`sparsebench run SPEC`)"
        )
    rel = {p.relative_to(root).as_posix(): p for p in paths_}
    cache = cache_path(out_parquet)
    old = _read_previous(cache) if incremental else None
    keep = pl.DataFrame()
    todo = list(paths_)
    if old is not None:
        stats = {}
        for k, p in rel.items():
            try:
                stats[k] = p.stat()
            except FileNotFoundError:
                raise TableError(f"record {p} is missing; run the benchmark first") from None
        current = pl.DataFrame(
            {
                SOURCE: list(stats),
                MTIME: [s.st_mtime_ns for s in stats.values()],
                SIZE: [s.st_size for s in stats.values()],
                INODE: [s.st_ino for s in stats.values()],
            },
            schema={SOURCE: pl.String, MTIME: pl.Int64, SIZE: pl.Int64, INODE: pl.Int64},
        )
        keep = old.join(current, on=STAT_KEY, how="semi")
        done = set(keep.get_column(SOURCE).unique().to_list())
        todo = [p for k, p in rel.items() if k not in done]
    if old is not None and not todo and keep.height == old.height:
        _publish(cache, out_parquet)  # nothing new, changed or removed: the table stands
        return old
    new = collect(pillar, todo, root) if todo else None
    if new is None:
        runs = keep
    elif keep.height:
        runs = pl.concat([keep, new], how="diagonal_relaxed")
    else:
        runs = new
    runs = runs.sort(SOURCE, maintain_order=True)
    from sparsebench.suite.schemas import validate_table  # pandera: only where a table is made

    validate_table(
        runs,
        pillar.table,
        sources=[f"{root}/{s}" for s in runs.get_column(SOURCE).to_list()],
        table=f"{pillar.name} runs",
        ident=pillar.row_key,
        problems=pillar.row_problems(),
    )
    write_atomic(cache, runs.write_parquet)
    _publish(cache, out_parquet)
    return runs


def _read_previous(path: Path) -> pl.DataFrame | None:
    """The previous table, if it exists and has the bookkeeping columns."""
    if not path.is_file():
        return None
    try:
        old = pl.read_parquet(path)
    except (OSError, pl.exceptions.PolarsError):
        return None
    return old if set(STAT_KEY) <= set(old.columns) else None


def read_runs(path: str | Path) -> pl.DataFrame:
    """A pillar's ``runs.parquet``; TableError naming the file and how to rebuild it when it is
    missing or not a readable table (it is made from the records, so nothing is lost)."""
    path = Path(path)
    rebuild = (
        f"it is rebuilt from the records by `sparsebench aggregate {path.parent.parent} "
        f"--pillar {path.parent.name}` (or the next snakemake run once it is removed)"
    )
    if not path.is_file():
        raise TableError(f"{path}: no runs table here; run the benchmark first, or {rebuild}")
    try:  # glob=False: a folder named like a pattern (bench?) must not read its siblings
        return pl.read_parquet(path, glob=False)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise TableError(
            f"{path}: not a readable runs table ({type(e).__name__}: {str(e).splitlines()[0]}); "
            f"{rebuild}"
        ) from None


def write_board(pillar: Pillar | str, runs_parquet: Path, log: str | None = None) -> dict:
    """The pillar's board from its ``runs.parquet`` alone, into the same folder (the rule
    ``board_<pillar>``, after the aggregation; the written files are listed in ``log``)."""
    pillar = get_pillar(pillar) if isinstance(pillar, str) else pillar
    runs = read_runs(runs_parquet)
    if runs.height == 0:
        raise TableError(f"{runs_parquet} is empty: nothing to rank; run the benchmark first")
    files = pillar.board(runs, Path(runs_parquet).parent)
    if log:
        Path(log).write_text("\n".join(map(str, files.values())) + "\n")
    return files


def write_summary(bench_folder: Path, top: int = 3, log: str | None = None) -> Path:
    """``summary.md``: for every pillar folder with a runs table, a link to its leaderboard
    and its top rows (:meth:`Pillar.summary`). Returns its path."""
    bench_folder = Path(bench_folder)
    lines = [f"# {bench_folder.name}: summary", ""]
    pillars = all_pillars()
    for name, folder in paths.pillar_folders(bench_folder).items():
        table = paths.runs_table_in(folder)
        if name not in pillars or not table.is_file():
            continue
        runs = read_runs(table)
        n_ok = runs.filter(pl.col("status") == "ok").height
        top_rows = pillars[name].summary(runs, top).strip("\n")
        lines += [
            f"## {pillars[name].title or name}",
            "",
            f"[{name}/leaderboard.md]({name}/leaderboard.md): {runs.height} row(s), {n_ok} ok.",
            "",
            *([f"```\n{_fence_safe(top_rows)}\n```", ""] if top_rows else []),
        ]
    out = paths.summary_in(bench_folder)
    text = "\n".join(lines).rstrip() + "\n"
    write_atomic(out, text)
    if log:
        Path(log).write_text(f"{out}\n")
    return out


def _fence_safe(text: str) -> str:
    """Text that cannot close its code block early (a spec string holding ``` would)."""
    return text.replace("```", "`\u200b``")


def rebuild(bench_folder: Path, incremental: bool = True) -> dict[str, pl.DataFrame]:
    """Aggregate every pillar folder of ``bench_folder`` and write its board and the summary.
    Raises TableError if the folder holds no records of a registered pillar."""
    bench_folder = Path(bench_folder)
    pillars = all_pillars()
    folders = {n: f for n, f in paths.pillar_folders(bench_folder).items() if n in pillars}
    found = {n: paths.find_records(f) for n, f in folders.items()}
    found = {n: r for n, r in found.items() if r}
    if not found:
        state = "" if bench_folder.is_dir() else " (the folder does not exist)"
        raise TableError(
            f"no records found under {bench_folder}{state}: searched "
            f"<pillar>/runs/**/record.json for the pillars {', '.join(pillars)}. Run the "
            "benchmark first (`sparsebench run SPEC`)."
        )
    out = {}
    for name, records in found.items():
        table = paths.runs_table_in(folders[name])
        out[name] = aggregate(pillars[name], records, table, incremental)
        pillars[name].board(out[name], folders[name])
    write_summary(bench_folder)
    return out

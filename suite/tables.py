"""Records -> validated runs table (incremental) -> every pillar's board and ``summary.md``.

:func:`aggregate` reads a pillar's rows from its fragments (:mod:`sparsebench.suite.fragments`,
the manifest lines added since the last table) and from the JSON records where no intact
fragment holds them, into one typed polars frame (the common columns and the pillar's, with
their dtypes; other keys with inferred dtypes), validates the rows read now with the pillar's
pandera model and writes ``runs.parquet`` atomically. The table keeps each row's record file
(``source``, relative to the pillar folder), its stat and its fragment; rows read from JSON are
read again when their record's stat changes; a full aggregation reads every JSON record. Boards
are a function of ``runs.parquet`` alone (:func:`write_boards`), with the side tables the
aggregation keeps beside it.
"""

from __future__ import annotations

import json
import os
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
FRAGMENT = "source_fragment"  # the fragment a row was read from; null: from its JSON record
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


def read_records(paths_: Sequence[str | Path]) -> list[dict[str, Any]]:
    """The JSON objects of ``paths_``; TableError naming a file that is unreadable or not an
    object."""
    out = []
    loads = json.loads
    for path in paths_:
        try:
            with open(path, "rb") as f:
                rec = loads(f.read())
        except (OSError, ValueError) as e:
            raise TableError(f"cannot read record {path}: {e}") from None
        if not isinstance(rec, dict):
            raise TableError(f"record {path} is not a JSON object but {type(rec).__name__}")
        out.append(rec)
    return out


def columns_of(pillar: Pillar) -> dict[str, type]:
    return {**COMMON_COLUMNS, **pillar.columns}


# The value types each column type takes as they are (anything else goes through _convert,
# which converts what it safely can and names the record of what it cannot).
_PLAIN: dict[type, frozenset[type]] = {
    float: frozenset({type(None), float, int}),
    int: frozenset({type(None), int}),
    bool: frozenset({type(None), bool}),
    str: frozenset({type(None), str}),
}


def _typed(name: str, py_type: type, values: list[Any], row_paths: Sequence[str]) -> pl.Series:
    """A declared column: the values as they are when their types fit, else each converted
    (:func:`_convert`) so that a mistyped value names its record."""
    if not set(map(type, values)) <= _PLAIN.get(py_type, frozenset({type(None), py_type})):
        values = [_convert(v, py_type, name, p) for v, p in zip(values, row_paths)]
    return pl.Series(name, values, dtype=polars_dtype(py_type), strict=True)


def _stat(path: str) -> os.stat_result:
    try:
        return os.stat(path)
    except FileNotFoundError:
        raise TableError(f"record {path} is missing; run the benchmark first") from None


def _rel(path: str | Path, root: str) -> str:
    """``path`` relative to ``root`` as a POSIX string (plain string work: a million records
    would otherwise make a million Path objects)."""
    s = os.fspath(path)
    if s.startswith(root):
        return s[len(root) :]
    return Path(s).relative_to(root.rstrip("/")).as_posix()


def collect(
    pillar: Pillar, paths_: Iterable[str | Path], root: str | Path | None = None
) -> pl.DataFrame:
    """Read records into one frame (a record may give several rows, :meth:`Pillar.table_rows`).

    Declared columns come first, in order, with explicit dtypes (so a column that is null in
    every record still has its type); other keys follow sorted by name. With ``root``, the
    ``source``/``source_mtime_ns``/``source_size``/``source_inode`` bookkeeping columns are
    added (paths relative to ``root``). Raises TableError for an unreadable or mistyped record.
    """
    paths_ = [os.fspath(p) for p in paths_]
    rows: list[dict[str, Any]] = []
    row_paths: list[str] = []
    # stat before reading: a record rewritten meanwhile then looks changed next time
    stats = [_stat(p) for p in paths_] if root is not None else [None] * len(paths_)
    prefix = os.fspath(root).rstrip("/") + "/" if root is not None else ""
    table_rows = pillar.table_rows
    for path, st, rec in zip(paths_, stats, read_records(paths_)):
        for row in table_rows(rec):
            if st is not None:
                row = {**row, SOURCE: _rel(path, prefix), MTIME: st.st_mtime_ns,
                       SIZE: st.st_size, INODE: st.st_ino}  # fmt: skip
            rows.append(row)
            row_paths.append(path)
    declared = columns_of(pillar)
    series = [_typed(c, t, [r.get(c) for r in rows], row_paths) for c, t in declared.items()]
    extras = sorted({k for r in rows for k in r} - declared.keys())
    series += [_extra_series(c, [r.get(c) for r in rows]) for c in extras]
    return pl.DataFrame(series)


def aggregate(
    pillar: Pillar | str,
    records: Iterable[str | Path] | None,
    out_parquet: Path,
    incremental: bool = True,
) -> pl.DataFrame:
    """Validate the pillar's records as its runs table and write ``out_parquet``; return it.

    Rows come from the pillar's fragments (:mod:`sparsebench.suite.fragments`) where the
    manifest lists them, and from the JSON records otherwise: records no fragment holds, those
    of a fragment that is missing or whose bytes changed. ``records`` is the list of record
    files the table holds (the spec's: rows of other records leave it, a listed record that no
    fragment holds is read); None means every record the manifest lists (in a full
    aggregation, without a manifest, or, for a first aggregation, with a manifest begun after
    records existed: every record found under the folder).

    With ``incremental`` and a previous table (its hidden cache, :func:`cache_path`), only
    manifest lines appended since are read, and of the rows read from JSON only those whose
    record's (size, mtime, inode) changed are read again (atomic rewrites change the inode);
    rows from fragments are trusted (the suite writes a fragment line for every record it
    writes). A full aggregation (``incremental=False``) reads every record's JSON and no
    fragment: what a record edited by hand needs, and what :func:`verify` compares.
    Raises :class:`TableError` if there are no records, one is unreadable or mistyped, or the
    table fails the pillar's schema (the message names the row, its record file, the column
    and the check); nothing is written then.
    """
    from sparsebench.suite import fragments

    pillar = get_pillar(pillar) if isinstance(pillar, str) else pillar
    out_parquet = Path(out_parquet)
    root = out_parquet.parent
    prefix = os.fspath(root).rstrip("/") + "/"
    cache = cache_path(out_parquet)
    old = _read_previous(cache) if incremental else None
    state = _read_state(cache) if old is not None else None
    tail = fragments.read(root, state["offset"], state.get("head")) if state else None
    filtered = False
    if tail is None:
        if old is not None and FRAGMENT in old.columns:  # another manifest: no fragment row
            old, filtered = old.filter(pl.col(FRAGMENT).is_null()), True
        tail = fragments.read(root)
        # a manifest that changed other than by appending (state is not None) is not trusted
        # to list every record either
        listed = incremental and state is None and tail is not None and tail.lists_every_record
        if records is None and not listed:
            records = paths.find_records(root)  # records older than the manifest: walk, once
    expected = None if records is None else [_rel(p, prefix) for p in records]
    if expected is not None and not expected:
        raise TableError(
            f"no {pillar.name} records to aggregate under {root}; run the benchmark first "
            "(`sparsebench run SPEC`)"
        )

    # Manifest lines: the last line naming a record decides its rows.
    # A full aggregation reads every record's JSON (the source of truth) and no fragment.
    entries = tail.entries if tail is not None and incremental else []
    last: dict[str, int] = {}
    for i, e in enumerate(entries):
        for s in e.sources:
            last[s] = i
    wanted = None if expected is None else set(expected)
    parts: list[pl.DataFrame] = []
    sides = pillar.side_tables()
    side_parts: dict[str, list[pl.DataFrame]] = {name: [] for name in sides}
    from_json: list[str] = []
    for i, e in enumerate(entries):
        mine = [s for s in e.sources if last[s] == i and (wanted is None or s in wanted)]
        if not mine:
            continue
        frame = _fragment(root, e)
        if frame is None:
            from_json += mine
            continue
        partial = len(mine) < len(set(e.sources))
        if partial:
            frame = frame.filter(pl.col(SOURCE).is_in(mine))
        parts.append(frame.with_columns(pl.lit(e.file, pl.String).alias(FRAGMENT)))
        for name, fn in sides.items():  # written with the fragment, else made from its rows
            side = _fragment(root, e, name, fragments.side_version(fn))
            if side is None:
                side = fn(frame)
            elif partial:
                side = side.filter(pl.col(SOURCE).is_in(mine))
            side_parts[name].append(side)
    covered = set(last)

    keep = old
    if old is not None:
        if FRAGMENT not in old.columns:
            old = old.with_columns(pl.lit(None, pl.String).alias(FRAGMENT))
        keep = old.filter(~pl.col(SOURCE).is_in(list(covered))) if covered else old
        if expected is not None:
            keep = keep.filter(pl.col(SOURCE).is_in(pl.Series(expected, dtype=pl.String)))
        # rows read from JSON: read again those whose record changed (or is gone)
        jrows = keep.filter(pl.col(FRAGMENT).is_null())
        if jrows.height:
            changed = _changed(root, jrows)
            if changed:
                keep = keep.filter(~pl.col(SOURCE).is_in(changed))
                from_json += [s for s in changed if wanted is not None or _exists(root, s)]
    if expected is not None:  # listed records that neither the table nor a fragment holds
        held = pl.Series(list(covered), dtype=pl.String)
        if keep is not None:
            held = pl.concat([held, keep.get_column(SOURCE)])
        listed = pl.Series(SOURCE, list(dict.fromkeys(expected)), dtype=pl.String)
        from_json += listed.filter(~listed.is_in(held)).to_list()
    from_json = list(dict.fromkeys(from_json))
    if from_json and expected is None:  # removed since its line (retry-failed): gone
        from_json = [s for s in from_json if _exists(root, s)]
    if from_json:  # a listed record that is missing: collect names it
        frame = collect(pillar, [prefix + s for s in from_json], root)
        parts.append(frame.with_columns(pl.lit(None, pl.String).alias(FRAGMENT)))
        for name, fn in sides.items():
            side_parts[name].append(fn(frame))
    if old is not None and not filtered and not parts and keep.height == old.height:
        _publish(cache, out_parquet)  # nothing new, changed or removed: the table stands
        return old
    new = pl.concat(parts, how="diagonal_relaxed") if parts else None
    if new is None and (keep is None or keep.height == 0):
        raise TableError(
            f"no {pillar.name} records to aggregate under {root}; run the benchmark first "
            "(`sparsebench run SPEC`)"
        )
    if new is not None:
        new = new.sort(SOURCE, maintain_order=True)
    # the previous table is sorted by record: the new rows go in between (no sort of it all)
    runs = merge_by_source(keep if keep is not None and keep.height else None, new)
    _validate(pillar, root, runs, new, keep)
    made = {
        name: pl.concat(got, how="diagonal_relaxed").sort(SOURCE, maintain_order=True)
        for name, got in side_parts.items()
        if got
    }
    _write_sides(pillar, out_parquet, runs, keep if old is not None else None, made)
    state = _state(tail)  # in the cache's own metadata: one atomic file holds both
    write_atomic(cache, lambda p: runs.write_parquet(p, metadata=state))
    _publish(cache, out_parquet)
    return runs


def side_path(out_parquet: Path, name: str) -> Path:
    """Where the side table ``name`` (:meth:`Pillar.side_tables`) of a runs table is kept."""
    out_parquet = Path(out_parquet)
    return out_parquet.with_name(f".{out_parquet.stem}.{name}.parquet")


FINGERPRINT = "_runs_fingerprint"
VERSION = "_side_version"  # fragments.side_version of the code that made a side table


def fingerprint(runs: pl.DataFrame) -> int:
    """A number that changes with the set of rows of a runs table (their record and its
    stat): a side table made with another table is not used."""
    cols = [c for c in (*STAT_KEY, FRAGMENT) if c in runs.columns]
    if SOURCE not in runs.columns or runs.is_empty():
        return 0
    total = runs.select(pl.struct(cols).hash(seed=7).sum()).item()  # u64, wrapping
    return (int(total) ^ runs.height) & 0xFFFF_FFFF_FFFF_FFFF


def _write_sides(
    pillar: Pillar,
    out_parquet: Path,
    runs: pl.DataFrame,
    keep: pl.DataFrame | None,
    made: dict[str, pl.DataFrame],
) -> None:
    """Each side table: the previous one's rows of the records kept, and ``made``, the side
    rows of the rows read now (from their fragments' side files, or made from the rows)."""
    sides = pillar.side_tables()
    if not sides:
        return
    from sparsebench.suite.fragments import side_version

    for name, fn in sides.items():
        path = side_path(out_parquet, name)
        # in the file's metadata (empty tables too): the rows and the code it was made with
        mark = {FINGERPRINT: str(fingerprint(runs)), VERSION: side_version(fn)}
        old = None
        if keep is not None and path.is_file():
            try:
                if pl.read_parquet_metadata(path).get(VERSION) == mark[VERSION]:
                    old = pl.read_parquet(path, glob=False)
            except (OSError, pl.exceptions.PolarsError):
                old = None
        new = made.get(name)
        if keep is not None and not keep.height:
            frame = new if new is not None else fn(runs)
        elif old is None and keep is not None:  # kept rows without their side rows
            frame = fn(runs)
        elif old is None:
            frame = new if new is not None else fn(runs)
        else:
            kept = old.filter(pl.col(SOURCE).is_in(keep.get_column(SOURCE).unique()))
            # the runs table's order (by record), each record's rows in their own order
            frame = merge_by_source(kept, new)
        write_atomic(path, lambda p, frame=frame, mark=mark: frame.write_parquet(p, metadata=mark))


def side_table(folder: Path, name: str, runs: pl.DataFrame) -> pl.DataFrame | None:
    """The side table ``name`` kept beside ``folder``'s ``runs.parquet`` when it was made with
    ``runs`` (the same rows) by the pillar's current code, else None: the caller derives it
    from ``runs`` itself."""
    path = side_path(paths.runs_table_in(folder), name)
    if SOURCE not in runs.columns or not path.is_file():
        return None
    from sparsebench.suite.fragments import side_version
    from sparsebench.suite.pillar import PillarError, get_pillar

    try:
        meta = pl.read_parquet_metadata(path)
        if meta.get(FINGERPRINT) != str(fingerprint(runs)):
            return None
        fn = get_pillar(str(runs["pillar"][0])).side_tables().get(name) if runs.height else None
        if fn is not None and meta.get(VERSION) != side_version(fn):
            return None
        return pl.read_parquet(path, glob=False)
    except (OSError, PillarError, pl.exceptions.PolarsError):
        return None


def verify(pillar: Pillar | str, pillar_folder: Path) -> dict[str, list[str]]:
    """Compare the rows the manifest's fragments give with those the JSON records give, record
    by record (every column but the bookkeeping ones). Returns ``differ`` (the two disagree),
    ``not_in_fragments`` (a record no readable fragment holds) and ``gone`` (a fragment's
    record that no longer exists), each a list of sources (relative to the folder)."""
    from sparsebench.suite import fragments

    pillar = get_pillar(pillar) if isinstance(pillar, str) else pillar
    root = Path(pillar_folder)
    prefix = os.fspath(root).rstrip("/") + "/"
    tail = fragments.read(root)
    entries = tail.entries if tail is not None else []
    last = {s: i for i, e in enumerate(entries) for s in e.sources}
    parts = []
    for i, e in enumerate(entries):
        mine = [s for s in e.sources if last[s] == i]
        frame = _fragment(root, e) if mine else None
        if frame is not None:
            parts.append(frame.filter(pl.col(SOURCE).is_in(mine)))
    on_disk = [_rel(p, prefix) for p in paths.find_records(root)]
    held = {s for part in parts for s in part.get_column(SOURCE).to_list()}
    exists = set(on_disk)
    both = [s for s in on_disk if s in held]
    differ: list[str] = []
    try:
        truth = collect(pillar, [prefix + s for s in both], root) if both else pl.DataFrame()
    except TableError:  # a record the table refuses: it differs; the others are compared
        frames = []
        for s in list(both):
            try:
                frames.append(collect(pillar, [prefix + s], root))
            except TableError:
                differ.append(s)
                both.remove(s)
        truth = pl.concat(frames, how="diagonal_relaxed") if frames else pl.DataFrame()
    if both and truth.height:
        wanted = set(both)
        skip = {*STAT_KEY, FRAGMENT}

        def rows_of(frames: Sequence[pl.DataFrame]) -> dict[str, list[dict[str, Any]]]:
            out: dict[str, list[dict[str, Any]]] = {}
            for frame in frames:  # each as typed when written: a concat would widen dtypes
                for row in frame.filter(pl.col(SOURCE).is_in(both)).iter_rows(named=True):
                    out.setdefault(row[SOURCE], []).append(
                        {k: _plain(v) for k, v in row.items() if v is not None and k not in skip}
                    )
            return out

        a, b = rows_of(parts), rows_of([truth])
        differ += [s for s in both if s in wanted and a.get(s) != b.get(s)]
    return {
        "differ": differ,
        "not_in_fragments": [s for s in on_disk if s not in held],
        "gone": sorted(held - exists),
    }


def _plain(value: Any) -> Any:
    """A value as compared by :func:`verify`: numbers as floats (a column's dtype may differ
    between two frames of the same records), the rest as is."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return value


def _validate(
    pillar: Pillar,
    root: Path,
    runs: pl.DataFrame,
    new: pl.DataFrame | None,
    keep: pl.DataFrame | None,
) -> None:
    """The pillar's schema on the rows read now (its checks are row by row), then uniqueness
    of their keys among themselves and against the rows kept (which were unique already); a
    duplicate validates the whole table for the full message."""
    from sparsebench.suite.schemas import validate_table  # pandera: only where a table is made

    def full(frame: pl.DataFrame) -> None:
        validate_table(
            frame,
            pillar.table,
            sources=_Sources(root, frame.get_column(SOURCE)),
            table=f"{pillar.name} runs",
            ident=pillar.row_key,
            problems=pillar.row_problems(),
        )

    if new is None:
        return  # only rows that were validated when they were read
    if keep is not None and keep.height:
        full(new)
        key = [c for c in ("cell_id", *pillar.row_key) if c in runs.columns]
        if _duplicated(runs, new, key):
            full(runs)
    else:
        full(runs)


class _Sources(Sequence[str]):
    """The record file of each row, made only for the rows an error names (a list of them all
    costs a second at a million rows)."""

    def __init__(self, root: Path, sources: pl.Series) -> None:
        self._root, self._sources = root, sources

    def __len__(self) -> int:
        return len(self._sources)

    def __getitem__(self, i):  # noqa: ANN001 - an index or a slice, as a Sequence takes
        if isinstance(i, slice):
            return [f"{self._root}/{s}" for s in self._sources[i].to_list()]
        return f"{self._root}/{self._sources[i]}"


def _duplicated(runs: pl.DataFrame, new: pl.DataFrame, key: list[str]) -> bool:
    """Whether a key repeats in ``runs``, where the rows not in ``new`` are unique already: only
    the rows sharing a first key column value with ``new`` can repeat."""
    first = pl.col(key[0])
    near = runs.filter(first.is_in(new.get_column(key[0]).unique()) | first.is_null())
    return near.select(pl.struct(key).is_duplicated().any()).item()


def merge_by_source(a: pl.DataFrame | None, b: pl.DataFrame | None) -> pl.DataFrame:
    """Two frames sorted by ``source`` (each record's rows in their order) with no record in
    both, as one frame sorted by ``source``: ``b``'s rows inserted into ``a`` by slices (a
    table of millions of rows is not sorted again for a thousand new ones; polars'
    ``merge_sorted`` copies every column, 2.3 s at 2.4 million rows here, where slices are
    views). Columns as ``pl.concat(how="diagonal_relaxed")`` gives them."""
    if a is None or b is None:
        return b if a is None else a
    schema = pl.concat([a.head(0), b.head(0)], how="diagonal_relaxed").schema

    def aligned(f: pl.DataFrame) -> pl.DataFrame:
        return f.select(
            [
                (pl.col(c) if c in f.columns else pl.lit(None)).cast(t).alias(c)
                for c, t in schema.items()
            ]
        )

    a, b = aligned(a), aligned(b)
    if not a.height or not b.height:
        return b if not a.height else a
    if not a.get_column(SOURCE).is_sorted():  # a table written otherwise: sorted once here
        a = a.sort(SOURCE, maintain_order=True)
    at = a.get_column(SOURCE).search_sorted(b.get_column(SOURCE), side="left").to_list()
    parts, done, i = [], 0, 0
    while i < len(at):  # the run of b's rows that go before a's row at[i]
        j = i
        while j < len(at) and at[j] == at[i]:
            j += 1
        parts += [a.slice(done, at[i] - done), b.slice(i, j - i)]
        done, i = at[i], j
    parts.append(a.slice(done))
    return pl.concat([p for p in parts if p.height], rechunk=False)


def _fragment(root: Path, entry, side: str | None = None, version: str = "") -> pl.DataFrame | None:
    """A manifest line's rows (or those of its side table ``side`` made by the code of
    ``version``), or None when they must be made otherwise (no file, the file is missing, its
    bytes differ from the digest the line recorded, or other code made it): the rows from JSON,
    the side rows from the rows."""
    from sparsebench.suite import fragments

    if side is None:
        file, sha = entry.file, entry.sha256
    else:
        file, sha = entry.side(side, version) or (None, None)
    if not file:
        return None
    import hashlib
    import io

    try:  # one read for the digest and the table
        data = (fragments.folder_of(root) / file).read_bytes()
        if hashlib.sha256(data).hexdigest() != sha:
            return None
        return pl.read_parquet(io.BytesIO(data))
    except (OSError, pl.exceptions.PolarsError):
        return None


def _exists(root: Path, source: str) -> bool:
    return os.path.isfile(os.path.join(root, source))


def _changed(root: Path, rows: pl.DataFrame) -> list[str]:
    """Sources among ``rows`` whose record's (mtime, size, inode) differ from the row's, or
    whose record is gone."""
    out = []
    base = os.fspath(root)
    for s, m, z, i in rows.select(STAT_KEY).unique(SOURCE, maintain_order=True).iter_rows():
        try:
            st = os.stat(os.path.join(base, s))
        except FileNotFoundError:
            out.append(s)
            continue
        if (st.st_mtime_ns, st.st_size, st.st_ino) != (m, z, i):
            out.append(s)
    return out


STATE = "sparsebench_manifest"  # the cache's metadata key: how far it read the manifest


def _read_state(cache: Path) -> dict[str, Any] | None:
    """How far the cache has read the manifest: its byte offset and the manifest's mark."""
    try:
        state = json.loads(pl.read_parquet_metadata(cache).get(STATE) or "null")
        return state if isinstance(state, dict) and isinstance(state.get("offset"), int) else None
    except (OSError, ValueError, pl.exceptions.PolarsError):
        return None


def _state(tail) -> dict[str, str]:
    offset, head = (tail.end, tail.head) if tail is not None else (0, None)
    return {STATE: json.dumps({"offset": offset, "head": head})}


def _read_previous(path: Path) -> pl.DataFrame | None:
    """The previous table, if it exists and has the bookkeeping columns."""
    if not path.is_file():
        return None
    try:
        old = pl.read_parquet(path, glob=False)  # a folder named like a pattern: no siblings
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
    from sparsebench.suite import fragments

    found: dict[str, list[Path] | None] = {}
    for name, folder in folders.items():
        if incremental and fragments.manifest_of(folder).is_file():
            found[name] = None  # the manifest lists them: no walk over the folder
        elif records := paths.find_records(folder):
            found[name] = records
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

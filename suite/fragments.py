"""Columnar fragments of the records: what lets a runs table grow to a million rows in seconds.

A JSON record per cell stays the source of truth (atomic, readable). Besides them, the process
that writes records also writes their runs-table rows (the typed frame of
:func:`sparsebench.suite.tables.collect`, with each record's ``stat`` at the time) as one
Parquet *fragment* per chunk of cells, and appends a line to the pillar's manifest::

    <pillar>/fragments/<stem>.<pid>.<n>.parquet
    <pillar>/fragments/<stem>.<pid>.<n>.<side>.parquet   (the pillar's side tables of those rows)
    <pillar>/fragments/manifest.jsonl   {"file": ..., "sha256": ..., "rows": ..., "sources": [...],
                                         "sides": {"<side>": {"file": ..., "sha256": ...,
                                                              "version": ...}}}

The manifest is append-only (one JSON line per fragment, appended under an exclusive lock), so
the aggregation remembers how far it has read and reads only what came after. A line whose
fragment is missing, or whose bytes no longer match its digest, falls back to the JSON of its
``sources``; a line without a file (``"file": null``: its rows could not be typed, e.g. a
mistyped record) does so always, so the record's error surfaces where the table is built.
Later lines win: a record written again (a rerun, a failure confirmed at the workflow's end)
gets a new line whose rows replace the old ones. The side tables of a pillar
(:meth:`sparsebench.suite.pillar.Pillar.side_tables`: e.g. curves parsed from JSON text) are
made from the fragment's rows by the process that writes it, so that they are parsed once, in
the jobs, not by an aggregation over a million rows; a side file that is missing, altered, or
made by other code (its ``version``, :func:`side_version`) is made again from the fragment's
rows.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FOLDER = "fragments"
MANIFEST = "manifest.jsonl"


def folder_of(pillar_folder: str | Path) -> Path:
    return Path(pillar_folder) / FOLDER


def manifest_of(pillar_folder: str | Path) -> Path:
    return folder_of(pillar_folder) / MANIFEST


def digest(path: str | Path) -> str:
    from sparsebench.suite.atomic import sha256_of

    return sha256_of(path)


@dataclass(frozen=True)
class Entry:
    """One manifest line: a fragment (``file`` relative to the fragments folder, or None) and
    the records it holds (``sources``, relative to the pillar folder)."""

    file: str | None
    sha256: str | None
    rows: int
    sources: tuple[str, ...]
    # (side table, file, sha256, version of the code that made it) of each side file
    sides: tuple[tuple[str, str, str, str], ...] = ()

    def side(self, name: str, version: str) -> tuple[str, str] | None:
        """The (file, sha256) of the side table ``name`` of this fragment, if it was written by
        the code of ``version``."""
        return next(((f, h) for n, f, h, v in self.sides if n == name and v == version), None)


def _lock(fd: int) -> None:
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError):  # no flock (another OS, some network mounts): O_APPEND only
        pass


def append(pillar_folder: str | Path, entry: Entry) -> None:
    """Append ``entry`` to the manifest as one line, in one write, flushed to disk."""
    fields: dict[str, Any] = {"file": entry.file, "sha256": entry.sha256, "rows": entry.rows,
                              "sources": list(entry.sources)}  # fmt: skip
    if entry.sides:
        fields["sides"] = {n: {"file": f, "sha256": h, "version": v}
                           for n, f, h, v in entry.sides}  # fmt: skip
    line = json.dumps(fields, separators=(",", ":")) + "\n"
    path = manifest_of(pillar_folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        _lock(fd)  # released by close
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: end it
            line = "\n" + line
        if not size:  # a new manifest: say whether it will list every record of the folder
            line = _header(pillar_folder) + line
        os.write(fd, line.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def write(
    pillar: Any, pillar_folder: str | Path, records: Sequence[str | Path], stem: str
) -> Entry:
    """The fragment of ``records`` (record files under ``pillar_folder``, just written by this
    process) and its manifest line. When the rows cannot be typed (a record the table would
    refuse), the line names the records without a file: the aggregation reads their JSON and
    reports the error there. Returns the entry appended."""
    from sparsebench.suite.atomic import write_atomic
    from sparsebench.suite.tables import collect

    root = Path(pillar_folder)
    sources = tuple(Path(p).relative_to(root).as_posix() for p in records)
    try:
        frame = collect(pillar, records, root)
    except Exception:  # noqa: BLE001 - any record the table cannot type: its JSON tells why
        entry = Entry(None, None, 0, sources)
    else:
        base = f"{_safe(stem)}.{os.getpid()}.{_next()}"
        path = folder_of(root) / f"{base}.parquet"
        write_atomic(path, frame.write_parquet, fsync=True)
        sides = []
        for side, fn in pillar.side_tables().items():
            try:
                rows = fn(frame)
            except Exception:  # noqa: BLE001 - the aggregation makes it (and names the error)
                continue
            side_path = folder_of(root) / f"{base}.{_safe(side)}.parquet"
            write_atomic(side_path, rows.write_parquet, fsync=True)
            sides.append((side, side_path.name, digest(side_path), side_version(fn)))
        entry = Entry(path.name, digest(path), frame.height, sources, tuple(sides))
    append(root, entry)
    return entry


_COUNTER = iter(range(1 << 62))


def _next() -> str:
    import time

    return f"{time.time_ns()}-{next(_COUNTER)}"


def _safe(stem: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:80] or "cells"


HEADER = "manifest"  # the first line's key: {"manifest": 1, "lists_every_record": bool}


def _header(pillar_folder: str | Path) -> str:
    """The first line of a new manifest: it lists every record of the folder when the folder
    holds none yet (every record the suite writes is named in the manifest before it is
    written), so an aggregation without a cache need not walk the folder; records older than
    the manifest (written before fragments existed) make it list only what comes after."""
    runs = Path(pillar_folder) / "runs"
    older = any("record.json" in files for _, _, files in os.walk(runs))
    return json.dumps({HEADER: 1, "lists_every_record": not older}) + "\n"


MARK_BYTES = 4096  # how much of the manifest before an offset identifies it


@dataclass(frozen=True)
class Tail:
    """Manifest lines from a byte offset on: the entries, the offset after the last complete
    line, and the mark of the manifest up to there (:func:`_mark`)."""

    entries: list[Entry]
    end: int
    head: str | None
    lists_every_record: bool = False  # read from the start: the header says so


def _mark(f, offset: int) -> str:
    """The digest of the manifest's first line and of the bytes just before ``offset``: a
    manifest rewritten, shortened or replaced since does not match."""
    f.seek(0)
    first = f.readline(1 << 20)
    f.seek(max(0, offset - MARK_BYTES))
    before = f.read(offset - max(0, offset - MARK_BYTES))
    return hashlib.sha256(first + b"\0" + before).hexdigest()


def read(pillar_folder: str | Path, offset: int = 0, head: str | None = None) -> Tail | None:
    """The manifest's complete lines after ``offset``; None when there is no manifest or when
    it is not, up to ``offset``, the manifest ``head`` marked (rewritten or shortened: read it
    all again)."""
    path = manifest_of(pillar_folder)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return None
    with f:
        size = os.fstat(f.fileno()).st_size
        if offset and (offset > size or _mark(f, offset) != head):
            return None
        f.seek(offset)
        data = f.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line being appended right now waits
        end = offset + len(complete)
        every = not offset and _lists_every_record(complete[: complete.find(b"\n") + 1])
        return Tail(list(_entries(complete, path)), end, _mark(f, end), every)


def _lists_every_record(first_line: bytes) -> bool:
    try:
        header = json.loads(first_line)
    except ValueError:
        return False
    return isinstance(header, dict) and header.get("lists_every_record") is True


def _entries(data: bytes, path: Path) -> Iterator[Entry]:
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            if isinstance(d, dict) and HEADER in d and "sources" not in d:
                continue
            sides = _sides(d.get("sides"))
            yield Entry(d.get("file"), d.get("sha256"), int(d.get("rows") or 0),
                        tuple(d["sources"]), sides)  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            # a line a killed writer left unfinished: its records keep their JSON, which a
            # listed or full aggregation reads
            print(f"warning: {path}: skipped an unreadable manifest line ({line[:60]!r})",
                  file=sys.stderr)  # fmt: skip


def _sides(value: Any) -> tuple[tuple[str, str, str, str], ...]:
    """A line's side files; none when they are not as written (the aggregation makes them)."""
    try:
        return tuple(
            (str(n), str(v["file"]), str(v["sha256"]), str(v.get("version")))
            for n, v in value.items()
        )
    except (AttributeError, KeyError, TypeError):
        return ()


@functools.cache
def side_version(fn: Any) -> str:
    """An identity of the code that makes a side table: the source file of ``fn``'s module and
    its own bytecode and constants. Side rows made by other code are made again (a change
    anywhere in that file counts: the helpers ``fn`` calls usually live there)."""
    import inspect

    code = getattr(fn, "__code__", None)
    parts = [getattr(fn, "__qualname__", repr(fn)).encode()]
    if code is not None:
        parts.append(_code_bytes(code))
    try:
        parts.append(Path(inspect.getsourcefile(fn) or "").read_bytes())
    except (TypeError, OSError):
        pass
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _code_bytes(code: Any) -> bytes:
    """A code object's bytecode and constants, nested code (comprehensions, lambdas) included,
    without anything a process makes up (the addresses in a nested code object's repr)."""
    out = [code.co_code]
    for c in code.co_consts:
        out.append(_code_bytes(c) if hasattr(c, "co_code") else repr(c).encode())
    return b"\0".join(out)

"""Columnar fragments of the records: what lets a runs table grow to a million rows in seconds.

A JSON record per cell stays the source of truth (atomic, readable). Besides them, the process
that writes records also writes their runs-table rows (the typed frame of
:func:`sparsebench.suite.tables.collect`, with each record's ``stat`` at the time) as one
Parquet *fragment* per chunk of cells, and appends a line to the pillar's manifest::

    <pillar>/fragments/<stem>.<pid>.<n>.parquet
    <pillar>/fragments/manifest.jsonl   {"file": ..., "sha256": ..., "rows": ..., "sources": [...]}

The manifest is append-only (one JSON line per fragment, appended under an exclusive lock), so
the aggregation remembers how far it has read and reads only what came after. A line whose
fragment is missing, or whose bytes no longer match its digest, falls back to the JSON of its
``sources``; a line without a file (``"file": null``: its rows could not be typed, e.g. a
mistyped record) does so always, so the record's error surfaces where the table is built.
Later lines win: a record written again (a rerun, a failure confirmed at the workflow's end)
gets a new line whose rows replace the old ones.
"""

from __future__ import annotations

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


def _lock(fd: int) -> None:
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX)
    except (ImportError, OSError):  # no flock (another OS, some network mounts): O_APPEND only
        pass


def append(pillar_folder: str | Path, entry: Entry) -> None:
    """Append ``entry`` to the manifest as one line, in one write, flushed to disk."""
    line = json.dumps(
        {"file": entry.file, "sha256": entry.sha256, "rows": entry.rows,
         "sources": list(entry.sources)},
        separators=(",", ":"),
    ) + "\n"  # fmt: skip
    path = manifest_of(pillar_folder)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        _lock(fd)  # released by close
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":  # a writer died mid-line: end it
            line = "\n" + line
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
        name = f"{_safe(stem)}.{os.getpid()}.{_next()}.parquet"
        path = folder_of(root) / name
        write_atomic(path, frame.write_parquet, fsync=True)
        entry = Entry(name, digest(path), frame.height, sources)
    append(root, entry)
    return entry


_COUNTER = iter(range(1 << 62))


def _next() -> str:
    import time

    return f"{time.time_ns()}-{next(_COUNTER)}"


def _safe(stem: str) -> str:
    return "".join(c if c.isalnum() or c in "-_" else "_" for c in stem)[:80] or "cells"


MARK_BYTES = 4096  # how much of the manifest before an offset identifies it


@dataclass(frozen=True)
class Tail:
    """Manifest lines from a byte offset on: the entries, the offset after the last complete
    line, and the mark of the manifest up to there (:func:`_mark`)."""

    entries: list[Entry]
    end: int
    head: str | None


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
        return Tail(list(_entries(complete, path)), end, _mark(f, end))


def _entries(data: bytes, path: Path) -> Iterator[Entry]:
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            d = json.loads(line)
            yield Entry(d.get("file"), d.get("sha256"), int(d.get("rows") or 0),
                        tuple(d["sources"]))  # fmt: skip
        except (ValueError, KeyError, TypeError, AttributeError):
            # a line a killed writer left unfinished: its records keep their JSON, which a
            # listed or full aggregation reads
            print(f"warning: {path}: skipped an unreadable manifest line ({line[:60]!r})",
                  file=sys.stderr)  # fmt: skip

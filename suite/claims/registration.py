"""When each claim file was registered, read from git rather than typed by hand: the last
commit that changed the file, and whether the file changed after the runs its claims read.

A claim is evidence only if it was fixed before its numbers existed. A claim file whose last
change (its commit date, or its modification time while it has uncommitted changes) is later
than the earliest ``started_at`` of the rows a verdict read is flagged *not pre-registered*.
Outside a git checkout, or when git fails, the commit is ``unknown`` and nothing is flagged
(there is nothing to compare).
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import polars as pl

from .judge import Inconclusive, Verdict, _select

GIT_TIMEOUT_S = 10
NOT_PRE_REGISTERED = "not pre-registered: the claim file changed after its cells ran"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class FileCommit:
    """The last commit that changed a claim file (``sha`` short, ``date`` the committer date
    in ISO 8601; both ``unknown`` outside git), whether the file has changes that commit does
    not hold (modified, staged or untracked), and when its content last changed."""

    sha: str = UNKNOWN
    date: str = UNKNOWN
    uncommitted: bool = False
    changed: datetime | None = None

    def text(self) -> str:
        """``registered at <sha> (<date>)``, noting uncommitted changes."""
        if self.sha == UNKNOWN:
            return "not committed" if self.uncommitted else "registered at an unknown commit"
        at = f"registered at {self.sha} ({self.date})"
        return at + (", with uncommitted changes" if self.uncommitted else "")

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.sha,
            "date": self.date,
            "uncommitted": self.uncommitted,
            "text": self.text(),
        }


# read-only git calls with the hooks a checkout's config can name switched off, since the
# claim file's folder may be anyone's repository
_GIT = [
    "git",
    "--no-optional-locks",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "core.hooksPath=/dev/null",
]


def _git_bytes(args: list[str], cwd: Path) -> bytes | None:
    """git's stdout as bytes, or None when git is missing, fails (not a checkout) or hangs.
    No shell; no optional locks, so that reading never writes the index of a checkout in use."""
    try:
        done = subprocess.run(
            [*_GIT, *args], cwd=cwd, capture_output=True, timeout=GIT_TIMEOUT_S, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout


def _git(args: list[str], cwd: Path) -> str | None:
    """:func:`_git_bytes` decoded (None where git fails or its output is not UTF-8)."""
    out = _git_bytes(args, cwd)
    try:
        return None if out is None else out.decode()
    except UnicodeDecodeError:
        return None


def _when(text: Any) -> datetime | None:
    """An ISO 8601 time (naive: UTC) as an aware datetime; None if it is not one."""
    if isinstance(text, datetime):
        when = text
    else:
        try:
            when = datetime.fromisoformat(str(text))
        except ValueError:
            return None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


def _differs_from_head(path: Path, folder: Path, name: str) -> bool:
    """Whether the file's bytes differ from HEAD's copy. Read with ``cat-file``, which runs
    no filter or fsmonitor hook of the checkout's config (``git status`` would: the folder
    may be anyone's repository)."""
    prefix = _git(["rev-parse", "--show-prefix"], folder)
    if prefix is None:
        return True
    blob = _git_bytes(["cat-file", "blob", f"HEAD:{prefix.strip()}{name}"], folder)
    return blob is None or blob != path.read_bytes()


def file_commit(path: str | Path) -> FileCommit:
    """The registration of the claim file at ``path``: ``git log -1 -- <file>`` in its folder
    (and ``git cat-file`` of HEAD's copy for changes not committed)."""
    path = Path(path)
    if not path.is_file():
        return FileCommit()
    folder, name = path.resolve().parent, path.resolve().name
    log = _git(["log", "-1", "--format=%h%x09%cI", "--", name], folder)
    if log is None:  # not a git checkout, or git failed
        return FileCommit()
    sha, _, date = log.strip().partition("\t")
    if not re.fullmatch(r"[0-9a-f]{4,64}", sha) or _when(date) is None:
        sha, date = "", ""  # no commit holds the file (untracked), or not git's format
    uncommitted = _differs_from_head(path, folder, name) if sha else True
    if uncommitted:  # the content judged is newer than any commit: its own mtime counts
        changed = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    else:
        changed = _when(date) if date else None
    return FileCommit(sha or UNKNOWN, date or UNKNOWN, uncommitted, changed)


def first_run(verdict: Verdict, runs: pl.DataFrame | None) -> datetime | None:
    """The earliest ``started_at`` of the rows the verdict read (each cell it has values of,
    by that cell's filters; with ``at``, the whole sweep); None when there are none."""
    if runs is None or "started_at" not in runs.columns:
        return None
    times = []
    for cell in verdict.cells:
        if not cell.n:
            continue
        try:
            rows = _select(runs, cell.selector)
        except Inconclusive:
            continue
        times += [t for t in map(_when, rows["started_at"].drop_nulls().to_list()) if t]
    return min(times, default=None)


@dataclass(frozen=True)
class Registration:
    """Per claim file its :class:`FileCommit`; per claim id the earliest start of the rows
    its verdict read and whether the file was fixed before then (None: unknown)."""

    files: dict[str, FileCommit]
    first_run: dict[str, datetime | None]
    pre_registered: dict[str, bool | None]

    def claim_json(self, claim_id: str, file: str) -> dict[str, Any]:
        first = self.first_run.get(claim_id)
        return {
            **self.files[file].to_json(),
            "first_run": first.isoformat() if first else None,
            "pre_registered": self.pre_registered.get(claim_id),
        }


def check(verdicts: list[Verdict], tables: dict[str, pl.DataFrame | None]) -> Registration:
    """The registration of every claim file of ``verdicts``, compared with the runs tables
    (pillar name -> table) the verdicts were judged on."""
    files = {v.claim.file: file_commit(v.claim.file) for v in verdicts}
    first, pre = {}, {}
    for v in verdicts:
        first[v.claim.id] = start = first_run(v, tables.get(v.claim.test["pillar"]))
        changed = files[v.claim.file].changed
        pre[v.claim.id] = None if start is None or changed is None else changed <= start
    return Registration(files, first, pre)

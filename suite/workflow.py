"""What the Snakefile runs: a spec's cells, which of them are pending, and their batches.

A cell is *done* when its record exists and carries the cell's current ``trigger`` hash; any
other cell is *pending* (no record yet, or its parameters changed since). Pending cells are
grouped by their pillar's batch key into :class:`Batch` es of at most ``batch_max`` cells,
each one Snakemake job (one process: the interpreter and torch start once) whose outputs are
its cells' records. Done records are plain inputs of the aggregation, so Snakemake never
reruns (nor deletes) them: a rerun does only what is missing or changed. A failed record is
done too until ``sparsebench retry-failed`` removes it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import json
import math
import re
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparsebench.suite import paths
from sparsebench.suite.job import IN_FLIGHT
from sparsebench.suite.pillar import Artefact, Cell, get_pillar


@dataclass(frozen=True)
class Batch:
    """Pending cells of one pillar that run in one job."""

    pillar: str
    name: str  # readable and unique within the pillar: the log file's name
    cells: tuple[Cell, ...]
    threads: int
    stale: tuple[str, ...] = ()  # ids of cells whose record exists for another trigger
    minutes: float = 0.0  # the cells' expected minutes (earlier records', else the pillar's)

    @property
    def gpus(self) -> int:
        return max((c.gpus for c in self.cells), default=0)

    def records(self, bench: str) -> list[str]:
        return [str(paths.record(bench, self.pillar, c.id)) for c in self.cells]

    def inputs(self, bench: str) -> list[str]:
        """Artefacts the cells read, plus the trigger marker of each stale cell."""
        markers = [str(stale_marker(bench, self.pillar, c)) for c in self.stale]
        return sorted({i for c in self.cells for i in c.inputs} | set(markers))

    @property
    def priority(self) -> int:
        """Snakemake ``priority``: the biggest batches start first (longest-processing-time
        scheduling, with cells x threads as the guess of a batch's length), so the small
        ones fill the cores at the end instead of one long batch running alone."""
        return len(self.cells) * self.threads

    @property
    def trigger(self) -> str:
        """Snakemake ``params`` of the job: every cell's trigger (a change reruns the job)."""
        return json.dumps({c.id: c.trigger_hash for c in self.cells}, sort_keys=True)


def record_state(record: Path, cell: Cell) -> str:
    """``done`` (the record exists for the cell's current trigger), ``stale`` (it exists for
    another trigger, or cannot be read) or ``missing``."""
    try:
        data = json.loads(record.read_text())
    except FileNotFoundError:
        return "missing"
    except (OSError, ValueError):
        return "stale"
    ok = isinstance(data, dict) and data.get("trigger") == cell.trigger_hash
    if ok and data.get("error") == IN_FLIGHT:  # its workflow was killed while it ran
        return "stale"
    return "done" if ok else "stale"


def is_done(record: Path, cell: Cell) -> bool:
    """Whether ``record`` exists and was written for the cell's current trigger."""
    return record_state(record, cell) == "done"


def stale_marker(bench: str, pillar: str, cell_id: str) -> Path:
    """A small file holding a stale cell's new trigger hash: an input of its batch, newer than
    the old record, so Snakemake reruns the batch even without its own metadata (after
    ``.snakemake/`` was removed, or for a record written by ``sparsebench run``)."""
    return paths.pillar_dir(bench, pillar) / "triggers" / f"{cell_id}.trigger"


def write_stale_markers(bench: str, batches_: dict[str, list[Batch]]) -> None:
    """Write the marker of every stale cell whose marker is missing or outdated."""
    for pillar_batches in batches_.values():
        for b in pillar_batches:
            for c in b.cells:
                if c.id not in b.stale:
                    continue
                marker = stale_marker(bench, b.pillar, c.id)
                try:
                    current = marker.read_text()
                except OSError:
                    current = None
                if current != c.trigger_hash:
                    marker.parent.mkdir(parents=True, exist_ok=True)
                    marker.write_text(c.trigger_hash)


def unwritable(folders: Iterable[Path]) -> str | None:
    """A message naming the first of ``folders`` (or its nearest existing parent, where it is
    still to be made) that this user cannot write into; None when all can be written."""
    import os

    for folder in folders:
        probe = Path(folder).absolute()
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not os.access(probe, os.W_OK | os.X_OK):
            return (
                f"{probe} is not writable by this user (the run writes {folder}); make it "
                "writable (chmod u+w) or run from another folder"
            )
    return None


def parquet_intact(path: Path) -> bool:
    """Whether ``path`` starts and ends with parquet's magic bytes (a cheap check, no polars:
    a truncated or overwritten table fails it)."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
            f.seek(-4, 2)
            return head == b"PAR1" and f.read(4) == b"PAR1"
    except OSError:
        return False


def drop_broken_tables(bench: str, pillars: Iterable[str]) -> list[Path]:
    """Remove each pillar's ``runs.parquet`` that is not an intact parquet file, so that
    Snakemake rebuilds it from the records (it would keep it: it is newer than they are).
    Returns the removed paths; nothing is lost, the records hold every row."""
    removed = []
    for name in pillars:
        table = paths.runs_table(bench, name)
        if table.is_file() and not parquet_intact(table):
            table.unlink()
            removed.append(table)
    return removed


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", name).strip("_") or "cells"


def batches(
    bench: str, cells: dict[str, list[Cell]], cores: int | None, everything: bool = False
) -> dict[str, list[Batch]]:
    """The pending cells of every pillar (``cells``: pillar -> its cells) in batches: same
    pillar, batch key and threads, at most ``Pillar.batch_max`` cells, and split further, over
    all pillars together, so that there are at least as many jobs as job slots (``cores``:
    the local cores, or a cluster executor's ``--jobs``; divided by the threads) when there
    are that many cells: no core, or node, idles for want of a job. Each batch carries its
    cells' expected minutes (:func:`expected_minutes`) for a cluster's time limit.

    ``everything``: every cell, done or not (a report's job graph and statistics show the
    jobs that made every record; a report runs nothing)."""
    groups: dict[tuple[str, str, int], list[Cell]] = {}
    stale: set[tuple[str, str]] = set()
    for pillar_name, pillar_cells in cells.items():
        for c in pillar_cells:
            state = record_state(paths.record(bench, pillar_name, c.id), c)
            if state != "done" or everything:
                groups.setdefault((pillar_name, c.batch, c.threads), []).append(c)
            if state == "stale":
                stale.add((pillar_name, c.id))
    limits = {}
    for pillar_name, key, threads in groups:
        batch_max = get_pillar(pillar_name).batch_max
        limits[(pillar_name, key, threads)] = batch_max or len(groups[(pillar_name, key, threads)])
    if cores and groups:
        slots = max(1, cores // max(t for _, _, t in groups))

        # Split the largest groups until there are `slots` jobs (or nothing left to split).
        def jobs() -> int:
            return sum(math.ceil(len(g) / limits[k]) for k, g in groups.items())

        while jobs() < slots and any(limits[k] > 1 for k in groups):
            k = max(groups, key=lambda k: limits[k] if limits[k] > 1 else 0)
            limits[k] = math.ceil(limits[k] / 2)
    out: dict[str, list[Batch]] = {name: [] for name in cells}
    used: set[tuple[str, str]] = set()
    for (pillar_name, key, threads), group in groups.items():
        base = _safe(key)
        if (pillar_name, base) in used:  # two keys that read alike, or other threads
            digest = hashlib.sha1(f"{key}|{threads}".encode()).hexdigest()[:6]
            base = f"{base}-{digest}"
        used.add((pillar_name, base))
        n = math.ceil(len(group) / limits[(pillar_name, key, threads)])
        chunk = math.ceil(len(group) / n)
        for i in range(n):
            part = tuple(group[i * chunk : (i + 1) * chunk])
            suffix = f".{i + 1}of{n}" if n > 1 else ""
            old = tuple(c.id for c in part if (pillar_name, c.id) in stale)
            minutes = sum(expected_minutes(bench, pillar_name, c) for c in part)
            out[pillar_name].append(
                Batch(pillar_name, base + suffix, part, threads, old, round(minutes, 2))
            )
    return out


def expected_minutes(bench: str, pillar: str, cell: Cell) -> float:
    """Minutes ``cell`` is expected to take: its last ok record's ``cell_s`` when it has one
    (a cell rerun for a new trigger), else the pillar's :attr:`Pillar.cell_minutes`."""
    try:
        data = json.loads(paths.record(bench, pillar, cell.id).read_text())
        if data.get("status") == "ok" and float(data["cell_s"]) >= 0:
            return float(data["cell_s"]) / 60
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        pass
    return get_pillar(pillar).cell_minutes


def cluster_resources(pillar: str, minutes: float, gpus: int) -> dict[str, int]:
    """Snakemake ``resources`` of a job of ``pillar`` expected to take ``minutes``, which a
    cluster executor turns into its request (profiles/slurm: ``--mem``, ``-t``, ``--gpus``;
    threads become ``--cpus-per-task``). The time limit is twice the estimate plus five
    minutes for the interpreter's start and the machine's load (ours): a job past its limit
    is killed, so the request errs long. Local runs ignore all three."""
    return {
        "mem_mb": get_pillar(pillar).job_mem_mb,
        "runtime": math.ceil(2 * minutes) + 5,
        "gpu": gpus,
    }


@dataclass(frozen=True)
class ArtefactBatch:
    """Missing artefacts of one pillar built by one job (one interpreter start)."""

    pillar: str
    name: str  # the Snakemake rule's name
    artefacts: tuple[Artefact, ...]
    threads: int

    @property
    def outputs(self) -> list[str]:
        return [o for a in self.artefacts for o in a.outputs]

    @property
    def inputs(self) -> list[str]:
        own = set(self.outputs)
        return sorted({i for a in self.artefacts for i in a.inputs} - own)


def artefact_batches(artefacts: dict[str, list[Artefact]]) -> list[ArtefactBatch]:
    """The artefacts (pillar -> list) with a missing output, grouped by pillar, batch key and
    threads. Artefacts whose outputs all exist get no rule: their files are plain inputs, so
    an existing artefact is never rebuilt (its id changes when what defines it changes)."""
    groups: dict[tuple[str, str, int], list[Artefact]] = {}
    for pillar, arts in artefacts.items():
        ids = [a.id for a in arts]
        if len(set(ids)) < len(ids):
            dup = next(i for i in ids if ids.count(i) > 1)
            raise ValueError(f"pillar {pillar!r} declares artefact {dup!r} twice")
        for a in arts:
            if not all(Path(o).is_file() for o in a.outputs):
                groups.setdefault((pillar, a.batch or a.id, a.threads), []).append(a)
    out, used = [], set()
    for (pillar, key, threads), group in groups.items():
        name = "artefact_" + re.sub(r"[^A-Za-z0-9_]+", "_", f"{pillar}_{key}")
        if name in used:
            name += "_" + hashlib.sha1(f"{key}|{threads}".encode()).hexdigest()[:6]
        used.add(name)
        out.append(ArtefactBatch(pillar, name, tuple(group), threads))
    return out


def save_plan(
    path: Path,
    batches_: dict[str, list[Batch]],
    artefacts: Sequence[ArtefactBatch] = (),
    pillars: dict[str, dict[str, Any]] | None = None,
) -> None:
    """Write the batch plan (which cells, and which missing artefacts, each job builds) for
    the jobs' own parses, with the spec's pillars and their headline metric (name, unit,
    direction) for the progress display of ``sparsebench run``."""
    from sparsebench.suite.record import write_json_atomic

    plan = {
        pillar: [
            {
                "name": b.name,
                "cells": [c.id for c in b.cells],
                "threads": b.threads,
                "stale": list(b.stale),
                "minutes": b.minutes,
            }  # fmt: skip
            for b in bs
        ]
        for pillar, bs in batches_.items()
    }
    arts = [
        {
            "pillar": b.pillar,
            "name": b.name,
            "ids": [a.id for a in b.artefacts],
            "threads": b.threads,
        }
        for b in artefacts
    ]
    write_json_atomic(path, {"cells": plan, "artefacts": arts, "pillars": pillars or {}})


def _read_plan(path: Path) -> dict[str, Any] | None:
    try:
        plan = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    return plan if isinstance(plan, dict) and "cells" in plan else None


def load_plan(path: Path, cells: dict[str, list[Cell]]) -> dict[str, list[Batch]] | None:
    """The plan the main Snakemake process saved, with today's cells; None if absent.

    A job that Snakemake runs in another process or on another machine (``--executor slurm``)
    parses the Snakefile again, when other jobs' records already exist and with other cores,
    so it must read the main process's plan instead of planning again: its rule (a batch) has
    to exist under the same name with the same outputs."""
    saved = _read_plan(path)
    if saved is None:
        return None
    plan = saved["cells"]
    by_id = {p: {c.id: c for c in cs} for p, cs in cells.items()}
    out: dict[str, list[Batch]] = {p: [] for p in cells}
    for pillar, bs in plan.items():
        for b in bs:
            found = [by_id.get(pillar, {}).get(i) for i in b["cells"]]
            if pillar in out and all(found):
                out[pillar].append(
                    Batch(
                        pillar,
                        b["name"],
                        tuple(found),
                        b["threads"],
                        tuple(b["stale"]),
                        float(b.get("minutes", 0.0)),
                    )  # fmt: skip
                )
    return out


def load_artefact_plan(
    path: Path, artefacts: dict[str, list[Artefact]]
) -> list[ArtefactBatch] | None:
    """The artefact batches of the main process's plan, with today's declared artefacts
    (pillar -> list); None if there is no plan. A job's own parse must not plan them again:
    by then some artefacts exist, and their rule (a batch of the missing ones at the start)
    would change its outputs or vanish."""
    saved = _read_plan(path)
    if saved is None:
        return None
    by_id = {p: {a.id: a for a in arts} for p, arts in artefacts.items()}
    out = []
    for b in saved.get("artefacts", []):
        found = [by_id.get(b["pillar"], {}).get(i) for i in b["ids"]]
        if all(found):
            out.append(ArtefactBatch(b["pillar"], b["name"], tuple(found), b["threads"]))
    return out


def release_scheduler_timers() -> int:
    """Cancel the pending timers of Snakemake's scheduler; returns how many.

    The scheduler re-reads its queue one job-rate timespan (1 s) after every round, each time
    on a new non-daemon ``threading.Timer``; once the workflow has ended (its onsuccess and
    onerror handlers) the last of them only holds the process open, for up to that timespan,
    before Snakemake can exit."""
    import threading

    timers = [
        t
        for t in threading.enumerate()
        if isinstance(t, threading.Timer)
        and getattr(t.function, "__module__", "").startswith("snakemake.")
    ]
    for t in timers:
        t.cancel()
    return len(timers)


def exit_without_teardown(code: int) -> None:
    """End the process with ``code`` as soon as Snakemake has finished, without the
    interpreter's teardown (the spec's checks imported torch and the methods: about 0.8 s of
    finalizers after the workflow is over).

    Called from the workflow's onsuccess (0) and onerror (1) handlers, after which Snakemake
    only logs its elapsed time and exits with that code; the handler registered here runs
    first among the exit handlers (last in, first out), flushes the log handlers and streams,
    then leaves."""
    import atexit
    import logging
    import os
    import sys

    def leave() -> None:
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(code)

    atexit.register(leave)


def import_pandas_meanwhile() -> threading.Thread | None:
    """Start importing pandas in a thread of Snakemake's process, when it is installed.

    Snakemake imports pandas (about 0.4 s) to hash a job's params when it records the first
    finished job; in a new results folder that falls between the first job and the next one,
    on the way to the answer. Started when the run starts (``onstart``), the import runs while
    Snakemake waits for its first jobs. A thread that is not a daemon: the interpreter waits
    for it at its end rather than stopping it inside an import."""
    if importlib.util.find_spec("pandas") is None:
        return None
    thread = threading.Thread(target=importlib.import_module, args=("pandas",), name="pandas")
    thread.start()
    return thread

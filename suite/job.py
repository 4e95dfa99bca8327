"""One Snakemake job: a batch of cells of one pillar in one process, one record per cell.

Importing torch and Lightning costs several seconds per process, about what a small cell's own
work takes, so cells that share their set-up (a batch key of the pillar) run in one process:
:meth:`Pillar.prepare` once, then :meth:`Pillar.run_cell` per cell. Each cell still gets its
own record, written atomically as soon as it finishes, with status ``failed`` (the error, the
metrics null) or ``diverged`` when it raises: one failing cell never loses the others.
"""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any

from sparsebench.suite import fragments, paths
from sparsebench.suite import record as rec
from sparsebench.suite.pillar import Cell, Pillar


def base_record(spec, pillar: Pillar, cell: Cell, parallel_jobs: int) -> dict[str, Any]:
    """The identifying and provenance columns of a cell's record (metrics null)."""
    out: dict[str, Any] = dict.fromkeys(rec.COMMON_COLUMNS)
    out.update(dict.fromkeys(pillar.columns))
    out.update(
        benchmark=spec.benchmark,
        pillar=pillar.name,
        cell_id=cell.id,
        label=cell.label,
        method=cell.method,
        params_json=cell.params_json,
        setting_id=cell.setting_id,
        seed=cell.seed,
        threads=cell.threads,
        parallel_jobs=parallel_jobs,
        spec_hash=spec.hash,
        trigger=cell.trigger_hash,
    )
    out.update(cell.columns)
    out.update(rec.provenance())
    return out


# Written before a cell runs, so that a death no exception reaches still leaves a record.
# Until the workflow that ran it confirms it (:func:`confirm_deaths`, at its end), it means
# "stopped while running": if the whole workflow was killed, the next run redoes the cell
# (workflow.record_state); if the workflow lived on, the job died on its own and stays failed.
IN_FLIGHT = (
    "the process stopped while running this cell (killed with its workflow, out of memory, or "
    "a crash in native code); the next run redoes it unless the workflow saw it die"
)
DIED = (
    "the process died while running this cell (killed, out of memory, or a crash in native "
    "code); see the job's log"
)


def confirm_deaths(records: Sequence[str | Path], since: float) -> list[Path]:
    """Turn the in-flight records among ``records`` written since ``since`` (a time stamp)
    into failed ones (:data:`DIED`): called by a workflow that is still alive at its end, so
    the processes that left them died on their own. Returns the records it changed."""
    import json

    changed = []
    by_folder: dict[Path, tuple[str, list[Path]]] = {}
    for path in map(Path, records):
        try:
            if path.stat().st_mtime < since:
                continue
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and data.get("error") == IN_FLIGHT:
            data["error"] = DIED
            rec.write_json_atomic(path, data)
            changed.append(path)
            folder = _pillar_folder_of(path, data.get("pillar"))
            if folder is not None:
                by_folder.setdefault(folder, (data["pillar"], []))[1].append(path)
    for folder, (name, written) in by_folder.items():
        from sparsebench.suite.pillar import all_pillars

        if name in all_pillars():
            fragments.write(all_pillars()[name], folder, written, "confirmed")
    return changed


def _pillar_folder_of(record: Path, pillar: Any) -> Path | None:
    """The pillar folder of a record file (``<pillar>/runs/<cell id>/record.json``)."""
    if not isinstance(pillar, str):
        return None
    for folder in reversed(record.parents):
        if folder.name == pillar and record.is_relative_to(folder / "runs"):
            return folder
    return None


# The folder of the cell being run (its record's), for files a cell keeps beside its record
# (the learning curve); None outside a cell.
_CELL_FOLDER: ContextVar[Path | None] = ContextVar("cell_folder", default=None)


def cell_folder() -> Path | None:
    """The folder of the record of the cell this process is running, or None."""
    return _CELL_FOLDER.get()


def _failed(spec, pillar: Pillar, cell: Cell, parallel_jobs: int, error: str) -> dict[str, Any]:
    record = base_record(spec, pillar, cell, parallel_jobs)
    now = rec.now_iso()
    record.update(status="failed", error=error, started_at=now, finished_at=now)
    record.update(pillar.failed_columns(cell, error))
    return record


def run_one(
    spec, pillar: Pillar, cell: Cell, state: Any, out: Path, parallel_jobs: int
) -> dict[str, Any]:
    """Run ``cell`` and write its record to ``out`` atomically, whatever happens.

    Before the cell runs, a record saying that it is in flight (:data:`IN_FLIGHT`) is written,
    so that a crash no exception reaches (segfault, out-of-memory kill) still leaves a failed
    record; an interruption (Ctrl-C, SIGTERM) removes it again, so the cell simply reruns. A
    record that cannot be written (a metric that is not JSON) becomes a failed record naming
    the error."""
    rec.write_json_atomic(out, _failed(spec, pillar, cell, parallel_jobs, IN_FLIGHT))
    record = base_record(spec, pillar, cell, parallel_jobs)
    record["started_at"] = rec.now_iso()
    t0 = time.perf_counter()
    token = _CELL_FOLDER.set(out.parent)
    try:
        metrics = pillar.run_cell(spec, cell, state)
        record.update({"status": "ok", "error": None, **metrics})
    except rec.Diverged as e:
        record.update(status="diverged", error=str(e), **pillar.failed_columns(cell, str(e)))
    except Exception as e:  # noqa: BLE001 - any failure becomes a failed record
        traceback.print_exc(file=sys.stderr)
        error = f"{type(e).__name__}: {e}"
        record.update(status="failed", error=error, **pillar.failed_columns(cell, error))
    except BaseException:  # interrupted: no record, the cell is pending again
        out.unlink(missing_ok=True)
        raise
    finally:
        _CELL_FOLDER.reset(token)
    record["cell_s"] = time.perf_counter() - t0
    record["finished_at"] = rec.now_iso()
    try:
        rec.write_json_atomic(out, record)
    except (TypeError, ValueError) as e:
        error = f"the record could not be written: {type(e).__name__}: {e}"
        record = _failed(spec, pillar, cell, parallel_jobs, error)
        rec.write_json_atomic(out, record)
    return record


def _terminate(signum, frame):  # SIGTERM (Snakemake stopping a job) unwinds like Ctrl-C
    raise SystemExit(128 + signum)


def run_batch(
    spec,
    pillar: Pillar,
    cells: Sequence[Cell],
    parallel_jobs: int = 1,
    root: str | Path = paths.RESULTS,
    progress: Callable[[str], None] | None = None,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Run ``cells`` of ``pillar`` in this process (shared :meth:`Pillar.prepare`), writing
    each record under ``root``. A failing prepare gives every cell a failed record.

    ``threads`` (Snakemake's ``threads``, capped at ``--cores``) overrides the cells' own
    thread count: it is what torch uses and what the records say."""
    import dataclasses
    import signal

    # Lightning is imported here, untimed: every pillar's job runs in it, and a cell's time is
    # its own work, not the seconds the first cell of a process would pay for the import.
    import lightning.pytorch  # noqa: F401
    import torch

    if threads is not None:
        cells = [dataclasses.replace(c, threads=threads) for c in cells]
    say = progress or (lambda msg: print(msg, flush=True))
    torch.set_num_threads(max(c.threads for c in cells))
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    records = []
    t0 = time.perf_counter()
    try:
        state = pillar.prepare(spec, cells)
        prepare_error = None
    except Exception as e:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        state, prepare_error = None, f"{type(e).__name__} in set-up: {e}"
    chunk = _Chunk(pillar, paths.pillar_dir(spec.benchmark, pillar.name, root))
    chunk.announce([paths.record(spec.benchmark, pillar.name, c.id, root) for c in cells])
    try:
        for i, cell in enumerate(cells, 1):
            out = paths.record(spec.benchmark, pillar.name, cell.id, root)
            if prepare_error is not None:
                record = _failed(spec, pillar, cell, parallel_jobs, prepare_error)
                rec.write_json_atomic(out, record)
            else:
                record = run_one(spec, pillar, cell, state, out, parallel_jobs)
            records.append(record)
            chunk.add(out)
            _report(pillar, cell, record, i, len(cells), say)
    finally:  # what finished is in a fragment even when the batch is stopped
        chunk.flush()
    say(f"{len(cells)} cell(s) of {pillar.name} in {time.perf_counter() - t0:.1f} s")
    return records


class _Chunk:
    """The records a batch wrote since its last fragment: a fragment every :data:`FLUSH_S`
    seconds and at the end. A batch killed outright (no ``finally``) leaves its last records
    without a fragment: its opening line (:meth:`announce`) has them read from JSON."""

    FLUSH_S = 30.0

    def __init__(self, pillar: Pillar, folder: Path) -> None:
        self.pillar, self.folder = pillar, folder
        self.pending: list[Path] = []
        self.since = time.monotonic()

    def announce(self, records: Sequence[Path]) -> None:
        """A manifest line without a file naming every record the batch may write: until a
        fragment holds them, the tables read them from JSON, so a batch killed outright (no
        fragment for its last cells) never leaves an earlier run's rows showing."""
        if records:
            root = Path(self.folder)
            sources = tuple(Path(r).relative_to(root).as_posix() for r in records)
            fragments.append(root, fragments.Entry(None, None, 0, sources))

    def add(self, record: Path) -> None:
        self.pending.append(record)
        if time.monotonic() - self.since >= self.FLUSH_S:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            fragments.write(self.pillar, self.folder, self.pending, self.pillar.name)
        self.pending, self.since = [], time.monotonic()


def _report(pillar: Pillar, cell: Cell, record: dict[str, Any], i: int, n: int, say) -> None:
    took = record.get("cell_s")
    secs = f" in {took:.1f} s" if took is not None else ""
    error = f": {record['error']}" if record["status"] != "ok" else ""
    metric = _headline(pillar, record)
    say(f"[{i}/{n}] [{record['status']}] {pillar.name} {cell.label}{metric}{secs}{error}")


def _headline(pillar: Pillar, record: dict[str, Any]) -> str:
    """`` test_acc=0.9712``: the pillar's headline metric of an ok record, for its log line."""
    name = pillar.ok_metric
    value = record.get(name) if name and record.get("status") == "ok" else None
    if not isinstance(value, int | float) or isinstance(value, bool):
        return ""
    return f" {name}={value:.4g}"


def build_artefact(spec, pillar: Pillar, artefact, threads: int | None = None) -> float:
    """Build one artefact of ``pillar`` in this process (``sparsebench build``); returns its
    wall-clock seconds. A failure propagates (the Snakemake job fails, its log has the error)
    after removing any output the pillar left behind, so a rerun builds it again."""
    import signal

    import torch

    torch.set_num_threads(threads or artefact.threads)
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _terminate)
    print(f"building {pillar.name} {artefact.label} ...", flush=True)
    t0 = time.perf_counter()
    try:
        pillar.build(spec, artefact)
    except BaseException:
        for out in artefact.outputs:
            Path(out).unlink(missing_ok=True)
        raise
    missing = [o for o in artefact.outputs if not Path(o).is_file()]
    if missing:
        raise RuntimeError(f"{pillar.name} artefact {artefact.id}: build wrote no {missing}")
    took = time.perf_counter() - t0
    # Its own seconds, next to its outputs: a run's overhead (perf.overhead) counts artefact
    # training as work, not as start-up cost.
    rec.write_json_atomic(
        paths.artefact_build_info(pillar.name, artefact.id),
        {
            "pillar": pillar.name,
            "artefact": artefact.id,
            "build_s": took,
            "threads": threads or artefact.threads,
            "finished_at": rec.now_iso(),
        },
    )
    print(f"built {pillar.name} {artefact.label} in {took:.1f} s", flush=True)
    return took

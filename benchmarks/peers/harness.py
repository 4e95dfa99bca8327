"""What every peer comparison shares: interleaved timing, one board row, the ratios, the peak
memory of a fresh process, and which peers are installed."""

from __future__ import annotations

import gc
import importlib
import importlib.metadata
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

# distribution name -> the module the benchmark imports (its presence decides "not installed")
PEERS = {
    "fusion-bench": "fusion_bench",
    "sae-lens": "sae_lens",
    "dictionary-learning": "dictionary_learning",
    "sparseprop": "sparseprop",
}
NOT_INSTALLED = "not installed"


def peer_version(dist: str) -> str | None:
    """The installed version of ``dist`` whose module imports, else None (absent, or broken:
    a peer that fails to import is reported as not installed, with the reason in its notes)."""
    try:
        version = importlib.metadata.version(dist)
        importlib.import_module(PEERS[dist])
    except Exception:  # noqa: BLE001 - any import failure means "cannot compare"
        return None
    return version


def peer_label(dist: str) -> str:
    version = peer_version(dist)
    return f"{dist} {version}" if version else dist


@dataclass(frozen=True)
class Stats:
    """Min and median of repeated measurements (seconds)."""

    min: float
    median: float


def summarize(samples: Sequence[float]) -> Stats | None:
    """Min and median of ``samples`` (None when there are none)."""
    if not samples:
        return None
    return Stats(min(samples), statistics.median(samples))


def ratio(ours: float | None, peer: float | None) -> float | None:
    """ours ÷ peer: > 1 means ours takes longer (or more memory); None when either is missing
    or the peer's is not positive."""
    if ours is None or peer is None or peer <= 0:
        return None
    return ours / peer


@dataclass
class Row:
    """One comparison on the board: ours against one peer on one case. Times in seconds (CPU
    time of the process, one thread, and wall-clock), memory in MiB. Another script's rows
    (e.g. records at scale vs polars) use the same fields in its JSON ``rows``."""

    group: str  # merging | sae | sparseprop | records
    case: str  # what runs, e.g. "task_arithmetic, MLP trunk (266,752 params)"
    ours: str  # our public entry point
    peer: str  # the peer and its version
    status: str = "ok"  # ok | not installed | failed: ... | pending: ...
    repeats: int = 0
    ours_cpu_min: float | None = None
    ours_cpu_median: float | None = None
    ours_wall_median: float | None = None
    peer_cpu_min: float | None = None
    peer_cpu_median: float | None = None
    peer_wall_median: float | None = None
    ours_peak_mb: float | None = None  # extra peak resident memory of the operation
    peer_peak_mb: float | None = None
    quality: str = ""  # what the results are checked by, e.g. "FVU 0.031 vs 0.033"
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # machine-readable quality numbers

    @property
    def ratio_median(self) -> float | None:
        """ours ÷ peer of the median CPU times (the board's headline)."""
        return ratio(self.ours_cpu_median, self.peer_cpu_median)

    @property
    def ratio_min(self) -> float | None:
        return ratio(self.ours_cpu_min, self.peer_cpu_min)

    @property
    def ratio_wall(self) -> float | None:
        return ratio(self.ours_wall_median, self.peer_wall_median)

    @property
    def ratio_memory(self) -> float | None:
        return ratio(self.ours_peak_mb, self.peer_peak_mb)

    def set_times(self, ours: Timing, peer: Timing | None) -> None:
        self.repeats = len(ours.cpu)
        o, ow = summarize(ours.cpu), summarize(ours.wall)
        self.ours_cpu_min, self.ours_cpu_median = (o.min, o.median) if o else (None, None)
        self.ours_wall_median = ow.median if ow else None
        if peer is not None:
            p, pw = summarize(peer.cpu), summarize(peer.wall)
            self.peer_cpu_min, self.peer_cpu_median = (p.min, p.median) if p else (None, None)
            self.peer_wall_median = pw.median if pw else None

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out.update(
            ratio_median=self.ratio_median,
            ratio_min=self.ratio_min,
            ratio_wall=self.ratio_wall,
            ratio_memory=self.ratio_memory,
        )
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> Row:
        """A row of a results JSON (ours or another script's); derived ratios are recomputed,
        unknown keys refused (a typo would silently drop a number)."""
        names = {f.name for f in fields(cls)}
        derived = {"ratio_median", "ratio_min", "ratio_wall", "ratio_memory"}
        unknown = sorted(set(raw) - names - derived)
        if unknown:
            raise ValueError(f"board row: unknown keys {unknown}; allowed: {sorted(names)}")
        return cls(**{k: v for k, v in raw.items() if k in names})


@dataclass
class Timing:
    """Per-repeat CPU and wall seconds of one variant, and its last result."""

    cpu: list[float] = field(default_factory=list)
    wall: list[float] = field(default_factory=list)
    result: Any = None


@dataclass
class Variant:
    """One side of a comparison: ``run(setup())`` is timed; ``setup`` (untimed) makes fresh
    inputs for a peer that changes its inputs in place."""

    name: str
    run: Callable[[Any], Any]
    setup: Callable[[], Any] = lambda: None


def interleave(variants: Sequence[Variant], repeats: int, warmup: int = 0) -> dict[str, Timing]:
    """Time every variant once per repeat, alternating them within each repeat (the order
    reversed every other repeat, so that neither always runs first, after the other's garbage),
    after ``warmup`` untimed rounds. CPU time is the process's (``time.process_time``: every
    thread, so a peer that spawns threads is not favoured), wall time ``perf_counter``."""
    out = {v.name: Timing() for v in variants}
    for r in range(warmup + repeats):
        for v in variants if r % 2 == 0 else list(reversed(variants)):
            arg = v.setup()
            gc.collect()
            c0, w0 = time.process_time(), time.perf_counter()
            result = v.run(arg)
            c1, w1 = time.process_time(), time.perf_counter()
            del arg
            if r >= warmup:
                out[v.name].cpu.append(c1 - c0)
                out[v.name].wall.append(w1 - w0)
            out[v.name].result = result
    return out


def extra_peak_mb(run: Callable[[], Any]) -> float:
    """Peak resident memory of ``run()`` above the resident set just before it (MiB): the
    kernel's high-water mark is reset first (suite/memory.py), so imports and inputs made
    before the call are not counted, what the call allocates (and frees) is."""
    from sparsebench.suite.memory import peak_mb, reset_peak, rss_mb

    gc.collect()
    before = rss_mb()
    if not reset_peak():
        raise RuntimeError("cannot reset the peak resident memory here (/proc/self/clear_refs)")
    result = run()
    peak = peak_mb() - before
    del result
    return peak


ROOT = Path(__file__).resolve().parents[2]  # the checkout


def unshadow() -> None:
    """Take the checkout off ``sys.path`` (``python -m`` puts it first): its ``kernels/``
    folder would import as the top-level ``kernels`` that transformers (under SAELens and
    nnsight) imports from Hugging Face's package of that name. sparsebench itself is
    installed, and this package is already imported, so nothing here needs the entry."""
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT]


def peak_in_child(module: str, function: str, **kwargs: Any) -> float | None:
    """``module.function(**kwargs)`` (returning MiB) in a fresh interpreter, so that one
    variant's freed memory cannot hide another's peak; None when it fails (reason printed)."""
    code = (
        f"import importlib, json, sys; sys.path.insert(0, {str(ROOT)!r}); "
        f"m = importlib.import_module({module!r}); "
        "from benchmarks.peers.harness import unshadow; unshadow(); "
        f"print(json.dumps(m.{function}(**json.loads(sys.argv[1]))))"
    )
    # glibc's allocator raises its mmap threshold as large blocks are freed and then keeps
    # freed memory resident, which a later allocation reuses unseen: a fixed threshold keeps
    # every tensor-sized block mmapped, returned when freed, so the resident set is live memory
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072"}
    proc = subprocess.run(
        [sys.executable, "-c", code, json.dumps(kwargs)], capture_output=True, text=True, env=env
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1:]
        print(f"  memory of {function}({kwargs}) failed: {tail}", flush=True)
        return None
    return float(json.loads(proc.stdout.strip().splitlines()[-1]))

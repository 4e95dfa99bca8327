"""The pillar contract and the pillar registry.

A pillar is everything one kind of benchmark adds to the spine, declared in one class (see
docs/architecture.md for the flow of one job and a worked example):

* its **spec section**: the top-level keys it owns (:attr:`Pillar.spec_keys`), a JSON Schema
  fragment for them with defaults (:meth:`Pillar.schema`, enums filled from the registries),
  and the registry and pre-flight checks that need more than a schema (:meth:`Pillar.check`);
* its **cells**: spec -> :class:`Cell` list, each with a stable id (its path under ``runs/``),
  a readable label, the parameters that are its rerun trigger, its threads, the artefacts it
  depends on (Snakemake inputs made by other rules), and a batch key: cells with the same key
  share their expensive set-up in one process (:meth:`Pillar.cells`);
* its **artefacts**: files that other rules make once and cells read (a trained base model,
  fine-tuned experts, cached activations): :meth:`Pillar.artefacts` lists them with their
  inputs (other artefacts), :meth:`Pillar.build` makes one; they live under
  ``results/artefacts/<pillar>/`` (shared by every benchmark: an artefact's id carries a hash
  of what defines it, so two specs asking for the same base model train it once);
* its **job**: :meth:`Pillar.prepare` (once per batch) and :meth:`Pillar.run_cell` (cell ->
  metric columns); the spine writes the record, a failed or diverged one on error;
* its **table**: a pandera model extending :class:`~sparsebench.suite.schemas.CommonSchema`
  plus the python types of its columns (:attr:`Pillar.columns`);
* its **board**: runs table -> leaderboard files and plots (:meth:`Pillar.board`), and a few
  lines for ``summary.md`` (:meth:`Pillar.summary`);
* the **metrics** claims may address (:attr:`Pillar.metrics`: unit, higher is better).

Pillars register by name: the built-ins listed in ``sparsebench.suite.pillars.BUILTIN``,
third-party ones through the entry-point group ``sparsebench.pillars`` (an entry point names a
:class:`Pillar` subclass or instance), and any
module listed in the environment variable ``SPARSEBENCH_PLUGINS`` (comma-separated module
names, imported once; their ``@register_pillar`` / ``@register`` calls do the rest).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from sparsebench.suite.catalog import did_you_mean

if TYPE_CHECKING:
    import polars as pl

    from sparsebench.suite.spec import Spec

PLUGINS_ENV = "SPARSEBENCH_PLUGINS"


class PillarError(ValueError):
    """An unknown pillar name or a pillar class that breaks the contract."""


@dataclass(frozen=True)
class Metric:
    """A column that claims may address.

    Attributes:
        name: the runs-table column.
        unit: e.g. ``"fraction"``, ``"s"``, ``"×"``; ``""`` for a count.
        higher_is_better: the direction of "better" (rank, claims' orderings).
        description: one line for docs and ``sparsebench pillars``.
        deterministic: the column is a function of the cell's configuration alone, the same on
            every seed and every rerun of every method (a count, a FLOPs formula): only then is
            a spread of zero over seeds evidence, and only then may a claim use ``stat:
            exact``. Accuracies, losses, timings and rounding errors are not. When in doubt,
            False: a claim on a deterministic metric could hold on a tie that is chance.
    """

    name: str
    unit: str
    higher_is_better: bool
    description: str = ""
    deterministic: bool = False


@dataclass(frozen=True)
class Plot:
    """A plot a board writes next to its leaderboard (flagged for ``snakemake --report``)."""

    file: str  # file name in results/<bench>/<pillar>/
    caption: str  # one paragraph, reStructuredText


@dataclass(frozen=True)
class Cell:
    """One job's worth of work: it writes one record.

    Attributes:
        pillar: the pillar's registered name.
        id: stable path under ``results/<bench>/<pillar>/runs/`` (``/``-separated, no
            ``..``); renaming it renames existing results, so the contract tests pin a few.
        label: readable one-line description.
        method: registered method name (or what the pillar calls its variant).
        params_json: the method's parameters, JSON with sorted keys.
        setting_id: ``default`` or a hash of the non-default parameters (open_lth style).
        seed: the cell's seed.
        trigger: everything that defines the cell's result besides its id; a change reruns
            exactly this cell (its hash is kept in the record as ``trigger``).
        threads: torch threads of the job (Snakemake ``threads:``).
        gpus: GPUs the cell needs (0: CPU only); a cluster job asks for them, and a run
            where they cannot be had is refused when it starts.
        batch: cells with the same key may run in one process, sharing their set-up.
        inputs: artefacts the cell reads (outputs of other rules, as Snakemake inputs).
        columns: the pillar's identifying columns of the record (known before running).
    """

    pillar: str
    id: str
    label: str
    method: str
    params_json: str = "{}"
    setting_id: str = "default"
    seed: int | None = None
    trigger: Mapping[str, Any] = field(default_factory=dict, compare=False)
    threads: int = 1
    gpus: int = 0
    batch: str = ""
    inputs: tuple[str, ...] = ()
    columns: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def trigger_hash(self) -> str:
        blob = json.dumps(self.trigger, sort_keys=True, default=str).encode()
        return hashlib.sha1(blob).hexdigest()[:16]


def trial_part(trial: int, sep: str) -> str:
    """Trial ``trial``'s part of a cell id (``sep`` ``"/"``: ``/trial1``) or label (``" "``:
    `` trial 1``), for a pillar whose replicate is ``trial``. None for trial 0: a section
    measured once keeps its cells' ids, and raising ``trials`` keeps the measurements made
    as trial 0."""
    if trial == 0:
        return ""
    return f"/trial{trial}" if sep == "/" else f"{sep}trial {trial}"


def with_trial(cell: Cell, trial: int) -> Cell:
    """``cell`` as trial ``trial`` of its configuration: the same parameters, seed and
    trigger, the trial in its id, label and ``trial`` column, and a batch key of its own so
    that each trial is measured in a job (a process) of its own, independently of the
    others."""
    return replace(
        cell,
        id=cell.id + trial_part(trial, "/"),
        label=cell.label + trial_part(trial, " "),
        batch=cell.batch + trial_part(trial, "/"),
        columns={**cell.columns, "trial": trial},
    )


@dataclass(frozen=True)
class Artefact:
    """A file set one Snakemake job makes once and cells (or other artefacts) read.

    Attributes:
        pillar: the pillar's registered name.
        id: stable ``/``-separated path under ``results/artefacts/<pillar>/``; it must change
            when anything that defines the artefact changes (put a hash of that in it), since
            an existing artefact is never rebuilt.
        label: readable one-line description (progress output).
        outputs: the files it writes (paths under its folder, from :func:`paths.artefact`).
        inputs: files it reads (other artefacts' outputs).
        threads: torch threads of the job.
        params: what defines it (JSON-able), handed back to :meth:`Pillar.build`.
        batch: artefacts with the same key that are both missing are built by one job (one
            interpreter start for, say, all experts of a seed), in :meth:`Pillar.artefacts`
            order; none may read another's outputs. Default: its own id.
    """

    pillar: str
    id: str
    label: str
    outputs: tuple[str, ...]
    inputs: tuple[str, ...] = ()
    threads: int = 1
    params: Mapping[str, Any] = field(default_factory=dict, compare=False)
    batch: str = ""


class Pillar:
    """Base class of a pillar; override what your pillar needs (see the module docstring).

    Class attributes:
        name: registry name and results folder.
        title: a few words for boards and listings.
        families: the method families this pillar runs (default: ``(name,)``); one pillar may
            run several families.
        method_packages: family -> the package holding its methods, where it is not
            ``sparsebench.methods.<family>`` (the registry discovers the modules in it).
        spec_keys: top-level spec keys this pillar owns (one section, named for the pillar);
            a spec with any of them has cells of this pillar.
        moved_keys: top-level keys of an older spec shape that now live inside the section;
            a spec that still has one is refused with the new shape (never guessed).
            of this pillar.
        columns: record column -> python type (str, int, float, bool) of the pillar's own
            columns; the common ones are in :data:`~sparsebench.suite.record.COMMON_COLUMNS`.
        row_key: columns that, with ``cell_id``, identify one table row (several rows per
            record only where :meth:`table_rows` splits records).
        metrics: the columns claims may address.
        replicate: the column whose distinct values are a cell's independent replicates: the
            claims engine counts them as n, refuses a cell where one has two rows and pairs
            ``stat: paired`` by them. ``seed`` (training pillars), or ``trial`` where a cell is
            one fixed configuration measured in several jobs (a pillar of timings). A cell
            id carries it as a ``/<replicate><n>`` part and a label as ``<replicate> <n>`` (or
            ``=``), which the engine strips to find the replicates of one cell.
        method_column, extra_method_names: the column holding a row's method and the names it
            may hold besides the registered methods of ``families`` (claims check both).
        plots: the plots :meth:`board` writes.
        batch_max: at most this many cells per process (0: the whole batch key group).
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    families: ClassVar[tuple[str, ...]] = ()
    method_packages: ClassVar[dict[str, str]] = {}
    spec_keys: ClassVar[tuple[str, ...]] = ()
    #: Whether a cell may run in a process forked from the run's warm job server
    #: (suite/warm.py). False where records report the process's own resident memory: a fork
    #: does not count the libraries' pages it shares until it touches them, so the figure
    #: would differ from a job started on its own.
    fork_cells: ClassVar[bool] = True
    moved_keys: ClassVar[tuple[str, ...]] = ()
    columns: ClassVar[dict[str, type]] = {}
    row_key: ClassVar[tuple[str, ...]] = ()
    metrics: ClassVar[tuple[Metric, ...]] = ()
    replicate: ClassVar[str] = "seed"
    # Numeric columns that are axes of the cell id (one cell per value, e.g. a target
    # sparsity): a claim reads them with `where`, never with `at`, which interpolates along a
    # method's settings.
    cell_axes: ClassVar[tuple[str, ...]] = ()
    # The column that holds a row's method (claims check its values against the registry)
    # and the names that column may hold besides registered methods (references, baselines).
    method_column: ClassVar[str] = "method"
    extra_method_names: ClassVar[tuple[str, ...]] = ()
    plots: ClassVar[tuple[Plot, ...]] = ()
    batch_max: ClassVar[int] = 0
    # The column an ok row must carry (None: the first metric's).
    ok_metric_column: ClassVar[str | None] = None
    # Columns that are measurements of the run (seconds, memory, and what is computed from
    # them): two runs of one cell differ there and agree on every other column on one CPU.
    measured: ClassVar[tuple[str, ...]] = ()
    # What a cluster job asks for (profiles/slurm): the peak resident memory of one job (MB,
    # a request with room: torch, Lightning and the pillar's largest default cells), and the
    # minutes one cell takes when no earlier record of it says (its last ``cell_s``), and one
    # artefact's build (suite/workflow.cluster_resources turns them into a time limit).
    job_mem_mb: ClassVar[int] = 4000
    cell_minutes: ClassVar[float] = 10.0
    artefact_minutes: ClassVar[float] = 15.0

    def method_package(self, family: str) -> str:
        """The package whose modules register ``family``'s built-in methods."""
        return self.method_packages.get(family, f"sparsebench.methods.{family}")

    # ------------------------------------------------------------------ spec
    def schema(self) -> dict[str, Any]:
        """JSON Schema properties of :attr:`spec_keys` (with defaults), merged into the spec
        schema. Enums must come from the registries."""
        return {}

    def example(self, method: str | None = None) -> dict[str, Any]:
        """The spec keys of a tiny run of this pillar (seconds on a CPU), with only ``method``
        when given: used by the contract tests and the docs. Default: none."""
        return {}

    def present(self, data: Mapping[str, Any]) -> bool:
        """Whether the (raw) spec has cells of this pillar."""
        return any(k in data for k in self.spec_keys)

    def check(self, spec: Spec) -> None:
        """Registry and pre-flight checks beyond the schema; raise
        :class:`~sparsebench.suite.spec.SpecError` naming file, key, value and what is
        allowed."""

    # ------------------------------------------------------------------ cells and job
    def cells(self, spec: Spec) -> list[Cell]:
        """Every cell of the spec, in a stable order."""
        raise NotImplementedError

    def artefacts(self, spec: Spec) -> list[Artefact]:
        """Every artefact the spec's cells need (default none); a cell names the files it reads
        in :attr:`Cell.inputs`."""
        return []

    def build(self, spec: Spec, artefact: Artefact) -> None:
        """Make ``artefact``'s outputs (each written atomically: a crash leaves none). Raise
        on failure: the Snakemake job fails with the error in its log, nothing is written."""
        raise NotImplementedError(f"pillar {self.name!r} declares artefacts but cannot build")

    def prepare(self, spec: Spec, cells: Sequence[Cell]) -> Any:
        """Set-up shared by the cells of one batch (data, models); passed to run_cell."""
        return None

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        """Run one cell; return its metric columns (``status`` defaults to ``ok``).

        Raise :class:`~sparsebench.suite.record.Diverged` for a diverged run, anything else
        for a failure; the spine writes the failed record."""
        raise NotImplementedError

    def failed_columns(self, cell: Cell, error: str) -> dict[str, Any]:
        """Extra columns of a failed record (default none)."""
        return {}

    # ------------------------------------------------------------------ table and board
    # By convention a pillar package holds ``table.py`` (its pandera model: a CommonSchema
    # subclass with the pillar's own checks, and optionally ROW_PROBLEMS, check name ->
    # row -> message) and ``board.py`` (``write_leaderboard(runs, out_dir)`` and
    # ``summary(runs, top)``); the spine finds them by name. A one-module pillar overrides
    # :meth:`own_table`, :meth:`board` and :meth:`summary` instead.
    @property
    def ok_metric(self) -> str | None:
        """The column every ``ok`` row carries."""
        if self.ok_metric_column:
            return self.ok_metric_column
        return self.metrics[0].name if self.metrics else None

    def method_names(self) -> list[str]:
        """The values :attr:`method_column` may hold: the families' registered methods and
        :attr:`extra_method_names`."""
        from sparsebench.suite.registry import all_methods

        return [*all_methods(self.families), *self.extra_method_names]

    def _module(self, name: str) -> Any:
        """``<pillar package>.<name>``, or None for a one-module pillar or a missing module."""
        package = type(self).__module__
        if not hasattr(importlib.import_module(package), "__path__"):
            return None
        try:
            return importlib.import_module(f"{package}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{package}.{name}":
                raise
            return None

    def own_table(self) -> type | None:
        """The pillar's own pandera model (its columns' checks): the one
        :class:`~sparsebench.suite.schemas.CommonSchema` subclass defined in its ``table.py``;
        None: the common columns and :attr:`columns` only."""
        from sparsebench.suite.schemas import CommonSchema

        module = self._module("table")
        if module is None:
            return None
        found = [
            v
            for v in vars(module).values()
            if isinstance(v, type)
            and issubclass(v, CommonSchema)
            and v.__module__ == module.__name__
        ]
        if len(found) != 1:
            raise PillarError(
                f"pillar {self.name!r}: {module.__name__} must define exactly one CommonSchema "
                f"subclass, found {len(found)}"
            )
        return found[0]

    @property
    def table(self) -> type:
        """The pandera DataFrameModel of the runs table: :meth:`own_table` plus the checks
        every pillar's table has (:func:`~sparsebench.suite.schemas.pillar_table`)."""
        cached = self.__dict__.get("_table")
        if cached is None:
            from sparsebench.suite.schemas import pillar_table

            cached = self.__dict__["_table"] = pillar_table(self, self.own_table())
        return cached

    def table_rows(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """The runs-table rows of one record (default: the record itself)."""
        return [record]

    def row_problems(self) -> dict[str, Any]:
        """Dataframe-check name -> ``row -> message`` for readable table errors: the generated
        checks' and the table module's ``ROW_PROBLEMS``."""
        from sparsebench.suite.schemas import pillar_problems

        module = self._module("table")
        return {**pillar_problems(self), **getattr(module, "ROW_PROBLEMS", {})}

    def side_tables(self) -> dict[str, Any]:
        """Name -> ``rows -> frame``: tables the board derives from heavy columns (JSON text
        of curves, per-task results), made by each job for the rows of the fragment it writes
        (:mod:`sparsebench.suite.fragments`; by the aggregation for rows read from JSON) and
        kept beside ``runs.parquet`` (:func:`sparsebench.suite.tables.side_table`), so that
        neither an aggregation nor a board over a million rows parses them. Each function gets
        runs rows (with their ``source``) and returns a frame with a ``source`` column, row by
        row (the rows of a subset are the subset's rows). Default: none."""
        return {}

    def board(self, runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
        """Write ``leaderboard.{md,csv,json}`` and :attr:`plots` into ``out_dir`` (default:
        ``board.write_leaderboard``)."""
        module = self._module("board")
        if module is None:
            raise NotImplementedError(f"pillar {self.name!r} has no board.py and no board()")
        return module.write_leaderboard(runs, out_dir)

    def summary(self, runs: pl.DataFrame, top: int = 3) -> str:
        """A few plain-text lines of the board's top rows; ``summary.md`` shows them in a code
        block (default: ``board.summary``, else none)."""
        module = self._module("board")
        return module.summary(runs, top) if module is not None else ""

    def add_commands(self, subparsers: Any) -> None:
        """Add the pillar's own ``sparsebench`` subcommands to the argparse ``subparsers``
        (each sets ``func``; default none)."""

    def describe(self) -> str:
        return " ".join((self.__doc__ or "").strip().split("\n\n")[0].split())


_PILLARS: dict[str, Pillar] = {}
_loaded = False


def register_pillar(cls_or_obj: Any) -> Any:
    """Register a :class:`Pillar` subclass (or instance) under its ``name``; usable as a
    class decorator. Raises PillarError for a missing name or a name taken by another class."""
    if isinstance(cls_or_obj, type):
        old = _PILLARS.get(getattr(cls_or_obj, "name", None) or "")
        # registering a class again keeps its instance: code holding it sees the same pillar
        obj = old if type(old) is cls_or_obj else cls_or_obj()
    else:
        obj = cls_or_obj
    if not isinstance(obj, Pillar) or not obj.name:
        raise PillarError(f"{cls_or_obj!r} is not a Pillar with a name")
    if not obj.families:
        type(obj).families = (obj.name,)
    old = _PILLARS.get(obj.name)
    if old is not None and type(old) is not type(obj):
        raise PillarError(f"pillar {obj.name!r} is registered twice")
    _PILLARS[obj.name] = obj
    return cls_or_obj


def load_plugins() -> None:
    """Import the built-in pillars, entry points and ``$SPARSEBENCH_PLUGINS`` (once)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ref in _builtin().values():
        register_pillar(_resolve(ref))
    for ep in entry_points(group="sparsebench.pillars"):
        register_pillar(ep.load())
    for mod in filter(None, (m.strip() for m in os.environ.get(PLUGINS_ENV, "").split(","))):
        try:
            importlib.import_module(mod)
        except ImportError as e:
            raise PillarError(
                f"${PLUGINS_ENV}: cannot import {mod!r} ({e}); give importable module names, "
                "comma-separated (is its folder on PYTHONPATH?)"
            ) from None


def builtin_pillars() -> list[Pillar]:
    """The built-in pillars alone (no entry point, no plug-in), registered."""
    for ref in _builtin().values():
        register_pillar(_resolve(ref))
    return [_PILLARS[name] for name in _builtin()]


def _builtin() -> dict[str, str]:
    """The built-in pillars' list, kept in the pillars package, not here."""
    return importlib.import_module("sparsebench.suite.pillars").BUILTIN


def _resolve(ref: str) -> Any:
    module, _, attr = ref.partition(":")
    return getattr(importlib.import_module(module), attr)


def all_pillars() -> dict[str, Pillar]:
    """Every registered pillar: the built-ins in their listed order, then the others
    in registration order (importing a built-in's module registers it early: the order must not
    depend on what was imported first)."""
    load_plugins()
    builtin = _builtin()
    names = [n for n in builtin if n in _PILLARS]
    names += [n for n in _PILLARS if n not in builtin]
    return {n: _PILLARS[n] for n in names}


def get_pillar(name: str) -> Pillar:
    """The registered pillar ``name``; PillarError lists the registered names (and the
    closest one) if absent."""
    pillars = all_pillars()
    if name not in pillars:
        raise PillarError(
            f"unknown pillar {name!r}; registered pillars: {', '.join(pillars)}"
            f"{did_you_mean(name, pillars)}"
        )
    return pillars[name]


def families_of(name: str) -> tuple[str, ...]:
    """The method families of pillar ``name``, or ``(name,)`` for a family (``sparsebench
    methods --pillar NAME`` takes either); PillarError lists both (and the closest) if
    ``name`` is neither."""
    pillars = all_pillars()
    if name in pillars:
        return pillars[name].families
    known = sorted({f for p in pillars.values() for f in p.families})
    if name in known:
        return (name,)
    raise PillarError(
        f"unknown pillar or family {name!r}; pillars: {', '.join(pillars)}; families: "
        f"{', '.join(known)}{did_you_mean(name, [*pillars, *known])}"
    )


def pillar_of_family(family: str) -> Pillar | None:
    """The pillar whose methods are registered under ``family`` (None if no pillar serves it)."""
    for p in all_pillars().values():
        if family in p.families:
            return p
    return None

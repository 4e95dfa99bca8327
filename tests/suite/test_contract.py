"""The contract every registered pillar and method meets (as benchopt's tests run over every
solver): declarations, a tiny spec that runs, records its table accepts, a board; for every
method a cited docstring, default Params that validate and a tiny cell that runs. The toy
pillar of tests/toy_pillar.py is registered too: it meets the same contract."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest

import tests.toy_pillar  # noqa: F401 - registers the toy pillar
from sparsebench.suite import paths, registry
from sparsebench.suite.job import build_artefact, run_batch
from sparsebench.suite.pillar import all_pillars, pillar_of_family
from sparsebench.suite.record import COMMON_COLUMNS
from sparsebench.suite.schemas import CommonSchema, TableError
from sparsebench.suite.spec import load, validate
from sparsebench.suite.tables import FRAGMENT, STAT_KEY, aggregate, side_table, verify

PILLARS = all_pillars()
METHODS = [
    (p.name, info.name)
    for p in PILLARS.values()
    for info in registry.all_methods(p.families).values()
]


@pytest.fixture(scope="module", autouse=True)
def _artefact_cache(tmp_path_factory):
    """One artefact folder for the module: artefact ids hash what defines them, so the tiny
    specs of all tests share their base models and experts, built once."""
    old = os.environ.get(paths.ARTEFACTS_ENV)
    os.environ[paths.ARTEFACTS_ENV] = str(tmp_path_factory.mktemp("artefacts"))
    yield
    if old is None:
        os.environ.pop(paths.ARTEFACTS_ENV)
    else:
        os.environ[paths.ARTEFACTS_ENV] = old


def _spec(tmp_path, pillar, method=None):
    data = {"benchmark": "contract", "data_root": str(tmp_path / "data"), **pillar.example(method)}
    spec = validate(data, source="contract.yaml")
    for art in pillar.artefacts(spec):  # in declaration order: a pillar lists inputs first
        assert art.pillar == pillar.name and art.outputs
        assert all(Path(o).is_relative_to(paths.artefact_root()) for o in art.outputs)
        if not all(Path(o).is_file() for o in art.outputs):
            took = build_artefact(spec, pillar, art)
            info = json.loads(paths.artefact_build_info(pillar.name, art.id).read_text())
            assert info["build_s"] == took and info["threads"] >= 1
    return spec


@pytest.mark.parametrize("name", PILLARS)
def test_pillar_declarations(name):
    p = PILLARS[name]
    assert p.name == name and p.title and p.describe(), "name, title and docstring"
    assert p.spec_keys and p.families
    declared = {**COMMON_COLUMNS, **p.columns}
    assert set(p.row_key) <= set(declared)
    # the column the claims engine counts replicates in (seed, or trial)
    assert p.replicate in declared and p.replicate not in {m.name for m in p.metrics}
    for m in p.metrics:
        assert m.name in declared, f"metric {m.name} is not a column of {name}"
    assert issubclass(p.table, CommonSchema)
    assert set(p.table.to_schema().columns) <= set(declared), "table columns are declared"
    # what a cluster job asks for, and the columns two runs of a cell may differ in: every
    # column of seconds, milliseconds or memory is declared measured
    assert p.job_mem_mb >= 500 and p.cell_minutes > 0 and p.artefact_minutes > 0
    assert set(p.measured) <= set(p.columns)
    timed = {c for c in p.columns if c.endswith(("_s", "_ms", "_mb"))}
    assert timed <= set(p.measured), f"{sorted(timed - set(p.measured))} are measurements"
    module_dir = Path(__import__(type(p).__module__, fromlist=["_"]).__file__).parent
    for plot in p.plots:
        assert plot.file.endswith(".png") and (module_dir / plot.caption).is_file()


@pytest.mark.parametrize("name", PILLARS)
def test_pillar_tiny_spec_runs_records_validate_and_board_is_written(name, tmp_path):
    p = PILLARS[name]
    spec = _spec(tmp_path, p)
    assert spec.pillars == (name,)
    cells = p.cells(spec)
    ids = [c.id for c in cells]
    assert cells and len(set(ids)) == len(ids)
    for c in cells:
        assert re.fullmatch(r"[A-Za-z0-9_.=+-]+(/[A-Za-z0-9_.=+-]+)*", c.id), c.id
        assert c.pillar == name and c.label and c.threads >= 1
    root = tmp_path / "results"
    records = run_batch(spec, p, cells[:2], root=root, progress=lambda msg: None)
    assert [r["status"] for r in records] == ["ok"] * len(records), records[0].get("error")
    folder = paths.pillar_dir("contract", name, root)
    runs = aggregate(p, paths.find_records(folder), folder / "runs.parquet")
    assert runs.height >= len(records)
    again = aggregate(p, paths.find_records(folder), folder / "runs.parquet")
    assert again.equals(runs), "an incremental rebuild with nothing new gives the same table"
    # the batch's fragment gives exactly the rows its JSON records give
    assert runs[FRAGMENT].null_count() == 0, "the rows came from the batch's fragment"
    assert verify(p, folder) == {"differ": [], "not_in_fragments": [], "gone": []}
    full = aggregate(p, paths.find_records(folder), folder / "runs.parquet", incremental=False)
    bookkeeping = [*STAT_KEY, FRAGMENT]
    assert full.drop(bookkeeping).equals(runs.drop(bookkeeping))
    runs = full
    for side, make in p.side_tables().items():  # kept by the aggregation, as made from runs
        kept = side_table(folder, side, runs)
        assert kept is not None and kept.equals(make(runs)), side
    files = p.board(runs, folder)
    for f in [*paths.board_files("contract", name, [pl_.file for pl_ in p.plots], root)]:
        assert f.is_file(), f
    assert set(files.values()) <= set(folder.iterdir())
    assert isinstance(p.summary(runs), str)
    # a bad record is refused naming its file, the row and the column, whatever the pillar
    bad = paths.find_records(folder)[0]
    rec = json.loads(bad.read_text())
    rec["threads"] = 0  # a common column every row of the record carries (threads >= 1)
    bad.write_text(json.dumps(rec))  # by hand: a full aggregation reads it
    with pytest.raises(TableError) as info:
        aggregate(p, paths.find_records(folder), folder / "runs.parquet", incremental=False)
    message = str(info.value)
    assert "threads" in message and bad.parent.name in message, message
    assert info.value.rows, "the offending rows are named"


@pytest.mark.parametrize("family_and_name", METHODS, ids=lambda m: f"{m[0]}/{m[1]}")
def test_method_contract(family_and_name):
    pillar_name, name = family_and_name
    info = registry.get_method(name, PILLARS[pillar_name].families)
    assert info.source, f"{name}: the class docstring needs a 'Source:' paragraph"
    assert dataclasses.is_dataclass(info.params_cls)
    params = registry.build_params(info, {})
    assert registry.setting_id(params) == "default"
    assert pillar_of_family(info.family) is PILLARS[pillar_name]


@pytest.mark.parametrize("family_and_name", METHODS, ids=lambda m: f"{m[0]}/{m[1]}")
def test_method_tiny_cell_runs(family_and_name, tmp_path):
    pillar_name, name = family_and_name
    p = PILLARS[pillar_name]
    spec = _spec(tmp_path, p, name)
    cell = next(c for c in p.cells(spec) if c.method in (name, "all"))
    [record] = run_batch(spec, p, [cell], root=tmp_path / "results", progress=lambda m: None)
    assert record["status"] == "ok", record["error"]
    folder = paths.pillar_dir("contract", pillar_name, tmp_path / "results")
    aggregate(p, paths.find_records(folder), folder / "runs.parquet")  # the schema accepts it
    rows = p.table_rows(record)
    mine = [r for r in rows if r.get("method") == name] or rows
    for r in mine:  # a backend that cannot run here is skipped with the reason, never failed
        assert r["status"] in ("ok", "skipped") and (r["status"] == "ok" or r["error"])


def test_every_method_family_belongs_to_a_pillar():
    for info in registry.all_methods().values():
        assert pillar_of_family(info.family) is not None, info


# Pinned identities: a refactor must never silently rename existing results (open_lth pins its
# run hashes the same way). Changing one of these moves records to new paths.
def test_registering_the_builtin_pillars_again_keeps_their_instances():
    from sparsebench.suite.pillar import builtin_pillars

    first = {p.name: p for p in builtin_pillars()}
    again = {p.name: p for p in builtin_pillars()}
    assert all(again[n] is first[n] is PILLARS[n] for n in first)


def test_setting_ids_and_cell_ids_are_pinned():
    set_zero = registry.build_params("set", {"regrowth_init": "zero"}, families=("dst",))
    assert registry.setting_id(set_zero) == "p3a94c0c901"
    rigl = registry.build_params("rigl", {"update_interval": 5}, families=("dst",))
    assert registry.setting_id(rigl) == "p1aeb035efd"
    spec = load(Path(__file__).parents[2] / "suite/benchmarks/default.yaml")
    ids = {c.pillar: [] for c in spec.cells()}
    for c in spec.cells():
        ids[c.pillar].append(c.id)
    assert ids["classification"][:2] == [
        "mnist5k_lenet300/dense/default/s0/seed0",
        "mnist5k_lenet300/dense/default/s0/seed1",
    ]
    # SET's authors' constant N(0, 0.1^2) is a named variant since issue 11 (default: init scale)
    set_normal = registry.setting_id(
        registry.build_params("set", {"regrowth_init": "normal"}, families=("dst",))
    )
    assert set_normal == "pfffbf46582"
    assert "mnist5k_lenet300/set/pfffbf46582/s0.98/seed2" in ids["classification"]
    assert ids["hessian"][0] == "alkane/pair/dense/n10"
    assert ids["kernels"] == ["4096x4096/s0.95/b64", "4096x4096/s0.99/b64"]
    assert len(ids["classification"]) == 66 and len(ids["hessian"]) == 16


def test_builtin_pillars_import_without_polars_pandera_or_torch():
    """A pillar's package imports none of them (its table.py and board.py do): the spec
    checks and the warm job server (suite/warm.py, which must not fork polars) import every
    pillar."""
    from tests.imports import imported_by

    statement = "from sparsebench.suite.pillar import builtin_pillars; builtin_pillars()"
    assert imported_by(statement, ["polars", "pandera", "torch", "lightning"]) == []

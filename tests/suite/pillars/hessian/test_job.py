import json

import polars as pl
import pytest

from sparsebench.suite import paths, tables
from sparsebench.suite.job import run_one
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.hessian.board import scaling_exponents, write_leaderboard
from sparsebench.suite.pillars.hessian.job import HessianJob, compute
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("hessian")


def _spec(**hessian):
    section = {
        "systems": {"alkane": {"sizes": [4, 30]}},
        "potentials": {"pair": {}, "schnet": {}},
        "methods": ["dense", "colored", "truncated"],
        "dense_max_atoms": 50,
        **hessian,
    }
    return validate({"benchmark": "h", "hessian": section}, source="h.yaml")


def test_cells_skip_truncated_for_one_hop_and_dense_above_the_limit():
    cells = {(c.columns["potential"], c.method, c.columns["size"]) for c in _spec().cells()}
    assert ("pair", "truncated", 4) not in cells  # K = 1: nothing to truncate
    assert ("schnet", "truncated", 4) in cells
    assert ("pair", "dense", 4) in cells and ("pair", "dense", 30) not in cells  # 92 atoms > 50
    assert ("pair", "colored", 30) in cells


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"systems": {"protein": {"sizes": [1]}}}, ["hessian.systems", "protein"]),
        ({"systems": {"alkane": {"sizes": []}}}, ["hessian.systems.alkane.sizes"]),
        ({"potentials": {"pair": {"cutof": 3.0}}}, ["hessian.potentials.pair", "cutof"]),
        ({"potentials": {"pair": {"cutoff": -1.0}}}, ["hessian.potentials.pair", "finite cutoff"]),
        ({"methods": ["sparse"]}, ["hessian.methods.0", "'sparse'"]),
        ({"chunk": 0}, ["hessian.chunk", "integer >= 1", "'auto'"]),
        ({"chunk": "big"}, ["hessian.chunk", "'big'", "'auto'"]),
    ],
)
def test_hessian_section_errors(section, expected):
    with pytest.raises(SpecError) as e:
        _spec(**section)
    for part in ["h.yaml", *expected]:
        assert part in str(e.value), (part, str(e.value))


def test_colored_is_exact_and_truncated_is_not():
    colored = compute(HessianJob("alkane", 6, "schnet", "colored", dense_max_atoms=100))
    assert colored["rel_err"] <= 1e-10 and colored["err_reference"] == "dense"
    assert colored["n_hvps"] == colored["n_colors"] < 3 * colored["n_atoms"]
    assert colored["n_colors"] % 3 == 0
    trunc = compute(HessianJob("alkane", 6, "schnet", "truncated", dense_max_atoms=100))
    assert trunc["pattern_hops"] == trunc["K"] - 1 == colored["K"] - 1
    assert trunc["rel_err"] > 1e-6
    big = compute(HessianJob("alkane", 6, "pair", "colored", dense_max_atoms=0))
    assert big["err_reference"] == "probes" and big["rel_err"] <= 1e-10
    assert "dense_wall_s" not in big  # no dense reference above dense_max_atoms
    with pytest.raises(ValueError, match="truncated needs a potential"):
        compute(HessianJob("alkane", 3, "pair", "truncated"))


def test_records_table_and_leaderboard(tmp_path):
    spec = _spec(systems={"alkane": {"sizes": [3]}, "water": {"sizes": [3]}})
    assert spec.pillars == ("hessian",)
    cells = spec.cells("hessian")
    assert "alkane/pair/colored/n3" in {c.id for c in cells}
    records = []
    for cell in cells:
        out = paths.record_in(tmp_path, cell.id)
        rec = run_one(spec, PILLAR, cell, state=None, out=out, parallel_jobs=1)
        assert rec["status"] == "ok", rec["error"]
        assert rec["pillar"] == "hessian" and rec["cell_id"] == cell.id
        records.append(out)
    runs = tables.aggregate("hessian", records, tmp_path / "runs.parquet")
    assert runs.height == len(cells)
    files = write_leaderboard(runs, tmp_path)
    assert all(p.is_file() for p in files.values())
    assert "## alkane, `pair`" in files["md"].read_text()
    assert json.loads(files["json"].read_text())["rows"]


def test_scaling_exponent_of_a_linear_law():
    runs = pl.DataFrame(
        {
            "system": ["a"] * 3,
            "potential": ["p"] * 3,
            "method": ["colored"] * 3,
            "status": ["ok"] * 3,
            "n_atoms": [400, 800, 1600],
            "wall_s": [1.0, 2.0, 4.0],
            "n_hvps": [30, 30, 60],  # colors doubled at the largest size
        }
    )
    expo = scaling_exponents(runs)
    assert expo["exponent"][0] == pytest.approx(1.0)
    assert expo["exponent_per_hvp"][0] < 1.0  # per HVP the cost grew less than N
    # by default only the exact sparse methods: neither the dense reference nor an approximation
    others = pl.concat(
        [
            runs.with_columns(method=pl.lit(m), wall_s=pl.col("wall_s") ** 2)
            for m in ("dense", "truncated")
        ]
    )
    expo = scaling_exponents(pl.concat([runs, others]))
    assert expo["method"].to_list() == ["colored"] and expo["exponent"][0] == pytest.approx(1.0)
    assert scaling_exponents(others, ["truncated"])["exponent"][0] == pytest.approx(2.0)


def test_colored_job_with_a_wrong_pattern_fails(monkeypatch):
    from sparsebench.methods.hessian import pattern as pattern_mod
    from sparsebench.methods.hessian.hvp import PatternError

    real = pattern_mod.HessianPattern.of_potential

    def one_hop_short(pot, n, hops=None):  # a detector that misses the K-th hop
        return real(pot, n, (hops or pot.hops) - 1)

    monkeypatch.setattr(pattern_mod.HessianPattern, "of_potential", staticmethod(one_hop_short))
    with pytest.raises(PatternError, match="not exact"):
        compute(HessianJob("alkane", 6, "schnet", "colored", dense_max_atoms=0))


def test_section_seed_seeds_schnet_weights(monkeypatch):
    from sparsebench.methods.hessian import potentials

    seen = []
    real = potentials.build_potential

    def spy(kind, atoms, **kw):
        seen.append(kw.get("seed"))
        return real(kind, atoms, **kw)

    monkeypatch.setattr(potentials, "build_potential", spy)
    a = compute(HessianJob("water", 3, "schnet", "colored", seed=7, dense_max_atoms=100))
    assert seen == [7] and a["rel_err"] <= 1e-10
    assert a["pattern_hops"] == a["K"] == 2
    compute(HessianJob("water", 3, "schnet", "colored", seed=7, potential_params={"seed": 3}))
    compute(HessianJob("water", 3, "pair", "colored", seed=7))  # no random weights, no seed
    assert seen == [7, 3, None]


def test_mistyped_potential_parameter_is_refused():
    with pytest.raises(SpecError, match="parameter 'D' of potential 'pair' has value 'x'"):
        _spec(potentials={"pair": {"D": "x"}})


def test_peak_memory_is_per_cell():
    import numpy as np

    from sparsebench.suite.memory import peak_mb, reset_peak

    big = np.ones(20_000_000)  # 160 MB
    high = peak_mb()
    del big
    if reset_peak():  # Linux: the next cell of a batch does not inherit this peak
        assert peak_mb() < high - 100

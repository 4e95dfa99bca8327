"""Kernels pillar jobs: one (shape, sparsity, batch) cell timed for every backend."""

import json

import polars as pl
import pytest
import torch

from sparsebench.suite import paths, tables
from sparsebench.suite.boards import md_escape
from sparsebench.suite.job import run_one
from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.pillars.kernels.board import (
    break_even,
    claim_verdicts,
    pattern_comparison,
    speedup_pivot,
    summary,
    write_leaderboard,
)
from sparsebench.suite.pillars.kernels.job import (
    KernelJob,
    MaskedLinear,
    measure,
    two_four_mask,
    useful_flops,
)
from sparsebench.suite.pillars.kernels.patterns import PATTERNS, haste_mask, random_mask
from sparsebench.suite.spec import SpecError, validate

PILLAR = get_pillar("kernels")


def _spec(**kernels):
    section = {
        "shapes": [[24, 40]],
        "sparsities": [0.5, 0.9],
        "batches": [3],
        "backends": ["torch_csr", "cpu", "triton", "semi_structured"],
        "repeats": 3,
        "warmup": 1,
        **kernels,
    }
    return validate({"benchmark": "k", "kernels": section}, source="k.yaml")


def test_cells_and_record_paths():
    spec = _spec(batches=[1, 8])
    assert spec.pillars == ("kernels",)
    cells = spec.cells("kernels")
    assert len(cells) == 4
    assert cells[0].id == "24x40/s0.5/b1"
    assert str(paths.record("k", "kernels", cells[0].id)) == (
        "results/k/kernels/runs/24x40/s0.5/b1/record.json"
    )


def test_the_cpu_extension_is_built_by_its_own_artefact(tmp_path, monkeypatch):
    """Timing cells depend on the build note, made by a one-core job; without cpu, none."""
    from sparsebench.kernels.backends import _cpu_build

    if _cpu_build.toolchain_problem():
        pytest.skip(_cpu_build.toolchain_problem())
    monkeypatch.setenv(paths.ARTEFACTS_ENV, str(tmp_path))
    spec = _spec()
    (art,) = PILLAR.artefacts(spec)
    assert art.threads == 1 and art.id.startswith("cpu-extension/")
    assert all(c.inputs == art.outputs for c in spec.cells("kernels"))
    assert PILLAR.artefacts(_spec(backends=["torch_csr"])) == []
    assert spec.cells("kernels") and not _spec(backends=["torch_csr"]).cells("kernels")[0].inputs
    PILLAR.build(spec, art)
    note = json.loads(open(art.outputs[0]).read())
    assert note["ok"] and note["module"] == _cpu_build.module_name(_cpu_build.build_directory())


@pytest.mark.parametrize(
    "section, expected",
    [
        ({"shapes": [[24]]}, ["kernels.shapes.0"]),
        ({"sparsities": [1.0]}, ["kernels.sparsities.0"]),
        ({"backends": ["cuda_magic"]}, ["kernels.backends.0", "'cuda_magic'", "torch_csr"]),
        ({"ops": ["sideways"]}, ["kernels.ops.0"]),
        ({"repeats": 1}, ["kernels.repeats"]),
        ({"batch": [3]}, ["kernels", "'batch'"]),
    ],
)
def test_kernels_section_errors(section, expected):
    with pytest.raises(SpecError) as e:
        _spec(**section)
    for part in ["k.yaml", *expected]:
        assert part in str(e.value), (part, str(e.value))


def test_device_and_execution_refused_where_they_cannot_apply():
    # device: cuda is valid anywhere (the run's start asks the machines that run the jobs,
    # tests/suite/test_gpus.py); its cells ask for a GPU
    assert {c.gpus for c in PILLAR.cells(_spec(device="cuda"))} == {1}
    section = {"shapes": [[8, 8]], "sparsities": [0.5], "batches": [1]}
    with pytest.raises(SpecError, match="execution: these keys belong to the `classification:`"):
        validate({"benchmark": "k", "execution": "cpu", "kernels": section}, source="k.yaml")


def test_half_precision_skips_backends_without_kernels_for_it():
    rows = measure(KernelJob(16, 16, 0.5, 2, ("torch_csr", "cpu"), dtype="float16", repeats=3))
    status = {r["backend"]: (r["status"], r["error"]) for r in rows if r["op"] == "forward"}
    assert status["cpu"][0] == "skipped" and "float32 and float64" in status["cpu"][1]
    assert status["torch_csr"][0] in ("ok", "skipped")  # skipped where torch lacks the kernel
    assert status["dense"][0] == "ok"


def test_random_and_two_four_masks():
    g = torch.Generator().manual_seed(0)
    m = random_mask(10, 20, 0.9, g)
    assert m.dtype == torch.bool and int(m.sum()) == 20
    w = torch.randn(4, 8)
    m24 = two_four_mask(w)
    assert torch.all(m24.reshape(4, 2, 4).sum(-1) == 2)
    kept = w.abs().reshape(4, 2, 4)[m24.reshape(4, 2, 4)].reshape(4, 2, 2)
    dropped = w.abs().reshape(4, 2, 4)[~m24.reshape(4, 2, 4)].reshape(4, 2, 2)
    assert torch.all(kept.min(-1).values >= dropped.max(-1).values)


def test_masked_linear_is_dense_times_mask():
    lin = torch.nn.Linear(5, 3)
    mask = torch.rand(3, 5) < 0.5
    layer = MaskedLinear(lin, mask)
    x = torch.randn(2, 5)
    torch.testing.assert_close(layer(x), x @ (lin.weight * mask).T + lin.bias)
    layer(x).sum().backward()
    assert torch.all(lin.weight.grad[~mask] == 0)


def test_measure_rows_ratios_and_errors():
    job = KernelJob(24, 40, 0.9, 3, ("torch_csr", "cpu", "semi_structured"), repeats=4, warmup=1)
    rows = measure(job)
    assert len(rows) == 5 * 3  # dense, dense_mask, 3 backends x 3 ops
    by = {(r["backend"], r["op"]): r for r in rows}
    nnz = by[("cpu", "forward")]["nnz"]
    assert nnz == round(0.1 * 24 * 40)
    for (backend, op), r in by.items():
        if backend == "semi_structured":
            assert r["status"] == "skipped" and "0.5" in r["error"]
            continue
        assert r["status"] == "ok" and r["repeats"] == 4
        assert r["ms_p10"] <= r["ms_median"] <= r["ms_p90"]
        assert r["speedup_vs_dense"] == pytest.approx(r["dense_ms"] / r["ms_median"])
        assert r["speedup_vs_dense_mask"] == pytest.approx(r["dense_mask_ms"] / r["ms_median"])
        assert r["useful_flops"] == useful_flops(op, nnz, 3)
        if backend == "dense":
            assert r["max_abs_err"] is None  # not masked: no reference to compare with
        else:
            assert r["max_abs_err"] < 1e-5, (backend, op, r["max_abs_err"])
    assert by[("dense_mask", "forward")]["max_abs_err"] == 0.0
    assert useful_flops("fwd_bwd", 10, 2) == 3 * useful_flops("forward", 10, 2)


def test_a_backend_failing_in_backward_keeps_the_other_rows(monkeypatch):
    from sparsebench.kernels import BACKENDS

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    # torch_csr with a grad_input that raises (a subclass keeps its registered name).
    broken_cls = type("BrokenCSR", (type(BACKENDS["torch_csr"]),), {})
    broken_cls.grad_input_impl = staticmethod(broken)
    bad = broken_cls()
    assert bad.name == "torch_csr"
    monkeypatch.setitem(BACKENDS, "torch_csr", bad)
    rows = measure(KernelJob(16, 24, 0.5, 2, ("torch_csr", "cpu"), repeats=3, warmup=0))
    by = {(r["backend"], r["op"]): r for r in rows}
    assert by[("torch_csr", "backward")]["status"] == "failed"
    assert "boom" in by[("torch_csr", "backward")]["error"]
    for backend in ("dense", "dense_mask", "cpu"):
        assert all(by[(backend, op)]["status"] == "ok" for op in ("forward", "backward"))
    assert by[("cpu", "forward")]["speedup_vs_torch_csr"] is None


def test_unknown_backend_fails_before_timing():
    with pytest.raises(ValueError, match="allowed"):
        measure(KernelJob(8, 8, 0.5, 1, ("cuda_magic",)))


def test_record_table_and_leaderboard(tmp_path):
    spec = _spec(backends=["cpu", "semi_structured"])
    records = []
    for cell in spec.cells("kernels"):
        out = paths.record_in(tmp_path, cell.id)
        rec = run_one(spec, PILLAR, cell, state=None, out=out, parallel_jobs=1)
        assert rec["status"] == "ok", rec["error"]  # a skipped backend is not a failure
        records.append(out)
    record = json.loads(records[0].read_text())
    assert record["benchmark"] == "k" and record["torch_version"] and record["threads"] == 1
    assert len(record["rows"]) == 4 * 3
    runs = tables.aggregate("kernels", records, tmp_path / "runs.parquet")
    assert runs.height == 2 * 4 * 3
    # Every row of the table carries its cell's provenance.
    assert set(runs["benchmark"]) == {"k"} and runs["torch_version"].null_count() == 0
    assert set(runs["cell_id"]) == {c.id for c in spec.cells("kernels")}
    files = write_leaderboard(runs, tmp_path)
    md = files["md"].read_text()
    # the shipped claims about kernels address 4096 x 4096 and 1000 x 100: no cell here
    assert "## Claims" in md and "inconclusive" in md and "holds" not in md
    assert "## Patterns" not in md  # random only
    assert "`semi_structured` (skipped)" in md
    assert files["png"].stat().st_size > 0
    pivot = speedup_pivot(runs)
    assert {"dense_mask", "cpu"} <= set(pivot.columns)


def _row(backend, op, sparsity, speedup, pattern="random", shape=(4096, 4096), **kw):
    o, i = shape
    part = "" if pattern == "random" else f"/{pattern}"
    return {
        "benchmark": "k",
        "pillar": "kernels",
        "cell_id": f"{o}x{i}{part}/s{sparsity}/b64",
        "label": f"{o}x{i} sparsity {sparsity} batch 64",
        "backend": backend,
        "op": op,
        "batch": 64,
        "in_features": i,
        "out_features": o,
        "pattern": pattern,
        "sparsity": sparsity,
        "nnz": round((1 - sparsity) * o * i),
        "status": "ok",
        "device": "cpu",
        "threads": 2,
        "dtype": "float32",
        "ms_median": 1.0,
        "speedup_vs_dense": speedup,
        "speedup_vs_dense_mask": speedup,
        "speedup_vs_torch_csr": 2.0,
        **kw,
    }


def _trials(backend, op, sparsity, speedups, csr=(1.9, 2.0, 2.1), **kw):
    """One row per trial (the timing claims' replicates): trial t's speed-ups are the t-th
    of ``speedups`` and ``csr``; trial 0 keeps the plain cell id."""
    out = []
    for t, (s, c) in enumerate(zip(speedups, csr, strict=True)):
        row = _row(backend, op, sparsity, s, speedup_vs_torch_csr=c, trial=t, **kw)
        row["cell_id"] += f"/trial{t}" if t else ""
        out.append(row)
    return out


def _spread(v, d=0.1):
    return (v - d, v, v + d)


def test_the_board_shows_the_claims_engines_verdicts_and_break_even():
    runs = pl.DataFrame(
        [
            *_trials("cpu", "forward", 0.5, _spread(0.4)),
            *_trials("cpu", "forward", 0.9, _spread(1.5)),
            *_trials("cpu", "forward", 0.95, _spread(6.0)),
            *_trials("cpu", "forward", 0.99, _spread(9.0)),
            *_trials("cpu", "fwd_bwd", 0.95, _spread(3.5)),
        ]
    )
    v = {r["claim"]: r for r in claim_verdicts(runs).iter_rows(named=True)}
    # Three trials v − 0.1, v, v + 0.1: mean v, sd 0.1, Welch's (one-sample t) half-width
    # t(0.975, 2) · 0.1 / √3 = 4.3027 · 0.05774 = 0.2484. The kernels issue's goals, now
    # claims: [5.75, 6.25] > 5, torch CSR [1.75, 2.25] > 1.5, [8.75, 9.25] < 10, [3.25, 3.75] > 3.
    assert v["cpu-forward-5x-dense-95"]["verdict"] == "holds"
    assert v["cpu-forward-5x-dense-95"]["low"] == pytest.approx(6.0 - 0.2484, abs=1e-4)
    assert v["cpu-forward-beats-torch-csr-95-by-50pct"]["verdict"] == "holds"
    assert v["cpu-forward-10x-dense-99"]["verdict"] == "fails"
    assert v["cpu-forward-10x-dense-99"]["estimate"] == pytest.approx(9.0)
    assert v["cpu-training-step-3x-dense-mask-95"]["verdict"] == "holds"
    # fwd_bwd at 95 %: 3.5 > 1.2 vs dense, 2.0 > 1.2 vs torch_csr; one sparsity: no trend
    assert v["cpu-kernel-beats-dense-95"]["verdict"] == "holds"
    assert v["cpu-kernel-beats-torch-csr-95"]["verdict"] == "holds"
    assert v["speedup-grows-with-sparsity"]["verdict"] == "inconclusive"
    assert v["haste-output-layer-faster-than-unstructured"]["verdict"] == "inconclusive"
    # one measurement is no interval: a single trial of the same cells decides nothing
    single = runs.filter(pl.col("trial") == 1)
    one_trial = {r["claim"]: r["verdict"] for r in claim_verdicts(single).iter_rows(named=True)}
    assert set(one_trial.values()) == {"inconclusive"}
    # equal speed-ups on every trial are chance ties of a timing, not a zero spread
    ties = runs.with_columns(speedup_vs_dense=pl.lit(6.0))
    tied = {r["claim"]: r for r in claim_verdicts(ties).iter_rows(named=True)}
    assert tied["cpu-forward-5x-dense-95"]["verdict"] == "inconclusive"
    assert "not deterministic" in tied["cpu-forward-5x-dense-95"]["test"]
    # a table aggregated from records without a pattern (all random cells) reads the same
    assert claim_verdicts(runs.drop("pattern")).equals(claim_verdicts(runs))
    lines = summary(runs).splitlines()
    line = next(x for x in lines if "cpu-forward-10x-dense-99" in x)
    assert line.startswith("  fails: cpu-forward-10x-dense-99: mean = 9, ")
    decided = [c for c, x in v.items() if x["verdict"] != "inconclusive"]
    assert sum(": " in x and x.split(":")[0].strip() in ("holds", "fails") for x in lines) == len(
        decided
    )
    # the fastest backend per sparsity and op, the median of its three trials (8.9, 9, 9.1)
    assert any(x.endswith("sparsity 99% forward: cpu 9.00x dense (3 trial(s))") for x in lines)
    assert any(x.endswith("sparsity 50% forward: cpu 0.40x dense (3 trial(s))") for x in lines)
    undecided = len(v) - len(decided)
    assert lines[-1] == f"  {undecided} claim(s) undecided here (the board's claims table says why)"
    one_thread = runs.with_columns(threads=pl.lit(1))  # e.g. a `--cores 1` run
    v1 = {r["claim"]: r["verdict"] for r in claim_verdicts(one_thread).iter_rows(named=True)}
    goals = [c for c in v if c.startswith("cpu-forward") or c.startswith("cpu-training")]
    assert len(goals) == 4 and {v1[c] for c in goals} == {"inconclusive"}  # 2 threads only
    assert v1["cpu-kernel-beats-dense-95"] == "holds"  # that claim names no thread count
    be = break_even(runs).filter(pl.col("op") == "forward")
    assert be["break_even_sparsity"].to_list() == [0.9]  # slower than dense at 0.5: honest
    slow = pl.DataFrame([_row("cpu", "forward", 0.99, 0.9)])
    assert break_even(slow)["break_even_sparsity"].to_list() == [None]


def test_the_haste_claim_compares_the_two_patterns_of_one_layer():
    wide = (1000, 100)

    def rows(random, haste):
        return [
            *_trials("cpu", "fwd_bwd", 0.95, random, shape=wide, ms_median=0.30),
            *_trials("cpu", "fwd_bwd", 0.95, haste, pattern="haste", shape=wide, ms_median=0.25),
        ]

    clear = rows(_spread(1.2), _spread(1.8))
    v = {r["claim"]: r for r in claim_verdicts(pl.DataFrame(clear)).iter_rows(named=True)}
    # speed-ups vs dense of their own jobs, HASTE 1.8 / random 1.2 = 1.5 by the delta method:
    # se² = 0.01 / (3 · 1.8²) + 0.01 / (3 · 1.2²) = 0.001029 + 0.002315 = 0.003344 (se 0.0578),
    # Welch–Satterthwaite df 3.48, t ≈ 2.98: 1.5 · exp(± 0.172) = [1.26, 1.78] > 1.2
    haste = v["haste-output-layer-faster-than-unstructured"]
    assert haste["verdict"] == "holds" and haste["estimate"] == pytest.approx(1.5)
    assert 1.24 < haste["low"] < 1.28 and 1.76 < haste["high"] < 1.80
    cmp = pattern_comparison(pl.DataFrame(clear))  # medians over the trials
    assert cmp["pattern"].to_list() == ["haste"] and cmp["random_nnz"].to_list() == [5000]
    assert cmp["speedup_vs_random"].to_list() == [pytest.approx(1.5)]
    assert cmp["random_ms"].to_list() == [0.30] and cmp["ms_median"].to_list() == [0.25]
    # 1.32 / 1.2 = 1.1 with the same spread: 1.1 · exp(± 0.181) = [0.92, 1.32] holds 1.2
    near = rows(_spread(1.2), _spread(1.32))
    v = {r["claim"]: r for r in claim_verdicts(pl.DataFrame(near)).iter_rows(named=True)}
    assert v["haste-output-layer-faster-than-unstructured"]["verdict"] == "inconclusive"
    # equal speed-ups, spread 0.05: se² = 2 · 0.0025 / (3 · 1.44), se 0.034, df 4, t 2.776:
    # exp(± 0.0944) = [0.91, 1.10], below 1.2
    same = rows(_spread(1.2, 0.05), _spread(1.2, 0.05))
    v = {r["claim"]: r for r in claim_verdicts(pl.DataFrame(same)).iter_rows(named=True)}
    assert v["haste-output-layer-faster-than-unstructured"]["verdict"] == "fails"


def test_haste_pattern_is_hastes_group_shared_fixed_fan_in():
    gen = torch.Generator().manual_seed(0)
    mask = haste_mask(40, 20, 0.9, gen)  # fan-in round(0.1 * 20) = 2, groups of 16: 3 groups
    assert mask.dtype == torch.bool and mask.shape == (40, 20)
    assert mask.sum(1).tolist() == [2] * 40
    for rows in (mask[0:16], mask[16:32], mask[32:40]):  # the last group has 40 mod 16 = 8
        assert torch.equal(rows, rows[:1].expand_as(rows))
    # the same draw as HASTE's own initial output mask: one (groups, in) uniform draw
    scores = torch.rand((3, 20), generator=torch.Generator().manual_seed(0))
    cols = torch.zeros(3, 20, dtype=torch.bool)
    cols.scatter_(1, scores.topk(2, dim=1).indices, True)
    assert torch.equal(mask, cols[torch.arange(40) // 16])
    assert PATTERNS.names() == ["random", "haste"]


def test_patterns_are_a_cell_axis_and_random_keeps_its_ids():
    spec = _spec(
        shapes=[[24, 40], [32, 8]],
        sparsities=[0.5],
        patterns={"random": {}, "haste": {"shapes": [[32, 8]]}},
    )
    ids = [c.id for c in spec.cells("kernels")]
    assert ids == ["24x40/s0.5/b3", "32x8/s0.5/b3", "32x8/haste/s0.5/b3"]
    cells = spec.cells("kernels")
    assert [c.columns["pattern"] for c in cells] == ["random", "random", "haste"]
    assert cells[2].label == "32x8 haste sparsity 0.5 batch 3"
    assert cells[0].trigger == cells[2].trigger and "patterns" not in cells[0].trigger
    assert [c.id for c in _spec(sparsities=[0.5]).cells("kernels")] == ["24x40/s0.5/b3"]
    with pytest.raises(SpecError, match=r"kernels.patterns.haste.shapes: \[8, 8\] is not one"):
        _spec(patterns={"haste": {"shapes": [[8, 8]]}})
    with pytest.raises(SpecError, match=r"kernels.patterns: value 'hast' is not allowed.*haste"):
        _spec(patterns={"hast": {}})
    old = {"cell_id": "24x40/s0.5/b3", "rows": [{"backend": "cpu", "op": "forward"}]}
    assert PILLAR.table_rows(old)[0]["pattern"] == "random"  # recorded before the axis


def test_a_haste_cell_runs_every_backend_on_hastes_mask():
    job = KernelJob(32, 8, 0.75, 3, ("torch_csr",), ops=("forward",), repeats=3, warmup=0,
                    pattern="haste")  # fmt: skip
    rows = {r["backend"]: r for r in measure(job)}
    # fan-in round(0.25 * 8) = 2 per output: 64 nonzeros, compared with dense x the same mask
    assert {r["nnz"] for r in rows.values()} == {64}
    assert rows["torch_csr"]["status"] == "ok" and rows["torch_csr"]["max_abs_err"] < 1e-5
    with pytest.raises(ValueError, match="unknown kernels pattern 'blocky'"):
        measure(KernelJob(8, 8, 0.5, 1, ("torch_csr",), pattern="blocky"))


def test_claim_text_cannot_break_the_markdown_table():
    # the board's claims table escapes with the shared helper of every board
    assert md_escape("a|b <i>&\nc") == "a\\|b &lt;i&gt;&amp; c"

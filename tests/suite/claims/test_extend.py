"""--extend-seeds: new seeds for exactly the cells the undecided claims read; --looks."""

import pytest
import yaml

from sparsebench.suite import paths
from sparsebench.suite.claims import ClaimError
from sparsebench.suite.claims.extend import extend_seeds, looks_level

from .conftest import one

RECIPE = {"epochs": 4, "batch_size": 64, "lr": 0.05}  # SET needs updates to be valid
ACC = {"snip": [0.93, 0.91, 0.95], "set": [0.92, 0.90, 0.94], "static": [0.80, 0.81, 0.82]}


@pytest.fixture
def run(tmp_path, claim_file, monkeypatch):
    """A spec of three methods at seeds 0-2, its runs table (snip vs set undecided: about 32
    seeds would decide it, test_power_and_level.py) and a claim file about snip and set."""
    import polars as pl

    from sparsebench.suite.spec import load

    monkeypatch.chdir(tmp_path)
    task = {"dataset": "digits", "model": "lenet300_100", "recipe": RECIPE}
    section = {"tasks": {"t": task}, "methods": {m: {} for m in ACC}, "sparsities": [0.9],
               "seeds": [0, 1, 2]}  # fmt: skip
    spec_path = tmp_path / "s.yaml"
    spec_path.write_text(yaml.safe_dump({"benchmark": "b", "classification": section}))
    spec = load(spec_path)
    rows = [{"cell_id": c.id, "label": c.label, "method": c.method, "setting_id": c.setting_id,
             "seed": c.seed, "status": "ok", "test_acc": ACC[c.method][c.seed], **c.columns}
            for c in spec.cells("classification")]  # fmt: skip
    folder = paths.bench_dir("b") / "classification"
    folder.mkdir(parents=True)
    pl.DataFrame(rows).write_parquet(folder / "runs.parquet")
    order = {"kind": "order", "a": {"method": "snip"}, "b": {"method": "set"}, "op": ">"}
    clear = {"kind": "order", "a": {"method": "snip"}, "b": {"method": "static"}, "op": ">"}
    claims_path = claim_file([one("snip-set", **order), one("snip-static", **clear)])
    return spec_path, paths.bench_dir("b"), claims_path, spec


def test_extend_seeds_targets_exactly_the_undecided_claims_cells(run, tmp_path):
    from sparsebench.suite.claims import load_files

    spec_path, bench, claims_path, spec = run
    out = bench / "extend-seeds.yaml"
    ext = extend_seeds(spec_path, bench, load_files([claims_path]), 2, out)
    assert [v.claim.id for v in ext.claims] == ["snip-set"]  # snip > static already holds
    assert ext.seeds == {"classification": [3, 4]}
    assert yaml.safe_load(out.read_text())["classification"]["seeds"] == [0, 1, 2, 3, 4]
    got = sorted(str(t.relative_to(bench / "classification" / "runs")) for t in ext.targets)
    # by hand: the ids of snip's and set's cells at seeds 3 and 4, nothing of static
    ids = {c.method: c.id.rsplit("/seed", 1)[0] for c in spec.cells("classification")}
    want = sorted(f"{ids[m]}/seed{s}/record.json" for m in ("snip", "set") for s in (3, 4))
    assert got == want
    with pytest.raises(ClaimError, match=r"--extend-seeds: 0 new seeds is not allowed; 1 to 20"):
        extend_seeds(spec_path, bench, load_files([claims_path]), 0, out)


def test_a_record_already_done_at_a_new_seed_is_no_target(run):
    """The workflow has no rule for a done record: naming it as a target fails the run."""
    import json

    from sparsebench.suite.claims import load_files
    from sparsebench.suite.spec import load

    spec_path, bench, claims_path, _ = run
    out = bench / "extend-seeds.yaml"
    first = extend_seeds(spec_path, bench, load_files([claims_path]), 2, out)
    extended = {c.id: c for c in load(out).cells("classification")}
    done = first.targets[0]
    cell = next(c for i, c in extended.items() if str(done).endswith(f"{i}/record.json"))
    done.parent.mkdir(parents=True)
    done.write_text(json.dumps({"trigger": cell.trigger_hash}))
    stale = first.targets[1]  # a record of another trigger is rerun: still a target
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"trigger": "older"}))
    again = extend_seeds(spec_path, bench, load_files([claims_path]), 2, out)
    assert again.targets == first.targets[1:]


def test_looks_level_is_bonferroni_over_the_looks():
    assert looks_level(0.95, 1) == pytest.approx(0.95)
    assert looks_level(0.95, 2) == pytest.approx(0.975)  # 1 − 0.05 / 2
    assert looks_level(0.9, 4) == pytest.approx(0.975)  # 1 − 0.1 / 4
    with pytest.raises(ValueError, match="looks must be at least 1"):
        looks_level(0.95, 0)


def test_the_cli_writes_the_spec_and_the_targets_and_judges_at_two_looks(run, capsys):
    from sparsebench.suite.cli import main

    spec_path, bench, claims_path, _ = run
    assert main(["claims", str(bench), str(claims_path), "--spec", str(spec_path),
                 "--extend-seeds", "2"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "snip-set: about 32 seeds per cell would decide it" in out
    assert len((bench / "extend-seeds.targets").read_text().splitlines()) == 4
    targets, spec_out = bench / "extend-seeds.targets", bench / "extend-seeds.yaml"
    assert f"snakemake --cores 2 $(cat {targets}) --config spec={spec_out}" in out
    # the judging command names the same claim files (a spec without a claims list would
    # otherwise judge every shipped file)
    assert f"sparsebench claims {bench} {claims_path} --spec {spec_path} --looks 2" in out
    assert main(["claims", str(bench), str(claims_path), "--looks", "2"]) == 0
    page = (bench / "claims.md").read_text()
    assert "(at the 97.5% level)" in page and "97.5% interval" in page


def test_a_second_extension_is_a_third_look_and_the_folder_must_be_the_specs(run, capsys, tmp_path):
    import shutil

    from sparsebench.suite.cli import main

    spec_path, bench, claims_path, _ = run
    args = ["claims", str(bench), str(claims_path), "--spec", str(spec_path)]
    assert main([*args, "--extend-seeds", "2", "--looks", "2"]) == 0
    assert f"--spec {spec_path} --looks 3" in capsys.readouterr().out
    copy = tmp_path / "copy"
    shutil.copytree(bench, copy)
    with pytest.raises(SystemExit, match=r"copy is not results/b, where the spec"):
        main(["claims", str(copy), str(claims_path), "--spec", str(spec_path),
              "--extend-seeds", "2"])  # fmt: skip


def test_looks_below_one_names_the_flag(run):
    from sparsebench.suite.cli import main

    _, bench, claims_path, _ = run
    with pytest.raises(SystemExit, match=r"--looks: 0 is not allowed; 1 or more"):
        main(["claims", str(bench), str(claims_path), "--looks", "0"])


def test_nothing_to_extend_removes_an_earlier_target_list(run, claim_file, capsys):
    from sparsebench.suite.cli import main

    spec_path, bench, _, _ = run
    clear = {"kind": "order", "a": {"method": "snip"}, "b": {"method": "static"}, "op": ">"}
    decided = claim_file([one("snip-static", **clear)], name="decided.yaml")
    stale = bench / "extend-seeds.targets"
    stale.write_text("results/b/classification/runs/x/seed9/record.json\n")
    assert main(["claims", str(bench), str(decided), "--spec", str(spec_path),
                 "--extend-seeds", "2"]) == 0  # fmt: skip
    assert "nothing to extend" in capsys.readouterr().out and not stale.exists()

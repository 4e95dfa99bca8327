"""Claim files: every mistake is an error naming the file, the claim and what is allowed."""

import pytest
import yaml

from sparsebench.suite.claims import BUILTIN, ClaimError, load_file, load_files
from sparsebench.suite.spec import SpecError, validate

from .conftest import one

ORDER = {"kind": "order", "a": {"method": "rigl"}, "b": {"method": "set"}, "op": ">"}


def test_a_valid_file_merges_the_defaults(claim_file):
    path = claim_file([one(**ORDER, where={"target_sparsity": 0.9})], defaults={
        "pillar": "classification", "metric": "test_acc", "where": {"task": "t"}})  # fmt: skip
    (c,) = load_file(path)
    assert c.test["where"] == {"task": "t", "target_sparsity": 0.9}
    assert c.test["stat"] == "welch" and c.test["level"] == 0.95 and c.test["min_seeds"] == 2
    assert c.paper["key"] == "toy2026" and c.file == str(path)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"paper": {"key": "x", "authors": "a", "year": 1, "title": "t", "doi": "1"}},
         r"toy\.yaml: paper: unknown key 'doi'; allowed keys: authors, key, title, url, venue"),
        ({"claimz": []}, r"unknown key 'claimz'"),
    ],
)  # fmt: skip
def test_unknown_top_level_keys_are_named(claim_file, change, message):
    with pytest.raises(ClaimError, match=message):
        load_file(claim_file([one(**ORDER)], **change))


def test_unknown_key_in_a_test_names_the_claim(claim_file):
    path = claim_file([one("rigl-beats-set", **ORDER, metirc="test_acc")])
    with pytest.raises(ClaimError, match=r"claim 'rigl-beats-set': test: unknown key 'metirc'"):
        load_file(path)


def test_unknown_metric_lists_the_pillars_metrics(claim_file):
    path = claim_file([one(**ORDER, metric="accuracy")])
    with pytest.raises(ClaimError, match=r"unknown metric 'accuracy' .*its metrics: test_acc"):
        load_file(path)


def test_unknown_column_and_pillar(claim_file):
    with pytest.raises(ClaimError, match=r"unknown column 'methd' of pillar 'classification'"):
        load_file(claim_file([one(**{**ORDER, "a": {"methd": "rigl"}})]))
    with pytest.raises(ClaimError, match=r"unknown pillar 'classifcation'; registered"):
        load_file(claim_file([one(**ORDER, pillar="classifcation")]))


@pytest.mark.parametrize(
    ("test", "message"),
    [
        ({"kind": "order", "a": {}, "b": {}}, r"an? 'order' test needs 'op'"),
        ({"kind": "equal", "a": {}, "b": {}}, r"needs 'tol'"),
        ({**ORDER, "tol": 0.1}, r"'tol' does not apply to an 'order' test"),
        ({"kind": "value", "a": {}}, r"either op and bound, or within"),
        ({"kind": "value", "a": {}, "within": [2, 1]}, r"within: \[2, 1\] is empty"),
        ({"kind": "trend", "a": {}, "along": "seed", "direction": "constant"}, r"needs tol"),
        ({"kind": "ranking", "order": [{}]}, r"order: \[\{\}\] is too short"),
        ({"kind": "between", "a": {}}, r"value 'between' is not allowed; allowed: 'order'"),
        ({**ORDER, "op": ">="}, r"value '>=' is not allowed; allowed: '>', '<'"),
    ],
)
def test_malformed_statements_say_what_the_kind_takes(claim_file, test, message):
    with pytest.raises(ClaimError, match=message):
        load_file(claim_file([one(**test)]))


def test_a_method_typo_is_an_error_with_the_allowed_names(claim_file):
    path = claim_file([one("x", **{**ORDER, "a": {"method": "rigel"}})])
    with pytest.raises(ClaimError, match=r"claim 'x': unknown method 'rigel' of pillar "
                       r"'classification'; allowed: acdc.*; did you mean 'rigl'\?$"):  # fmt: skip
        load_file(path)
    refs = one("y", kind="order", pillar="merging", metric="norm_acc",
               a={"method": "zero_shot"}, b={"method": "ties"}, op=">")  # fmt: skip
    assert load_file(claim_file([refs]))[0].test["a"] == {"method": "zero_shot"}
    base = one("z", kind="value", pillar="kernels", metric="speedup_vs_dense",
               a={"backend": "dense_mask", "op": "forward"}, op=">", bound=1)  # fmt: skip
    assert load_file(claim_file([base]))
    with pytest.raises(ClaimError, match=r"unknown backend 'cuda_csr' of pillar 'kernels'"):
        load_file(claim_file([{**base, "test": {**base["test"], "a": {"backend": "cuda_csr"}}}]))


def test_the_pillars_extra_method_names_are_their_jobs_rows():
    from sparsebench.suite.pillar import get_pillar
    from sparsebench.suite.pillars.kernels.job import BASELINES
    from sparsebench.suite.pillars.merging.job import REFERENCES

    assert get_pillar("merging").extra_method_names == REFERENCES
    assert get_pillar("kernels").extra_method_names == BASELINES


def test_along_must_be_numeric(claim_file):
    trend = one(kind="trend", a={}, along="method", direction="increasing")
    with pytest.raises(ClaimError, match=r"along: 'method' is not a numeric column"):
        load_file(claim_file([trend]))


def test_empty_missing_and_non_mapping_files(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ClaimError, match=r"empty\.yaml: the claim file is empty"):
        load_file(tmp_path / "empty.yaml")
    with pytest.raises(ClaimError, match=r"nope\.yaml: claim file not found"):
        load_file(tmp_path / "nope.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ClaimError, match=r"a claim file is a YAML mapping, got list"):
        load_file(tmp_path / "list.yaml")


def test_ids_are_names_and_unique_across_files(claim_file):
    with pytest.raises(ClaimError, match=r"'RigL_90' is not a valid name"):
        load_file(claim_file([one("RigL_90", **ORDER)]))
    with pytest.raises(ClaimError, match=r"the id is used twice in this file"):
        load_file(claim_file([one("x", **ORDER), one("x", **ORDER)]))
    first = claim_file([one("x", **ORDER)], name="a.yaml")
    second = claim_file([one("x", **ORDER)], name="b.yaml")
    with pytest.raises(ClaimError, match=r"b\.yaml: claim 'x' is also in .*a\.yaml"):
        load_files([first, second])
    third = claim_file([one("x0", **ORDER)], name="c.yaml")
    fourth = claim_file([one("x-0", **ORDER)], name="d.yaml")
    with pytest.raises(ClaimError, match=r"same LaTeX macro names \(\\claimXZero\.\.\.\)"):
        load_files([third, fourth])


def test_a_spec_names_its_claim_files_and_they_are_checked(claim_file, tmp_path):
    recipe = {"epochs": 1, "batch_size": 64, "lr": 0.05}
    task = {"dataset": "digits", "model": "lenet300_100", "recipe": recipe}
    section = {"tasks": {"t": task}, "methods": {"static": {}, "dense": {}}, "sparsities": [0.9],
               "seeds": [0]}  # fmt: skip
    base = {"benchmark": "b", "classification": section}
    good = claim_file([one(**{**ORDER, "a": {"method": "static"}, "b": {"method": "dense"}})])
    assert validate({**base, "claims": [str(good)]}, "s.yaml").data["claims"] == [str(good)]
    with pytest.raises(SpecError, match=r"s\.yaml: claims: .*missing\.yaml: claim file not"):
        validate({**base, "claims": [str(tmp_path / "missing.yaml")]}, "s.yaml")
    colored = {**ORDER, "a": {"method": "colored"}, "b": {"method": "dense"}}
    hess = claim_file([one(**colored, pillar="hessian", metric="n_colors")], name="h.yaml")
    with pytest.raises(SpecError, match=r"addresses pillar 'hessian', which this spec does not"):
        validate({**base, "claims": [str(hess)]}, "s.yaml")


def test_every_shipped_claim_file_is_valid_and_the_reproduction_spec_lists_them_all():
    files = sorted(BUILTIN.glob("*.yaml"))
    claims = load_files(files)
    assert len({c.paper["key"] for c in claims}) == len(files) >= 10 and len(claims) >= 25
    from sparsebench.suite.spec import load

    spec = load(BUILTIN.parent / "suite" / "benchmarks" / "reproduce.yaml")
    assert sorted(spec.data["claims"]) == sorted(f"claims/{f.name}" for f in files)
    doc = (BUILTIN.parent / "docs" / "claims.md").read_text()
    assert [c.id for c in claims if f"`{c.id}`" not in doc] == []  # every claim documented


AT = {"kind": "order", "pillar": "sae", "metric": "fvu", "a": {"method": "batchtopk"},
      "b": {"method": "topk"}, "op": "<"}  # fmt: skip


def test_at_is_normalised_to_a_list_of_floats(claim_file):
    (c,) = load_file(claim_file([one(**AT, at={"l0": 8})]))
    assert c.test["at"] == {"l0": [8.0]}
    (c,) = load_file(claim_file([one(**AT, at={"l0": [4, 8, 16]})]))
    assert c.test["at"] == {"l0": [4.0, 8.0, 16.0]}


@pytest.mark.parametrize(
    ("at", "extra", "message"),
    [
        ({"nope": 8}, {}, r"toy\.yaml: claim 'c-1': at: 'nope' is an unknown column of pillar "
         r"'sae'; the metric is read at a value of a numeric column: .*l0"),
        ({"setting": 8}, {}, r"claim 'c-1': at: 'setting' is not a numeric column of pillar "
         r"'sae'; .*numeric column: .*d_in, dead_fraction"),
        ({"seed": 1}, {}, r"at: 'seed' is not a numeric column"),
        ({"fvu": 8}, {}, r"at: 'fvu' is the claim's metric"),
        ({"l0": 8}, {"where": {"l0": 8}}, r"at: 'l0' is also a filter"),
        ({"l0": [8, 8.0]}, {}, r"at: l0: \[8, 8\.0\] repeats a value"),
        ({"l0": 0}, {}, r"claim 'c-1': at: l0: 0 is not allowed; give a finite number > 0 or "
         r"a list of them"),
        ({"l0": float("inf")}, {}, r"claim 'c-1': test\.at\.l0: inf is not a finite number"),
        ({"l0": 8}, {"where": {"setting": "k=8"}}, r"at: a filter on 'setting' leaves one "
         r"setting, but at reads l0 across the sweep of settings; drop that filter"),
        ({"l0": [4, -1]}, {}, r"claim 'c-1': at: l0: -1 is not allowed"),
        ({"l0": "8"}, {}, r"claim 'c-1': test\.at\.l0: value '8' is invalid; expected a value "
         r"of type number; or"),
        ({"l0": True}, {}, r"test\.at\.l0: value True is invalid"),
        ({}, {}, r"test\.at: \{\} should be non-empty"),
        ({"l0": 8, "width": 128}, {}, r"test\.at: .* has too many properties"),
    ],
)  # fmt: skip
def test_bad_at_names_the_file_claim_key_and_what_is_allowed(claim_file, at, extra, message):
    with pytest.raises(ClaimError, match=message):
        load_file(claim_file([one(**AT, **extra, at=at)]))


def test_at_applies_to_cell_comparisons_not_to_trends(claim_file):
    trend = one(kind="trend", pillar="sae", metric="fvu", a={}, along="width",
                direction="increasing", at={"l0": 8})  # fmt: skip
    with pytest.raises(ClaimError, match=r"key 'at' does not apply to a 'trend' test"):
        load_file(claim_file([trend]))


def test_the_reproduction_spec_judges_on_seeds_no_board_spec_runs():
    """Claims are judged on seeds whose boards nobody could have read before registering them:
    every seed of reproduce.yaml's pillars is absent from that pillar in every other spec."""
    from sparsebench.suite.spec import load

    specs = BUILTIN.parent / "suite" / "benchmarks"
    claims_spec = load(specs / "reproduce.yaml").data
    seeded = [
        p for p, section in claims_spec.items() if isinstance(section, dict) and "seeds" in section
    ]
    assert {"classification", "merging", "sae"} <= set(seeded)
    for path in sorted(specs.glob("*.yaml")):
        if path.name == "reproduce.yaml":
            continue
        raw = yaml.safe_load(path.read_text())
        if not set(raw) & set(seeded):  # e.g. the GPU kernels specs, which load only on a GPU
            continue
        board = load(path).data  # with the schema's default seeds where a section names none
        for pillar in seeded:
            shared = set(board.get(pillar, {}).get("seeds", [])) & set(claims_spec[pillar]["seeds"])
            assert not shared, f"{path.name} runs {pillar} seeds {sorted(shared)}"


def test_at_refuses_an_axis_of_the_cell_id(claim_file):
    claim = one(kind="order", pillar="classification", metric="test_acc",
                a={"method": "magnitude_oneshot"}, b={"method": "random_oneshot"}, op=">",
                at={"target_sparsity": [0.9, 0.95]})  # fmt: skip
    with pytest.raises(ClaimError, match=r"at: 'target_sparsity' is an axis of pillar "
                       r"'classification''s cells .* where: \{target_sparsity: x\}"):  # fmt: skip
        load_file(claim_file([claim]))


def test_a_claim_that_can_address_no_cell_of_the_spec_is_refused(claim_file):
    recipe = {"epochs": 1, "batch_size": 64, "lr": 0.05}
    task = {"dataset": "digits", "model": "lenet300_100", "recipe": recipe}
    methods = {"dense": {}, "static": {}}
    section = {"tasks": {"t": task}, "methods": methods, "sparsities": [0.9], "seeds": [0]}
    base = {"benchmark": "b", "classification": section}
    order = {"kind": "order", "pillar": "classification", "metric": "test_acc", "op": ">"}
    fine = {**order, "a": {"method": "static", "target_sparsity": 0.9}, "b": {"method": "dense"}}
    validate({**base, "claims": [str(claim_file([one(**fine)], name="ok.yaml"))]}, "s.yaml")
    # a test-level where reaches the dense side too, whose cells sit at sparsity 0
    bad = {**order, "where": {"target_sparsity": 0.9}, "a": {"method": "static"},
           "b": {"method": "dense"}}  # fmt: skip
    path = claim_file([one(**bad)], name="bad.yaml")
    with pytest.raises(SpecError, match=r"bad\.yaml: claim 'c-1': no cell of this spec matches "
                       r"target_sparsity=0\.9, method=dense"):  # fmt: skip
        validate({**base, "claims": [str(path)]}, "s.yaml")

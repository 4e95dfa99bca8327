"""The suite-wide rules every spec value obeys, whichever pillar declares it (spec.harden and
registry.check_fields): names that can be folders and arguments, seeds in numpy's range,
integers that are ints, lists without repeats. Each case was once accepted and failed later
(at run time, in Snakemake's planning or in a board)."""

import copy

import pytest
import yaml

from sparsebench.suite.spec import (
    DEFAULT_SPEC,
    INT_BOUND,
    NAME_MAX_LEN,
    SEED_MAX,
    SpecError,
    _schema,
    load,
)

BASE = yaml.safe_load(DEFAULT_SPEC.read_text())


def _rename(section: dict, old: str, new: str) -> None:
    section[new] = section.pop(old)


def _case(mutate):
    d = copy.deepcopy(BASE)
    mutate(d)
    return d


CASES = {
    "seed 2**32": (
        lambda d: d["classification"].__setitem__("seeds", [2**32]),
        r"classification\.seeds\.0: 4294967296 is greater than the maximum of 4294967295",
    ),
    "seed 2**70 (merging)": (
        lambda d: d["merging"].__setitem__("seeds", [2**70]),
        r"merging\.seeds\.0: .* greater than the maximum of 4294967295",
    ),
    "seed 2**40 (hessian)": (
        lambda d: d["hessian"].__setitem__("seed", 2**40),
        r"hessian\.seed: 1099511627776 is greater",
    ),
    "integer past 2**53": (
        lambda d: d["kernels"].__setitem__("repeats", 2**60),
        r"kernels\.repeats: .* greater than the maximum",
    ),
    "300-character benchmark": (
        lambda d: d.__setitem__("benchmark", "b" * 300),
        r"benchmark: 'b+'\.\.\. is 300 characters long; at most 64",
    ),
    "300-character task": (
        lambda d: _rename(d["classification"]["tasks"], "mnist5k_lenet300", "t" * 300),
        r"classification\.tasks: 't+'\.\.\. is 300 characters long",
    ),
    "300-character source": (
        lambda d: _rename(d["sae"]["sources"], "lm_resid1", "s" * 300),
        r"sae\.sources: 's+'\.\.\. is 300 characters long",
    ),
    "task named -t": (
        lambda d: _rename(d["classification"]["tasks"], "mnist5k_lenet300", "-t"),
        r"classification\.tasks: name '-t' is not allowed; .*starting with a letter",
    ),
    "model named -t": (
        lambda d: _rename(d["merging"]["models"], "mlp", "-t"),
        r"merging\.models: name '-t' is not allowed",
    ),
    "model named .x": (
        lambda d: _rename(d["merging"]["models"], "mlp", ".x"),
        r"merging\.models: name '\.x' is not allowed",
    ),
    "repeated widths": (
        lambda d: d["sae"].__setitem__("widths", [32, 32]),
        r"sae\.widths: repeated values in \[32, 32\]",
    ),
    "repeated seeds": (
        lambda d: d["sae"].__setitem__("seeds", [0, 0]),
        r"sae\.seeds: repeated values in \[0, 0\]",
    ),
    "epochs 1.0": (
        lambda d: d["classification"]["tasks"]["mnist5k_lenet300"]["recipe"].__setitem__(
            "epochs", 1.0
        ),
        r"recipe\.epochs: expected integer, got 1\.0",
    ),
    "d_model 64.0": (
        lambda d: d["sae"]["sources"]["lm_resid1"]["model"].__setitem__("d_model", 64.0),
        r"sae\.sources\.lm_resid1\.model\.d_model: value 64\.0 \(float\); expected int",
    ),
    "steps '3'": (
        lambda d: d["sae"]["sources"]["lm_resid1"]["model"].__setitem__("steps", "3"),
        r"model\.steps: value '3' \(str\); expected int",
    ),
    "lm seed 2**40": (
        lambda d: d["sae"]["sources"]["lm_resid1"]["model"].__setitem__("seed", 2**40),
        r"model\.seed: 1099511627776 is outside \[0, 4294967295\]",
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_naming_the_file_and_the_key(tmp_path, name):
    mutate, message = CASES[name]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(_case(mutate)))
    with pytest.raises(SpecError, match=message) as err:
        load(path)
    assert str(err.value).startswith(f"{path}: ")


def test_the_rules_reach_every_pillar_section():
    """Every map of names, every integer and every list of plain values in the merged schema
    carries the rule (so a new pillar's fragment gets them without asking)."""
    seen = {"names": 0, "seeds": 0, "ints": 0, "lists": 0}

    def walk(node, key=""):
        if isinstance(node, list):
            for n in node:
                walk(n, key)
            return
        if not isinstance(node, dict):
            return
        if isinstance(node.get("propertyNames"), dict):
            assert node["propertyNames"]["maxLength"] <= NAME_MAX_LEN
            assert node["propertyNames"]["pattern"].startswith("^[A-Za-z0-9_]")
            seen["names"] += 1
        types = node.get("type") if isinstance(node.get("type"), list) else [node.get("type")]
        if "integer" in types:
            bound = SEED_MAX if key in ("seed", "seeds") else INT_BOUND
            assert node["maximum"] <= bound, (key, node)
            seen["seeds" if key in ("seed", "seeds") else "ints"] += 1
        items = node.get("items")
        if (
            "array" in types
            and isinstance(items, dict)
            and items.get("type") in ("integer", "number", "string")
            and node.get("minItems") != node.get("maxItems")
        ):
            assert node.get("uniqueItems") is True, (key, node)
            seen["lists"] += 1
        for k, v in node.items():
            if k == "properties":
                for name, sub in v.items():
                    walk(sub, name)
            elif k == "items":
                walk(v, key)
            elif k not in ("enum", "const", "default"):
                walk(v)

    walk(_schema())
    assert seen["names"] >= 4 and seen["seeds"] >= 5 and seen["ints"] > 10 and seen["lists"] > 5


def test_names_at_the_bounds_are_accepted(tmp_path):
    d = copy.deepcopy(BASE)
    d["benchmark"] = "b" * NAME_MAX_LEN
    _rename(d["merging"]["models"], "mlp", "_m.1-x")
    d["classification"]["seeds"] = [0, SEED_MAX]
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d))
    spec = load(path)
    assert spec.benchmark == "b" * NAME_MAX_LEN


def test_yaml_integers_read_as_yaml_1_2():
    import yaml

    from sparsebench.suite.spec import SpecLoader

    got = yaml.load("a: [064, 0o17, 0x1f, 1:00, -3, 010]", Loader=SpecLoader)  # noqa: S506
    assert got == {"a": [64, 15, 31, "1:00", -3, 10]}
    assert yaml.safe_load("a: 064") == {"a": 52}  # PyYAML's own loader is left as it was


EXTRA = {
    "integer key": (
        lambda d: d["classification"]["tasks"].__setitem__(
            -1, d["classification"]["tasks"].pop("mnist5k_lenet300")
        ),
        r"classification\.tasks: key -1 is a int, not text",
    ),
    "two sparsities, one cell": (
        lambda d: d["classification"].__setitem__("sparsities", [0.9, 0.9000000001]),
        r"classification: two values give the same cell",
    ),
    "trials 10**8": (
        lambda d: d["kernels"].__setitem__("trials", 10**8),
        r"kernels\.trials: 100000000 is greater than the maximum of 100",
    ),
    "a 10**8-point grid": (
        lambda d: d["merging"]["methods"].__setitem__(
            "adamerging_task",
            {
                "steps": list(range(1, 101)),
                "lr": [0.1 * i for i in range(1, 101)],
                "batch_size": list(range(1, 101)),
            },  # fmt: skip
        ),
        r"merging\.methods\.adamerging_task: the grid has 1000000 points",
    ),
    "a 3600-digit integer": (
        lambda d: d.__setitem__("threads", 16**3000),
        r"threads: an integer of about 3613 digits is not a finite number",
    ),
    "a list of 2000 seeds": (
        lambda d: d["sae"].__setitem__("seeds", list(range(2000))),
        r"sae\.seeds: .* is too long",
    ),
}
CASES.update(EXTRA)


@pytest.mark.parametrize("name", sorted(EXTRA))
def test_more_refusals(tmp_path, name):
    test_refused_naming_the_file_and_the_key(tmp_path, name)


def test_a_folder_or_a_pipe_as_the_spec_says_what_it_is(tmp_path):
    import os

    with pytest.raises(SpecError, match="a folder, not a spec file"):
        load(tmp_path)
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="not a regular file"):
        load(fifo)
    with pytest.raises(SpecError, match=r"spec file not found \(looked in "):
        load(tmp_path / "nope.yaml")

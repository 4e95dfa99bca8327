from pathlib import Path

import pytest
import yaml

from sparsebench.suite.spec import DEFAULT_SPEC, SpecError, load

BASE = {
    "benchmark": "t",
    "tasks": {
        "d": {
            "dataset": "digits",
            "model": "lenet300_100",
            "recipe": {"epochs": 1, "batch_size": 32, "lr": 0.1},
        }
    },
    "methods": {"dense": {}, "rigl": {"drop_fraction": [0.1, 0.3]}},
    "sparsities": [0.5, 0.9],
    "seeds": [0, 1],
}


def _write(tmp_path: Path, data, name="spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _with(**changes):
    import copy

    d = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = d
        *parents, last = dotted.split("__")
        for k in parents:
            node = node[k]
        node[last] = value
    return d


def test_default_spec_is_valid_and_expands():
    spec = load(DEFAULT_SPEC)
    jobs = spec.jobs()
    # 6 sparse methods x 4 sparsities x 3 seeds + dense x 3 seeds
    assert len(jobs) == 6 * 4 * 3 + 3
    assert len({j.record_path for j in jobs}) == len(jobs)


def test_grid_and_defaults(tmp_path):
    spec = load(_write(tmp_path, BASE))
    jobs = spec.jobs()
    assert len(jobs) == 2 + 2 * 2 * 2  # dense per seed; rigl 2 settings x 2 sparsities x 2 seeds
    assert spec.data["tasks"]["d"]["recipe"]["momentum"] == 0.9  # schema default filled in
    ids = {j.setting_id for j in jobs if j.method == "rigl"}
    assert len(ids) == 2 and "default" in ids  # drop_fraction 0.3 is RigL's default


@pytest.mark.parametrize(
    "data, expected",
    [
        (_with(bogus=1), ["(top level)", "unknown key 'bogus'", "allowed keys:", "benchmark"]),
        (_with(tasks__d__recipe__lrr=0.1), ["tasks.d.recipe", "unknown key 'lrr'", "epochs"]),
        (_with(methods={"rigl2": {}}), ["methods.rigl2", "unknown method 'rigl2'", "rigl, set"]),
        (
            _with(methods={"rigl": {"drop_frac": 0.1}}),
            ["methods.rigl", "unknown parameter 'drop_frac'", "drop_fraction"],
        ),
        (
            _with(methods={"rigl": {"update_interval": "often"}}),
            ["methods.rigl", "'often'", "expected int"],
        ),
        (_with(methods={"set": {"zeta": 2.0}}), ["methods.set", "zeta must be in (0, 1)"]),
        (_with(sparsities=[0.5, 1.0]), ["sparsities.1", "1.0", "maximum"]),
        (_with(sparsities=[-0.1]), ["sparsities.0", "-0.1"]),
        (_with(tasks__d__dataset="imagenet"), ["tasks.d.dataset", "'imagenet'", "mnist5k"]),
        (_with(tasks__d__model="vgg"), ["tasks.d.model", "'vgg'", "lenet300_100"]),
        (
            _with(tasks__d__recipe__optimizer="lion"),
            ["tasks.d.recipe.optimizer", "'lion'", "'sgd'"],
        ),
        (_with(tasks__d__recipe__epochs="ten"), ["tasks.d.recipe.epochs", "'ten'", "integer"]),
    ],
)
def test_spec_errors_name_file_key_value_and_allowed(tmp_path, data, expected):
    path = _write(tmp_path, data, "my_spec.yaml")
    with pytest.raises(SpecError) as e:
        load(path)
    msg = str(e.value)
    assert "my_spec.yaml" in msg
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_missing_file_and_bad_yaml(tmp_path):
    with pytest.raises(SpecError, match="spec file not found"):
        load(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("benchmark: [unclosed")
    with pytest.raises(SpecError, match="not valid YAML"):
        load(bad)

from pathlib import Path

import pytest
import yaml

from sparsebench.suite import paths
from sparsebench.suite.spec import DEFAULT_SPEC, SpecError, load

SECTION = {
    "tasks": {
        "d": {
            "dataset": "digits",
            "model": "lenet300_100",
            "recipe": {"epochs": 1, "batch_size": 32, "lr": 0.1},
        }
    },
    "methods": {"dense": {}, "rigl": {"drop_fraction": [0.1, 0.3], "update_interval": 5}},
    "sparsities": [0.5, 0.9],
    "seeds": [0, 1],
}
BASE = {"benchmark": "t", "classification": SECTION}


def _write(tmp_path: Path, data, name="spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(yaml.safe_dump(data))
    return p


def _with(top: bool = False, **changes):
    """BASE with ``a__b=value`` set inside the classification section (``top``: at top level)."""
    import copy

    d = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = d if top else d["classification"]
        *parents, last = dotted.split("__")
        for k in parents:
            node = node[k]
        node[last] = value
    return d


def test_default_spec_is_valid_and_expands():
    spec = load(DEFAULT_SPEC)
    assert spec.pillars == ("classification", "hessian", "kernels", "merging", "sae")
    cells = spec.cells("classification")
    # (6 sparse methods + a second SET setting) x 3 sparsities x 3 seeds + dense x 3 seeds
    assert len(cells) == 7 * 3 * 3 + 3
    every = spec.cells()
    # the hessian, kernels, merging (3 references + 5 methods, one seed) and SAE (5
    # architectures x 2 settings, one seed) slices
    assert len(every) == len(cells) + 16 + 2 + 8 + 5 * 2
    records = {paths.record(spec.benchmark, c.pillar, c.id) for c in every}
    assert len(records) == len(every)


def test_grid_and_defaults(tmp_path):
    spec = load(_write(tmp_path, BASE))
    cells = spec.cells("classification")
    assert len(cells) == 2 + 2 * 2 * 2  # dense per seed; rigl 2 settings x 2 sparsities x 2 seeds
    assert spec.data["classification"]["tasks"]["d"]["recipe"]["momentum"] == 0.9  # default
    labels = {c.setting_id: c for c in cells if c.method == "rigl"}
    assert len(labels) == 2 and "default" not in labels  # update_interval 5 is not the default


@pytest.mark.parametrize(
    "data, expected",
    [
        (
            _with(top=True, bogus=1),
            ["(top level)", "unknown key 'bogus'", "allowed keys:", "benchmark"],
        ),
        (_with(tasks__d__recipe__lrr=0.1), ["tasks.d.recipe", "unknown key 'lrr'", "epochs"]),
        (
            _with(methods={"rigl2": {}}),
            ["methods.rigl2", "unknown method 'rigl2'", "rigl, serene, set"],
        ),
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
        (_with(execution="values_only"), ["execution", "'values_only'", "'sparse'"]),
        (_with(execution="semi_structured"), ["execution", "'semi_structured'", "'dense_mask'"]),
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


def test_yaml_12_floats_are_numbers_and_duplicate_keys_are_refused(tmp_path):
    text = yaml.safe_dump(BASE).replace("lr: 0.1", "lr: 1e-3")
    assert "lr: 1e-3" in text
    spec = load(_write_text(tmp_path, text))
    assert spec.data["classification"]["tasks"]["d"]["recipe"]["lr"] == 0.001
    dup = text + "benchmark: again\n"
    with pytest.raises(SpecError, match="duplicate key 'benchmark'"):
        load(_write_text(tmp_path, dup))


def _write_text(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "t.yaml"
    p.write_text(text)
    return p


@pytest.mark.parametrize(
    "data, expected",
    [
        (_with(methods={"set": {"zeta": []}}), ["methods.set.zeta", "empty list"]),
        (_with(methods={"set": {"zeta": [0.1, 0.1]}}), ["methods.set.zeta", "repeated values"]),
        (_with(methods={"set": {"zeta": [0.3, None]}}), ["methods.set", "zeta"]),
        (_with(sparsities=[0.9, 0.9]), ["sparsities", "repeated values"]),
        (_with(methods=None), ["methods", "expected object, got nothing (empty)"]),
        # Pre-flight checks: would otherwise fail only when the job runs.
        (_with(tasks__d__model="lenet5"), ["tasks.d.model", "lenet5 needs H, W >= 16"]),
        (_with(tasks__d__dataset="mnist"), ["tasks.d.dataset", "not found", "allow_download"]),
        (
            _with(methods={"rigl": {"update_interval": 100}}),
            ["methods.rigl", "tasks.d", "no mask update would happen", "update_interval = 100"],
        ),
        (
            _with(methods={"gmp": {"pruning_frequency": 100}}),
            ["methods.gmp", "tasks.d", "0 pruning steps", "MIN_PRUNING_STEPS = 10"],
        ),
    ],
)
def test_grid_and_preflight_errors(tmp_path, data, expected):
    with pytest.raises(SpecError) as e:
        load(_write(tmp_path, data, "my_spec.yaml"))
    msg = str(e.value)
    assert "my_spec.yaml" in msg
    for part in expected:
        assert part in msg, f"{part!r} not in {msg!r}"


def test_empty_spec_file(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("")
    with pytest.raises(SpecError, match="the spec is empty"):
        load(p)


def test_execution_backend_must_run_here(tmp_path, monkeypatch):
    """A GPU backend on a machine without a GPU is valid (its cells ask for one, and the run's
    start asks the machines that run the jobs: a cluster's submitting machine has none); on a
    machine with a GPU the backend's own check runs at once."""
    import torch

    from sparsebench.kernels.backends import triton_csr

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = load(_write(tmp_path, _with(execution="triton")))
    assert spec.data["classification"]["execution"] == "triton"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(triton_csr, "_triton_installed", lambda: False)
    with pytest.raises(SpecError, match="backend 'triton' cannot run here: triton is not inst"):
        load(_write(tmp_path, _with(execution="triton")))
    spec = load(_write(tmp_path, _with(execution="cpu")))
    assert spec.data["classification"]["execution"] == "cpu"


def test_the_old_top_level_shape_is_refused_with_the_new_one(tmp_path):
    old = {"benchmark": "t", **SECTION}
    with pytest.raises(SpecError) as e:
        load(_write(tmp_path, old, "old.yaml"))
    msg = str(e.value)
    # the keys in the file's order (safe_dump sorts them)
    assert msg.startswith(f"{tmp_path / 'old.yaml'}: methods, seeds, sparsities, tasks: ")
    assert "belong to the `classification:` section" in msg
    shown = yaml.safe_load(msg.split("move them under it:\n", 1)[1])
    assert shown == {"classification": SECTION}  # the new shape, ready to paste


def test_claim_files_are_found_beside_the_spec_and_for_embedded_specs_in_the_checkout(
    tmp_path, monkeypatch
):
    from sparsebench.suite.spec import BENCHMARKS_DIR, load

    monkeypatch.chdir(tmp_path)  # not the checkout: claims/... is not here
    spec = load(BENCHMARKS_DIR / "reproduce.yaml")
    files = spec.claim_files()
    assert files and all(Path(f).is_file() for f in files)
    assert all(Path(f).parent == BENCHMARKS_DIR.parents[1] / "claims" for f in files)
    # a user's spec: a relative claim file beside it is found from another folder
    own = tmp_path / "specs"
    own.mkdir()
    (own / "mine.yaml").write_text(
        "paper: {key: p, authors: A, year: 2026, title: T}\ndefaults: {pillar: classification, "
        "metric: test_acc}\nclaims:\n  - id: x\n    statement: s\n    source: {where: w, setting: "
        "s}\n    why: w\n    test: {kind: order, a: {method: static}, b: {method: dense}, "
        "op: '>'}\n"
    )
    (own / "s.yaml").write_text(
        "benchmark: b\nclaims: [mine.yaml]\nclassification:\n  tasks:\n    t: {dataset: digits, "
        "model: lenet300_100, recipe: {epochs: 1, batch_size: 64, lr: 0.05}}\n"
        "  methods: {dense: {}, static: {}}\n"
        "  sparsities: [0.9]\n  seeds: [0]\n"
    )
    assert load(own / "s.yaml").claim_files() == [str(own / "mine.yaml")]


def test_a_top_level_init_is_told_to_move_under_its_section(tmp_path):
    spec = {"benchmark": "t", "init": "swi", "classification": SECTION}
    with pytest.raises(SpecError, match=r"init: these keys belong to the `classification:` sec"):
        load(_write(tmp_path, spec, "init.yaml"))

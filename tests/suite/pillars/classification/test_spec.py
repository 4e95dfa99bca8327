"""The classification section's keys: the shared `distribution`, per-task `methods`, and
CNN-only methods on an MLP."""

import copy
import json

import pytest
import yaml

from sparsebench.suite.pillar import get_pillar
from sparsebench.suite.spec import SpecError, load

BASE = {
    "benchmark": "t",
    "tasks": {
        "mlp": {"dataset": "digits", "model": "lenet300_100",
                "recipe": {"epochs": 2, "batch_size": 32, "lr": 0.1}},
        "cnn": {"dataset": "digits", "model": "lenet5",
                "recipe": {"epochs": 2, "batch_size": 32, "lr": 0.1}},
    },
    "methods": {"dense": {}, "static": {}, "snip": {}},
    "sparsities": [0.9],
    "seeds": [0],
}  # fmt: skip


def _load(tmp_path, data):
    """Write ``data`` (benchmark + the section's keys, flat for brevity) as a spec."""
    section = {k: v for k, v in data.items() if k != "benchmark"}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({"benchmark": data["benchmark"], "classification": section}))
    return load(path)


def _digits_cnn(data):
    # digits are 8x8: LeNet-5 needs 16x16, so the CNN task runs on mnist5k
    data["tasks"]["cnn"]["dataset"] = "mnist5k"
    return data


def test_shared_distribution_fills_every_method_that_has_one(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["distribution"] = "uniform"
    data["methods"]["snip"] = {"distribution": "global"}  # a method's own value wins
    cells = get_pillar("classification").cells(_load(tmp_path, data))
    params = {c.method: json.loads(c.params_json) for c in cells}
    assert params["static"]["distribution"] == "uniform"
    assert params["snip"]["distribution"] == "global"
    assert "distribution" not in params["dense"]


def test_shared_init_fills_every_method_and_absent_keeps_their_own(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["methods"]["cht"] = {"update_interval": 1}
    data["tasks"]["mlp"]["methods"] = ["dense", "static", "snip", "cht"]
    cells = get_pillar("classification").cells(_load(tmp_path, data))
    params = {c.method: json.loads(c.params_json) for c in cells}
    assert params["static"]["init"] == "default" and params["cht"]["init"] == "swi"
    data["init"] = "scaled"
    data["methods"]["snip"] = {"init": ["default", "swi"]}  # a method's own value wins
    cells = get_pillar("classification").cells(_load(tmp_path, data))
    inits = {(c.method, json.loads(c.params_json)["init"]) for c in cells if c.method != "dense"}
    assert inits == {("static", "scaled"), ("cht", "scaled"), ("snip", "default"), ("snip", "swi")}
    data["init"] = "xavier"
    with pytest.raises(SpecError, match="init"):
        _load(tmp_path, data)


def test_a_dst_method_refuses_a_global_distribution(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["distribution"] = "global"
    with pytest.raises(
        SpecError, match=r"methods.static \(with the section's distribution: 'global'.*'erk'"
    ):
        _load(tmp_path, data)


def test_cnn_only_method_on_an_mlp_is_refused_and_a_task_filter_allows_it(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["methods"]["cht_channel"] = {}
    with pytest.raises(
        SpecError, match=r"methods.cht_channel .* on classification.tasks.mlp: cht_channel needs"
    ):
        _load(tmp_path, data)
    data["tasks"]["mlp"]["methods"] = ["dense", "static", "snip"]
    cells = get_pillar("classification").cells(_load(tmp_path, data))
    assert {(c.columns["task"], c.method) for c in cells if c.method == "cht_channel"} == {
        ("cnn", "cht_channel")
    }
    assert sum(c.columns["task"] == "mlp" for c in cells) == 3
    data["tasks"]["mlp"]["methods"] = ["dense", "rigel"]
    with pytest.raises(SpecError, match=r"tasks.mlp.methods: 'rigel' not in the section's"):
        _load(tmp_path, data)


def test_a_method_typo_is_named_before_a_task_list_mentions_it(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["methods"]["rgil"] = {}
    data["tasks"]["mlp"]["methods"] = ["dense", "rigl"]
    with pytest.raises(SpecError, match=r"methods.rgil: unknown method 'rgil'"):
        _load(tmp_path, data)


def test_granet_target_denser_than_its_start_is_refused_at_validation(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["methods"] = {"granet": {}}  # initial_density 0.5: it only prunes from there
    data["sparsities"] = [0.3, 0.9]
    with pytest.raises(SpecError, match=r"methods.granet .*sparsity 0.3.* initial_density = 0.5"):
        _load(tmp_path, data)
    data["sparsities"] = [0.9]
    assert _load(tmp_path, data)


def test_an_init_that_a_dense_start_makes_a_no_op_is_refused(tmp_path):
    # The init rule acts once, on the layers masked at fit start: AC/DC, GMP, one-shot
    # magnitude pruning and GraNet from density 1.0 have none there.
    data = _digits_cnn(copy.deepcopy(BASE))
    data["tasks"] = {"mlp": data["tasks"]["mlp"]}
    dense_starts = {
        "acdc": {},
        "arc_acdc": {},
        "gmp": {},
        "magnitude_oneshot": {},
        "granet": {"initial_density": 1.0},
    }
    for method, params in dense_starts.items():
        data["methods"] = {method: {**params, "init": "swi"}}
        with pytest.raises(SpecError, match=rf"methods.{method}: .*init = 'swi' changes nothing"):
            _load(tmp_path, data)
        data["methods"] = {method: params}  # the section's init fills it: refused too
        data["init"] = "scaled"
        with pytest.raises(SpecError, match=r"section's init: 'scaled'.*set this method's own"):
            _load(tmp_path, data)
        data["methods"] = {method: {**params, "init": "default"}, "static": {}}
        assert _load(tmp_path, data)  # its own default wins; static takes the section's
        del data["init"]
    # a sparse start takes any init
    data["methods"] = {"arc": {"init": "swi"}, "granet": {"init": "swi"}, "snip": {"init": "swi"}}
    assert _load(tmp_path, data)


def test_a_section_init_or_distribution_that_fills_no_method_is_refused(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["methods"] = {"dense": {}}  # dense has no parameters
    for key, value in (("init", "swi"), ("distribution", "uniform")):
        data[key] = value
        with pytest.raises(SpecError, match=rf"classification.{key}: '{value}' applies to none"):
            _load(tmp_path, data)
        del data[key]
    data["init"] = "swi"
    data["methods"]["static"] = {}
    assert _load(tmp_path, data)


def test_a_haste_head_the_output_budget_cannot_pay_is_refused_at_validation(tmp_path):
    data = {"benchmark": "t", "sparsities": [0.98],
            "tasks": {"skew": {"dataset": "skew300", "model": "lenet300_100",
                               "recipe": {"epochs": 3, "batch_size": 64, "lr": 0.05}}},
            "methods": {"haste": {"dense_head": 60}}}  # fmt: skip
    # ERK at 98 %: fc3 (300 x 100) gets 544 nonzeros, fewer than 60 dense rows of 100
    with pytest.raises(SpecError, match=r"methods.haste \(setting dense_head=60\).*fc3.*544"):
        _load(tmp_path, data)
    data["methods"]["haste"] = {}
    assert _load(tmp_path, data)


def test_nm_methods_run_at_their_patterns_sparsity_whatever_the_list(tmp_path):
    data = copy.deepcopy(BASE)
    del data["tasks"]["cnn"]
    data["methods"] = {
        "static": {},
        "sr_ste": {"pattern": ["2:4", "1:4"]},
        "nm_magnitude": {"pattern": "4:8"},
    }
    data["sparsities"] = [0.9, 0.95]
    cells = get_pillar("classification").cells(_load(tmp_path, data))
    got = sorted({(c.method, c.setting_id, c.columns["target_sparsity"]) for c in cells})
    assert [(m, s) for m, _, s in got] == [
        ("nm_magnitude", 0.5), ("sr_ste", 0.5), ("sr_ste", 0.75), ("static", 0.9), ("static", 0.95)
    ]  # fmt: skip


# sr_ste trains dense weights behind its masks, serene hooks the layer modules: a kernel
# backend would replace both
@pytest.mark.parametrize("method", ["sr_ste", "serene"])
def test_a_method_that_needs_the_dense_layers_needs_dense_mask_execution(tmp_path, method):
    data = copy.deepcopy(BASE)
    del data["tasks"]["cnn"]
    data["methods"] = {method: {}}
    data["execution"] = "torch_csr"
    with pytest.raises(SpecError, match=rf"execution: 'torch_csr' cannot run {method}.*dense_mask"):
        _load(tmp_path, data)


@pytest.mark.parametrize(
    ("recipe", "match"),
    [
        ({"momentum": 0.0, "nesterov": True}, r"recipe\.nesterov: true needs momentum > 0"),
        ({"optimizer": "adamw", "nesterov": True}, r"recipe\.nesterov: .*SGD only.*adamw"),
    ],
)
def test_nesterov_is_checked_at_validation(tmp_path, recipe, match):
    data = copy.deepcopy(BASE)
    del data["tasks"]["cnn"]
    task = next(iter(data["tasks"].values()))
    task["recipe"] = {**task["recipe"], **recipe}
    with pytest.raises(SpecError, match=match):
        _load(tmp_path, data)


def test_a_sparsity_that_prints_as_one_is_refused(tmp_path):
    data = _digits_cnn(copy.deepcopy(BASE))
    data["sparsities"] = [0.9999999]
    with pytest.raises(SpecError, match=r"sparsities: 0.9999999 prints as 1 \(100 %\)"):
        _load(tmp_path, data)
    data["sparsities"] = [0.99999]
    assert {c.columns["target_sparsity"] for c in _load(tmp_path, data).cells("classification")
            if c.method != "dense"} == {0.99999}  # fmt: skip

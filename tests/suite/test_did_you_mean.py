"""Every lookup of a user-typed name suggests the closest known one ("; did you mean 'x'?")
and none when nothing is close: spec keys and values, method names and parameters, pillars."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import pytest

from sparsebench.suite import registry
from sparsebench.suite.catalog import closest, did_you_mean
from sparsebench.suite.pillar import PillarError, families_of, get_pillar
from sparsebench.suite.schema_errors import first_error, format_error
from sparsebench.suite.spec import SpecError, validate

from .test_spec import BASE  # a classification section with methods dense and rigl


def _error(data: dict) -> str:
    with pytest.raises(SpecError) as e:
        validate(data, "s.yaml")
    return str(e.value)


def test_the_shared_helpers():
    assert closest("mnsit", ["mnist", "digits"]) == "mnist"
    assert closest("zzz", ["mnist", "digits"]) is None
    # case-blind: a capitalised name is its own choice, not a neighbour
    assert closest("AdamW", ["sgd", "adam", "adamw"]) == "adamw"
    assert closest("SGD", ["sgd", "adam", "adamw"]) == "sgd"
    assert did_you_mean("lamda", ["lam", "beta"]) == "; did you mean 'lam'?"
    assert did_you_mean("zzz", ["lam", "beta"]) == ""
    assert did_you_mean(3, []) == ""


def test_a_mistyped_top_level_key_suggests_the_section():
    data = {"benchmark": "t", "clasification": BASE["classification"]}
    msg = _error(data)
    assert msg.startswith("s.yaml: (top level): unknown key 'clasification'; allowed keys: ")
    assert ", classification, " in msg and msg.endswith("; did you mean 'classification'?")
    assert not _error({**BASE, "zzqqx": 1}).endswith("?")


def test_a_mistyped_method_in_a_section_suggests_a_registered_one():
    data = copy.deepcopy(BASE)
    data["classification"]["methods"]["rigll"] = {}
    msg = _error(data)
    assert msg.startswith("s.yaml: classification.methods.rigll: unknown method 'rigll'; ")
    assert msg.endswith("; did you mean 'rigl'?")
    data["classification"]["methods"] = {"qqqqzz": {}}
    assert "did you mean" not in _error(data)


def test_a_task_methods_entry_suggests_the_sections_method():
    data = copy.deepcopy(BASE)
    data["classification"]["tasks"]["d"]["methods"] = ["rigel"]
    assert _error(data) == (
        "s.yaml: classification.tasks.d.methods: 'rigel' not in the section's `methods`; "
        "allowed: dense, rigl; did you mean 'rigl'?"
    )
    data["classification"]["tasks"]["d"]["methods"] = ["qqqqzz"]
    assert _error(data) == (
        "s.yaml: classification.tasks.d.methods: 'qqqqzz' not in the section's `methods`; "
        "allowed: dense, rigl"
    )


def test_a_mistyped_parameter_suggests_the_methods_parameter():
    data = copy.deepcopy(BASE)
    data["classification"]["methods"]["rigl"] = {"drop_fractoin": 0.3}
    msg = _error(data)
    assert "unknown parameter 'drop_fractoin' for method 'rigl'; allowed: " in msg
    assert msg.endswith("; did you mean 'drop_fraction'?")
    data["classification"]["methods"]["rigl"] = {"qqqqzz": 0.3}
    assert "did you mean" not in _error(data)


@pytest.mark.parametrize(
    ("section", "key", "typo", "far", "hint"),
    [
        ("hessian", "methods", ["colord"], ["qqqqzz"], "; did you mean 'colored'?"),
        ("hessian", "chunk", "aut", "qqqqzz", "; did you mean 'auto'?"),
        ("kernels", "backends", ["torch_cssr"], ["qqqqzz"], "; did you mean 'torch_csr'?"),
        ("merging", "methods", {"ties_merg": {}}, {"qqqqzz": {}}, "; did you mean 'ties'?"),
        ("sae", "methods", {"topkk": {}}, {"qqqqzz": {}}, "; did you mean 'topk'?"),
        ("classification", "execution", "cpuu", "qqqqzz", "; did you mean 'cpu'?"),
    ],
)
def test_schema_enums_of_every_pillar_suggest_the_closest_value(section, key, typo, far, hint):
    from sparsebench.suite.pillar import all_pillars

    data = {"benchmark": "t", **all_pillars()[section].example()}
    data[section][key] = typo
    msg = _error(data)
    assert msg.startswith(f"s.yaml: {section}.{key}") and msg.endswith(hint)
    data[section][key] = far
    assert "did you mean" not in _error(data)


SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "mode": {"enum": ["fast", "slow", 3]},
        "chunk": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
        "alpha": {},
        "beta": {},
    },
}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"mode": "fats"},
         "f.yaml: mode: value 'fats' is not allowed; allowed: 'fast', 'slow', 3; "
         "did you mean 'fast'?"),
        ({"mode": "quick"},
         "f.yaml: mode: value 'quick' is not allowed; allowed: 'fast', 'slow', 3"),
        ({"mode": 4}, "f.yaml: mode: value 4 is not allowed; allowed: 'fast', 'slow', 3"),
        ({"chunk": "atuo"},
         "f.yaml: chunk: value 'atuo' is invalid; expected a value of type integer >= 1; or "
         "'auto'; did you mean 'auto'?"),
        ({"alpah": 1},
         "f.yaml: (top level): unknown key 'alpah'; allowed keys: alpha, beta, chunk, mode; "
         "did you mean 'alpha'?"),
        ({"alpah": 1, "bta": 2, "zzz": 3},
         "f.yaml: (top level): unknown key 'alpah', 'bta', 'zzz'; allowed keys: alpha, beta, "
         "chunk, mode; did you mean 'alpha' for 'alpah', 'beta' for 'bta'?"),
        ({"zzz": 3},
         "f.yaml: (top level): unknown key 'zzz'; allowed keys: alpha, beta, chunk, mode"),
    ],
)  # fmt: skip
def test_schema_errors_suggest_the_closest_key_or_value(data, message):
    err = first_error(SCHEMA, data)
    assert err is not None
    assert format_error(err, "f.yaml", schema=SCHEMA) == message


@dataclass
class _Config:
    width: int = 1
    depth: int = 2


def test_registry_lookups_suggest():
    with pytest.raises(registry.RegistryError) as e:
        registry.get_method("sett", ["dst"])
    assert str(e.value).startswith("unknown method 'sett'; registered methods: [")
    assert str(e.value).endswith("]; did you mean 'set'?")
    with pytest.raises(registry.RegistryError) as e:
        registry.get_method("qqqqzz", ["dst"])
    assert str(e.value).endswith("]")
    with pytest.raises(registry.RegistryError) as e:
        registry.check_fields(_Config, {"widht": 3}, "model.")
    assert str(e.value) == "model.widht: unknown key; allowed: width, depth; did you mean 'width'?"
    with pytest.raises(registry.RegistryError) as e:
        registry.check_fields(_Config, {"qqqq": 3}, "model.")
    assert str(e.value) == "model.qqqq: unknown key; allowed: width, depth"
    info = registry.get_method("set", ["dst"])
    with pytest.raises(registry.RegistryError) as e:
        registry.build_params(info, {"update_intervall": 5}, "s.yaml: methods.set")
    assert str(e.value).startswith(
        "s.yaml: methods.set: unknown parameter 'update_intervall' for method 'set'; allowed: "
    )
    assert str(e.value).endswith("; did you mean 'update_interval'?")
    with pytest.raises(registry.RegistryError) as e:
        registry.build_params(info, {"qqqqzz": 5})
    assert "did you mean" not in str(e.value)


def test_pillar_and_family_lookups_suggest():
    # other tests may register more pillars (after sae): the messages list them too
    with pytest.raises(PillarError) as e:
        get_pillar("hesian")
    msg = str(e.value)
    assert msg.startswith(
        "unknown pillar 'hesian'; registered pillars: classification, hessian, kernels, merging, "
        "sae"
    )
    assert msg.endswith("; did you mean 'hessian'?")
    with pytest.raises(PillarError) as e:
        get_pillar("qqqqzz")
    assert "did you mean" not in str(e.value)
    assert families_of("classification") == ("dst", "pruning")
    assert families_of("pruning") == ("pruning",)
    with pytest.raises(PillarError) as e:
        families_of("prunnig")
    msg = str(e.value)
    assert msg.startswith(
        "unknown pillar or family 'prunnig'; pillars: classification, hessian, kernels, "
        "merging, sae"
    )
    assert "; families: dst, hessian, kernels, lm_pruning, merging, pruning, sae" in msg
    assert msg.endswith("; did you mean 'pruning'?")
    with pytest.raises(PillarError) as e:
        families_of("qqqqzz")
    assert "did you mean" not in str(e.value)


def test_a_mistyped_potential_parameter_suggests_the_potentials_parameter():
    from sparsebench.suite.pillar import all_pillars

    data = {"benchmark": "t", **all_pillars()["hessian"].example()}
    data["hessian"]["potentials"] = {"pair": {"cutof": 3.0}}
    assert _error(data) == (
        "s.yaml: hessian.potentials.pair: cutof: unknown key; allowed: D, a, r0, cutoff, skin, "
        "p; did you mean 'cutoff'?"
    )
    data["hessian"]["potentials"] = {"pair": {"qqqqzz": 3.0}}
    assert "did you mean" not in _error(data)

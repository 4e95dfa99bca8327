"""The merging family as the registry sees it: names, board order, parameters, sources."""

import dataclasses
import typing

import pytest
import torch

from sparsebench.methods.merging.base import MergeInputs
from sparsebench.suite import registry

ORDER = [
    "averaging",
    "task_arithmetic",
    "ties",
    "dare_ta",
    "dare_ties",
    "fisher",
    "regmean",
    "adamerging_task",
    "adamerging_layer",
    "tall_masks",
    "consensus",
    "cass",
    "cass_tuning",
]


def test_listing_order_is_by_name():
    assert list(registry.all_methods(("merging",))) == sorted(ORDER)


@pytest.mark.parametrize("name", ORDER)
def test_params_defaults_sources_and_search(name):
    info = registry.all_methods(("merging",))[name]
    assert info.source, f"{name}: no 'Source:' line"
    fields = {f.name for f in dataclasses.fields(info.params_cls)}
    hosts = [{}]
    if "host" in fields:
        hosts = [
            {"host": h} for h in typing.get_args(typing.get_type_hints(info.params_cls)["host"])
        ]
    for raw in hosts:
        params = registry.build_params(info, raw)
        search = info.cls.grid_for(params)
        if not raw or raw["host"] == "task_arithmetic":  # the class-level grids: default host
            assert search == info.cls.search, name
        for f in fields:  # a field left None is searched by the pillar: it needs a grid
            if getattr(params, f) is None:
                assert search.get(f), (name, raw, f)
        for field, grid in search.items():
            assert field in fields, (name, field)
            for value in grid:  # every candidate is accepted by validate()
                registry.build_params(info, {**raw, field: value})


def test_build_params_rejects_bad_values():
    info = registry.all_methods(("merging",))
    with pytest.raises(registry.RegistryError):
        registry.build_params(info["ties"], {"k": 0.0})
    with pytest.raises(registry.RegistryError):
        registry.build_params(info["dare_ta"], {"p": 1.0})
    with pytest.raises(registry.RegistryError):
        registry.build_params(info["tall_masks"], {"lam": "test"})
    with pytest.raises(registry.RegistryError):
        registry.build_params(info["cass"], {"host": "fisher"})


def test_merge_inputs_refuse_mismatched_experts_with_the_reason():
    base = {"a": torch.zeros(2), "b": torch.zeros(3)}
    with pytest.raises(ValueError, match="^merging needs at least one expert$"):
        MergeInputs(base, [])
    keys = [f"k{i}" for i in range(7)]
    with pytest.raises(ValueError, match=r"^expert 0 has other parameters than the base: "
                       r"\['b', 'k0', 'k1', 'k2', 'k3'\]$"):  # fmt: skip
        MergeInputs(base, [{"a": torch.zeros(2), **{k: torch.zeros(1) for k in keys}}])
    with pytest.raises(ValueError, match=r"^expert 1: b has shape \(4,\), the base \(3,\)$"):
        MergeInputs(base, [base, {"a": torch.zeros(2), "b": torch.zeros(4)}])
    with pytest.raises(ValueError, match="^1 task names for 2 experts$"):
        MergeInputs(base, [base, base], tasks=["t"])
    with pytest.raises(ValueError, match="^artefact 'fisher': 1 files for 2 experts$"):
        MergeInputs(base, [base, base], artefacts={"fisher": [base]})
    ok = MergeInputs(base, [base, base], tasks=["t", "u"], artefacts={"fisher": [base, base]})
    assert ok.artefact("fisher")[1] is base
    with pytest.raises(ValueError, match=r"artefact 'gram'.*the inputs hold: fisher$"):
        ok.artefact("gram")
    with pytest.raises(ValueError, match="the inputs hold: none$"):
        MergeInputs(base, [base]).artefact("gram")

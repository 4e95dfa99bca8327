"""The one JSON Schema error formatter (spec and claim files): each kind of error in words."""

from __future__ import annotations

import pytest

from sparsebench.suite.schema_errors import describe_schema, first_error, format_error, keypath

SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["name"],
    "$defs": {"scalar": {"type": ["string", "number", "boolean"]}},
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z]+$"},
        "size": {"type": "integer", "minimum": 1},
        "mode": {"enum": ["fast", "slow"]},
        "tags": {"type": "array", "uniqueItems": True},
        "chunk": {"oneOf": [{"type": "integer", "minimum": 1}, {"const": "auto"}]},
        "where": {
            "type": "object",
            "additionalProperties": {
                "anyOf": [{"$ref": "#/$defs/scalar"}, {"type": "array"}],
            },
        },
        "inner": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"a": {}, "b": {}},
        },
    },
}


def _message(data, **kw) -> str:
    err = first_error(SCHEMA, data)
    assert err is not None
    return format_error(err, "f.yaml", schema=SCHEMA, **kw)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"name": "x", "inner": {"a": 1, "zz": 2, "c": 3}},
         "f.yaml: inner: unknown key 'c', 'zz'; allowed keys: a, b"),
        ({}, "f.yaml: (top level): 'name' is a required property"),
        ({"name": 3}, "f.yaml: name: expected string, got 3"),
        ({"name": "x", "tags": None}, "f.yaml: tags: expected array, got nothing (empty)"),
        ({"name": "x", "tags": [1, 1]},
         "f.yaml: tags: repeated values in [1, 1]; list each value once"),
        ({"name": "x", "mode": "warp"},
         "f.yaml: mode: value 'warp' is not allowed; allowed: 'fast', 'slow'"),
        ({"name": "Xy"}, "f.yaml: name: value 'Xy' does not match '^[a-z]+$'"),
        ({"name": "x", "chunk": 0},
         "f.yaml: chunk: value 0 is invalid; expected a value of type integer >= 1; or 'auto'"),
        ({"name": "x", "where": {"k": None}},
         "f.yaml: where.k: value None is invalid; expected a value of type string, number or "
         "boolean; or a value of type array"),
        ({"name": "x", "size": 0}, "f.yaml: size: 0 is less than the minimum of 1"),
    ],
)  # fmt: skip
def test_each_kind_of_error_in_words(data, message):
    assert _message(data) == message


def test_the_caller_names_the_place_and_says_what_a_pattern_means():
    msg = _message({"name": "Xy"}, where="claim 'c': name", pattern="{value!r} is not lower-case")
    assert msg == "f.yaml: claim 'c': name: 'Xy' is not lower-case"


def test_the_shallowest_error_comes_first():
    err = first_error(SCHEMA, {"inner": {"zz": 1}, "size": "big"})  # name missing at the top
    assert err is not None and err.validator == "required"
    err = first_error(SCHEMA, {"name": "x", "size": "big", "mode": "warp"})  # same depth: by key
    assert err is not None and list(err.absolute_path) == ["mode"]
    assert first_error(SCHEMA, {"name": "ok"}) is None


def test_keypath_and_describe_schema():
    assert keypath(["tasks", "d", 0, "recipe"]) == "tasks.d.0.recipe"
    assert keypath([]) == "(top level)"
    assert describe_schema({"enum": ["a", "b"]}) == "one of 'a', 'b'"
    assert describe_schema({"type": "number", "minimum": 0, "maximum": 1}) == (
        "a value of type number >= 0 <= 1"
    )
    assert describe_schema({"type": ["integer", "null"]}) == "a value of type integer or null"


def test_a_huge_value_is_clipped_keeping_file_and_key():
    from sparsebench.suite.schema_errors import MAX_MESSAGE, first_error, format_error

    err = first_error({"type": "object", "properties": {"k": {"type": "integer"}}},
                      {"k": "x" * 500_000})  # fmt: skip
    msg = format_error(err, "spec.yaml")
    assert len(msg) <= MAX_MESSAGE and msg.startswith("spec.yaml: k: expected integer")
    assert "characters left out" in msg

"""JSON Schema errors as one readable line: file, key path, value and what is allowed.

Shared by the spec (``suite/spec.py``) and the claim files (``suite/claims/parse.py``): both
report the shallowest error first (the outermost mistake, not its consequences), each kind of
error in the same words.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jsonschema

from sparsebench.suite.catalog import closest, did_you_mean


def _strict_integer(checker: Any, instance: Any) -> bool:
    """An integer is an int: JSON Schema's own rule also takes 1.0, which would reach a
    ``range()`` as a float and hash to another artefact than 1."""
    return isinstance(instance, int) and not isinstance(instance, bool)


StrictValidator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator,
    type_checker=jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", _strict_integer),
)


def first_error(schema: dict[str, Any], data: Any) -> jsonschema.ValidationError | None:
    """The error to report: the shallowest key path first, then by path; None when valid."""
    errors = sorted(
        StrictValidator(schema).iter_errors(data),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    return errors[0] if errors else None


def keypath(path: Sequence[Any]) -> str:
    """``tasks.d.recipe`` for a path of keys and list indices; ``(top level)`` when empty."""
    return ".".join(str(p) for p in path) or "(top level)"


MAX_MESSAGE = 2000


def clip(message: str, limit: int = MAX_MESSAGE) -> str:
    """``message`` cut in the middle past ``limit`` characters: an error quoting a 500 KB
    value or 60,000 unknown keys stays one readable line (its start names file and key)."""
    if len(message) <= limit:
        return message
    head, tail = limit - 260, 200
    cut = len(message) - head - tail
    return f"{message[:head]} ... ({cut} characters left out) ... {message[-tail:]}"


def format_error(
    err: jsonschema.ValidationError,
    source: str,
    *,
    where: str | None = None,
    pattern: str = "value {value!r} does not match {pattern!r}",
    schema: dict[str, Any] | None = None,
) -> str:
    """``source: where: message`` for ``err``. ``where`` defaults to the key path; ``pattern``
    is the message for a string the schema's pattern refuses (``{value!r}``, ``{pattern!r}``),
    which only the caller can put in words (what the names are for); ``schema`` is the root
    schema, where the alternatives of a oneOf/anyOf may point (``$ref``). Clipped to
    :data:`MAX_MESSAGE` characters."""
    return clip(_format_error(err, source, where=where, pattern=pattern, schema=schema))


def _format_error(
    err: jsonschema.ValidationError,
    source: str,
    *,
    where: str | None,
    pattern: str,
    schema: dict[str, Any] | None,
) -> str:
    where = keypath(err.absolute_path) if where is None else where
    if err.validator == "additionalProperties":
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        bad = ", ".join(repr(e) for e in extra)
        return (
            f"{source}: {where}: unknown key {bad}; allowed keys: {', '.join(allowed)}"
            f"{_suggest_keys(extra, allowed)}"
        )
    if err.validator == "type":
        got = "nothing (empty)" if err.instance is None else repr(err.instance)
        return f"{source}: {where}: expected {err.validator_value}, got {got}"
    if err.validator == "uniqueItems":
        return f"{source}: {where}: repeated values in {err.instance!r}; list each value once"
    if err.validator == "enum":
        allowed = ", ".join(repr(v) for v in err.validator_value)
        hint = _suggest_value(err.instance, err.validator_value)
        return f"{source}: {where}: value {err.instance!r} is not allowed; allowed: {allowed}{hint}"
    if err.validator == "maxLength":
        return (
            f"{source}: {where}: {err.instance[:24]!r}... is {len(err.instance)} characters "
            f"long; at most {err.validator_value} are allowed (it names files and folders)"
        )
    if err.validator == "pattern":
        text = pattern.format(value=err.instance, pattern=err.validator_value)
        return f"{source}: {where}: {text}"
    if err.validator in ("oneOf", "anyOf"):
        subs = [_resolve(sub, schema) for sub in err.validator_value]
        options = "; or ".join(describe_schema(sub) for sub in subs)
        # the values the alternatives name (a const, an enum); None for the others
        named = [v for sub in subs for v in sub.get("enum", [sub.get("const")])]
        hint = _suggest_value(err.instance, named)
        return f"{source}: {where}: value {err.instance!r} is invalid; expected {options}{hint}"
    # required, minimum, minItems, ...: jsonschema's message names the value or the key
    return f"{source}: {where}: {err.message}"


# Suggestions for at most this many unknown keys: a line of thousands helps no one, and each
# costs a difflib match.
MAX_SUGGESTED = 5


def _suggest_keys(extra: Sequence[str], allowed: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for one unknown key, ``"; did you mean 'x' for 'y', ..."`` for
    several (those with a close allowed key); ``""`` when none is close."""
    if len(extra) == 1:
        return did_you_mean(extra[0], allowed)
    pairs = [(e, closest(e, allowed)) for e in extra[:MAX_SUGGESTED]]
    hints = [f"{match!r} for {e!r}" for e, match in pairs if match is not None]
    return f"; did you mean {', '.join(hints)}?" if hints else ""


def _suggest_value(value: Any, allowed: Sequence[Any]) -> str:
    """The "did you mean" of a text value among the text values of an enum or const."""
    names = [v for v in allowed if isinstance(v, str)]
    return did_you_mean(value, names) if isinstance(value, str) and names else ""


def _resolve(sub: dict[str, Any], root: dict[str, Any] | None) -> dict[str, Any]:
    """``sub``, or what its local ``$ref`` points to in ``root``."""
    ref = sub.get("$ref", "")
    if root is not None and ref.startswith("#/"):
        for part in ref[2:].split("/"):
            root = root[part]
        return root
    return sub


def describe_schema(sub: dict[str, Any], root: dict[str, Any] | None = None) -> str:
    """A few words for a simple subschema: "a value of type integer >= 1", "'auto'", "one of 'a',
    'b'", "a value of type string or number"; a local ``$ref`` is looked up in ``root``."""
    sub = _resolve(sub, root)
    if "const" in sub:
        return repr(sub["const"])
    if "enum" in sub:
        return "one of " + ", ".join(repr(v) for v in sub["enum"])
    types = sub.get("type", "any")
    if isinstance(types, list):
        types = " or ".join(filter(None, [", ".join(types[:-1]), types[-1]]))
    words = f"a value of type {types}"
    if "minimum" in sub:
        words += f" >= {sub['minimum']}"
    if "maximum" in sub:
        words += f" <= {sub['maximum']}"
    return words

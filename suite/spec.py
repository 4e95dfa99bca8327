"""Benchmark specs: load a YAML file, validate it, expand it into cells.

Validation happens before any job starts, in two layers: the JSON Schema (``spec.schema.json``
for the common keys, merged with every registered pillar's section fragment; structure, types,
ranges; defaults filled in) and each present pillar's :meth:`~sparsebench.suite.pillar.Pillar.
check` (registry names, parameter names and types, pre-flight checks). Every error is a
:class:`SpecError` whose message names the spec file, the key path, the bad value and what is
allowed.

Grids: a list value in a method's parameters expands into one setting per value (cartesian
product over parameters, :func:`expand_grid`); pillars expand their own axes (sparsities,
seeds, sizes, ...).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparsebench.suite import registry
from sparsebench.suite.schema_errors import first_error, format_error, keypath

SCHEMA_PATH = Path(__file__).with_name("spec.schema.json")
BENCHMARKS_DIR = Path(__file__).with_name("benchmarks")
DEFAULT_SPEC = BENCHMARKS_DIR / "default.yaml"


class SpecError(ValueError):
    """An invalid benchmark spec; the message names file, key path, value and what is allowed."""


class SpecLoader(yaml.SafeLoader):
    """YAML loader for specs: reads ``1e-3`` as a float (YAML 1.2; PyYAML's YAML 1.1 rules
    would make it the string "1e-3") and refuses duplicate keys instead of keeping the last."""

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


SpecLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def _schema(data: dict[str, Any] | None = None) -> dict[str, Any]:
    """The spec schema: the common keys, the full section fragment of every pillar present in
    ``data`` (every pillar when None), and the bare keys of the others (so that an unknown key
    lists every allowed one without building every pillar's enums, which import torch)."""
    from sparsebench.suite.pillar import all_pillars

    schema = json.loads(SCHEMA_PATH.read_text())
    for p in all_pillars().values():
        if data is None or p.present(data):
            schema["properties"].update(p.schema())
        else:
            schema["properties"].update({k: {} for k in p.spec_keys})
    return schema


_NAME_PATTERN = (
    "name {value!r} is not allowed; use letters, digits, '_', '.' and '-' (not only dots, and "
    "not 'artefacts': it names a folder)"
)


def _fill_defaults(value: Any, schema: dict[str, Any]) -> Any:
    """Fill JSON Schema ``default``s into objects (recursively), as Snakemake's validate does."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for key, sub in props.items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
        extra = schema.get("additionalProperties")
        for key, v in value.items():
            sub = props.get(key, extra if isinstance(extra, dict) else {})
            value[key] = _fill_defaults(v, sub)
    return value


@dataclass(frozen=True)
class Setting:
    """One parameter setting of a method: its params dataclass and its id."""

    method: str
    params: Any
    setting_id: str

    @property
    def params_json(self) -> str:
        return json.dumps(registry.params_to_dict(self.params), sort_keys=True)

    @property
    def label(self) -> str:
        return registry.setting_label(self.params)


def expand_grid(info: registry.MethodInfo, raw: dict[str, Any] | None, where: str) -> list[Setting]:
    """Expand the parameter grid of one method (a list value is a grid axis) into settings.

    ``where`` (e.g. ``"spec.yaml: methods.rigl"``) prefixes errors. Raises SpecError for an
    empty list, a list with repeated values or two grid points with the same parameters, and
    RegistryError for an unknown parameter or a value of the wrong type."""
    raw = raw or {}
    keys = sorted(raw)
    axes = [raw[k] if isinstance(raw[k], list) else [raw[k]] for k in keys]
    for key, axis in zip(keys, axes):
        if not axis:
            raise SpecError(f"{where}.{key}: empty list; give at least one value")
        if len({json.dumps(v, sort_keys=True) for v in axis}) < len(axis):
            raise SpecError(f"{where}.{key}: repeated values in {axis!r}; list each value once")
    out = []
    for values in itertools.product(*axes):
        params = registry.build_params(info, dict(zip(keys, values)), where=where)
        out.append(Setting(info.name, params, registry.setting_id(params)))
    ids = [s.setting_id for s in out]
    if len(set(ids)) < len(ids):  # e.g. [0.3, 0.30000] or a value equal to the default
        raise SpecError(f"{where}: two grid points give the same parameters")
    return out


@dataclass
class Spec:
    """A validated spec (defaults filled in), where it came from, and its pillars."""

    data: dict[str, Any]
    source: str
    pillars: tuple[str, ...] = ()

    @property
    def benchmark(self) -> str:
        return self.data["benchmark"]

    @property
    def hash(self) -> str:
        blob = json.dumps(self.data, sort_keys=True).encode()
        return hashlib.sha1(blob).hexdigest()[:12]

    def cells(self, pillar: str | None = None) -> list:
        """Every cell of ``pillar`` (default: of every pillar of the spec), stable order."""
        from sparsebench.suite.pillar import get_pillar

        names = self.pillars if pillar is None else (pillar,)
        return [c for name in names for c in get_pillar(name).cells(self)]


def section_settings(spec: Spec, key: str, method: str, families) -> list[Setting]:
    """The settings of ``method`` under ``spec.data[key]["methods"]`` (a pillar's own section),
    grid expanded, errors prefixed with the file and ``<key>.methods.<method>``."""
    info = registry.get_method(method, families)
    return expand_grid(
        info, spec.data[key]["methods"][method], f"{spec.source}: {key}.methods.{method}"
    )


def _refuse_non_finite(value: Any, source: str, path: tuple = ()) -> None:
    """YAML's .nan / .inf are numbers to JSON Schema: refuse them here, naming the key."""
    if isinstance(value, float) and not math.isfinite(value):
        raise SpecError(f"{source}: {keypath(path)}: {value!r} is not a finite number")
    if isinstance(value, dict):
        for k, v in value.items():
            _refuse_non_finite(v, source, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_non_finite(v, source, (*path, i))


def validate(data: Any, source: str = "<spec>") -> Spec:
    """Validate a spec given as a parsed YAML mapping; return it with defaults filled in.

    Raises: SpecError naming ``source``, the key path, the bad value and what is allowed.
    """
    from sparsebench.suite.pillar import all_pillars

    if data is None:
        raise SpecError(f"{source}: the spec is empty; see suite/benchmarks/default.yaml")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a YAML mapping, got {type(data).__name__}")
    _refuse_non_finite(data, source)
    _refuse_moved_keys(data, source)
    schema = _schema(data)
    data = copy.deepcopy(data)
    if (err := first_error(schema, data)) is not None:
        raise SpecError(format_error(err, source, pattern=_NAME_PATTERN, schema=schema))
    pillars = tuple(name for name, p in all_pillars().items() if p.present(data))
    if not pillars:
        sections = "; ".join(
            f"{name}: {', '.join(p.spec_keys)}" for name, p in all_pillars().items()
        )
        raise SpecError(
            f"{source}: (top level): the spec has no pillar section; give the keys of at "
            f"least one pillar ({sections})"
        )
    data = _fill_defaults(data, schema)
    spec = Spec(data, source, pillars)
    _check_claims(spec)
    for name in pillars:
        pillar = all_pillars()[name]
        try:
            pillar.check(spec)
            if not pillar.cells(spec):
                raise SpecError(
                    f"{source}: {', '.join(k for k in pillar.spec_keys if k in data)}: this "
                    f"section gives no {name} cell (every combination was skipped, e.g. a "
                    "method that does not apply); add a value that runs or remove the section"
                )
        except registry.RegistryError as e:
            raise SpecError(str(e)) from None
    return spec


def _refuse_moved_keys(data: dict[str, Any], source: str) -> None:
    """A top-level key that a pillar's section now holds: refuse it, showing the new shape."""
    from sparsebench.suite.pillar import all_pillars

    for p in all_pillars().values():
        moved = [k for k in data if k in p.moved_keys]
        if moved:
            section = p.spec_keys[0]
            indented = "\n".join(
                "  " + line
                for line in yaml.safe_dump({k: data[k] for k in moved}, sort_keys=False)
                .rstrip()
                .splitlines()
            )
            raise SpecError(
                f"{source}: {', '.join(moved)}: these keys belong to the `{section}:` section "
                f"now (every pillar owns one section); move them under it:\n{section}:\n"
                f"{indented}"
            )


def _check_claims(spec: Spec) -> None:
    """The spec's claim files load (``claims.ClaimError`` as a SpecError naming the spec key)
    and address only pillars that the spec runs."""
    files = spec.data.get("claims", [])
    if not files:
        return
    from sparsebench.suite.claims import ClaimError, load_files

    try:
        found = load_files(files)
    except ClaimError as e:
        raise SpecError(f"{spec.source}: claims: {e}") from None
    for c in found:
        if c.test["pillar"] not in spec.pillars:
            raise SpecError(
                f"{spec.source}: claims: {c.file}: claim {c.id!r} addresses pillar "
                f"{c.test['pillar']!r}, which this spec does not run (its pillars: "
                f"{', '.join(spec.pillars)}); add its section or drop the file"
            )


def load(path: str | Path) -> Spec:
    """Read and validate the YAML spec at ``path``.

    Raises: SpecError if the file is missing, is not valid YAML, or fails validation."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found")
    try:
        data = yaml.load(path.read_text(), Loader=SpecLoader)  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as e:
        raise SpecError(f"{path}: not valid YAML: {e}") from None
    try:
        return validate(data, str(path))
    except registry.RegistryError as e:
        raise SpecError(str(e)) from None

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
import sys
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


# Bounds on a YAML file (a spec or a claim file), which may come from anyone: its size, and
# what its aliases may add (``*a`` repeats the node ``&a`` names, so ten aliases of ten
# aliases of ... expand a few hundred bytes into billions of nodes), its nesting depth (the
# parser recurses) and the nodes it expands to when it uses aliases.
MAX_YAML_BYTES = 1 << 20
MAX_YAML_ALIASES = 100
MAX_YAML_DEPTH = 64
MAX_YAML_NODES = 100_000


class YamlLimitError(ValueError):
    """A YAML file past one of the bounds above; the message names the bound."""


def _yaml_children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _check_expansion(root: yaml.Node) -> None:
    """Refuse a document whose aliases expand it past :data:`MAX_YAML_NODES` nodes or
    :data:`MAX_YAML_DEPTH` levels (an alias inside a deep node nests the node it names once
    more) or make it contain itself; counted over the composed graph, each node once (no
    expansion here)."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    open_: set[int] = set()  # nodes on the current path: an alias to one of them is a cycle
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if done:
            open_.discard(id(node))
            children = _yaml_children(node)
            sizes[id(node)] = 1 + sum(sizes[id(c)] for c in children)
            depths[id(node)] = 1 + max((depths[id(c)] for c in children), default=0)
            if sizes[id(node)] > MAX_YAML_NODES:
                raise YamlLimitError(
                    f"its aliases (*name) expand it to more than {MAX_YAML_NODES} nodes, the "
                    "most allowed; write the values out or use fewer aliases"
                )
            if depths[id(node)] > MAX_YAML_DEPTH:  # nodes on a path, as composing counts
                raise YamlLimitError(
                    f"its aliases (*name) nest it more than {MAX_YAML_DEPTH} levels deep, the "
                    "most allowed"
                )
            continue
        if id(node) in sizes:
            continue
        open_.add(id(node))
        stack.append((node, True))
        for child in _yaml_children(node):
            if id(child) in open_:
                mark = child.start_mark
                raise YamlLimitError(
                    f"an alias (*name) makes the node at {mark.line + 1}:{mark.column + 1} "
                    "contain itself"
                )
            if id(child) not in sizes:
                stack.append((child, False))


class SpecLoader(yaml.SafeLoader):
    """YAML loader for specs and claim files: reads ``1e-3`` as a float (YAML 1.2; PyYAML's
    YAML 1.1 rules would make it the string "1e-3"), refuses duplicate keys instead of
    keeping the last, and bounds what aliases and nesting may cost (:data:`MAX_YAML_ALIASES`,
    :data:`MAX_YAML_DEPTH`, :data:`MAX_YAML_NODES`; :class:`YamlLimitError`)."""

    def __init__(self, stream) -> None:
        super().__init__(stream)
        self._aliases = 0
        self._depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                mark = self.peek_event().start_mark
                raise YamlLimitError(
                    f"it uses more than {MAX_YAML_ALIASES} aliases (*name), the most allowed "
                    f"(the first past it at {mark.line + 1}:{mark.column + 1})"
                )
        self._depth += 1
        if self._depth > MAX_YAML_DEPTH:
            mark = self.peek_event().start_mark
            raise YamlLimitError(
                f"it nests more than {MAX_YAML_DEPTH} levels deep, the most allowed (at "
                f"{mark.line + 1}:{mark.column + 1})"
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def compose_document(self):
        node = super().compose_document()
        if self._aliases:
            _check_expansion(node)
        return node

    def construct_mapping(self, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    "merge keys (<<) are not supported; write the keys out",
                    key_node.start_mark,
                )
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool) and key is not None:
                raise yaml.constructor.ConstructorError(
                    None,
                    None,
                    f"a key must be a plain value, got a {type(key).__name__}",
                    key_node.start_mark,
                )
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep)


# Integers as YAML 1.2 reads them: decimal (leading zeros allowed: 064 is 64), 0o octal, 0x
# hex. PyYAML's YAML 1.1 rules would read 064 as 52 and 1:00 as 60, silently. The resolver
# lists are rebuilt rather than appended to, as appending would change SafeLoader's too.
_INT = "tag:yaml.org,2002:int"
SpecLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in pairs if tag != _INT]
    for first, pairs in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
SpecLoader.add_implicit_resolver(
    _INT, re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)


def _construct_int(loader: yaml.SafeLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


SpecLoader.add_constructor(_INT, _construct_int)
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
    return harden(schema)


# What every spec value must satisfy to run, whichever pillar's fragment declares it, added
# to the merged schema by :func:`harden` (so a new pillar's section gets it without saying so).
# A name becomes a folder, a file name and a command-line argument: at most NAME_MAX_LEN
# characters (paths nest several names under the 255-byte limit of one component) and never
# starting with '-' (an option to argparse) or '.' (a hidden or relative folder).
NAME_MAX_LEN = 64
NAME_REGEX = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
# numpy's seed range: a seed past it fails every cell at run time.
SEED_MAX = 2**32 - 1
# Integers a float, a JSON reader and a polars Int64 column all hold exactly.
INT_BOUND = 2**53
# Lists of values (grid axes, seeds, sizes) and a method's grid: beyond these a spec plans
# for minutes before it could run, and would run for years.
MAX_LIST = 1000
MAX_GRID = 10_000


def _scalar_type(schema: Any) -> bool:
    types = schema.get("type") if isinstance(schema, dict) else None
    types = types if isinstance(types, list) else [types]
    return bool(types) and all(t in ("integer", "number", "string", "boolean") for t in types)


def harden(node: Any, key: str = "") -> Any:
    """Add the suite-wide rules to a schema, in place: every map's key names (``propertyNames``)
    follow :data:`NAME_REGEX` and :data:`NAME_MAX_LEN`; every integer lies within
    ±:data:`INT_BOUND`, and a ``seed`` or ``seeds`` within [0, :data:`SEED_MAX`]; every list of
    plain values that is not a fixed-length tuple holds each value once (a repeated grid value
    or seed would plan the same cell twice) and at most :data:`MAX_LIST` of them."""
    if isinstance(node, list):
        for item in node:
            harden(item, key)
        return node
    if not isinstance(node, dict):
        return node
    if "propertyNames" in node and isinstance(node["propertyNames"], dict):
        names = node["propertyNames"]
        names.setdefault("maxLength", NAME_MAX_LEN)
        names.setdefault("pattern", NAME_REGEX)
    types = node.get("type")
    types = types if isinstance(types, list) else [types]
    if "integer" in types:
        node.setdefault("maximum", SEED_MAX if key in ("seed", "seeds") else INT_BOUND)
        node.setdefault("minimum", -INT_BOUND)
    if "array" in types and _scalar_type(node.get("items")):
        fixed = node.get("minItems") is not None and node.get("minItems") == node.get("maxItems")
        if not fixed:
            node.setdefault("uniqueItems", True)
            node.setdefault("maxItems", MAX_LIST)
    for k, v in node.items():
        if k == "properties" and isinstance(v, dict):
            for name, sub in v.items():
                harden(sub, name)
        elif k == "items":
            harden(v, key)  # a list's items keep its key: the entries of `seeds` are seeds
        elif k not in ("enum", "const", "default", "examples"):
            harden(v, "")
    return node


_NAME_PATTERN = (
    "name {value!r} is not allowed; use letters, digits, '_', '.' and '-', starting with a "
    "letter, a digit or '_' (and not 'artefacts': it names a folder)"
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
    if math.prod(len(a) for a in axes) > MAX_GRID:
        raise SpecError(
            f"{where}: the grid has {math.prod(len(a) for a in axes)} points "
            f"({' x '.join(str(len(a)) for a in axes)}), more than the {MAX_GRID} allowed "
            "per method; split it over several specs"
        )
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

    def claim_files(self) -> list[str]:
        """The spec's claim files. A relative path is read from the current folder, else from
        the spec's folder, else, for a spec embedded in the package, from the checkout (so
        that `sparsebench run reproduce` works from any folder)."""
        bases = [Path(self.source).parent]
        if Path(self.source).resolve().parent == BENCHMARKS_DIR.resolve():
            bases.append(BENCHMARKS_DIR.parents[1])
        out = []
        for f in self.data.get("claims", []):
            path = Path(f)
            if not path.is_absolute() and not path.exists():
                found = [b / path for b in bases if (b / path).is_file()]
                path = found[0] if found else path
            out.append(str(path))
        return out

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


def first_non_finite(value: Any, path: tuple = ()) -> tuple[tuple, Any] | None:
    """(key path, value) of the first number in ``value`` that is not finite: YAML's .nan,
    .inf, a float literal past the float range (``1e309``) or an integer too large for a
    float; None if there is none. JSON Schema takes them all as numbers, and every bound or
    margin compared with one would hold or fail vacuously."""
    if isinstance(value, float) and not math.isfinite(value):
        return path, value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > sys.float_info.max:
        return path, value
    if isinstance(value, dict | list):
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for k, v in items:
            if (found := first_non_finite(v, (*path, k))) is not None:
                return found
    return None


def show_number(value: Any) -> str:
    """``repr`` of a number for a message, but an integer of hundreds of digits (which
    Python refuses to print past 4,300) as its size."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 3300:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    return repr(value)


def _refuse_non_finite(value: Any, source: str) -> None:
    """Refuse a number that is not finite anywhere in a spec, naming the key."""
    if (found := first_non_finite(value)) is not None:
        path, bad = found
        raise SpecError(f"{source}: {keypath(path)}: {show_number(bad)} is not a finite number")


def _refuse_non_string_keys(value: Any, source: str, path: tuple = ()) -> None:
    """Every key of a spec is a name or a parameter: text. YAML reads ``-1:``, ``1.5:`` or
    ``true:`` as numbers, which the schema's name rules (for strings) would not see."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise SpecError(
                    f"{source}: {keypath(path) if path else '(top level)'}: key {k!r} is a "
                    f"{type(k).__name__}, not text; quote it ('{k}') if it is a name"
                )
            _refuse_non_string_keys(v, source, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _refuse_non_string_keys(v, source, (*path, i))


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
    _refuse_non_string_keys(data, source)
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
    claims = _check_claims(spec)
    cells_of: dict[str, list[Any]] = {}
    for name in pillars:
        pillar = all_pillars()[name]
        try:
            pillar.check(spec)
            cells = cells_of[name] = pillar.cells(spec)
            ids = [c.id for c in cells]
            if len(set(ids)) < len(ids):
                twice = next(i for i in ids if ids.count(i) > 1)
                raise SpecError(
                    f"{source}: {', '.join(k for k in pillar.spec_keys if k in data)}: two "
                    f"values give the same cell {twice!r} (e.g. sparsities 0.9 and "
                    "0.9000000001 print alike); make the values differ in their first six "
                    "significant digits"
                )
            if not cells:
                raise SpecError(
                    f"{source}: {', '.join(k for k in pillar.spec_keys if k in data)}: this "
                    f"section gives no {name} cell (every combination was skipped, e.g. a "
                    "method that does not apply); add a value that runs or remove the section"
                )
        except registry.RegistryError as e:
            raise SpecError(str(e)) from None
    _check_claim_cells(spec, claims, cells_of)
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


def _check_claims(spec: Spec) -> list[Any]:
    """The spec's claim files load (``claims.ClaimError`` as a SpecError naming the spec key)
    and address only pillars that the spec runs; returns their claims."""
    files = spec.claim_files()
    if not files:
        return []
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
    return found


def _same(want: Any, have: Any) -> bool:
    if isinstance(want, bool) or isinstance(have, bool):
        return want is have
    if isinstance(want, int | float) and isinstance(have, int | float):
        return math.isclose(want, have, rel_tol=1e-9, abs_tol=1e-12)
    return want == have


def _check_claim_cells(spec: Spec, claims: list[Any], cells_of: dict[str, list[Any]]) -> None:
    """Every selector of every claim (with its ``where``) matches some cell this spec runs,
    on the keys a cell knows before it runs (method, seed, setting and the pillar's cell
    columns; a key only the records hold, such as a measured column, is not checked here): a
    claim that can address nothing would be judged "not run" only after the whole run."""
    for c in claims:
        cells = cells_of.get(c.test["pillar"], [])
        known = [
            {"method": x.method, "seed": x.seed, "setting_id": x.setting_id, **x.columns}
            for x in cells
        ]
        for sel in c.selectors:
            filters = {**c.test.get("where", {}), **sel}
            if not any(
                all(_same(v, k[col]) for col, v in filters.items() if col in k) for k in known
            ):
                shown = ", ".join(f"{col}={v}" for col, v in filters.items())
                raise SpecError(
                    f"{spec.source}: claims: {c.file}: claim {c.id!r}: no cell of this spec "
                    f"matches {shown}; a filter in the test's where applies to every "
                    "selector (a, b and order alike)"
                )


def read_yaml(path: Path, what: str, error: type[ValueError]) -> Any:
    """The parsed YAML of a spec or claim file (``what`` names it in messages), within the
    bounds of :class:`SpecLoader` and :data:`MAX_YAML_BYTES`; ``error`` (naming the file)
    if it is larger, not UTF-8, not valid YAML or past a bound."""
    with path.open("rb") as f:  # never more than the bound, whatever the file holds
        raw = f.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise error(
            f"{path}: the {what} is larger than {MAX_YAML_BYTES} bytes (1 MiB), the most a "
            f"{what} may hold"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise error(
            f"{path}: not UTF-8 (byte {e.start}: {e.reason}); a {what} must be UTF-8 text"
        ) from None
    try:
        return yaml.load(text, Loader=SpecLoader)  # noqa: S506 - a SafeLoader
    except YamlLimitError as e:
        raise error(f"{path}: {e}") from None
    except yaml.YAMLError as e:
        where = str(e).replace('"<unicode string>"', "the file")
        raise error(f"{path}: not valid YAML: {where}") from None
    except ValueError as e:  # e.g. an integer of more digits than Python converts
        raise error(f"{path}: a value cannot be read: {e}") from None


def load(path: str | Path) -> Spec:
    """Read and validate the YAML spec at ``path``.

    Raises: SpecError if the file is missing, too large, not UTF-8, not valid YAML, or fails
    validation."""
    path = Path(path)
    if path.is_dir():
        raise SpecError(f"{path}: a folder, not a spec file; give the YAML file inside it")
    if path.exists() and not path.is_file():
        raise SpecError(f"{path}: not a regular file (a pipe or device); give a YAML spec file")
    if not path.is_file():
        raise SpecError(f"{path}: spec file not found (looked in {Path.cwd()})")
    data = read_yaml(path, "spec", SpecError)
    try:
        return validate(data, str(path))
    except registry.RegistryError as e:
        raise SpecError(str(e)) from None

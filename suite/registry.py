"""Method registry: every method is a class with a typed ``Params`` dataclass, found by name.

``@register("rigl", family="dst")`` on a :class:`~sparsebench.suite.method.Method` subclass makes
it available to specs as ``methods: {rigl: ...}``. A family is a set of methods one pillar runs
(:attr:`sparsebench.suite.pillar.Pillar.families`: the classification pillar runs ``dst`` and
``pruning``); names are unique within a family.

One registration convention: a family's methods live in one package
(``sparsebench.methods.<family>`` unless the pillar's ``method_packages`` says otherwise), and
:func:`discover` imports every module of it that registers a method, in file-name order (the
listings sort methods by name). Nothing lists the modules. Third-party methods come through the
``sparsebench.methods`` entry-point group (each entry point names a module that is imported) or
``$SPARSEBENCH_PLUGINS`` (comma-separated module names).
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.util
import json
import pkgutil
import re
import types
import typing
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from sparsebench.suite.catalog import did_you_mean
from sparsebench.suite.method import Method, NoParams

__all__ = ["Method", "MethodInfo", "NoParams", "RegistryError", "register"]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RegistryError(ValueError):
    """A method name or parameter that the registry does not know or cannot accept."""


@dataclass(frozen=True)
class MethodInfo:
    """A registered method: its name, family, class and parameter dataclass."""

    name: str
    family: str  # the method family a pillar runs (Pillar.families)
    cls: type
    params_cls: type
    source: str  # the paper the method follows, taken from the class docstring's "Source:" line
    sparse: bool  # False only for dense baselines: they ignore the sparsity axis of a spec

    def param_fields(self) -> list[dataclasses.Field]:
        return list(dataclasses.fields(self.params_cls))


_REGISTRY: dict[tuple[str, str], MethodInfo] = {}
_loaded = False
_imported: set[str] = set()


def register(name: str, family: str, sparse: bool = True):
    """Class decorator: register a :class:`Method` subclass under ``name`` in ``family``.

    The class must define a nested ``Params`` dataclass whose fields all have defaults (the
    published defaults of the method). Raises ``RegistryError`` on a duplicate name in the
    family, a name that is not snake_case, a class that is not a :class:`Method` or a
    ``Params`` that is not a dataclass.
    """
    for what, value in (("method", name), ("family", family)):
        if not _NAME.match(value):
            raise RegistryError(f"{what} name {value!r} must be snake_case ([a-z][a-z0-9_]*)")

    def deco(cls: type) -> type:
        if not (isinstance(cls, type) and issubclass(cls, Method)):
            raise RegistryError(
                f"method {name!r}: {cls!r} must be a class deriving from its family's base "
                "(sparsebench.suite.method.Method)"
            )
        params_cls = getattr(cls, "Params", None)
        if params_cls is None or not dataclasses.is_dataclass(params_cls):
            raise RegistryError(f"method {name!r}: class {cls.__name__} needs a Params dataclass")
        for f in dataclasses.fields(params_cls):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RegistryError(f"method {name!r}: parameter {f.name!r} needs a default")
        if not isinstance(cls.test_params, Mapping):
            raise RegistryError(f"method {name!r}: test_params must be a mapping of parameters")
        old = _REGISTRY.get((family, name))
        if old is not None and old.cls.__qualname__ != cls.__qualname__:
            raise RegistryError(f"method {name!r} is registered twice in {family!r}")
        _REGISTRY[(family, name)] = MethodInfo(
            name, family, cls, params_cls, _source_of(cls), sparse
        )
        cls.method_name = name
        cls.family = family
        return cls

    return deco


def _source_of(cls: type) -> str:
    """The docstring's ``Source:`` paragraph (up to the next blank line), on one line."""
    lines = [ln.strip() for ln in (cls.__doc__ or "").splitlines()]
    for i, line in enumerate(lines):
        if line.startswith("Source:"):
            para = [line[len("Source:") :].strip()]
            for nxt in lines[i + 1 :]:
                if not nxt:
                    break
                para.append(nxt)
            return " ".join(para)
    return ""


_discovered: dict[str, list[str]] = {}  # package -> its registering modules, imported


def discover(package: str) -> list[str]:
    """Import every module of ``package`` that registers a method (its text holds
    ``@register(``), in file-name order; return their names. Modules that only help (shared
    math, a training loop) are not imported: a listing does not pay for their imports."""
    if package in _discovered:  # a board asks for every method's source, row by row
        return _discovered[package]
    spec = importlib.util.find_spec(package)
    if spec is None or spec.submodule_search_locations is None:
        raise RegistryError(f"method package {package!r} is not an importable package")
    found = []
    for info in sorted(pkgutil.iter_modules(spec.submodule_search_locations), key=lambda m: m.name):
        if info.ispkg or info.name.startswith("_"):
            continue
        path = Path(info.module_finder.path) / f"{info.name}.py"  # type: ignore[union-attr]
        if path.is_file() and "@register(" in path.read_text(encoding="utf-8"):
            found.append(f"{package}.{info.name}")
    for mod in found:
        if mod not in _imported:
            importlib.import_module(mod)
            _imported.add(mod)
    _discovered[package] = found
    return found


def package_exists(package: str) -> bool:
    try:
        return importlib.util.find_spec(package) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def load_builtin_methods(families: Iterable[str] | None = None) -> None:
    """Discover the method packages of ``families`` (all when None) and load the third-party
    entry points, each once. Per family, so that listing one pillar's methods does not import
    another pillar's dependencies (Lightning for the classification ones)."""
    global _loaded
    from sparsebench.suite.pillar import all_pillars

    wanted = None if families is None else set(families)
    for p in all_pillars().values():
        for family in p.families:
            if wanted is None or family in wanted:
                package = p.method_package(family)
                # A third-party family without a package of its own registers its methods when
                # its plug-in module is imported; a package the pillar names must exist.
                if family in p.method_packages or package_exists(package):
                    discover(package)
    if not _loaded:
        _loaded = True
        for ep in entry_points(group="sparsebench.methods"):
            ep.load()


def all_methods(families: Iterable[str] | None = None) -> dict[str, MethodInfo]:
    """Registered methods by name, of the given families, sorted by name (the order of
    listings and schema enums, independent of import order); all families: keys
    ``family/name``, sorted."""
    load_builtin_methods(families)
    if families is None:
        return {f"{f}/{n}": info for (f, n), info in sorted(_REGISTRY.items())}
    fams = set(families)
    return {
        n: info for (f, n), info in sorted(_REGISTRY.items(), key=lambda kv: kv[0][1]) if f in fams
    }


def get_method(name: str, families: Iterable[str]) -> MethodInfo:
    """Return the method ``name`` of ``families``; ``RegistryError`` lists the known names
    (and the closest one)."""
    methods = all_methods(families)
    if name not in methods:
        raise RegistryError(
            f"unknown method {name!r}; registered methods: {sorted(methods)}"
            f"{did_you_mean(name, methods)}"
        )
    return methods[name]


def type_ok(value: Any, tp: Any) -> bool:
    """Whether ``value`` (from YAML) fits the dataclass annotation ``tp``."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return value in typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        return any(type_ok(value, a) for a in typing.get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(tp, type):
        return isinstance(value, tp)
    return True


def describe_type(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in typing.get_args(tp))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(describe_type(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    return getattr(tp, "__name__", str(tp))


def field_problem(cls: type, key: str, value: Any) -> str | None:
    """What is wrong with ``key: value`` as a field of the dataclass ``cls``: ``"unknown"``,
    ``"type"`` (:func:`type_ok`: an ``int`` field takes neither 64.0 nor "64"), ``"range"``
    (an integer beyond ±2**53, past a float's exact range and a polars column's; a field
    named ``seed`` outside numpy's range [0, 2**32 - 1]); None when it fits."""
    hints = typing.get_type_hints(cls)
    if key not in {f.name for f in dataclasses.fields(cls)}:
        return "unknown"
    if not type_ok(value, hints[key]):
        return "type"
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = int_range(key)
        if not low <= value <= high:
            return "range"
    return None


def int_range(key: str) -> tuple[int, int]:
    return (0, 2**32 - 1) if key == "seed" else (-(2**53), 2**53)


def check_fields(cls: type, raw: Mapping[str, Any], where: str = "") -> None:
    """Refuse a key of ``raw`` that :func:`field_problem` finds wrong; RegistryError naming
    ``where`` (a key-path prefix such as ``"model."``), the key, the value and what is
    allowed."""
    hints = typing.get_type_hints(cls)
    for key, value in raw.items():
        problem = field_problem(cls, key, value)
        if problem == "unknown":
            fields = [f.name for f in dataclasses.fields(cls)]
            raise RegistryError(
                f"{where}{key}: unknown key; allowed: {', '.join(fields) or '(none)'}"
                f"{did_you_mean(key, fields)}"
            )
        if problem == "type":
            raise RegistryError(
                f"{where}{key}: value {value!r} ({type(value).__name__}); expected "
                f"{describe_type(hints[key])}"
            )
        if problem == "range":
            low, high = int_range(key)
            raise RegistryError(f"{where}{key}: {value} is outside [{low}, {high}]")


def build_params(
    method: str | MethodInfo,
    raw: dict[str, Any] | None,
    where: str = "",
    families: Iterable[str] = (),
) -> Any:
    """Build the ``Params`` of ``method`` (a MethodInfo, or a name in ``families``) from a
    plain dict, checking names, types and integer ranges (:func:`field_problem`).

    ``where`` prefixes error messages (e.g. ``"spec.yaml: methods.rigl"``). Raises
    ``RegistryError`` naming the parameter, the bad value and what is allowed.
    """
    if isinstance(method, MethodInfo):
        info = method
    elif not families:
        raise TypeError("build_params: give a MethodInfo, or a name with its families")
    else:
        info = get_method(method, families)
    name = info.name
    raw = dict(raw or {})
    hints = typing.get_type_hints(info.params_cls)
    prefix = f"{where}: " if where else ""
    for key, value in raw.items():
        problem = field_problem(info.params_cls, key, value)
        if problem == "unknown":
            fields = sorted(f.name for f in info.param_fields())
            raise RegistryError(
                f"{prefix}unknown parameter {key!r} for method {name!r}; allowed: "
                f"{', '.join(fields) or '(no parameters)'}{did_you_mean(key, fields)}"
            )
        if problem is not None:
            expected = describe_type(hints[key])
            if problem == "range":
                expected = "an integer in [{}, {}]".format(*int_range(key))
            raise RegistryError(
                f"{prefix}parameter {key!r} of method {name!r} has value {value!r} "
                f"({type(value).__name__}); expected {expected}"
            )
    params = info.params_cls(**raw)
    check = getattr(params, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            raise RegistryError(f"{prefix}method {name!r}: {e}") from None
    return params


def params_to_dict(params: Any) -> dict[str, Any]:
    return dataclasses.asdict(params)


def non_default_params(params: Any) -> dict[str, Any]:
    """The parameters that differ from the method's defaults (the identity of a setting)."""
    out = {}
    for f in dataclasses.fields(params):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        value = getattr(params, f.name)
        if value != default:
            out[f.name] = value
    return out


def setting_label(params: Any) -> str:
    """Readable form of :func:`setting_id`: ``default`` or ``name=value, ...`` (sorted)."""
    nd = non_default_params(params)
    return ", ".join(f"{k}={v}" for k, v in sorted(nd.items())) or "default"


def setting_id(params: Any) -> str:
    """Short stable id of a parameter setting, as in open_lth: ``default`` when every parameter
    is at its default, else a hash of the non-default values. A new parameter added later with a
    no-op default therefore keeps old results' identity."""
    nd = non_default_params(params)
    if not nd:
        return "default"
    blob = json.dumps(nd, sort_keys=True, default=str).encode()
    return "p" + hashlib.sha1(blob).hexdigest()[:10]

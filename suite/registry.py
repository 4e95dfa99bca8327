"""Method registry: every method is a class with a typed ``Params`` dataclass, found by name.

``@register("rigl", pillar="dst")`` on a class makes it available to specs as
``methods: {rigl: ...}``. ``pillar`` is the method family a pillar serves (see
:attr:`sparsebench.suite.pillar.Pillar.families`: the classification pillar serves ``dst`` and
``pruning``); names are unique within a family. Built-in method modules are listed by their
pillar (``Pillar.method_modules``); third-party packages add methods through the
``sparsebench.methods`` entry-point group (each entry point names a module that is imported)
or ``$SPARSEBENCH_PLUGINS``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import re
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")


class RegistryError(ValueError):
    """A method name or parameter that the registry does not know or cannot accept."""


@dataclass(frozen=True)
class MethodInfo:
    """A registered method: its name, family (``pillar``), class and parameter dataclass."""

    name: str
    pillar: str  # the method family a pillar serves (Pillar.families)
    cls: type
    params_cls: type
    source: str  # the paper the method follows, taken from the class docstring's "Source:" line
    sparse: bool  # False only for dense baselines: they ignore the sparsity axis of a spec

    def param_fields(self) -> list[dataclasses.Field]:
        return list(dataclasses.fields(self.params_cls))


_REGISTRY: dict[tuple[str, str], MethodInfo] = {}
_loaded = False
_imported: set[str] = set()


def register(name: str, pillar: str, sparse: bool = True):
    """Class decorator: register a method under ``name`` in the method family ``pillar``.

    The class must define a nested ``Params`` dataclass whose fields all have defaults (the
    published defaults of the method). Raises ``RegistryError`` on a duplicate name in the
    family, a name that is not snake_case or a ``Params`` that is not a dataclass.
    """
    for what, value in (("method", name), ("family", pillar)):
        if not _NAME.match(value):
            raise RegistryError(f"{what} name {value!r} must be snake_case ([a-z][a-z0-9_]*)")

    def deco(cls: type) -> type:
        params_cls = getattr(cls, "Params", None)
        if params_cls is None or not dataclasses.is_dataclass(params_cls):
            raise RegistryError(f"method {name!r}: class {cls.__name__} needs a Params dataclass")
        for f in dataclasses.fields(params_cls):
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RegistryError(f"method {name!r}: parameter {f.name!r} needs a default")
        old = _REGISTRY.get((pillar, name))
        if old is not None and old.cls.__qualname__ != cls.__qualname__:
            raise RegistryError(f"method {name!r} is registered twice in {pillar!r}")
        _REGISTRY[(pillar, name)] = MethodInfo(
            name, pillar, cls, params_cls, _source_of(cls), sparse
        )
        cls.method_name = name
        return cls

    return deco


@dataclass
class NoParams:
    """Parameters of a method that has none."""


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


def load_builtin_methods(families: Iterable[str] | None = None) -> None:
    """Import the method modules of the pillars serving ``families`` (all when None) and the
    third-party entry points, each once. Per family, so that listing one pillar's methods
    does not import another pillar's dependencies (Lightning for the classification ones)."""
    global _loaded
    from sparsebench.suite.pillar import all_pillars

    wanted = None if families is None else set(families)
    for p in all_pillars().values():
        if wanted is None or wanted & set(p.families):
            for mod in p.method_modules:
                if mod not in _imported:
                    importlib.import_module(mod)
                    _imported.add(mod)
    if not _loaded:
        _loaded = True
        for ep in entry_points(group="sparsebench.methods"):
            ep.load()


def all_methods(families: Iterable[str] | None = None) -> dict[str, MethodInfo]:
    """Registered methods by name, of the given families, in registration order (each
    pillar's ``method_modules`` order); all families: keys ``family/name``, sorted."""
    load_builtin_methods(families)
    if families is None:
        return {f"{f}/{n}": info for (f, n), info in sorted(_REGISTRY.items())}
    fams = set(families)
    return {n: info for (f, n), info in _REGISTRY.items() if f in fams}


def registered(family: str) -> dict[str, MethodInfo]:
    """The methods registered so far in ``family``, in registration order, without importing
    any module (for a package that registers its own plug-ins while it is imported)."""
    return {n: info for (f, n), info in _REGISTRY.items() if f == family}


def get_method(name: str, families: Iterable[str] = ("dst", "pruning")) -> MethodInfo:
    """Return the method ``name`` of ``families``; ``RegistryError`` lists the known names."""
    methods = all_methods(families)
    if name not in methods:
        raise RegistryError(f"unknown method {name!r}; registered methods: {sorted(methods)}")
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


def build_params(
    method: str | MethodInfo,
    raw: dict[str, Any] | None,
    where: str = "",
    families: Iterable[str] = ("dst", "pruning"),
) -> Any:
    """Build the ``Params`` of ``method`` (a MethodInfo, or a name in ``families``) from a
    plain dict, checking names and types.

    ``where`` prefixes error messages (e.g. ``"spec.yaml: methods.rigl"``). Raises
    ``RegistryError`` naming the parameter, the bad value and what is allowed.
    """
    info = method if isinstance(method, MethodInfo) else get_method(method, families)
    name = info.name
    raw = dict(raw or {})
    hints = typing.get_type_hints(info.params_cls)
    fields = {f.name: f for f in info.param_fields()}
    prefix = f"{where}: " if where else ""
    for key, value in raw.items():
        if key not in fields:
            allowed = ", ".join(sorted(fields)) or "(no parameters)"
            raise RegistryError(
                f"{prefix}unknown parameter {key!r} for method {name!r}; allowed: {allowed}"
            )
        if not type_ok(value, hints[key]):
            raise RegistryError(
                f"{prefix}parameter {key!r} of method {name!r} has value {value!r} "
                f"({type(value).__name__}); expected {describe_type(hints[key])}"
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

"""Benchmark specs: load a YAML file, validate it, expand it into jobs.

Validation happens before any job starts, in two layers: the JSON Schema ``spec.schema.json``
(structure, types, ranges; defaults filled in) and the registries (method names, method
parameter names and types, dataset and model names). Every error is a :class:`SpecError` whose
message names the spec file, the key path, the bad value and what is allowed.

Grids: a list value in a method's parameters expands into one setting per value (cartesian
product over parameters); ``sparsities`` and ``seeds`` expand too. The dense baseline ignores
``sparsities`` and runs once per (task, seed) at sparsity 0.
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

import jsonschema
import yaml

from sparsebench.suite import registry

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


def _schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _keypath(path) -> str:
    return ".".join(str(p) for p in path) or "(top level)"


def _subschema(schema: dict[str, Any], path) -> dict[str, Any]:
    """The schema node that describes the value at ``path`` (for listing allowed keys)."""
    node = schema
    for part in path:
        if isinstance(part, int):
            node = node.get("items", {})
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        else:
            node = node.get("additionalProperties", {}) or {}
    return node


def _format_schema_error(err: jsonschema.ValidationError, schema: dict, source: str) -> str:
    where = _keypath(err.absolute_path)
    if err.validator == "additionalProperties":
        allowed = sorted(_subschema(schema, err.absolute_path).get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        bad = ", ".join(repr(e) for e in extra)
        return f"{source}: {where}: unknown key {bad}; allowed keys: {', '.join(allowed)}"
    if err.validator == "required":
        return f"{source}: {where}: {err.message}"
    if err.validator == "type":
        got = "nothing (empty)" if err.instance is None else repr(err.instance)
        return f"{source}: {where}: expected {err.validator_value}, got {got}"
    if err.validator == "uniqueItems":
        return f"{source}: {where}: repeated values in {err.instance!r}; list each value once"
    if err.validator == "enum":
        allowed = ", ".join(repr(v) for v in err.validator_value)
        return f"{source}: {where}: value {err.instance!r} is not allowed; allowed: {allowed}"
    if err.validator in ("oneOf", "anyOf"):
        options = "; or ".join(_describe_schema(sub) for sub in err.validator_value)
        return f"{source}: {where}: value {err.instance!r} is invalid; expected {options}"
    return f"{source}: {where}: value {err.instance!r} is invalid: {err.message}"


def _describe_schema(sub: dict[str, Any]) -> str:
    """A few words for a simple subschema: "an integer >= 1", "'auto'", "one of 'a', 'b'"."""
    if "const" in sub:
        return repr(sub["const"])
    if "enum" in sub:
        return "one of " + ", ".join(repr(v) for v in sub["enum"])
    words = f"a value of type {sub.get('type', 'any')}"
    if "minimum" in sub:
        words += f" >= {sub['minimum']}"
    if "maximum" in sub:
        words += f" <= {sub['maximum']}"
    return words


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


@dataclass(frozen=True)
class Job:
    """One (task, method setting, sparsity, seed) cell of a benchmark."""

    benchmark: str
    task: str
    pillar: str
    method: str
    setting_id: str
    params_json: str
    sparsity: float
    seed: int

    @property
    def sparsity_tag(self) -> str:
        return f"{self.sparsity:g}"

    @property
    def record_path(self) -> str:
        return (
            f"results/{self.benchmark}/runs/{self.task}/{self.method}/{self.setting_id}/"
            f"s{self.sparsity_tag}/seed{self.seed}/record.json"
        )


@dataclass(frozen=True)
class KernelCell:
    """One (layer shape, sparsity, batch) cell of a spec's ``kernels`` section."""

    benchmark: str
    out_features: int
    in_features: int
    sparsity: float
    batch: int

    @property
    def record_path(self) -> str:
        return (
            f"results/{self.benchmark}/kernels/{self.out_features}x{self.in_features}/"
            f"s{self.sparsity!r}/b{self.batch}/record.json"
        )


@dataclass(frozen=True)
class HessianCell:
    """One (system, size, potential, method) cell of a spec's ``hessian`` section."""

    benchmark: str
    system: str
    size: int
    potential: str
    potential_params_json: str
    method: str

    @property
    def potential_tag(self) -> str:
        """``pair``, or ``pair-<hash>`` when the potential has non-default parameters."""
        if self.potential_params_json == "{}":
            return self.potential
        digest = hashlib.sha1(self.potential_params_json.encode()).hexdigest()[:8]
        return f"{self.potential}-{digest}"

    @property
    def record_path(self) -> str:
        return (
            f"results/{self.benchmark}/hessian/{self.system}/{self.potential_tag}/"
            f"{self.method}/n{self.size}/record.json"
        )


@dataclass
class Spec:
    """A validated spec (defaults filled in) and where it came from."""

    data: dict[str, Any]
    source: str

    @property
    def benchmark(self) -> str:
        return self.data["benchmark"]

    @property
    def hash(self) -> str:
        blob = json.dumps(self.data, sort_keys=True).encode()
        return hashlib.sha1(blob).hexdigest()[:12]

    def task(self, name: str) -> dict[str, Any]:
        if name not in self.data["tasks"]:
            raise SpecError(
                f"{self.source}: tasks: unknown task {name!r}; "
                f"tasks in this spec: {sorted(self.data['tasks'])}"
            )
        return self.data["tasks"][name]

    def settings(self, method: str) -> list[Setting]:
        """Expand the parameter grid of ``method`` (a list value is a grid axis).

        Raises SpecError for an empty list or a list with repeated values."""
        raw = self.data["methods"][method] or {}
        keys = sorted(raw)
        axes = [raw[k] if isinstance(raw[k], list) else [raw[k]] for k in keys]
        for key, axis in zip(keys, axes):
            where = f"{self.source}: methods.{method}.{key}"
            if not axis:
                raise SpecError(f"{where}: empty list; give at least one value")
            if len({json.dumps(v, sort_keys=True) for v in axis}) < len(axis):
                raise SpecError(f"{where}: repeated values in {axis!r}; list each value once")
        out = []
        for values in itertools.product(*axes):
            params = registry.build_params(
                method, dict(zip(keys, values)), where=f"{self.source}: methods.{method}"
            )
            out.append(Setting(method, params, registry.setting_id(params)))
        ids = [s.setting_id for s in out]
        if len(set(ids)) < len(ids):  # e.g. [0.3, 0.30000] or a value equal to the default
            raise SpecError(
                f"{self.source}: methods.{method}: two grid points give the same parameters"
            )
        return out

    def hessian_cells(self) -> list[HessianCell]:
        """Every job of the ``hessian`` section; ``truncated`` is skipped for potentials whose
        Hessian reaches only 1 hop (nothing to truncate), ``dense`` above ``dense_max_atoms``."""
        from sparsebench.methods.hessian.systems import n_atoms

        h = self.data.get("hessian")
        if not h:
            return []
        out = []
        for system, sys_spec in h["systems"].items():
            for potential, params in h["potentials"].items():
                hops = _potential_hops(potential, params or {})
                for method in h["methods"]:
                    if method == "truncated" and hops <= 1:
                        continue
                    for size in sys_spec["sizes"]:
                        if method == "dense" and n_atoms(system, size) > h["dense_max_atoms"]:
                            continue
                        out.append(
                            HessianCell(
                                self.benchmark,
                                system,
                                size,
                                potential,
                                json.dumps(params or {}, sort_keys=True),
                                method,
                            )
                        )
        return out

    def kernel_cells(self) -> list[KernelCell]:
        """Every job of the ``kernels`` section: one per (shape, sparsity, batch)."""
        k = self.data.get("kernels")
        if not k:
            return []
        return [
            KernelCell(self.benchmark, int(o), int(i), float(s), int(b))
            for o, i in k["shapes"]
            for s in k["sparsities"]
            for b in k["batches"]
        ]

    def jobs(self) -> list[Job]:
        """Every classification (dst, pruning) job of the benchmark, in a stable order."""
        out = []
        for task in self.data.get("tasks", {}):
            for method in self.data["methods"]:
                info = registry.get_method(method)
                sparsities = self.data["sparsities"] if info.sparse else [0.0]
                for setting in self.settings(method):
                    for s in sparsities:
                        for seed in self.data["seeds"]:
                            out.append(
                                Job(
                                    self.benchmark,
                                    task,
                                    info.pillar,
                                    method,
                                    setting.setting_id,
                                    setting.params_json,
                                    float(s),
                                    seed,
                                )
                            )
        return out


def validate(data: Any, source: str = "<spec>") -> Spec:
    """Validate a spec given as a parsed YAML mapping; return it with defaults filled in.

    Raises: SpecError naming ``source``, the key path, the bad value and what is allowed.
    """
    schema = _schema()
    if data is None:
        raise SpecError(f"{source}: the spec is empty; see suite/benchmarks/default.yaml")
    if not isinstance(data, dict):
        raise SpecError(f"{source}: the spec must be a YAML mapping, got {type(data).__name__}")
    data = copy.deepcopy(data)
    errors = sorted(
        jsonschema.Draft202012Validator(schema).iter_errors(data),
        key=lambda e: (len(e.absolute_path), list(map(str, e.absolute_path))),
    )
    if errors:
        raise SpecError(_format_schema_error(errors[0], schema, source))
    data = _fill_defaults(data, schema)
    if not any(k in data for k in ("tasks", "hessian", "kernels")):
        raise SpecError(
            f"{source}: (top level): the spec needs `tasks` + `methods` (dst, "
            "pruning), a `hessian` section or a `kernels` section (or several)"
        )
    if ("tasks" in data) != ("methods" in data):
        missing = "methods" if "tasks" in data else "tasks"
        raise SpecError(
            f"{source}: (top level): `tasks` and `methods` go together; `{missing}` is missing"
        )
    spec = Spec(data, source)
    if "tasks" in data:
        _check_registries(data, source)
        for method in data["methods"]:
            spec.settings(method)  # builds every Params: names and types checked here
        if any(registry.get_method(m).sparse for m in data["methods"]) and not data["sparsities"]:
            raise SpecError(f"{source}: sparsities: sparse methods need at least one sparsity")
        _preflight(spec)
        _check_execution(data, source)
    elif data["execution"] != "dense_mask":
        raise SpecError(
            f"{source}: execution: {data['execution']!r} applies to dst/pruning `tasks`, and "
            "this spec has none; remove the key (the kernels section lists its own `backends`)"
        )
    if "kernels" in data and data["kernels"]["device"] == "cuda":
        import torch

        if not torch.cuda.is_available():
            raise SpecError(
                f"{source}: kernels.device: 'cuda' but torch sees no CUDA GPU here; use "
                "device: cpu (or run kernels/gpu_check.sh on a GPU machine)"
            )
    if "hessian" in data:
        for potential, params in data["hessian"]["potentials"].items():
            try:
                _potential_hops(potential, params or {})
            except ValueError as e:
                raise SpecError(f"{source}: hessian.potentials.{potential}: {e}") from None
    return spec


def _check_execution(data: dict[str, Any], source: str) -> None:
    """The ``execution`` backend must run on this machine (its reason otherwise)."""
    import torch

    from sparsebench.kernels import BACKENDS

    name = data["execution"]
    ok, why = BACKENDS[name].available()
    if ok and name == "triton" and not torch.cuda.is_available():
        ok, why = False, "it needs a CUDA GPU to train (TRITON_INTERPRET=1 is for tests only)"
    if not ok:
        raise SpecError(
            f"{source}: execution: backend {name!r} cannot run here: {why}; "
            "use dense_mask or another backend (`sparsebench kernels` lists them)"
        )


def _potential_hops(kind: str, params: dict[str, Any]) -> int:
    """K of potential ``kind`` with ``params`` (builds it on methane; validates the params).
    Raises ValueError for unknown or bad parameters."""
    from sparsebench.methods.hessian.potentials import build_potential
    from sparsebench.methods.hessian.systems import build_system

    return build_potential(kind, build_system("alkane", 1), **params).hops


def _preflight(spec: Spec) -> None:
    """Checks that need the registries' knowledge but no data: the model fits the dataset, the
    torchvision files are there (or may be downloaded), every method can act within the task's
    step budget. Catches at validation what would otherwise fail one job at a time."""
    from sparsebench.suite.data import DATASET_INFO, DatasetNotFoundError, check_available
    from sparsebench.suite.models import build_model

    src, data = spec.source, spec.data
    for name, task in data["tasks"].items():
        info = DATASET_INFO[task["dataset"]]
        try:
            build_model(task["model"], info.input_shape, info.num_classes)
        except ValueError as e:
            raise SpecError(f"{src}: tasks.{name}.model: {e}") from None
        try:
            check_available(task["dataset"], data["data_root"], data["allow_download"])
        except DatasetNotFoundError as e:
            raise SpecError(f"{src}: tasks.{name}.dataset: {e}") from None
        recipe = task["recipe"]
        total_steps = math.ceil(info.n_train / recipe["batch_size"]) * recipe["epochs"]
        for method in data["methods"]:
            cls = registry.get_method(method).cls
            for setting in spec.settings(method):
                try:
                    cls.check_budget(setting.params, total_steps)
                except ValueError as e:
                    raise SpecError(
                        f"{src}: methods.{method} (setting {registry.setting_label(setting.params)}"
                        f") on tasks.{name}: {e}"
                    ) from None


def _check_registries(data: dict[str, Any], source: str) -> None:
    from sparsebench.suite.data import DATASETS
    from sparsebench.suite.models import MODELS

    for name, task in data["tasks"].items():
        if task["dataset"] not in DATASETS:
            raise SpecError(
                f"{source}: tasks.{name}.dataset: unknown dataset {task['dataset']!r}; "
                f"allowed: {', '.join(sorted(DATASETS))}"
            )
        if task["model"] not in MODELS:
            raise SpecError(
                f"{source}: tasks.{name}.model: unknown model {task['model']!r}; "
                f"allowed: {', '.join(sorted(MODELS))}"
            )
    known = registry.all_methods()
    for method, params in data["methods"].items():
        if method not in known:
            raise SpecError(
                f"{source}: methods.{method}: unknown method {method!r}; "
                f"registered methods: {', '.join(known)}"
            )
        if params is not None and not isinstance(params, dict):
            raise SpecError(f"{source}: methods.{method}: expected a mapping of parameters")


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

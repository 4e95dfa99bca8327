"""The lm_pruning pillar: pruning a language model once it is trained, by the methods of the
lm_pruning family (methods/lm_pruning/), unstructured and N:M, judged by held-out perplexity
against the unpruned model.

The model is the SAE pillar's byte-level transformer (suite/pillars/sae/models.py) trained on
the stdlib corpus, here at the size in :data:`MODEL_DEFAULTS`, once, as an artefact
(``results/artefacts/lm_pruning/lm-<h>/model/``). Calibration windows come from the train split
(one draw per seed), held-out windows from the test split's files, which the model never saw.
Cells of one seed share a process, the model and the calibration windows.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.pillar import Artefact, Cell, Metric, Pillar, Plot, register_pillar
from sparsebench.suite.spec import Spec, SpecError, section_settings, show_number

from .columns import COLUMNS

FAMILY = ("lm_pruning",)
# The model pruned (ours: the SAE pillar's model made deeper and wider, so that each block has
# linear layers of 128-512 inputs to prune; about ten minutes to train on 2 cores).
MODEL_DEFAULTS: dict[str, Any] = {
    "d_model": 128, "n_blocks": 4, "n_heads": 4, "ctx": 128, "steps": 1500, "batch_size": 32,
    "lr": 2e-3, "corpus_bytes": 4_000_000,
}  # fmt: skip
DENSE = "dense"
# Most memory the calibration activations may take in the pruning walk (inputs and outputs of
# a block for every window, float32).
CALIBRATION_BYTES = 4 * 2**30


@register_pillar
class LMPruningPillar(Pillar):
    """Pruning a small trained language model, one layer at a time from calibration text, at
    unstructured and N:M sparsity; held-out perplexity against the unpruned model."""

    name = "lm_pruning"
    title = "Language-model pruning"
    families = FAMILY
    spec_keys = ("lm_pruning",)
    columns = COLUMNS
    measured = ("prune_s",)
    job_mem_mb = 2000
    cell_minutes = 10.0
    row_key = ("model", "method", "setting_id", "pattern", "target_sparsity", "seed")
    cell_axes = ("target_sparsity",)
    extra_method_names = (DENSE,)
    metrics = (
        Metric("perplexity", "per byte", False, "held-out perplexity per byte"),
        Metric("test_loss", "nats/byte", False, "held-out cross-entropy"),
        Metric("ppl_ratio", "×", False, "perplexity ÷ the dense model's"),
        Metric("actual_sparsity", "fraction", True, "zeros of the pruned layers"),
        Metric("flops_rel_dense", "×", False, "linear layers' inference FLOPs ÷ dense"),
        Metric("prune_s", "s", False, "calibration statistics and pruning, wall-clock"),
    )
    plots = (Plot("perplexity.png", "perplexity.rst"),)

    def example(self, method: str | None = None) -> dict[str, Any]:
        infos = registry.all_methods(FAMILY)
        names = [method] if method else list(infos)[:2]
        return {
            "lm_pruning": {
                "model": {"d_model": 16, "n_blocks": 1, "n_heads": 2, "ctx": 16, "steps": 5,
                          "batch_size": 4, "corpus_bytes": 20_000},
                "calibration": {"sequences": 4},
                "eval_tokens": 256,
                "patterns": ["unstructured", "2:4"],
                "methods": {n: dict(infos[n].cls.test_params) for n in names},
            }
        }  # fmt: skip

    def schema(self) -> dict[str, Any]:
        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        frag["lm_pruning"]["properties"]["methods"]["propertyNames"]["enum"] = list(
            registry.all_methods(FAMILY)
        )
        return frag

    def check(self, spec: Spec) -> None:
        from sparsebench.suite.pillars.sae.sources import check_corpus

        from .job import check_patterns

        sec, src = spec.data["lm_pruning"], spec.source
        cfg = model_config(spec)
        for i, p in enumerate(sec["patterns"]):
            try:
                if p != "unstructured":
                    target(p, 0.5)
            except ValueError as e:
                raise SpecError(f"{src}: lm_pruning.patterns.{i}: {e}; or 'unstructured'") from None
        try:
            check_patterns(cfg, [target(p, 0.5) for p in sec["patterns"] if p != "unstructured"])
        except ValueError as e:
            raise SpecError(f"{src}: lm_pruning.patterns: {e}") from None
        try:
            check_corpus(cfg, {"train_tokens": cfg.ctx, "eval_tokens": sec["eval_tokens"]})
        except ValueError as e:
            where = "" if str(e).startswith("eval_tokens") else "model."
            raise SpecError(f"{src}: lm_pruning.{where}{str(e).removeprefix('model.')}") from None
        held = sec["calibration"]["sequences"] * cfg.ctx * cfg.d_model * 4 * 2
        if held > CALIBRATION_BYTES:
            most = CALIBRATION_BYTES // (cfg.ctx * cfg.d_model * 8)
            raise SpecError(
                f"{src}: lm_pruning.calibration.sequences: {sec['calibration']['sequences']} "
                f"windows hold {held / 2**30:.1f} GiB of activations in the pruning walk; "
                f"allowed: at most {most} at this model's ctx and d_model"
            )
        for method in sec["methods"]:
            info = registry.get_method(method, FAMILY)
            for s in settings(spec, method):
                try:
                    info.cls.check(s.params, sec)
                except ValueError as e:
                    raise SpecError(f"{src}: lm_pruning.methods.{method}: {e}") from None

    def artefacts(self, spec: Spec) -> list[Artefact]:
        from . import job

        cfg = model_config(spec)
        mid = job.model_id(cfg)
        return [
            Artefact(self.name, mid, f"language model {mid.split('/')[0]}", job.model_files(mid),
                     (), spec.data["threads"], {"model": asdict(cfg)})
        ]  # fmt: skip

    def build(self, spec: Spec, artefact: Artefact) -> None:
        from . import job

        job.build_model(artefact)

    def cells(self, spec: Spec) -> list[Cell]:
        from . import job

        sec = spec.data["lm_pruning"]
        cfg = model_config(spec)
        mid = job.model_id(cfg)
        common = {"model": mid, "calib": sec["calibration"], "eval_tokens": sec["eval_tokens"],
                  "protocol": 1}  # fmt: skip
        out = []
        for seed in sec["seeds"]:
            runs = [(DENSE, "default", "dense", "{}", "dense", 0.0)]
            for method in sec["methods"]:
                for s in settings(spec, method):
                    params_json = json.dumps(registry.params_to_dict(s.params), sort_keys=True)
                    for pattern in sec["patterns"]:
                        spars = sec["sparsities"] if pattern == "unstructured" else [
                            target(pattern, 0.0).sparsity
                        ]  # fmt: skip
                        for sp in spars:
                            runs.append((method, s.setting_id, s.label, params_json, pattern, sp))
            for method, sid, label, params_json, pattern, sp in runs:
                slug = pattern.replace(":", "of")
                where = f"{slug}/s{sp:g}" if pattern == "unstructured" else slug
                out.append(
                    Cell(
                        pillar=self.name,
                        id=f"{method}/{sid}/{where}/seed{seed}",
                        label=f"{method} ({label}) {pattern} {sp:g} seed {seed}",
                        method=method,
                        params_json=params_json,
                        setting_id=sid,
                        seed=seed,
                        trigger={
                            **common,
                            "params": params_json,
                            "pattern": pattern,
                            "sparsity": sp,
                        },  # fmt: skip
                        threads=spec.data["threads"],
                        batch=f"seed{seed}",
                        inputs=(job.model_files(mid)[0],),
                        columns={
                            "model": mid,
                            "setting": label,
                            "pattern": pattern,
                            "target_sparsity": sp,
                        },  # fmt: skip
                    )
                )
        return out

    def prepare(self, spec: Spec, cells) -> Any:
        from . import job

        sec = spec.data["lm_pruning"]
        seeds = {c.seed for c in cells}
        return job.prepare(model_config(spec), sec, seeds)

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from . import job

        pattern = cell.columns["pattern"]
        if cell.method == DENSE:
            return job.run_dense(state)
        info = registry.get_method(cell.method, FAMILY)
        params = registry.build_params(info, json.loads(cell.params_json), families=FAMILY)
        t = target(pattern, cell.columns["target_sparsity"])
        return job.run_pruning(info.cls(params), t, state, cell.seed)


def settings(spec: Spec, method: str):
    """The parameter settings of ``method`` in the spec's lm_pruning section (grid
    expanded)."""
    return section_settings(spec, "lm_pruning", method, FAMILY)


def model_config(spec: Spec):
    """The section's model config (its keys over :data:`MODEL_DEFAULTS`), validated. Raises
    SpecError naming the file, the key and what is allowed."""
    from dataclasses import fields

    from sparsebench.suite.pillars.sae.models import LMConfig

    raw = {**MODEL_DEFAULTS, **spec.data["lm_pruning"].get("model", {})}
    allowed = [f.name for f in fields(LMConfig)]
    unknown = sorted(set(raw) - set(allowed))
    if unknown:
        raise SpecError(
            f"{spec.source}: lm_pruning.model: unknown key {unknown[0]!r}; allowed: "
            f"{', '.join(allowed)}"
        )
    for f in fields(LMConfig):
        kind = type(f.default)
        value = raw[f.name] if f.name in raw else f.default
        ok = isinstance(value, kind) or (kind is float and isinstance(value, int))
        if isinstance(value, bool) or not ok:
            raise SpecError(
                f"{spec.source}: lm_pruning.model.{f.name}: {value!r} is not "
                f"{'an integer' if kind is int else 'a number'}"
            )
        low, high = (0, 2**32 - 1) if f.name == "seed" else (-(2**53), 2**53)
        if not low <= value <= high:
            raise SpecError(
                f"{spec.source}: lm_pruning.model.{f.name}: {show_number(value)} is out of "
                f"range; allowed: {low} to {high}"
            )
    try:
        cfg = LMConfig(**raw)
        cfg.validate()
    except (TypeError, ValueError) as e:
        raise SpecError(f"{spec.source}: lm_pruning.{e}") from None
    return cfg


def target(pattern: str, sparsity: float):
    """The :class:`~sparsebench.methods.lm_pruning.base.Target` of a pattern ("unstructured"
    at ``sparsity``, or "N:M")."""
    from sparsebench.methods.lm_pruning.base import Target
    from sparsebench.suite.pillars.classification.nm import parse_nm

    if pattern == "unstructured":
        return Target(sparsity)
    n, m = parse_nm(pattern)
    return Target(1 - n / m, (n, m))

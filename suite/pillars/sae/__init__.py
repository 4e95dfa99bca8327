"""The SAE pillar: every sparse-autoencoder architecture trained on the same activations with
one recipe, FVU / L0 / dead latents / dictionary recovery side by side, frontier plots.

Sources (:mod:`.sources`): synthetic ground truth (a known dictionary), the suite's byte-level
language model on the stdlib corpus and LeNet-300-100 on images, each at a named hookpoint; the
models and their activations are artefacts made once. Cells of one (source, seed) share a
process and its activations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.pillar import Artefact, Cell, Metric, Pillar, Plot, register_pillar
from sparsebench.suite.spec import Spec, SpecError, section_settings

from .columns import COLUMNS

FAMILY = ("sae",)


@register_pillar
class SAEPillar(Pillar):
    """Sparse autoencoders on activations (synthetic ground truth, a language model, an image
    model): reconstruction and loss recovered against sparsity per architecture, dead latents,
    sparse probing, and the decoder against the true dictionary."""

    name = "sae"
    title = "Sparse autoencoders"
    families = FAMILY
    spec_keys = ("sae",)
    columns = COLUMNS
    measured = ("train_s",)
    job_mem_mb = 3000
    cell_minutes = 10.0
    row_key = ("activations", "width", "method", "setting_id", "seed")
    metrics = (
        Metric("fvu", "fraction", False, "fraction of variance unexplained on held-out tokens"),
        Metric("explained_variance", "fraction", True, "1 − FVU (about the mean)"),
        Metric("l0", "", False, "nonzero latents per token"),
        Metric("l0_train", "", False, "inference L0 on the training tokens"),
        Metric("dead_fraction", "fraction", False, "latents silent over the dead window"),
        Metric("loss_recovered", "fraction", True, "x̂ spliced in: CE recovered vs zero-ablation"),
        Metric("kl_recovered", "fraction", True, "x̂ spliced in: (KL_zero − KL_SAE)/KL_zero"),
        Metric("probe_acc_k1", "fraction", True, "sparse probing, 1 latent (balanced accuracy)"),
        Metric("probe_acc_k5", "fraction", True, "sparse probing, 5 latents (balanced accuracy)"),
        Metric("mcc", "fraction", True, "synthetic: matched |cos| with the true dictionary"),
        Metric("recovery_rate", "fraction", True, "synthetic: true features with |cos| >= 0.9"),
        Metric("bipolar_fraction", "fraction", True, "latents firing with both signs"),
        Metric("pair_recovery", "fraction", True, "synthetic: ± pairs one latent fires ± on"),
        Metric("pair_recovery_any", "fraction", True, "synthetic: ± pairs with a matched latent"),
        Metric("shrinkage", "", True, "relative reconstruction bias γ (1: none)"),
        # 6·d·m·matmuls per token over the tokens of cfg.steps batches: fixed by the config
        Metric(
            "train_flops", "FLOPs", False, "training FLOPs, dense accounting", deterministic=True
        ),
        Metric("train_s", "s", False, "training wall-clock"),
    )
    plots = (
        Plot("fvu_vs_l0.png", "fvu.rst"),
        Plot("loss_recovered_vs_l0.png", "loss_recovered.rst"),
        Plot("dead_vs_l0.png", "dead.rst"),
    )
    batch_max = 8

    def example(self, method: str | None = None) -> dict[str, Any]:
        # the method asked for, or the first two registered, each at its test_params
        infos = registry.all_methods(FAMILY)
        names = [method] if method else list(infos)[:2]
        methods = {name: dict(infos[name].cls.test_params) for name in names}
        return {
            "sae": {
                "sources": {
                    "synthetic": {
                        "kind": "synthetic", "n_features": 32, "d": 8, "n_bipolar": 4,
                        "train_tokens": 2048, "eval_tokens": 512,
                    }
                },
                "widths": [32],
                "methods": methods,
                "seeds": [0],
                "train": {"steps": 20, "batch_size": 128, "dead_window": 1024},
            }
        }  # fmt: skip

    def schema(self) -> dict[str, Any]:
        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        frag["sae"]["properties"]["methods"]["propertyNames"]["enum"] = list(
            registry.all_methods(FAMILY)
        )
        return frag

    def check(self, spec: Spec) -> None:
        from sparsebench.suite.data import check_available

        sec, src = spec.data["sae"], spec.source
        for name in sec["sources"]:
            s = source(spec, name)
            if s.kind == "image":
                try:
                    check_available(
                        s.model.dataset, spec.data["data_root"], spec.data["allow_download"]
                    )
                except FileNotFoundError as e:
                    raise SpecError(f"{src}: sae.sources.{name}.model.dataset: {e}") from None
        for method in sec["methods"]:
            info = registry.get_method(method, FAMILY)
            for s in settings(spec, method):  # every Params built: names and types checked
                try:
                    info.cls.check(s.params, sec)
                except ValueError as e:
                    raise SpecError(f"{src}: sae.methods.{method}: {e}") from None

    def artefacts(self, spec: Spec) -> list[Artefact]:
        from . import sources

        resolved = {name: source(spec, name) for name in spec.data["sae"]["sources"]}
        return sources.artefacts(resolved, spec.data["threads"])

    def build(self, spec: Spec, artefact: Artefact) -> None:
        from . import sources

        sources.build(artefact, spec.data["data_root"])

    def cells(self, spec: Spec) -> list[Cell]:
        from . import sources

        sec = spec.data["sae"]
        out = []
        for name in sec["sources"]:
            src = source(spec, name)
            for seed in sec["seeds"]:
                for width in src.widths or sec["widths"]:
                    for method in sec["methods"]:
                        for s in settings(spec, method):
                            params_json = json.dumps(
                                registry.params_to_dict(s.params), sort_keys=True
                            )
                            out.append(
                                Cell(
                                    pillar=self.name,
                                    id=f"{name}/m{width}/{method}/{s.setting_id}/seed{seed}",
                                    label=f"{name} m={width} {method} ({s.label}) seed {seed}",
                                    method=method,
                                    params_json=params_json,
                                    setting_id=s.setting_id,
                                    seed=seed,
                                    trigger={
                                        "params": params_json,
                                        "source": src.identity(),
                                        "train": sec["train"],
                                        "protocol": 4,
                                    },
                                    threads=spec.data["threads"],
                                    batch=f"{name}/seed{seed}",
                                    inputs=sources.inputs(src),
                                    columns={
                                        "activations": name,
                                        "activations_kind": src.kind,
                                        "hookpoint": src.hookpoint or "",
                                        "width": width,
                                        "setting": s.label,
                                    },
                                )
                            )
        return out

    def prepare(self, spec: Spec, cells) -> Any:
        """The activations of every (source, seed) of the batch, made once."""
        from . import sources

        keys = dict.fromkeys((c.columns["activations"], c.seed) for c in cells)
        return {(name, seed): sources.load(source(spec, name), seed) for name, seed in keys}

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import run_sae

        info = registry.get_method(cell.method, FAMILY)
        params = registry.build_params(info, json.loads(cell.params_json), families=FAMILY)
        acts = state[(cell.columns["activations"], cell.seed)]
        return run_sae(
            info, params, acts, cell.columns["width"], spec.data["sae"]["train"], cell.seed
        )


def settings(spec: Spec, method: str):
    """The parameter settings of ``method`` in the spec's sae section (grid expanded)."""
    return section_settings(spec, "sae", method, FAMILY)


def source(spec: Spec, name: str):
    """The resolved :class:`~.sources.Source` ``name`` of the spec. Raises SpecError naming
    the file, the key and what is allowed."""
    from . import sources

    try:
        return sources.resolve(spec.data["sae"]["sources"][name])
    except (ValueError, TypeError) as e:
        raise SpecError(f"{spec.source}: sae.sources.{name}.{e}") from None

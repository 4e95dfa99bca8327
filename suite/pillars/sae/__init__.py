"""The SAE pillar: every sparse-autoencoder architecture trained on the same activations with
one recipe, FVU / L0 / dead latents / dictionary recovery side by side, frontier plots.

Sources today: synthetic ground truth (a known dictionary; methods/sae/synthetic.py). The
suite's language model and image-model activations are the next sources (docs/sae.md).
Cells of one (source, seed) share a process and its activations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.pillar import Cell, Metric, Pillar, Plot, register_pillar
from sparsebench.suite.spec import Spec, SpecError, section_settings

from .table import COLUMNS

FAMILY = ("sae",)


@register_pillar
class SAEPillar(Pillar):
    """Sparse autoencoders on activations (synthetic ground truth today): reconstruction
    against sparsity per architecture, dead latents, and the decoder against the true
    dictionary."""

    name = "sae"
    title = "Sparse autoencoders"
    families = FAMILY
    method_modules = ("sparsebench.methods.sae",)
    spec_keys = ("sae",)
    columns = COLUMNS
    row_key = ("activations", "width", "method", "setting_id", "seed")
    metrics = (
        Metric("fvu", "fraction", False, "fraction of variance unexplained on held-out tokens"),
        Metric("explained_variance", "fraction", True, "1 − FVU (about the mean)"),
        Metric("l0", "", False, "nonzero latents per token"),
        Metric("dead_fraction", "fraction", False, "latents silent over the dead window"),
        Metric("mcc", "fraction", True, "synthetic: matched |cos| with the true dictionary"),
        Metric("recovery_rate", "fraction", True, "synthetic: true features with |cos| >= 0.9"),
        Metric("bipolar_fraction", "fraction", True, "latents firing with both signs"),
        Metric("shrinkage", "", True, "relative reconstruction bias γ (1: none)"),
        Metric("train_flops", "FLOPs", False, "training FLOPs, dense accounting"),
        Metric("train_s", "s", False, "training wall-clock"),
    )
    plots = (Plot("fvu_vs_l0.png", "fvu.rst"), Plot("dead_vs_l0.png", "dead.rst"))
    batch_max = 8

    def example(self, method: str | None = None) -> dict[str, Any]:
        methods = {method: {}} if method else {"topk": {"k": 4}, "relu_l1": {}}
        if method in ("topk", "batchtopk", "matryoshka_batchtopk"):
            methods = {method: {"k": 4}}
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
        from .job import synthetic_config

        sec, src = spec.data["sae"], spec.source
        for name, source in sec["sources"].items():
            try:
                synthetic_config(source).validate()
            except ValueError as e:
                raise SpecError(f"{src}: sae.sources.{name}: {e}") from None
        for method in sec["methods"]:
            for s in settings(spec, method):  # every Params built: names and types checked
                k = getattr(s.params, "k", None)
                if k is not None and k > min(sec["widths"]):
                    raise SpecError(
                        f"{src}: sae.methods.{method}.k: {k} exceeds the width "
                        f"{min(sec['widths'])}; allowed: 1 to the smallest of sae.widths"
                    )

    def cells(self, spec: Spec) -> list[Cell]:
        sec = spec.data["sae"]
        out = []
        for name, source in sec["sources"].items():
            for seed in sec["seeds"]:
                for width in sec["widths"]:
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
                                        "source": source,
                                        "train": sec["train"],
                                        "protocol": 2,
                                    },
                                    threads=spec.data["threads"],
                                    batch=f"{name}/seed{seed}",
                                    columns={
                                        "activations": name,
                                        "activations_kind": source["kind"],
                                        "width": width,
                                        "setting": s.label,
                                    },
                                )
                            )
        return out

    def prepare(self, spec: Spec, cells) -> Any:
        """The activations of every (source, seed) of the batch, made once."""
        from .job import load_source

        sec = spec.data["sae"]
        keys = dict.fromkeys((c.columns["activations"], c.seed) for c in cells)
        return {(name, seed): load_source(sec["sources"][name], seed) for name, seed in keys}

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import run_sae

        info = registry.get_method(cell.method, FAMILY)
        params = registry.build_params(info, json.loads(cell.params_json), families=FAMILY)
        acts = state[(cell.columns["activations"], cell.seed)]
        return run_sae(
            info, params, acts, cell.columns["width"], spec.data["sae"]["train"], cell.seed
        )

    @property
    def table(self) -> type:
        from .table import SAESchema

        return SAESchema

    def board(self, runs, out_dir: Path) -> dict[str, Path]:
        from .board import write_leaderboard

        return write_leaderboard(runs, out_dir)

    def summary(self, runs, top: int = 3) -> str:
        from .board import summary

        return "```\n" + summary(runs, top) + "\n```"


def settings(spec: Spec, method: str):
    """The parameter settings of ``method`` in the spec's sae section (grid expanded)."""
    return section_settings(spec, "sae", method, FAMILY)

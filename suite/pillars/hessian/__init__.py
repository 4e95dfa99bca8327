"""The hessian pillar: Hessians of local energies from Hessian-vector products, sparse (by graph
coloring) against dense, one cell per (system, size, potential, method) of the spec's
``hessian`` section.

A method gets no cell for a potential it does not apply to (its ``skip`` reason, from the
potential's reach K), a method that is not sparse none above ``dense_max_atoms``. Cells of one
(system, potential) share a process.

Timings vary by tens of percent from run to run, so the section's ``trials`` measures each
cell in that many independent jobs: the same configuration (seed, geometry), one cell and
record per trial with a ``trial`` column, the pillar's replicate (claims average over trials
as over seeds). Trial 0 keeps the id of a section measured once; trial t > 0 adds
``/trial<t>``, and its cells share a process with the same trial of their (system, potential)
only.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sparsebench.suite import registry
from sparsebench.suite.pillar import Cell, Metric, Pillar, Plot, register_pillar, with_trial
from sparsebench.suite.spec import Spec, SpecError

from .columns import HESSIAN_COLUMNS

FAMILY = ("hessian",)


def potential_tag(potential: str, params_json: str) -> str:
    """``pair``, or ``pair-<hash>`` when the potential has non-default parameters."""
    if params_json == "{}":
        return potential
    return f"{potential}-{hashlib.sha1(params_json.encode()).hexdigest()[:8]}"


def potential_hops(kind: str, params: dict[str, Any]) -> int:
    """K of potential ``kind`` with ``params`` (builds it on methane; validates the params).
    Raises ValueError for unknown or bad parameters (a mistyped name with the closest one)."""
    from sparsebench.methods.hessian.potentials import POTENTIALS, build_potential
    from sparsebench.methods.hessian.systems import build_system

    # unknown names here, with the closest one as for methods; values in build_potential
    cls = POTENTIALS.get(kind).Params
    registry.check_fields(
        cls, {k: v for k, v in params.items() if registry.field_problem(cls, k, v) == "unknown"}
    )
    return build_potential(kind, build_system("alkane", 1), **params).hops


@register_pillar
class HessianPillar(Pillar):
    """Sparse Hessians of local potentials by star coloring and compressed HVPs, against the
    dense Hessian: colors, HVP count, exactness and wall-clock against system size."""

    name = "hessian"
    title = "Sparse Hessians by graph coloring"
    families = FAMILY
    spec_keys = ("hessian",)
    fork_cells = False  # records report peak_mem_mb, the job process's own (Pillar)
    columns = HESSIAN_COLUMNS
    measured = (
        "t_pattern_s",
        "t_coloring_s",
        "t_hvp_s",
        "t_decompress_s",
        "wall_s",
        "dense_wall_s",
        "speedup_vs_dense",
        "peak_mem_mb",
    )
    job_mem_mb = 2000
    cell_minutes = 5.0
    row_key = ("system", "n_atoms", "potential", "method", "trial")
    # a cell is one configuration; its trials (independent jobs) are what claims average over
    replicate = "trial"
    ok_metric_column = "wall_s"
    # deterministic: the counts (from the pattern of the section seed's geometry and a greedy
    # coloring in a fixed vertex order) and the errors against dense, which are rounding, not
    # measurement: the same configuration, threads and CPU give them bit for bit (the suite's
    # determinism contract), so their size is a property of the method, not of a draw.
    metrics = (
        Metric(
            "n_colors",
            "",
            False,
            "coordinate colors = compressed HVPs (3N for dense)",
            deterministic=True,
        ),
        Metric("n_hvps", "", False, "Hessian-vector products computed", deterministic=True),
        Metric("wall_s", "s", False, "pattern + coloring + HVPs + recovery"),
        Metric("speedup_vs_dense", "×", True, "dense wall-clock ÷ this method's"),
        Metric(
            "rel_err",
            "",
            False,
            "relative Frobenius error vs dense (or probe HVPs)",
            deterministic=True,
        ),
        Metric("max_abs_err", "", False, "largest entry-wise error vs dense", deterministic=True),
        Metric("peak_mem_mb", "MiB", False, "peak resident memory of the job"),
    )
    plots = (Plot("scaling.png", "scaling.rst"),)

    def example(self, method: str | None = None) -> dict[str, Any]:
        from sparsebench.methods.hessian.potentials import POTENTIALS

        # every potential at its defaults, so that every method applies to one of them; no
        # method asked for: the section's default methods
        section: dict[str, Any] = {
            "systems": {"alkane": {"sizes": [3]}},
            "potentials": {name: {} for name in POTENTIALS},
        }
        if method:
            section["methods"] = [method]
        return {"hessian": section}

    def schema(self) -> dict[str, Any]:
        from sparsebench.methods.hessian.potentials import POTENTIALS
        from sparsebench.methods.hessian.systems import SYSTEMS

        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        props = frag["hessian"]["properties"]
        props["systems"]["propertyNames"]["enum"] = sorted(SYSTEMS)
        props["potentials"]["propertyNames"]["enum"] = sorted(POTENTIALS.names())
        methods = registry.all_methods(FAMILY)
        props["methods"]["items"]["enum"] = list(methods)
        # default: every exact method, the references (not sparse) first
        by_sparse = sorted(methods.items(), key=lambda item: item[1].sparse)
        props["methods"]["default"] = [n for n, info in by_sparse if info.cls.exact]
        return frag

    def check(self, spec: Spec) -> None:
        for potential, params in spec.data["hessian"]["potentials"].items():
            try:
                potential_hops(potential, params or {})
            except ValueError as e:
                raise SpecError(f"{spec.source}: hessian.potentials.{potential}: {e}") from None

    def cells(self, spec: Spec) -> list[Cell]:
        from sparsebench.methods.hessian.systems import n_atoms

        h = spec.data["hessian"]
        # A cell's own coordinates are not its trigger: adding a system, size, potential,
        # method or trial adds cells and reruns none of the others.
        axes = ("systems", "potentials", "methods", "trials")
        settings = {k: v for k, v in h.items() if k not in axes}
        methods = registry.all_methods(FAMILY)
        out = []
        for system, sys_spec in h["systems"].items():
            for potential, params in h["potentials"].items():
                params_json = json.dumps(params or {}, sort_keys=True)
                tag = potential_tag(potential, params_json)
                hops = potential_hops(potential, params or {})
                for method in h["methods"]:
                    info = methods[method]
                    if not info.cls().applies(hops):
                        continue
                    for size in sys_spec["sizes"]:
                        if not info.sparse and n_atoms(system, size) > h["dense_max_atoms"]:
                            continue
                        out.append(
                            Cell(
                                pillar=self.name,
                                id=f"{system}/{tag}/{method}/n{size}",
                                label=f"{system} n={size} {tag} {method}",
                                method=method,
                                seed=h["seed"],  # every trial the same geometry and weights
                                trigger={"params": params_json, **settings},
                                threads=spec.data["threads"],
                                batch=f"{system}/{tag}",
                                columns={
                                    "system": system,
                                    "size": size,
                                    "potential": potential,
                                    "potential_params_json": params_json,
                                    "order": h["order"],
                                    "setting": "default",
                                },
                            )
                        )
        return [with_trial(c, t) for c in out for t in range(int(h["trials"]))]

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import HessianJob, run_hessian_job

        h = spec.data["hessian"]
        c = cell.columns
        job = HessianJob(
            c["system"],
            c["size"],
            c["potential"],
            cell.method,
            json.loads(c["potential_params_json"]),
            h["order"],
            None if h["chunk"] == "auto" else h["chunk"],
            h["repeats"],
            h["dense_max_atoms"],
            h["seed"],
        )
        return run_hessian_job(job, cell.threads)

    def table_rows(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """The record as its row; one written before trials existed is trial 0."""
        return [{**record, "trial": 0} if record.get("trial") is None else record]

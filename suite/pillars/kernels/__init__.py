"""The kernels pillar: every sparse-linear backend timed against dense (``nn.Linear``) and
``dense_mask`` on one (layer shape, pattern, sparsity, batch) cell of the spec's ``kernels``
section. The pattern of W is ``random`` (unstructured) unless the section's ``patterns`` name
others (:mod:`.patterns`); a ``random`` cell's id does not name it.

A record is one cell; its ``rows`` hold one measurement per (backend, op) and become the rows
of the runs table (:meth:`KernelsPillar.table_rows`). Its status is ``failed`` when a backend
failed (``skipped`` rows, a backend that cannot run here, are not failures). Backends are
registered in the ``kernels`` method family (:mod:`sparsebench.kernels.backends`).

Timings vary by tens of percent from run to run, so the section's ``trials`` measures each
cell in that many independent jobs: the same configuration (seed, weights, inputs, masks), one
cell and record per trial with a ``trial`` column, the pillar's replicate (claims average over
trials as over seeds). Trial 0 keeps the id of a section measured once; trial t > 0 adds
``/trial<t>``, and its cells run in a process of their own (batch key ``kernels/trial<t>``).

When the section times the ``cpu`` backend, compiling its C++ extension (about a minute, one
core) is an artefact of its own (:meth:`KernelsPillar.artefacts`), so that Snakemake builds it
on one core next to other jobs instead of inside the timing job, which holds every core of the
section's ``threads``. The artefact's file is a note of the build (``built.json``); the
compiled module lives in the extension cache (``kernels/backends/_cpu_build.py``). A failed
build is written into that note, not raised: the timing job then records the ``cpu`` rows as
failed with the compiler's message, as it would without the artefact.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sparsebench.suite import paths, registry
from sparsebench.suite.pillar import (
    Artefact,
    Cell,
    Metric,
    Pillar,
    Plot,
    register_pillar,
    with_trial,
)
from sparsebench.suite.spec import Spec, SpecError

from .columns import KERNEL_COLUMNS
from .patterns import DEFAULT as DEFAULT_PATTERN
from .patterns import PATTERNS

FAMILY = ("kernels",)
BASELINE = "dense_mask"  # always measured, so not listed among the section's backends


@register_pillar
class KernelsPillar(Pillar):
    """Sparse linear-layer kernels (SpMM forward, SpMM + SDDMM backward) against dense and
    dense x mask: milliseconds and speed-ups at each sparsity, interleaved in one process."""

    name = "kernels"
    title = "Sparse kernels"
    families = FAMILY
    method_packages = {"kernels": "sparsebench.kernels.backends"}
    spec_keys = ("kernels",)
    columns = KERNEL_COLUMNS
    measured = (
        "ms_median",
        "ms_p10",
        "ms_p90",
        "dense_ms",
        "dense_mask_ms",
        "torch_csr_ms",
        "speedup_vs_dense",
        "speedup_vs_dense_mask",
        "speedup_vs_torch_csr",
        "gflops_effective",
    )
    job_mem_mb = 2000
    cell_minutes = 5.0
    row_key = ("backend", "op", "trial")
    # a cell is one configuration; its trials (independent jobs) are what claims average over
    replicate = "trial"
    method_column = "backend"  # a record times every backend; its rows name them
    extra_method_names = ("dense", "dense_mask")  # job.BASELINES
    # None deterministic: timings vary from run to run, and max_abs_err depends on the order
    # in which a multithreaded kernel accumulates its products.
    metrics = (
        Metric("ms_median", "ms", False, "median milliseconds of the op over the rounds"),
        Metric("speedup_vs_dense", "×", True, "dense nn.Linear ms ÷ this backend's"),
        Metric("speedup_vs_dense_mask", "×", True, "dense × mask ms ÷ this backend's"),
        Metric("speedup_vs_torch_csr", "×", True, "torch.sparse CSR ms ÷ this backend's"),
        Metric("gflops_effective", "GFLOP/s", True, "useful sparse FLOPs per second"),
        Metric("max_abs_err", "", False, "largest difference to dense_mask"),
    )
    plots = (Plot("speedup.png", "speedup.rst"),)

    def example(self, method: str | None = None) -> dict[str, Any]:
        backends = [method] if method and method != BASELINE else ["torch_csr"]
        return {
            "kernels": {
                "shapes": [[16, 8]],
                "sparsities": [0.5],
                "batches": [2],
                "backends": backends,
                "repeats": 3,
                "warmup": 0,
            }
        }

    def schema(self) -> dict[str, Any]:
        frag = json.loads(Path(__file__).with_name("section.schema.json").read_text())
        backends = [b for b in registry.all_methods(FAMILY) if b != BASELINE]
        prop = frag["kernels"]["properties"]["backends"]
        prop["items"]["enum"] = backends
        prop["default"] = backends
        frag["kernels"]["properties"]["patterns"]["propertyNames"]["enum"] = PATTERNS.names()
        return frag

    def check(self, spec: Spec) -> None:
        k = spec.data["kernels"]
        shapes = [list(s) for s in k["shapes"]]
        for name, opts in k["patterns"].items():
            for shape in opts.get("shapes", []):
                if list(shape) not in shapes:
                    raise SpecError(
                        f"{spec.source}: kernels.patterns.{name}.shapes: {list(shape)} is not "
                        f"one of the section's shapes {shapes}; add it to kernels.shapes"
                    )
        # Whether a GPU is there is asked when a run starts, of the machines that run the
        # jobs (suite/gpus.py): on a cluster, the submitting machine usually has none.

    def artefacts(self, spec: Spec) -> list[Artefact]:
        """The cpu extension's build, when the section times ``cpu`` on a machine that can
        build it (the id carries the build folder's hash: source, flags, CPU, compiler, torch)."""
        k = spec.data["kernels"]
        if "cpu" not in k["backends"] or k["device"] != "cpu":
            return []
        from sparsebench.kernels.backends import _cpu_build

        if _cpu_build.toolchain_problem() is not None:
            return []  # the backend reports itself unavailable; its rows are skipped
        key = _cpu_build.build_directory().name.rsplit("_", 1)[-1]
        art_id = f"cpu-extension/{key}"
        return [
            Artefact(
                pillar=self.name,
                id=art_id,
                label="compile the cpu backend's C++ extension",
                outputs=(str(paths.artefact(self.name, art_id, "built.json")),),
            )
        ]

    def build(self, spec: Spec, artefact: Artefact) -> None:
        import time

        from sparsebench.kernels.backends import _cpu_build
        from sparsebench.suite.record import write_json_atomic

        start = time.perf_counter()
        try:
            module = _cpu_build.load_extension()
            note = {"ok": True, "module": module.__name__}
        except RuntimeError as e:  # the timing job records the cpu rows as failed
            note = {"ok": False, "error": str(e)}
        note.update(build_dir=str(_cpu_build.build_directory()),
                    seconds=round(time.perf_counter() - start, 1))  # fmt: skip
        write_json_atomic(Path(artefact.outputs[0]), note)

    def cells(self, spec: Spec) -> list[Cell]:
        k = spec.data["kernels"]
        inputs = tuple(o for a in self.artefacts(spec) for o in a.outputs)
        # A cell's own coordinates, and trials (more trials add cells and rerun none), are
        # not its trigger.
        axes = ("shapes", "patterns", "sparsities", "batches", "trials")
        trigger = {key: v for key, v in k.items() if key not in axes}
        threads = k.get("threads", spec.data["threads"])
        cells = [
            Cell(
                pillar=self.name,
                id=f"{int(o)}x{int(i)}{_part(p, '/')}/s{float(s)!r}/b{int(b)}",
                label=f"{int(o)}x{int(i)}{_part(p, ' ')} sparsity {float(s):g} batch {int(b)}",
                method="all",
                seed=k["seed"],  # every trial the same weights, inputs and masks
                trigger=trigger,
                threads=threads,
                gpus=int(k["device"] == "cuda"),
                batch="kernels",
                inputs=inputs,
                columns={
                    "out_features": int(o),
                    "in_features": int(i),
                    "sparsity": float(s),
                    "batch": int(b),
                    "pattern": p,
                    "dtype": k["dtype"],
                    "device": k["device"],
                    "setting": "default",
                },
            )
            for o, i in k["shapes"]
            for p, opts in k["patterns"].items()
            if [o, i] in [list(x) for x in opts.get("shapes", k["shapes"])]
            for s in k["sparsities"]
            for b in k["batches"]
        ]
        return [with_trial(c, t) for c in cells for t in range(int(k["trials"]))]

    def run_cell(self, spec: Spec, cell: Cell, state: Any) -> dict[str, Any]:
        from .job import KernelJob, run_kernel_job

        k, c = spec.data["kernels"], cell.columns
        job = KernelJob(
            c["out_features"],
            c["in_features"],
            c["sparsity"],
            c["batch"],
            tuple(k["backends"]),
            tuple(k["ops"]),
            k["dtype"],
            k["repeats"],
            k["warmup"],
            k["seed"],
            k["device"],
            c["pattern"],
        )
        rows = run_kernel_job(job, cell.threads)
        failed = sorted({r["backend"] for r in rows if r["status"] == "failed"})
        out: dict[str, Any] = {"rows": rows, "device": k["device"]}
        if failed:
            errors = "; ".join(
                f"{r['backend']}: {r['error']}" for r in rows if r["status"] == "failed"
            )
            out.update(status="failed", error=f"backend(s) {', '.join(failed)} failed: {errors}")
        return out

    def add_commands(self, subparsers) -> None:
        k = subparsers.add_parser(
            "kernels", help="list sparse-kernel backends and whether they run here"
        )
        k.set_defaults(func=_cmd_kernels)

    def table_rows(self, record: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per (backend, op) measurement: the cell's columns, then the row's."""
        cell = {k: v for k, v in record.items() if k != "rows"}
        if cell.get("pattern") is None:  # recorded before patterns were an axis: all random
            cell["pattern"] = DEFAULT_PATTERN
        if cell.get("trial") is None:  # recorded before trials: the one measurement, trial 0
            cell["trial"] = 0
        rows = record.get("rows") or []
        if not rows:  # the whole cell failed before measuring
            return [{**cell, "backend": "all", "op": "all"}]
        return [{**cell, "method": r.get("backend", cell.get("method")), **r} for r in rows]


def _part(pattern: str, sep: str) -> str:
    """The pattern's part of a cell id or label: none for the default (``random``), so that
    the cells of a section without ``patterns`` keep their ids."""
    return "" if pattern == DEFAULT_PATTERN else f"{sep}{pattern}"


def _cmd_kernels(args) -> int:
    """``sparsebench kernels``: every registered backend and whether it runs here."""
    from sparsebench.kernels import BACKENDS

    for name, be in BACKENDS.items():
        ok, why = be.available()
        print(f"{name:16s} {'available' if ok else 'unavailable: ' + why}")
        print(f"    {be.description}")
    return 0

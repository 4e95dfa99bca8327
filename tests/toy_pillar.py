"""A toy pillar defined only in the tests: the proof that a pillar is one module and nothing
in the spine. Spec section ``toy: {values: [...]}``; one cell per value; its job writes the
value's square (-1 fails, 55 diverges, 99 kills the process, 77 takes two minutes). With
``base: n`` every cell first reads an artefact, a tensor of n ones built once
(``TOY_BUILD_SLEEP`` seconds of building, to be interrupted), through the suite's artefact
loader. Loaded through
``SPARSEBENCH_PLUGINS=tests.toy_pillar``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import polars as pl

from sparsebench.suite import paths, tensorfile
from sparsebench.suite.boards import write_board_files
from sparsebench.suite.pillar import Artefact, Cell, Metric, Pillar, register_pillar
from sparsebench.suite.record import Diverged


@register_pillar
class ToyPillar(Pillar):
    """Squares numbers (a test of the pillar contract)."""

    name = "toy"
    title = "Toy"
    spec_keys = ("toy",)
    columns = {"value": float, "square": float}  # the runs table: common columns + these
    extra_method_names = ("square",)  # the cells' method: the toy registers no method family
    # deterministic: arithmetic, so its claims may use stat: exact
    metrics = (Metric("square", "", True, "the value squared", deterministic=True),)

    def example(self, method=None):
        return {"toy": {"values": [1, 2]}}

    def schema(self):
        values = {"type": "array", "minItems": 1, "items": {"type": "number"}}
        return {
            "toy": {
                "type": "object",
                "additionalProperties": False,
                "required": ["values"],
                "properties": {"values": values, "base": {"type": "integer", "minimum": 1}},
            }
        }

    def _base(self, spec):
        n = spec.data["toy"].get("base")
        if n is None:
            return None
        folder = paths.artefact(self.name, f"base-{n}")
        return Artefact(self.name, f"base-{n}", f"base of {n}",
                        (str(folder / "t.safetensors"), str(folder / "meta.json")),
                        params={"n": n})  # fmt: skip

    def artefacts(self, spec):
        base = self._base(spec)
        return [base] if base else []

    def build(self, spec, artefact):
        import torch

        time.sleep(float(os.environ.get("TOY_BUILD_SLEEP", "0")))
        tensorfile.save(*artefact.outputs, {"w": torch.ones(artefact.params["n"])}, {})

    def cells(self, spec):
        base = self._base(spec)
        return [
            Cell(
                self.name,
                f"v{v:g}",
                f"value {v:g}",
                "square",
                trigger={"v": v},
                columns={"value": float(v)},
                inputs=base.outputs if base else (),
            )  # fmt: skip
            for v in spec.data["toy"]["values"]
        ]

    def run_cell(self, spec, cell, state):
        if cell.inputs:
            tensorfile.load(*cell.inputs, "the toy's rule builds it", "toy artefact")
        if cell.columns["value"] == 99:  # a crash no exception reaches (as a segfault)
            os._exit(3)
        if cell.columns["value"] == 77:  # a long cell, to be interrupted (a rerun may shorten it)
            time.sleep(float(os.environ.get("TOY_SLEEP", "120")))
        if cell.columns["value"] == 55:
            raise Diverged("the square is nan at step 3")
        if cell.columns["value"] < 0:
            raise ValueError("negative values are refused")
        return {"square": cell.columns["value"] ** 2}

    def board(self, runs: pl.DataFrame, out_dir: Path) -> dict[str, Path]:
        board = runs.filter(pl.col("status") == "ok").select("value", "square").sort("value")
        md = "# Toy\n\n" + "\n".join(f"- {v:g}² = {s:g}" for v, s in board.iter_rows()) + "\n"
        return write_board_files(out_dir, md, board)

    def summary(self, runs, top=3):
        best = runs.sort("square", descending=True, nulls_last=True).head(top)
        return "\n".join(f"- {v:g}² = {s}" for v, s in best.select("value", "square").iter_rows())

"""Hand-built runs tables and claim files for the claims engine's tests."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import polars as pl
import pytest
import yaml

from sparsebench.suite.claims.parse import parse

PAPER = {"key": "toy2026", "authors": "A. Author", "year": 2026, "title": "A paper"}


def rows(method: str, values: list[float], sparsity: float = 0.9, **extra: Any) -> list[dict]:
    """One classification row per seed of (method, sparsity) with test_acc = values[seed]."""
    setting = extra.pop("setting", "default")
    status = extra.pop("status", "ok")
    out = []
    for seed, v in enumerate(values):
        cell = f"t/{method}/{setting}/s{sparsity}/seed{seed}"
        out.append({"cell_id": cell, "label": f"{method} {setting} {sparsity:.0%}",
                    "task": "t", "method": method, "setting_id": setting, "setting": setting,
                    "target_sparsity": sparsity, "seed": seed, "status": status,
                    "test_acc": v, "train_flops": 1e9 * (1 - sparsity), **extra})  # fmt: skip
    return out


def table(*groups: list[dict]) -> pl.DataFrame:
    return pl.DataFrame([r for g in groups for r in g])


@pytest.fixture
def claim() -> Callable[..., Any]:
    """``claim(test)``: one parsed classification claim with the given test mapping."""

    def build(test: dict[str, Any], **defaults: Any) -> Any:
        data = {
            "paper": PAPER,
            "defaults": {"pillar": "classification", "metric": "test_acc", **defaults},
            "claims": [
                {
                    "id": "c-1",
                    "statement": "s",
                    "source": {"where": "T1", "setting": "x"},
                    "why": "w",
                    "test": test,
                }
            ],  # fmt: skip
        }
        return parse(data, "toy.yaml")[0]

    return build


@pytest.fixture
def claim_file(tmp_path: Path) -> Callable[..., Path]:
    """``claim_file(claims, name=..., **top)``: a claim file on disk."""

    def write(claims: list[dict], name: str = "toy.yaml", **top: Any) -> Path:
        data = {"paper": PAPER, "defaults": {"pillar": "classification", "metric": "test_acc"}}
        data.update(top)
        data["claims"] = claims
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


def one(cid: str = "c-1", **test: Any) -> dict[str, Any]:
    """A claim mapping with id ``cid`` and the given test."""
    return {"id": cid, "statement": "s", "source": {"where": "T1", "setting": "x"}, "why": "w",
            "test": test}  # fmt: skip

"""Shared fixtures."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import pytest


def _unshadow_code_folders() -> None:
    """Under pytest the repository root is on ``sys.path`` (``tests`` is a package), so the
    code folders ``kernels/``, ``methods/`` and ``suite/`` would import as top-level packages
    and shadow installed distributions of those names: the oracles' venv has Hugging Face's
    ``kernels``, which transformers imports when its metadata says it is installed, and it got
    ours. The suite imports them only as ``sparsebench.*``, so a top-level import of one of
    these names resolves as if the root were not on the path: the installed package, or
    ModuleNotFoundError when there is none."""
    import importlib.machinery
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != root]
    for name in ("kernels", "methods", "suite"):
        if importlib.machinery.PathFinder.find_spec(name, elsewhere) is None:
            sys.modules.setdefault(name, None)  # type: ignore[arg-type]
    sys.meta_path.insert(0, _Installed(elsewhere))


class _Installed:
    """Meta path finder: the top-level code-folder names from ``path`` (the root left out)."""

    def __init__(self, path: list[str]) -> None:
        self.path = path

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        import importlib.machinery

        if path is None and name in ("kernels", "methods", "suite"):
            return importlib.machinery.PathFinder.find_spec(name, self.path)
        return None


_unshadow_code_folders()

from sparsebench.suite.pillars.classification.table import COLUMNS  # noqa: E402
from sparsebench.suite.record import COMMON_COLUMNS  # noqa: E402

MakeRecord = Callable[..., dict[str, Any]]

PRUNING_METHODS = ("magnitude", "gmp", "snip")


def pytest_configure(config: pytest.Config) -> None:
    """One torch thread per xdist worker: `make test` runs a worker per core, and torch's
    default of a thread per core in every worker oversubscribes the machine (a 3 s SAE
    training took 30 s beside another worker)."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Snakemake end-to-end tests (marker ``e2e``, a minute or more each) run first: collected
    last, they kept one xdist worker busy alone at the end of `make test`."""
    items.sort(key=lambda item: item.get_closest_marker("e2e") is None)  # stable sort


@pytest.fixture
def make_record() -> MakeRecord:
    """A function building a valid ``ok`` classification record dict (every common column,
    every classification column, plus ``host``); keyword arguments override columns. The cell
    id, label and family follow the (overridden) task, method, setting, sparsity and seed
    unless given. ``status="failed"``/``"diverged"`` also nulls the metrics and sets an error,
    as a real failed job does (override ``error`` to change the message)."""

    def build(**overrides: Any) -> dict[str, Any]:
        method = overrides.get("method", "rigl")
        sparsity = overrides.get("target_sparsity", 0.0 if method == "dense" else 0.9)
        density = 1.0 - sparsity
        rec: dict[str, Any] = {
            "benchmark": "unit",
            "pillar": "classification",
            "family": "pruning" if method in PRUNING_METHODS else "dst",
            "task": "digits_mlp",
            "dataset": "digits",
            "model": "mlp",
            "method": method,
            "params_json": "{}",
            "setting_id": "default",
            "setting": "default",
            "execution": "dense_mask",
            "target_sparsity": sparsity,
            "actual_sparsity": sparsity,
            "seed": 0,
            "status": "ok",
            "error": None,
            "test_acc": 0.9,
            "test_loss": 0.3,
            "val_acc": 0.91,
            "val_loss": 0.28,
            "epochs": 2,
            "steps": 40,
            "train_flops": 1e9 * density,
            "inference_flops": 1e5 * density,
            "train_flops_rel_dense": density,
            "inference_flops_rel_dense": density,
            "params_total": 1000,
            "params_nonzero": round(1000 * density),
            "train_wall_s": 2.0,
            "infer_ms": 0.5,
            "infer_batch": 256,
            "layer_densities_json": "{}",
            "distribution": None if method == "dense" else "erk",
            "trained_density": density,
            "reachable_outputs_init": 1.0,
            "reachable_outputs": 1.0,
            "allocation": None if method == "dense" else "erk",
            "pattern": None if method == "dense" else "unstructured",
            "activation_density": None,
            "allocation_shift": None if method == "dense" else 0.0,
            "init": None if method == "dense" else "default",
            "mask_updates": 0 if method in ("dense", "static") else 4,
            "effective_density_init": density,
            "effective_density": density,
            "regrowth_s": None if method in ("dense", "static") else 0.02,
            "regrowth_updates": None if method in ("dense", "static") else 4,
            "device": "cpu",
            "threads": 1,
            "parallel_jobs": 2,
            "cell_s": 2.5,
            "torch_version": "2.14.1",
            "package_version": "0.1.0",
            "git_sha": "0" * 40,
            "git_dirty": False,
            "spec_hash": "abc123",
            "trigger": "0123456789abcdef",
            "started_at": "2025-01-01T00:00:00+00:00",
            "finished_at": "2025-01-01T00:00:05+00:00",
            "host": "testhost",
        }
        if overrides.get("status", "ok") != "ok":
            for col in (
                "actual_sparsity", "test_acc", "test_loss", "val_acc", "val_loss", "steps",
                "train_flops", "inference_flops", "train_flops_rel_dense",
                "inference_flops_rel_dense", "params_total", "params_nonzero", "train_wall_s",
                "infer_ms", "infer_batch", "layer_densities_json", "device", "trained_density",
                "reachable_outputs_init", "reachable_outputs", "regrowth_s", "regrowth_updates",
                "mask_updates", "effective_density_init", "effective_density",
            ):  # fmt: skip
                rec[col] = None
            rec["error"] = "RuntimeError: boom"
        rec.update(overrides)
        # The cell's identity, as the classification pillar builds it (unless overridden).
        s = rec["target_sparsity"]
        s = f"{float(s):g}" if isinstance(s, int | float) else s
        if "cell_id" not in overrides:
            rec["cell_id"] = (
                f"{rec['task']}/{rec['method']}/{rec['setting_id']}/s{s}/seed{rec['seed']}"
            )
        if "label" not in overrides:
            rec["label"] = (
                f"{rec['task']} {rec['method']} [{rec['setting']}] s={s} seed={rec['seed']}"
            )
        assert set(COMMON_COLUMNS) <= set(rec), "factory lags behind COMMON_COLUMNS"
        assert set(COLUMNS) <= set(rec), "factory lags behind the classification COLUMNS"
        return rec

    return build

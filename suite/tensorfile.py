"""Tensors on disk for artefacts (trained models, cached activations): one safetensors file of
named tensors plus a JSON sidecar, both written atomically, loaded without unpickling."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def save(
    tensor_path: str | Path,
    meta_path: str | Path,
    tensors: Mapping[str, torch.Tensor],
    meta: Mapping[str, Any],
) -> None:
    """Write ``tensors`` (safetensors) then ``meta`` (JSON, with ``written_at``), each through a
    temporary file and an atomic rename: a crash leaves no torn or half-made artefact (the meta
    file, written last, is what marks it complete)."""
    from safetensors.torch import save_file

    from sparsebench.suite.atomic import atomic_path
    from sparsebench.suite.record import write_json_atomic

    with atomic_path(tensor_path) as tmp:
        save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp))
    write_json_atomic(meta_path, {**meta, "written_at": time.strftime("%Y-%m-%dT%H:%M:%S")})


def load(
    tensor_path: str | Path, meta_path: str | Path, how_to_make: str, what: str = "artefact"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta). Raises FileNotFoundError naming ``what``, the missing file and
    ``how_to_make``."""
    from safetensors.torch import load_file

    for p in (tensor_path, meta_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"missing {what} {p}; {how_to_make}")
    return load_file(str(tensor_path)), json.loads(Path(meta_path).read_text())

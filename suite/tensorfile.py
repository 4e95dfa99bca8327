"""Tensors on disk for artefacts (trained models, cached activations): one safetensors file of
named tensors plus a JSON sidecar, both written atomically, loaded without unpickling.

The sidecar records the tensor file's SHA-256 and each tensor's shape and dtype; :func:`load`
checks them, and that every floating-point tensor is finite, so a truncated, replaced or
corrupted artefact is refused naming its file and how to make it again, never used.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sparsebench.suite.atomic import sha256_of

if TYPE_CHECKING:
    import torch


class ArtefactError(ValueError):
    """An artefact on disk that cannot be used; the message names the file, what is wrong and
    how to make it again."""


def save(
    tensor_path: str | Path,
    meta_path: str | Path,
    tensors: Mapping[str, torch.Tensor],
    meta: Mapping[str, Any],
) -> None:
    """Write ``tensors`` (safetensors) then ``meta`` (JSON, with ``written_at``, the tensor
    file's ``sha256`` and each tensor's shape and dtype), each through a temporary file and an
    atomic rename: a crash leaves no torn or half-made artefact (the meta file, written last,
    is what marks it complete)."""
    from safetensors.torch import save_file

    from sparsebench.suite.atomic import atomic_path
    from sparsebench.suite.record import write_json_atomic

    tensors = {k: v.detach().contiguous() for k, v in tensors.items()}
    with atomic_path(tensor_path) as tmp:
        save_file(tensors, str(tmp))
        digest = sha256_of(tmp)
    layout = {k: {"shape": list(v.shape), "dtype": str(v.dtype)} for k, v in tensors.items()}
    write_json_atomic(
        meta_path,
        {
            **meta,
            "sha256": digest,
            "tensors": layout,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    )


def load(
    tensor_path: str | Path, meta_path: str | Path, how_to_make: str, what: str = "artefact"
) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, meta), checked. Raises FileNotFoundError naming ``what``, the missing file
    and ``how_to_make``; :class:`ArtefactError` (the file, the fault, and "remove the folder
    and" ``how_to_make``) when the sidecar is not JSON, the file's SHA-256 differs from the
    one recorded at writing, it is not a readable safetensors file, a tensor's shape or dtype
    differs from the sidecar's, or a floating-point tensor holds NaN or infinity. A sidecar
    written before hashes were recorded is checked for all but the hash."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    for p in (tensor_path, meta_path):
        if not Path(p).is_file():
            raise FileNotFoundError(f"missing {what} {p}; {how_to_make}")
    folder = Path(tensor_path).parent
    fix = f"remove {folder} and rebuild it: {how_to_make}"

    def refuse(path: Any, fault: str) -> ArtefactError:
        return ArtefactError(f"{what} {path}: {fault}; {fix}")

    try:
        meta = json.loads(Path(meta_path).read_text())
    except (OSError, ValueError) as e:
        raise refuse(meta_path, f"not a readable JSON sidecar ({e})") from None
    if not isinstance(meta, dict):
        raise refuse(meta_path, "the sidecar is not a JSON object")
    recorded = meta.get("sha256")
    if recorded is not None and sha256_of(tensor_path) != recorded:
        raise refuse(tensor_path, "its content changed since it was written (SHA-256 differs)")
    try:
        tensors = load_file(str(tensor_path))
    except (SafetensorError, OSError, ValueError) as e:
        raise refuse(tensor_path, f"not a readable safetensors file ({e})") from None
    layout = meta.get("tensors")
    if layout is not None:
        if sorted(layout) != sorted(tensors):
            raise refuse(
                tensor_path,
                f"it holds tensors {sorted(tensors)}, its sidecar lists {sorted(layout)}",
            )
        for name, t in tensors.items():
            want = layout[name]
            if list(t.shape) != want["shape"] or str(t.dtype) != want["dtype"]:
                raise refuse(
                    tensor_path,
                    f"tensor {name!r} is {str(t.dtype)} {list(t.shape)}, its sidecar says "
                    f"{want['dtype']} {want['shape']}",
                )
    for name, t in tensors.items():
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            raise refuse(tensor_path, f"tensor {name!r} holds NaN or infinite values")
    return tensors, meta

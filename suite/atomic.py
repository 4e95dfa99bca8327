"""Atomic file writes: a temporary file in the destination's folder, then ``os.replace``.

Readers see the old file or the complete new one, never a torn one, and a writer that fails
leaves the old file as it was and no temporary file behind.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | Path, *, fsync: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary path beside ``path`` for a writer that needs a path
    (safetensors' ``save_file``, polars' ``write_parquet``); on a clean exit it is renamed onto
    ``path``, on an exception removed. ``fsync`` flushes the data to disk before the rename.

    The name is not created in advance (mkstemp would, with a 0600 mode that leaks onto the
    final file and hides it from other users of a shared results folder): the writer creates it
    with the usual permissions.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        yield tmp
        if fsync:
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(
    path: str | Path, data: bytes | str | Callable[[Path], object], *, fsync: bool = False
) -> None:
    """Write ``data`` (bytes; text as UTF-8; or a callable that writes the path it is given)
    to ``path`` atomically (see :func:`atomic_path`)."""
    with atomic_path(path, fsync=fsync) as tmp:
        if callable(data):
            data(tmp)
        else:
            with open(tmp, "xb") as f:
                f.write(data.encode("utf-8") if isinstance(data, str) else data)


def sha256_of(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex), read in blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()

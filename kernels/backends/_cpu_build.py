"""JIT build and cache of the C++ kernels in ``csrc/sparse_linear.cpp`` (``cpu`` backend).

The extension is compiled once per (source, flags, CPU, Python, torch) with
``torch.utils.cpp_extension.load`` (Ninja) into a stable cache folder, so later processes only
``dlopen`` it. The folder is ``$SPARSEBENCH_EXTENSIONS_DIR`` if set, else
``$TORCH_EXTENSIONS_DIR/sparsebench``, else ``~/.cache/sparsebench/torch_extensions``. Its name
carries a hash of everything that changes the binary, including the CPU's feature flags:
``-march=native`` code from one node of a cluster must never be loaded on an older one, and of
the absolute paths torch writes into ``build.ninja`` (the source file and the torch install):
two checkouts or venvs sharing one folder would rewrite each other's ``build.ninja`` and
recompile on every switch (a minute each).
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import sys
import threading
from importlib import resources
from pathlib import Path
from types import ModuleType

import torch

EXTENSION_NAME = "sparsebench_sparse_linear"
CFLAGS = ("-O3", "-march=native", "-fopenmp")  # torch adds -std=c++20 (its headers need it)
LDFLAGS = ("-fopenmp",)

_lock = threading.Lock()
_module: ModuleType | None = None


def source_path() -> Path:
    """Path of the C++ source shipped as package data (``sparsebench/kernels/csrc``)."""
    return Path(str(resources.files("sparsebench.kernels").joinpath("csrc/sparse_linear.cpp")))


def compiler() -> str | None:
    """The C++ compiler torch would use (``$CXX``, default ``c++``) as a full path, or None."""
    return shutil.which(os.environ.get("CXX", "c++"))


def toolchain_problem() -> str | None:
    """Why the extension cannot be built here (no compiler, no Ninja, no source), or None."""
    cxx = compiler()
    if cxx is None:
        return (
            f"no C++ compiler found: {os.environ.get('CXX', 'c++')!r} is not on PATH "
            "(install g++/clang++ or set CXX)"
        )
    if shutil.which("ninja") is None:
        return "Ninja not found: torch.utils.cpp_extension needs it (pip install ninja)"
    if not source_path().is_file():
        return f"C++ source missing: {source_path()} (broken installation?)"
    return None


def _cpu_fingerprint() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.machine() + platform.processor()


def build_directory() -> Path:
    """Cache folder of this build (created on demand)."""
    root = os.environ.get("SPARSEBENCH_EXTENSIONS_DIR")
    if root is None:
        torch_root = os.environ.get("TORCH_EXTENSIONS_DIR")
        root = (
            os.path.join(torch_root, "sparsebench")
            if torch_root
            else os.path.join(Path.home(), ".cache", "sparsebench", "torch_extensions")
        )
    key = hashlib.sha256()
    for part in (
        source_path().read_bytes(),
        str(source_path()).encode(),
        str(Path(torch.__file__).resolve().parent).encode(),
        " ".join(CFLAGS + LDFLAGS).encode(),
        _cpu_fingerprint().encode(),
        (compiler() or "").encode(),
        torch.__version__.encode(),
        sys.version.encode(),
    ):
        key.update(part)
        key.update(b"\0")
    tag = f"py{sys.version_info.major}{sys.version_info.minor}_torch{torch.__version__}"
    return Path(root) / f"{EXTENSION_NAME}_{tag}_{key.hexdigest()[:12]}"


def module_name(build_dir: Path) -> str:
    """The extension's module name for ``build_dir``: unique per build folder. torch's JIT
    versioner renames an extension (``name_v1``, ...) and recompiles it when one process loads
    the same name with other arguments (another folder, another compiler), and the renamed
    build then overwrites the shared cache's ``build.ninja``: every later process recompiled."""
    return f"{EXTENSION_NAME}_{build_dir.name.rsplit('_', 1)[-1]}"


def is_loaded() -> bool:
    """Whether the extension is already imported in this process."""
    return _module is not None


def load_extension(verbose: bool = False) -> ModuleType:
    """Compile (first call on this machine) and import the extension; cached per process.

    Returns the module with ``spmm`` and ``sddmm``. Raises RuntimeError naming the reason when
    there is no compiler/Ninja, and the build folder plus the compiler output when the build
    fails (the full log is kept in ``<build folder>/build.log``).
    """
    global _module
    if _module is not None:
        return _module
    with _lock:
        if _module is not None:
            return _module
        problem = toolchain_problem()
        if problem is not None:
            raise RuntimeError(f"cpu backend unavailable: {problem}")
        # Importing cpp_extension on a CUDA build without a CUDA runtime logs a warning about
        # CUDA_HOME that does not concern a CPU-only extension.
        ext_logger = logging.getLogger("torch.utils.cpp_extension")
        level = ext_logger.level
        ext_logger.setLevel(logging.ERROR)
        try:
            from torch.utils.cpp_extension import load
        finally:
            ext_logger.setLevel(level)

        build_dir = build_directory()
        build_dir.mkdir(parents=True, exist_ok=True)
        try:
            _module = load(
                name=module_name(build_dir),
                sources=[str(source_path())],
                extra_cflags=list(CFLAGS),
                extra_ldflags=list(LDFLAGS),
                build_directory=str(build_dir),
                verbose=verbose,
            )
        except Exception as exc:  # the compiler's output is in the exception text
            log = build_dir / "build.log"
            log.write_text(f"compiler: {compiler()}\n{exc}\n")
            errors = [line for line in str(exc).splitlines() if "error" in line.lower()]
            raise RuntimeError(
                f"building the cpu kernel failed with {compiler()} in {build_dir} "
                f"(full compiler output: {log}); first errors:\n" + "\n".join(errors[:8])
            ) from exc
        return _module

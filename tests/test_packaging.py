"""Every code folder is installed: a package folder without ``__init__.py`` (setup.py's
discovery would skip it) or a data file no ``package-data`` glob covers would work in this
editable checkout and be missing from a wheel."""

from __future__ import annotations

import fnmatch
import importlib.util
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _setup_module():
    spec = importlib.util.spec_from_file_location("sparsebench_setup", REPO / "setup.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # defines packages(); setup() runs only as __main__
    return module


def _config() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]


def _is_data(path: Path, config: dict) -> bool:
    """Whether a package-data glob of the code folder holding ``path`` covers it."""
    for pkg, folder in config["package-dir"].items():
        if (REPO / folder) in path.parents:
            rel = path.relative_to(REPO / folder).as_posix()
            return any(fnmatch.fnmatch(rel, g) for g in config["package-data"].get(pkg, []))
    return False


def _source_folders(root: str) -> list[Path]:
    """Folders holding Python modules (not Python files shipped as data, e.g. Snakemake's)."""
    config = _config()
    modules = (REPO / root).rglob("*.py")
    return sorted(
        {p.parent for p in modules if "__pycache__" not in p.parts and not _is_data(p, config)}
    )


def test_every_folder_with_python_files_is_an_installed_package():
    setup = _setup_module()
    installed = set(setup.packages())
    for root in setup.ROOTS:
        for folder in _source_folders(root):
            rel = folder.relative_to(REPO)
            assert (folder / "__init__.py").is_file(), f"{rel} has .py files but no __init__.py"
            assert "sparsebench." + ".".join(rel.parts) in installed, rel


def test_every_data_file_is_package_data():
    config = _config()
    for folder in config["package-dir"].values():
        for path in (REPO / folder).rglob("*"):
            if not path.is_file() or path.suffix in (".py", ".pyc") or "__pycache__" in path.parts:
                continue
            assert _is_data(path, config), (
                f"{path.relative_to(REPO)} is not covered by [tool.setuptools.package-data]"
            )

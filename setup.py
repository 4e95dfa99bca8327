"""Package discovery, the one thing pyproject.toml cannot say: the code folders ``suite/``,
``methods/`` and ``kernels/`` install as ``sparsebench.suite``, ``sparsebench.methods`` and
``sparsebench.kernels`` (``package-dir`` in pyproject.toml), and every package below them is
found here, so a new pillar or method family folder is installed without a list to edit."""

from setuptools import find_namespace_packages, setup

ROOTS = ("suite", "methods", "kernels")


def packages() -> list[str]:
    """``sparsebench`` and every folder under the code folders, as installed names: packages
    and the data-only folders their package-data lives in (specs, rules, C++ sources), which
    setuptools otherwise warns it would leave out."""
    found = find_namespace_packages(
        include=[f"{r}*" for r in ROOTS], exclude=["*__pycache__*", "*.egg-info*"]
    )
    return ["sparsebench", *(f"sparsebench.{p}" for p in found)]


if __name__ == "__main__":
    setup(packages=packages())

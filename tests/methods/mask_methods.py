"""Registry lookups of the mask-method families (dst and pruning) for the method tests."""

from functools import partial

from sparsebench.suite import registry
from sparsebench.suite.registry import RegistryError

FAMILIES = ("dst", "pruning")
build_params = partial(registry.build_params, families=FAMILIES)
get_method = partial(registry.get_method, families=FAMILIES)

__all__ = ["FAMILIES", "RegistryError", "build_params", "get_method"]

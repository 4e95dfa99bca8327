"""The hessian methods' contract: the pattern each colors, exactness, where each applies."""

from __future__ import annotations

import pytest

from sparsebench.methods.hessian.base import HessianMethod
from sparsebench.suite import registry

METHODS = registry.all_methods(("hessian",))


def test_every_method_meets_the_contract():
    for name, info in METHODS.items():
        assert issubclass(info.cls, HessianMethod), name
        assert info.cls.brief, f"{name}: a one-line brief for the leaderboard"
        assert isinstance(info.cls.exact, bool)


@pytest.mark.parametrize(
    ("name", "hops", "pattern", "exact", "sparse"),
    [
        ("dense", 2, None, True, False),  # every column, the reference
        ("colored", 2, 2, True, True),  # the potential's full reach
        ("truncated", 4, 3, False, True),  # one hop short
    ],
)
def test_pattern_exactness_and_sparsity(name, hops, pattern, exact, sparse):
    info = METHODS[name]
    assert info.cls().pattern_hops(hops) == pattern
    assert info.cls.exact is exact and info.sparse is sparse


def test_only_the_truncation_needs_more_than_one_hop():
    for name, info in METHODS.items():
        method = info.cls()
        assert method.applies(2) and method.skip(2) is None
        one_hop = name != "truncated"
        assert method.applies(1) is one_hop
        assert (method.skip(1) is None) is one_hop
    assert METHODS["truncated"].cls().skip(1) == "needs a potential reaching more than 1 hop"

"""Catalog: a named registry whose lookups all fail the same way, listing what is allowed."""

from __future__ import annotations

import pytest

from sparsebench.suite.catalog import Catalog, CatalogError


def _fruit() -> Catalog[int]:
    c: Catalog[int] = Catalog("fruit")
    c.add("pear", 1)
    c.add("apple", 2)
    c.add("mango", 3)
    return c


def test_entries_in_registration_order():
    c = _fruit()
    assert c.names() == ["pear", "apple", "mango"] == list(c)
    assert list(c.items()) == [("pear", 1), ("apple", 2), ("mango", 3)]
    assert len(c) == 3 and "apple" in c and "kiwi" not in c
    assert c.get("apple") == 2 and c["mango"] == 3


def test_the_decorator_registers_and_returns_the_entry():
    c: Catalog[object] = Catalog("model")

    @c.register("tiny")
    def tiny() -> str:
        return "built"

    assert c["tiny"] is tiny and tiny() == "built"


def test_unknown_name_lists_the_allowed_names_sorted():
    with pytest.raises(CatalogError) as e:
        _fruit().get("zzz")
    assert str(e.value) == "unknown fruit 'zzz'; allowed: apple, mango, pear"


def test_a_close_name_is_suggested():
    with pytest.raises(CatalogError) as e:
        _fruit()["aple"]
    assert str(e.value) == "unknown fruit 'aple'; did you mean 'apple'? allowed: apple, mango, pear"
    assert _fruit().unknown("mang") == (
        "unknown fruit 'mang'; did you mean 'mango'? allowed: apple, mango, pear"
    )


def test_an_unhashable_name_is_an_unknown_name_and_a_catalog_error_is_a_value_error():
    with pytest.raises(ValueError, match=r"^unknown fruit \[3\]; allowed: apple, mango, pear$"):
        _fruit().get([3])  # type: ignore[arg-type]


def test_a_name_taken_by_another_entry_is_refused_the_same_entry_again_is_not():
    c = _fruit()
    c.add("pear", 1)  # a module imported twice registers the same object again
    assert c["pear"] == 1 and len(c) == 3
    with pytest.raises(CatalogError, match=r"^fruit 'pear' is registered twice$"):
        c.add("pear", 7)
    assert c["pear"] == 1

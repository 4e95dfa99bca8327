"""A named catalog: one registry class for the things specs name besides methods (datasets,
models, potentials), so that every lookup fails the same way and lists what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Callable, ItemsView, Iterable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


def closest(name: object, choices: Iterable[object]) -> str | None:
    """The choice most like ``name`` (difflib, ratio >= 0.6), or None: what a "did you mean"
    offers for a mistyped name. Every lookup of a user-typed name uses it, so that all suggest
    alike."""
    # compared case-blind ("AdamW" is adamw, not adam), the choice returned as written
    by_folded = {str(c).casefold(): str(c) for c in choices}
    close = difflib.get_close_matches(str(name).casefold(), list(by_folded), n=1)
    return by_folded[close[0]] if close else None


def did_you_mean(name: object, choices: Iterable[object]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``name``; ``""`` when none
    is close (a suggestion far off would mislead more than none)."""
    match = closest(name, choices)
    return "" if match is None else f"; did you mean {match!r}?"


class CatalogError(ValueError):
    """An unknown name or a name registered twice."""


class Catalog(Generic[T]):
    """Name -> entry, in registration order.

    ``kind`` names the entries in messages (``"dataset"``): ``unknown dataset 'mnsit'; did you
    mean 'mnist'? allowed: ...``.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; CatalogError if the name is taken by another."""
        old = self._entries.get(name)
        if old is not None and old is not entry:
            raise CatalogError(f"{self.kind} {name!r} is registered twice")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""
        return lambda entry: self.add(name, entry)

    def unknown(self, name: object) -> str:
        """The message for an unknown ``name``: a close match if any, then every allowed name."""
        hint = did_you_mean(name, self._entries) or ";"
        return f"unknown {self.kind} {name!r}{hint} allowed: {', '.join(sorted(self._entries))}"

    def get(self, name: str) -> T:
        """The entry ``name``; CatalogError (a ValueError) naming the allowed names if absent."""
        try:
            return self._entries[name]
        except (KeyError, TypeError):
            raise CatalogError(self.unknown(name)) from None

    def names(self) -> list[str]:
        return list(self._entries)

    def items(self) -> ItemsView[str, T]:
        return self._entries.items()

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __getitem__(self, name: str) -> T:
        return self.get(name)

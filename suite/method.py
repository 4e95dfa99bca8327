"""The method contract every family shares (in the style of benchopt's solver base).

A method is one class in one file under its family's package (``methods/<family>/`` unless the
pillar's ``method_packages`` names another), subclassing its family's base (``base.py`` there),
which subclasses :class:`Method`. It declares:

* ``Params``: a dataclass whose defaults are the published ones (every field has a default);
* its docstring: the source (a ``Source:`` paragraph: paper, algorithm or equation) and every
  choice the source leaves open, labelled ours;
* optionally :attr:`Method.test_params`: tiny parameter values the contract tests run (seconds on
  a CPU) where the published defaults would take long;
* optionally :meth:`Method.check`: spec-time checks that need more than the schema (the value a
  parameter may take given the rest of the section), raised as ``ValueError``; the pillar adds
  the file and key path;
* optionally :meth:`Method.artefacts`: artefacts the method needs besides its pillar's own (e.g.
  experts fine-tuned under the method's masks); the pillar turns each into Snakemake jobs and
  hands the built files back to the method (see the family's base for how).

Registration: ``@register("name", family="...")`` from :mod:`sparsebench.suite.registry`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar


@dataclass
class NoParams:
    """Parameters of a method that has none."""


@dataclass(frozen=True)
class MethodArtefact:
    """An artefact a method asks its pillar for, besides the pillar's own.

    Attributes:
        kind: a short snake_case name, unique within the method (part of the artefact's id).
        params: what defines the artefact (JSON-able); a change makes a new artefact.
    """

    kind: str
    params: Mapping[str, Any] = field(default_factory=dict)


class Method:
    """Base of every registered method; each family's base class subclasses it.

    Class attributes:
        Params: the parameter dataclass (paper defaults).
        test_params: parameter values of the contract tests' tiny run (default: the defaults).
        method_name, family: set by ``@register``.
    """

    Params: ClassVar[type] = NoParams
    test_params: ClassVar[Mapping[str, Any]] = {}
    method_name: ClassVar[str] = ""
    family: ClassVar[str] = ""

    @classmethod
    def check(cls, params: Any, section: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` if ``params`` cannot run in the pillar's spec ``section``
        (defaults filled in); the message says what is allowed. The default accepts any."""

    @classmethod
    def artefacts(cls, params: Any, section: Mapping[str, Any]) -> Sequence[MethodArtefact]:
        """Artefacts the method needs besides its pillar's own (default none)."""
        return ()

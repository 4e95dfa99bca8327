"""The method contract of the ``dst`` and ``pruning`` families: a Lightning callback that edits
the module's mask store, and the run context it is handed.

A method class does not import Lightning: spec validation imports every method module to
check names and parameters, and Lightning (with torchmetrics) costs seconds to import, which
every Snakemake parse would pay. :func:`as_callback` makes an instance the Lightning callback
it is written as (its hooks are Lightning's) when a job hands it to a ``Trainer``.

A method is one file in ``methods/dst/`` or ``methods/pruning/``: a :class:`MaskMethod`
subclass registered with ``@register(name, family="dst")`` (or ``"pruning"``), its ``Params``
(the paper's defaults) and its docstring (``Source:``, and what is ours). The family hooks
below (:meth:`MaskMethod.check_budget`, :meth:`~MaskMethod.check_sparsity`,
:meth:`~MaskMethod.check_model`) are called by spec validation for every task, sparsity and
setting, before any job starts, and again when the job starts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn
from torch.utils.data import Dataset

from sparsebench.suite.method import Method
from sparsebench.suite.pillars.classification.flops import TrainFlopsCounter
from sparsebench.suite.pillars.classification.masks import MaskStore


@dataclass
class RunContext:
    """What a method may know about the run it is attached to.

    Attributes:
        total_steps: optimizer steps of the whole run (epochs x steps_per_epoch).
        steps_per_epoch: optimizer steps per epoch.
        epochs: training epochs.
        batch_size: training batch size.
        seed: the job's seed.
        generator: a CPU ``torch.Generator`` seeded from ``seed``, for mask randomness.
        flops: the training FLOPs counter (methods add their extra costs to it).
        train_data: the training set, for methods that look at data (e.g. SNIP's batch).
        new_model: builds a new model of the task, randomly initialised from the global
            torch seed (a method's control that trains a mask from fresh weights).
    """

    total_steps: int
    steps_per_epoch: int
    epochs: int
    batch_size: int
    seed: int
    generator: torch.Generator
    flops: TrainFlopsCounter
    train_data: Dataset
    new_model: Callable[[], nn.Module] | None = None


class MaskMethod(Method):
    """Base of DST and pruning methods: a Lightning callback that edits the module's
    :class:`~sparsebench.suite.pillars.classification.masks.MaskStore` (``pl_module.masks``)
    at the hooks it needs.

    Subclasses define a ``Params`` dataclass and are registered with
    ``@register(name, family="dst")`` (or ``"pruning"``).
    """

    #: Whether the method regrows connections during training (drop/grow, prune/regrow,
    #: compress/decompress). Such a method times each of its mask updates with
    #: :meth:`timed_update` (or :meth:`record_update`), and its records carry the sum and the
    #: count (``regrowth_s``, ``regrowth_updates``); for the others both stay null: dense,
    #: static, and the pruning methods (GMP prunes during training but never regrows: its
    #: magnitude top-k steps are not the cost these columns compare).
    updates_masks: ClassVar[bool] = False
    #: Whether the method trains dense weights behind its masks (MaskStore straight-through
    #: layers, SR-STE): its layers must run as dense x mask (``execution: dense_mask``).
    straight_through: ClassVar[bool] = False
    #: Whether the method hooks the pruned layers' modules (SeReNe reads their outputs): a
    #: kernel backend replaces those modules, so it runs with ``execution: dense_mask`` only.
    hooks_layers: ClassVar[bool] = False
    #: Whether the method runs on values-only layers (``execution: sparse``: the nnz values
    #: are the only Parameter and topology changes go through ``MaskStore.set_pattern``).
    #: Read from the class's own body by :meth:`runs_values_only`, never inherited: a
    #: subclass that changes the update rule must implement and declare it itself.
    values_only: ClassVar[bool] = False

    @classmethod
    def runs_values_only(cls) -> bool:
        """Whether ``execution: sparse`` may run this method (``values_only`` in its own body)."""
        return bool(cls.__dict__.get("values_only", False))

    def __init__(self, params: Any, sparsity: float, ctx: RunContext):
        self.params = params
        self.sparsity = float(sparsity)
        self.density = 1.0 - self.sparsity
        self.ctx = ctx
        self.update_seconds: list[float] = []

    def record_update(self, seconds: float) -> None:
        """Count one mask update that took ``seconds`` of wall-clock."""
        self.update_seconds.append(float(seconds))

    @contextmanager
    def timed_update(self, store: MaskStore | None = None) -> Iterator[None]:
        """Time the enclosed block as one mask update (:meth:`record_update`). With ``store``
        on a GPU, CUDA work is synchronised before and after so that the time is the
        update's. Keep FLOPs bookkeeping and logging out of the block: the time is the
        update's own (choosing what to drop and grow, installing the masks and initial
        values)."""
        cuda = store is not None and any(w.is_cuda for w in store.model.parameters())
        if cuda:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if cuda:
                torch.cuda.synchronize()
            self.record_update(time.perf_counter() - t0)

    def update_timing(self) -> tuple[float | None, int | None]:
        """(total seconds, number) of the mask updates so far; (None, None) for a method that
        never updates its masks (``updates_masks`` false)."""
        if not self.updates_masks:
            return None, None
        return float(sum(self.update_seconds)), len(self.update_seconds)

    @contextmanager
    def plain_network(self) -> Iterator[None]:
        """The network without what the method adds to its forward pass (a method that
        sparsifies activations switches it off), for the structural measures of the masks
        (reachable outputs, effective density). The default changes nothing."""
        yield

    def activation_density(self) -> float | None:
        """The measured share of active hidden units of a method that sparsifies activations
        (the record's ``activation_density``); None for the others."""
        return None

    @classmethod
    def final_allocation(cls, params: Any) -> str | None:
        """How the method's layer densities are set at the END of training, for the record's
        ``allocation``: ``erk`` / ``uniform`` when the start's layer counts are kept (the
        default: ``params.distribution``), ``global`` when the method ranks all layers jointly,
        ``redistributed`` when it moves weights between layers by a rule of its own; None for
        dense. The record's ``allocation_shift`` measures how far the layers actually moved."""
        return getattr(params, "distribution", None)

    @classmethod
    def fixed_sparsity(cls, params: Any) -> float | None:
        """The one sparsity the method reaches whatever the spec asks (N:M patterns: 1 - N/M),
        or None (the default): its cells then run at the spec's sparsities."""
        return None

    @classmethod
    def training_steps(cls, params: Any, sparsity: float, recipe_steps: int) -> int:
        """Optimizer steps the method trains for, given the recipe's ``recipe_steps``: the
        recipe's by default; more for a method that trains several rounds (IMP's levels),
        whose records then count every round's FLOPs."""
        return recipe_steps

    @classmethod
    def schedule_position(
        cls, params: Any, sparsity: float, recipe_steps: int
    ) -> Callable[[int], int] | None:
        """Global step -> step of the recipe's learning-rate schedule, for a method that
        trains more than ``recipe_steps`` (None: the identity)."""
        return None

    @classmethod
    def pattern(cls, params: Any) -> str:
        """The record's ``pattern``: which weights may be zero. ``unstructured`` (any), or
        ``N:M`` for at most N nonzeros in every M consecutive weights."""
        return "unstructured"

    @classmethod
    def check_budget(cls, params: Any, total_steps: int) -> None:
        """Raise ValueError if a run of ``total_steps`` optimizer steps is too short for the
        method to act as published. Called by spec validation (before any job starts) and
        again when the job starts. The default accepts any budget."""

    @classmethod
    def check_sparsity(cls, params: Any, sparsity: float) -> None:
        """Raise ValueError if the method cannot reach ``sparsity`` with ``params`` (e.g. a
        pruning-only method whose start is already sparser). Called by spec validation for
        every sparsity of the spec and again when the job starts. The default accepts any."""

    @classmethod
    def check_model(cls, params: Any, layers: dict[str, nn.Module]) -> None:
        """Raise ValueError if the method cannot act on a model with these prunable ``layers``
        (name -> ``nn.Linear``/``nn.Conv2d``, in definition order), e.g. a CNN-only method on
        an MLP; the message says what the method needs. Called by spec validation with a
        freshly built model of each task. The default accepts any model."""


_AS_CALLBACK: dict[type, type] = {}


def as_callback(method: MaskMethod) -> MaskMethod:
    """``method`` as a Lightning ``Callback``: its class gains ``Callback`` as its last base
    (a subclass made once per class, with the same name), so its hooks, and their
    ``super()`` calls, run exactly as in a class written ``(Callback, ...)``. Returns the
    same object."""
    import lightning.pytorch as pl

    if isinstance(method, pl.Callback):
        return method
    cls = type(method)
    hooked = _AS_CALLBACK.get(cls)
    if hooked is None:
        body = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        body["__doc__"] = cls.__doc__
        hooked = _AS_CALLBACK[cls] = type(cls.__name__, (cls, pl.Callback), body)
    method.__class__ = hooked
    return method

"""The merging pillar's tasks: real digit images that ship offline, under the transformations
and label re-groupings the continual-learning literature uses, each with its own label set.

=================  ========================================================  =======
task               inputs -> labels                                          classes
=================  ========================================================  =======
mnist              mnist5k digits                                             10
mnist_rot90        mnist5k rotated by 90° (counter-clockwise)                 10
mnist_inverted     mnist5k with inverted intensities (negative image)         10
mnist_permuted     mnist5k under one fixed pixel permutation (seed 0)         10
mnist_parity       mnist5k -> even / odd digit                                 2
mnist_ge5          mnist5k -> digit < 5 / >= 5                                 2
digits             scikit-learn's 8x8 UCI digits, bilinearly upsampled to     10
                   28x28
digits_mirror      the upsampled UCI digits mirrored left-right               10
fashion_mnist      Fashion-MNIST from ``data_root`` (optional: not shipped)   10
=================  ========================================================  =======

Why they conflict when merged: rotation, inversion and permutation present the same digits as
different inputs, so each expert rewires the trunk's early layers its own way (and a fixed
pixel permutation destroys the locality patches rely on); parity and >= 5 keep the inputs but
want features that separate other unions of digits, pulling the same weights toward other
boundaries; the UCI digits are another writer population at another resolution (covariate
shift). Each task's images are standardised with its own train split's scalar mean and std,
and keep the split of their source dataset (mnist5k 3,500 / 500 / 1,000, digits 1,257 / 180 /
360, Fashion-MNIST 54,000 / 6,000 / 10,000).

θ0's pre-training task (``rotation``, :func:`pretrain_data`) is label-free: self-supervised
rotation prediction (Gidaris et al. 2018, RotNet) on the train images of mnist5k and the
upsampled UCI digits, each shown at a random multiple of 90° and labelled with it. No task
label is seen before the heads are fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset

PERMUTATION_SEED = 0


@dataclass(frozen=True)
class TaskDef:
    name: str
    source: str  # a dataset of sparsebench.suite.data
    transform: str  # identity | rot90 | invert | permute | mirror
    labels: str  # identity | parity | ge5
    description: str

    @property
    def num_classes(self) -> int:
        return 2 if self.labels in ("parity", "ge5") else 10


TASKS: dict[str, TaskDef] = {
    t.name: t
    for t in (
        TaskDef("mnist", "mnist5k", "identity", "identity", "mnist5k digits"),
        TaskDef("mnist_rot90", "mnist5k", "rot90", "identity", "mnist5k rotated 90°"),
        TaskDef("mnist_inverted", "mnist5k", "invert", "identity", "mnist5k, negative image"),
        TaskDef("mnist_permuted", "mnist5k", "permute", "identity", "mnist5k, fixed permutation"),
        TaskDef("mnist_parity", "mnist5k", "identity", "parity", "mnist5k -> even/odd"),
        TaskDef("mnist_ge5", "mnist5k", "identity", "ge5", "mnist5k -> digit >= 5"),
        TaskDef("digits", "digits", "identity", "identity", "UCI 8x8 digits upsampled"),
        TaskDef("digits_mirror", "digits", "mirror", "identity", "UCI digits mirrored"),
        TaskDef("fashion_mnist", "fashion_mnist", "identity", "identity", "Fashion-MNIST"),
    )
}
DEFAULT_TASKS = [
    "mnist",
    "mnist_rot90",
    "mnist_inverted",
    "mnist_permuted",
    "mnist_parity",
    "mnist_ge5",
    "digits",
    "digits_mirror",
]


@dataclass
class TaskData:
    """One task's splits, inputs (n, 1, 28, 28) float32 standardised, labels (n,) int64."""

    name: str
    train: TensorDataset
    val: TensorDataset
    test: TensorDataset
    num_classes: int


@cache
def _source(name: str, data_root: str) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_val, y_val, x_test, y_test) in [0, 1]-ish raw scale at 28x28."""
    from sparsebench.suite.data import load_dataset

    splits = load_dataset(name, data_root)
    out = []
    for ds in (splits.train, splits.val, splits.test):
        x, y = ds.tensors
        if x.shape[-1] != 28:  # UCI digits: 8x8 -> 28x28
            x = F.interpolate(x, size=(28, 28), mode="bilinear", align_corners=False)
        out += [x.float(), y]
    return tuple(out)


def _permutation() -> torch.Tensor:
    g = torch.Generator().manual_seed(PERMUTATION_SEED)
    return torch.randperm(28 * 28, generator=g)


def _transform(x: torch.Tensor, how: str) -> torch.Tensor:
    if how == "identity":
        return x
    if how == "rot90":
        return torch.rot90(x, 1, dims=(-2, -1))
    if how == "invert":  # standardised inputs: -x is the standardised negative image
        return -x
    if how == "mirror":
        return torch.flip(x, dims=(-1,))
    if how == "permute":
        return x.flatten(1)[:, _permutation()].view_as(x)
    raise ValueError(f"unknown transform {how!r}")


def _relabel(y: torch.Tensor, how: str) -> torch.Tensor:
    if how == "identity":
        return y
    if how == "parity":
        return y % 2
    if how == "ge5":
        return (y >= 5).long()
    raise ValueError(f"unknown label map {how!r}")


def load_task(name: str, data_root: str | Path = "data") -> TaskData:
    """Task ``name``'s splits. Raises ValueError for an unknown task (naming the known ones),
    :class:`~sparsebench.suite.data.DatasetNotFoundError` when its source is missing."""
    if name not in TASKS:
        raise ValueError(f"unknown merging task {name!r}; known: {', '.join(TASKS)}")
    t = TASKS[name]
    xs = _source(t.source, str(data_root))
    split = []
    for i in range(3):
        x, y = xs[2 * i], xs[2 * i + 1]
        x = _transform(x, t.transform)
        split.append((x, _relabel(y, t.labels)))
    mean, std = split[0][0].mean(), split[0][0].std()
    sets = [TensorDataset(((x - mean) / std).contiguous(), y.contiguous()) for x, y in split]
    return TaskData(name, *sets, num_classes=t.num_classes)


def pretrain_data(data_root: str | Path, seed: int) -> TensorDataset:
    """θ0's label-free pre-training set: train images of mnist5k and the upsampled UCI digits,
    each rotated by k·90° with k drawn once from ``seed``, labelled k (RotNet, Gidaris et al.
    2018, "Unsupervised Representation Learning by Predicting Image Rotations", ICLR)."""
    images = []
    for source in ("mnist5k", "digits"):
        x = _source(source, str(data_root))[0]
        images.append((x - x.mean()) / x.std())
    x = torch.cat(images)
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(0, 4, (x.shape[0],), generator=g)
    rotated = torch.stack([torch.rot90(img, int(r), dims=(-2, -1)) for img, r in zip(x, k)])
    return TensorDataset(rotated.contiguous(), k)

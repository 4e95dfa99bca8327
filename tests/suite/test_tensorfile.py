"""The one artefact loader: a truncated, replaced, reshaped, retyped or non-finite artefact is
refused naming its file and how to rebuild it, never used."""

import json

import pytest
import torch
from safetensors.torch import save_file

from sparsebench.suite import tensorfile
from sparsebench.suite.tensorfile import ArtefactError

HOW = "make it with `sparsebench build x`"


def _saved(tmp_path, tensors=None):
    t, m = tmp_path / "a" / "model.safetensors", tmp_path / "a" / "meta.json"
    tensors = tensors or {"w": torch.arange(6.0).reshape(2, 3), "n": torch.tensor([1, 2])}
    tensorfile.save(t, m, tensors, {"d": 3})
    return t, m


def test_round_trip_and_the_sidecar_records_hash_shapes_and_dtypes(tmp_path):
    t, m = _saved(tmp_path)
    tensors, meta = tensorfile.load(t, m, HOW)
    assert torch.equal(tensors["w"], torch.arange(6.0).reshape(2, 3)) and meta["d"] == 3
    assert meta["tensors"] == {"w": {"shape": [2, 3], "dtype": "torch.float32"},
                               "n": {"shape": [2], "dtype": "torch.int64"}}  # fmt: skip
    assert meta["sha256"] == tensorfile.sha256_of(t)


def _refused(t, m, *words):
    with pytest.raises(ArtefactError) as err:
        tensorfile.load(t, m, HOW, "test artefact")
    msg = str(err.value)
    assert "test artefact" in msg and HOW in msg and f"remove {t.parent}" in msg
    for w in words:
        assert w in msg, msg
    return msg


def test_a_truncated_file_is_refused_naming_it(tmp_path):
    t, m = _saved(tmp_path)
    t.write_bytes(t.read_bytes()[:40])
    _refused(t, m, str(t), "SHA-256 differs")
    legacy = json.loads(m.read_text())
    del legacy["sha256"]
    m.write_text(json.dumps(legacy))
    _refused(t, m, str(t), "not a readable safetensors file")


def test_noise_of_the_same_shape_is_refused_by_the_hash(tmp_path):
    t, m = _saved(tmp_path)
    save_file({"w": torch.randn(2, 3), "n": torch.tensor([1, 2])}, str(t))
    _refused(t, m, "content changed since it was written")


def test_shape_and_dtype_are_compared_with_the_sidecar(tmp_path):
    """Without a hash (an artefact written before hashes were kept) the layout still holds."""
    cases = [({"w": torch.zeros(3, 2)}, "[3, 2]"),
             ({"w": torch.zeros(2, 3, dtype=torch.float64)}, "torch.float64")]  # fmt: skip
    for other, word in cases:
        t, m = _saved(tmp_path)
        save_file({**other, "n": torch.tensor([1, 2])}, str(t))
        meta = json.loads(m.read_text())
        del meta["sha256"]
        m.write_text(json.dumps(meta))
        _refused(t, m, "tensor 'w'", word, "its sidecar says torch.float32 [2, 3]")


def test_non_finite_tensors_are_refused_even_when_written_so(tmp_path):
    t, m = _saved(tmp_path, {"w": torch.full((2, 2), float("nan"))})
    _refused(t, m, "tensor 'w' holds NaN or infinite values")
    t, m = _saved(tmp_path, {"w": torch.tensor([1.0, float("inf")])})
    _refused(t, m, "NaN or infinite")


def test_a_broken_sidecar_is_refused_and_a_missing_file_says_how_to_make_it(tmp_path):
    t, m = _saved(tmp_path)
    m.write_text("{not json")
    _refused(t, m, str(m), "not a readable JSON sidecar")
    m.unlink()
    with pytest.raises(FileNotFoundError, match=HOW):
        tensorfile.load(t, m, HOW)

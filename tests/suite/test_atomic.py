"""Atomic writes: the old file or the complete new one, never a torn file or a stray temp."""

from __future__ import annotations

import json
import os

import pytest

from sparsebench.suite import atomic
from sparsebench.suite.atomic import atomic_path, write_atomic
from sparsebench.suite.record import write_json_atomic


def test_text_bytes_and_callable_land_whole(tmp_path):
    write_atomic(tmp_path / "a.txt", "héllo\n")
    write_atomic(tmp_path / "b.bin", b"\x00\xff")
    write_atomic(tmp_path / "c.txt", lambda p: p.write_bytes(b"via path"))
    assert (tmp_path / "a.txt").read_bytes() == b"h\xc3\xa9llo\n"  # UTF-8 of "é" by hand
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\xff"
    assert (tmp_path / "c.txt").read_bytes() == b"via path"
    assert sorted(os.listdir(tmp_path)) == ["a.txt", "b.bin", "c.txt"]  # no temp left


def test_missing_parent_folders_are_made(tmp_path):
    write_atomic(tmp_path / "x" / "y" / "z.txt", "z")
    assert (tmp_path / "x" / "y" / "z.txt").read_text() == "z"


def test_a_writer_that_raises_mid_write_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "board.csv"
    path.write_text("old\n")

    def crash(p):
        p.write_text("half a ta")  # a torn new file, then the crash
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError, match="disk on fire"):
        write_atomic(path, crash)
    assert path.read_text() == "old\n"
    assert os.listdir(tmp_path) == ["board.csv"]


def test_an_exception_inside_atomic_path_leaves_the_old_file_and_no_temp(tmp_path):
    path = tmp_path / "model.safetensors"
    path.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_path(path) as tmp:
        tmp.write_bytes(b"ne")
        raise KeyboardInterrupt  # not an Exception: still cleaned up
    assert path.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["model.safetensors"]


def test_the_temp_is_a_fresh_hidden_name_beside_the_target(tmp_path):
    seen = []
    for _ in range(2):
        with atomic_path(tmp_path / "r.json") as tmp:
            assert not tmp.exists()  # the writer creates it (a link target must not exist)
            seen.append(tmp)
            tmp.write_text("{}")
    assert seen[0] != seen[1]
    assert all(t.parent == tmp_path and t.name.startswith(".r.json.") for t in seen)


def test_a_writer_that_writes_nothing_fails_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("old")
    with pytest.raises(FileNotFoundError):
        write_atomic(path, lambda p: None)
    assert path.read_text() == "old"


def test_the_new_file_has_the_usual_permissions(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "t.txt", "t")
        with atomic_path(tmp_path / "u.txt") as tmp:
            tmp.write_text("u")
    finally:
        os.umask(old)
    # 0o666 & ~0o022: readable by others, like any file written without a temp
    assert (tmp_path / "t.txt").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "u.txt").stat().st_mode & 0o777 == 0o644


def test_fsync_flushes_before_the_rename(tmp_path, monkeypatch):
    calls = []
    real = os.fsync

    def spy(fd):
        calls.append(os.path.exists(tmp_path / "r.json"))  # the target not renamed yet
        real(fd)

    monkeypatch.setattr(atomic.os, "fsync", spy)
    write_atomic(tmp_path / "n.json", "{}")
    assert calls == []
    write_atomic(tmp_path / "r.json", "{}", fsync=True)
    assert calls == [False]


def test_a_record_that_cannot_be_serialised_keeps_the_old_record(tmp_path):
    path = tmp_path / "record.json"
    write_json_atomic(path, {"status": "ok", "x": 1})
    assert path.read_text() == '{\n  "status": "ok",\n  "x": 1\n}'
    with pytest.raises(TypeError):
        write_json_atomic(path, {"status": object()})
    assert json.loads(path.read_text()) == {"status": "ok", "x": 1}
    assert os.listdir(tmp_path) == ["record.json"]

"""The cpu backend's build: cache folder, and clear errors without a compiler or on failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparsebench.kernels.backends import _cpu_build, cpu


def test_missing_compiler_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    monkeypatch.setattr(_cpu_build, "_module", None)  # as in a fresh process
    ok, reason = cpu.available()
    assert not ok and reason.startswith("no C++ compiler found")
    with pytest.raises(RuntimeError, match="no C\\+\\+ compiler found"):
        _cpu_build.load_extension()


def test_build_folder_is_stable_and_overridable(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARSEBENCH_EXTENSIONS_DIR", str(tmp_path))
    first = _cpu_build.build_directory()
    assert first.parent == tmp_path and first == _cpu_build.build_directory()
    assert _cpu_build.source_path().name == "sparse_linear.cpp"


def test_failed_build_names_the_log(monkeypatch, tmp_path: Path) -> None:
    fake = tmp_path / "fake-c++"
    fake.write_text("#!/bin/sh\necho 'fake.cpp:1: error: no compiler here' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CXX", str(fake))
    monkeypatch.setenv("SPARSEBENCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
    monkeypatch.setattr(_cpu_build, "_module", None)
    with pytest.raises(RuntimeError, match="building the cpu kernel failed") as err:
        _cpu_build.load_extension()
    msg = str(err.value)
    assert "build.log" in msg and str(tmp_path / "ext") in msg
    log = Path(msg.split("full compiler output: ")[1].split(")")[0])
    assert log.is_file()


def test_another_build_folder_does_not_rename_the_cached_build(monkeypatch, tmp_path) -> None:
    """A load with other arguments in the same process (the failed build above) must not make
    torch's versioner rename the real extension to ``..._v1``: the rename recompiled the
    shared cache in every process that followed (a minute each in `make test`)."""
    fake = tmp_path / "fake-c++"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    with monkeypatch.context() as m:
        m.setenv("CXX", str(fake))
        m.setenv("SPARSEBENCH_EXTENSIONS_DIR", str(tmp_path / "ext"))
        m.setattr(_cpu_build, "_module", None)
        with pytest.raises(RuntimeError):
            _cpu_build.load_extension()
        fake_name = _cpu_build.module_name(_cpu_build.build_directory())
    monkeypatch.setattr(_cpu_build, "_module", None)
    module = _cpu_build.load_extension()
    real = _cpu_build.build_directory()
    assert module.__name__ == _cpu_build.module_name(real) != fake_name
    assert not list(real.glob("*_v[0-9]*.so"))


def test_another_checkout_gets_its_own_build_folder(monkeypatch, tmp_path) -> None:
    """torch writes the source's absolute path into build.ninja: a second checkout (or venv)
    sharing the folder would make every switch between them a full recompile."""
    here = _cpu_build.build_directory()
    copy = tmp_path / "sparse_linear.cpp"
    copy.write_bytes(_cpu_build.source_path().read_bytes())
    monkeypatch.setattr(_cpu_build, "source_path", lambda: copy)
    assert _cpu_build.build_directory() != here

"""farm.builder.interpreters: every candidate is started and asked, never believed by its name."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from farm.builder.interpreters import PROBE_TIMEOUT_S, find_interpreter, probe, version_of_tag

HERE = f"{sys.version_info.major}.{sys.version_info.minor}"
TAG = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _script(folder: Path, name: str, body: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


def test_tags_and_versions() -> None:
    assert version_of_tag("cp312") == "3.12"
    assert version_of_tag("cp39") == "3.9"
    with pytest.raises(ValueError, match="abi3"):
        version_of_tag("abi3")


def test_probe_asks_the_interpreter_itself() -> None:
    found, _ = probe(sys.executable, HERE)
    assert found is not None
    assert found.version.startswith(HERE + ".")
    found, why = probe(sys.executable, "3.99")
    assert found is None
    assert f"is CPython {sys.version_info.major}.{sys.version_info.minor}" in why


def test_a_shim_that_names_no_installed_version_is_passed_over(tmp_path) -> None:
    """pyenv's shims exist for every version it knows and fail for those not selected."""
    shim = _script(tmp_path / "shims", "python3.99", "echo 'pyenv: python3.99: command not found' >&2; exit 127")
    liar = _script(tmp_path / "bin", "python3.99", "echo 'CPython 3.11.7 True'")  # says another version
    env = {"PATH": os.pathsep.join([str(shim.parent), str(liar.parent)]), "PYENV_ROOT": str(tmp_path / "none")}
    search = find_interpreter("cp399", environ=env)
    assert search.interpreter is None
    looked = "\n".join(search.looked)
    assert f"{shim}: does not run" in looked
    assert "command not found" in looked
    assert f"{liar}: is CPython 3.11.7" in looked
    assert "pyenv: no python3.99" in looked


def test_pyenv_and_path_interpreters_are_found(tmp_path) -> None:
    """A pyenv layout ($PYENV_ROOT/versions/X.Y.Z/bin/pythonX.Y) and a PATH folder, each holding
    this interpreter under the name of its version; the running interpreter is tried first."""
    assert find_interpreter(TAG).interpreter.found_by == "farm"  # type: ignore[union-attr]
    pyenv_bin = tmp_path / "pyenv" / "versions" / f"{HERE}.99" / "bin"
    pyenv_bin.mkdir(parents=True)
    (pyenv_bin / f"python{HERE}").symlink_to(os.path.realpath(sys.executable))
    from farm.builder import interpreters

    candidates = list(interpreters._candidates(HERE, {"PYENV_ROOT": str(tmp_path / "pyenv"), "PATH": ""}, None))
    assert ("pyenv", str(pyenv_bin / f"python{HERE}")) in candidates
    path_dir = tmp_path / "bin"
    path_dir.mkdir()
    (path_dir / f"python{HERE}").symlink_to(os.path.realpath(sys.executable))
    candidates = list(interpreters._candidates(HERE, {"PATH": str(path_dir)}, None))
    assert ("PATH", str(path_dir / f"python{HERE}")) in candidates


def test_another_python_of_the_grid_is_found_when_the_host_has_one() -> None:
    """The native builder's reason to exist: a 3.12 (or 3.11) found from a farm of another version."""
    other = "cp312" if TAG != "cp312" else "cp311"
    search = find_interpreter(other)
    if search.interpreter is None:
        pytest.skip(f"no {other} on this host: {'; '.join(search.looked)}")
    assert search.interpreter.tag == other
    assert search.interpreter.found_by in ("uv", "pyenv", "PATH")


def test_a_probe_that_times_out_is_said_as_such_not_as_a_missing_python(tmp_path) -> None:
    """An interpreter too slow to answer (a loaded host) is not "no Python": the search records
    the timeout and its message says so. The default timeout leaves room for a loaded host."""
    slow = _script(tmp_path / "bin", "python3.99", "sleep 30; echo 'CPython 3.99.0 True'")
    search = find_interpreter("cp399", environ={"PATH": str(slow.parent), "PYENV_ROOT": str(tmp_path / "none")},
                              timeout=0.5)
    assert search.interpreter is None
    assert search.timed_out == (str(slow),)
    assert f"PATH: {slow}: did not answer its probe within 0.5 s" in search.looked
    assert search.missing().startswith(f"Python 3.99 did not answer its probe within {PROBE_TIMEOUT_S} s ({slow}; ")
    assert "no Python" not in search.missing()
    assert PROBE_TIMEOUT_S >= 120
    # nothing at all is the plain refusal
    none = find_interpreter("cp399", environ={"PATH": str(tmp_path / "empty"), "PYENV_ROOT": str(tmp_path / "none")})
    assert none.timed_out == ()
    assert none.missing().startswith("no Python 3.99 here (looked: ")

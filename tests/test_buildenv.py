"""farm.builder.buildenv: a build environment is reused only where it was made, with console
scripts that run its own interpreter; real venvs, made by uv (or venv + pip) as builds make them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from farm.builder.buildenv import SPEC_FILE, EnvSpec, ensure_env, remove_env, reuse_problem, script_interpreter

SPEC = EnvSpec(".".join(map(str, sys.version_info[:3])), os.path.realpath(sys.executable), ("auditwheel",))


def _repair_step_finds_auditwheel(env: Path) -> subprocess.CompletedProcess[str]:
    """What the native builder's repair step does: ``auditwheel`` by name from the env's bin/."""
    path = f"{env / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return subprocess.run("auditwheel --version", shell=True, capture_output=True, text=True, check=False,
                          env={**os.environ, "PATH": path})


@pytest.mark.slow  # three environments made by uv (or venv + pip), auditwheel installed in each
def test_a_moved_or_copied_environment_is_made_again_and_the_original_reused(tmp_path) -> None:
    made: list[str] = []
    first = ensure_env(SPEC, tmp_path / "a", log=made.append)
    assert not first.reused
    assert json.loads((first.path / SPEC_FILE).read_text())["path"] == str(first.path)
    assert _repair_step_finds_auditwheel(first.path).returncode == 0

    # moved: its marker says ready, but its auditwheel runs an interpreter that is gone
    shutil.move(tmp_path / "a", tmp_path / "b")
    moved = tmp_path / "b" / first.path.name
    assert _repair_step_finds_auditwheel(moved).returncode != 0  # the failure seen at repair
    said: list[str] = []
    again = ensure_env(SPEC, tmp_path / "b", log=said.append)
    assert not again.reused
    (why,) = [line for line in said if line.startswith("removing")]
    assert f"made at {first.path}" in why
    assert "copied or moved" in why
    assert _repair_step_finds_auditwheel(again.path).returncode == 0

    # copied: the original is still there, so the copy's scripts would run the original's Python
    shutil.copytree(tmp_path / "b", tmp_path / "c", symlinks=True)
    copy = tmp_path / "c" / first.path.name
    assert script_interpreter(copy / "bin" / "auditwheel") == str(again.path / "bin" / "python")
    assert "copied or moved" in (reuse_problem(SPEC, copy) or "")
    said.clear()
    third = ensure_env(SPEC, tmp_path / "c", log=said.append)
    assert not third.reused
    assert any("copied or moved" in line for line in said)
    assert script_interpreter(third.path / "bin" / "auditwheel") == str(third.path / "bin" / "python")

    # the environment left where it was made is reused, saying so
    said.clear()
    assert ensure_env(SPEC, tmp_path / "b", log=said.append).reused
    assert said == [f"reusing build environment {first.path.name}"]


def _venv_with_marker(root: Path, marker: dict[str, object]) -> Path:
    path = root / SPEC.slug
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    (path / SPEC_FILE).write_text(json.dumps(marker))
    return path


def test_the_marker_and_the_scripts_are_checked_before_reuse(tmp_path) -> None:
    """A real venv (no pip) with the scripts written in the two forms pip and uv write: a ``#!``
    line, and the sh trampoline for a path too long for one."""
    path = _venv_with_marker(tmp_path, {**SPEC.to_json(), "path": str(tmp_path / SPEC.slug)})
    script = path / "bin" / "auditwheel"
    assert reuse_problem(SPEC, path) == "bin/auditwheel is missing or names no interpreter"
    script.write_text(f"#!{path}/bin/python\nimport sys\n")
    assert reuse_problem(SPEC, path) is None
    script.write_text(f"#!/bin/sh\n'''exec' \"{path}/bin/python\" \"$0\" \"$@\"\n' '''\nimport sys\n")
    assert script_interpreter(script) == f"{path}/bin/python"
    assert reuse_problem(SPEC, path) is None
    script.write_text("#!/opt/elsewhere/bin/python\n")
    assert reuse_problem(SPEC, path) == "bin/auditwheel runs /opt/elsewhere/bin/python, not this environment's interpreter"

    # a marker of an older farm (no folder), of other contents, or unreadable: not reused
    (path / SPEC_FILE).write_text(json.dumps(SPEC.to_json()))
    assert "does not record the folder" in (reuse_problem(SPEC, path) or "")
    (path / SPEC_FILE).write_text(json.dumps({**SPEC.to_json(), "torch": "torch==2.8.0", "path": str(path)}))
    assert "other contents" in (reuse_problem(SPEC, path) or "")
    (path / SPEC_FILE).write_text("{")
    assert "cannot be read" in (reuse_problem(SPEC, path) or "")


def test_an_environment_whose_interpreter_is_gone_is_not_reused(tmp_path) -> None:
    path = _venv_with_marker(tmp_path, {**SPEC.to_json(), "path": str(tmp_path / SPEC.slug)})
    (path / "bin" / "auditwheel").write_text(f"#!{path}/bin/python\n")
    for name in ("python", "python3", f"python3.{sys.version_info.minor}"):
        (path / "bin" / name).unlink(missing_ok=True)
    (path / "bin" / "python").symlink_to(tmp_path / "removed-python3")
    assert "does not resolve" in (reuse_problem(SPEC, path) or "")


def test_removing_an_environment_says_what_it_shares_with_others(tmp_path) -> None:
    """A file hard-linked from another environment stays on disk when one of them goes."""
    one, other = tmp_path / "one", tmp_path / "other"
    for folder in (one, other):
        folder.mkdir()
    (one / "own.so").write_bytes(b"o" * 3_000_000)
    (other / "torch.so").write_bytes(b"t" * 2_000_000)
    os.link(other / "torch.so", one / "torch.so")
    said: list[str] = []
    remove_env(one, "not used", said.append)
    assert said == [f"removing build environment {one} (5 MB, 2 MB of it shared with other environments): not used"]
    assert not one.exists()
    assert (other / "torch.so").stat().st_nlink == 1

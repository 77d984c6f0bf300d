"""A nox session installs farm once per venv and again only when what an install reads changes;
the code it runs is always the checkout's own (run for real, in a fresh clone)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# nox makes a virtual environment and installs farm into it, three times
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent
INSTALL = "pip install -e '.[build]'"  # a session that runs farm installs its build extra


def nox(clone: Path, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "nox", "--non-interactive", "-s", "explain", "--", *args],
                          cwd=clone, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout + proc.stderr


def test_session_installs_once_runs_current_code_and_reinstalls_when_the_project_changes(tmp_path: Path) -> None:
    clone = tmp_path / "farm"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True)
    first = nox(clone, "8.0")
    assert INSTALL in first
    assert "no image" in first
    # farm runs `python -m pip` itself (a toolkit's wheels, torch): the session's venv has pip,
    # also where uv made it (nox's backend wherever uv is installed, as in the test environment)
    (python,) = (clone / ".nox").glob("explain*/bin/python")
    subprocess.run([str(python), "-m", "pip", "--version"], check=True, capture_output=True)

    # an edit of farm's code: no reinstall, and the edit is what runs
    explain = clone / "farm" / "commands" / "explain.py"
    explain.write_text(explain.read_text() + '\nprint("EDITED-IN-THE-CHECKOUT")\n')
    second = nox(clone, "8.0")
    assert INSTALL not in second
    assert "EDITED-IN-THE-CHECKOUT" in second

    # what an install reads changed: installed again
    pyproject = clone / "pyproject.toml"
    pyproject.write_text(pyproject.read_text() + "\n# changed\n")
    third = nox(clone, "8.0")
    assert INSTALL in third
    assert "EDITED-IN-THE-CHECKOUT" in third

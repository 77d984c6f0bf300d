"""The nox sessions, run for real from a fresh clone (nox has no testing helper)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# each test runs nox, which makes a virtual environment and installs farm into it
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh clone of the committed repository, with its own nox envdir."""
    if not (REPO / ".git").exists():
        pytest.fail("the nox session tests need the repository's git checkout")
    dest = tmp_path_factory.mktemp("clone") / "farm"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(dest)], check=True)
    # share the sdist download cache with the rest of the suite; nothing else
    sdists = REPO / ".cache" / "sdist"
    if sdists.is_dir():
        shutil.copytree(sdists, dest / ".cache" / "sdist")
    return dest


def farm_json(output: str) -> dict[str, Any]:
    """The JSON document a farm command printed; nox merges the command's stderr into stdout."""
    data: dict[str, Any]
    data, _ = json.JSONDecoder().raw_decode(output[output.index("{"):])
    return data


def nox(clone: Path, session: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nox", "--non-interactive", "-s", session, "--", *args],
        cwd=clone, capture_output=True, text=True, timeout=900, check=False,
    )


def test_matrix_session_on_the_repository_packages(clone: Path) -> None:
    # Every package, with the committed (empty) ledger. The lint needs each pinned source; git
    # sources live on GitHub, which this test cannot reach, so the full run skips the lint (and
    # says so) and the lint run below covers the packages whose sources it can fetch.
    result = nox(clone, "matrix", "--no-lint", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    data = farm_json(result.stdout)
    packages = {p["package"]: p for p in data["packages"]}
    assert {"flash_attn", "sageattention", "pointnet2_ops", "demo_ext"} <= set(packages)
    assert all(p["built"] == 0 and p["to_build"] > 0 for p in packages.values())
    assert data["lint"]["ran"] is False
    assert "--no-lint" in result.stdout


def test_matrix_session_lints_what_it_schedules(clone: Path) -> None:
    result = nox(clone, "matrix", "demo_ext", "flash_attn", "gsplat")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "lint: passed (3 package(s)" in result.stdout


def test_matrix_session_fails_closed_on_unknown_filter(clone: Path) -> None:
    result = nox(clone, "matrix", "--cuda", "11.8", "--no-lint")
    assert result.returncode == 2  # farm's own exit code, not nox's generic 1
    assert "unknown CUDA line '11.8'" in result.stdout


def test_explain_session(clone: Path) -> None:
    result = nox(clone, "explain", "8.0;8.6;9.0+PTX", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    devices = {d["device"]: d for d in farm_json(result.stdout)["devices"]}
    assert devices["8.9"]["image"] == "sm_86"
    assert devices["10.0"]["image"] == "compute_90"
    assert devices["10.0"]["kind"] == "ptx-jit"
    assert devices["7.5"]["image"] is None


def test_cache_plan_session(clone: Path) -> None:
    """The session is `farm cache-plan` with its arguments: the committed size table, read offline."""
    result = nox(clone, "cache-plan", "--json")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    plan = farm_json(result.stdout)
    assert plan["limit_bytes"] == 10_000_000_000
    assert plan["rows"]
    assert plan["total_bytes"] == sum(row["total_bytes"] for row in plan["rows"])


def test_simulate_session(clone: Path) -> None:
    """The session is `farm simulate` with its arguments: two packages' bump on a simulated GitHub."""
    result = nox(clone, "simulate", "--runners", "20", "--json", "demo_ext", "fused_ssim")
    data = farm_json(result.stdout)
    assert data["runners"] == 20
    assert data["published"] == 510
    assert result.returncode == (1 if any(g["met"] is False for g in data["goals"]) else 0), result.stdout[-3000:]

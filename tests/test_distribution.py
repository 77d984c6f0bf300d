"""farm's own distribution, `cuda-wheel-farm` (PyPI's `farm` is another project): the name in
pyproject.toml and in every install hint, and (slow) the sdist and the wheel uv builds from this
checkout installed by real pip into fresh venvs, the light install and the build extra."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from farm import DISTRIBUTION, __version__
from tests.support.publishfix import fresh_venv, pip_install

REPO = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]


def test_the_distribution_name_is_ours() -> None:
    assert PROJECT["name"] == DISTRIBUTION
    assert PROJECT["scripts"] == {"farm": "farm.cli:console"}
    assert f"{DISTRIBUTION}[build]" in PROJECT["optional-dependencies"]["test"]  # a self-reference by name


def test_the_build_tooling_is_an_extra() -> None:
    base = {r.split(">")[0].split(";")[0].strip() for r in PROJECT["dependencies"]}
    assert not base & {"cibuildwheel", "nox", "pip", "nvidia-cuda-cuobjdump"}


def test_no_install_hint_names_pypis_farm() -> None:
    """Every `pip install` a user is told to type names this distribution, never `farm`."""
    texts = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted((REPO / "farm").rglob("*.py"))]
    bad = [f"{p.relative_to(REPO)}: {line.strip()}" for p in texts for line in p.read_text().splitlines()
           if "install farm" in line or "install 'farm[" in line or 'install "farm[' in line]
    assert bad == []


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist, and the wheel built from that sdist (uv's default), as a release makes them."""
    out = tmp_path_factory.mktemp("dist")
    uv = Path(sys.executable).with_name("uv")
    proc = subprocess.run([str(uv), "build", "--no-config", "--out-dir", str(out), str(REPO)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    stem = f"{DISTRIBUTION.replace('-', '_')}-{__version__}"
    sdist, wheel = out / f"{stem}.tar.gz", out / f"{stem}-py3-none-any.whl"
    assert sdist.is_file(), sorted(out.iterdir())
    assert wheel.is_file(), sorted(out.iterdir())
    return sdist, wheel


def _run(venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(venv.parent / args[0]), *args[1:]], capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_the_sdist_installs_light_and_diagnoses_and_refuses_to_build(dists: tuple[Path, Path], doctor_wheel: Path,
                                                                     tmp_path: Path) -> None:
    """The sdist installed without extras (PyPI supplies the base dependencies): the command is
    `farm`, doctor reads a stamped wheel of another environment (its data files came along),
    cibuildwheel and nox are absent, and `farm build` names the extra to install."""
    sdist, _ = dists
    light = fresh_venv(tmp_path / "light")
    proc = pip_install(light, str(sdist))
    assert proc.returncode == 0, proc.stderr[-2000:]
    show = _run(light, "python", "-c", "import importlib.metadata as m, importlib.util as u; "
                "print(m.version('cuda-wheel-farm'), [n for n in ('cibuildwheel', 'nox') if u.find_spec(n)])")
    assert show.stdout.split(None, 1) == [__version__, "[]\n"], show.stderr
    assert _run(light, "farm", "--version").stdout.strip() == f"farm {__version__}"

    target = fresh_venv(tmp_path / "target")
    assert pip_install(target, "--no-deps", "--no-index", str(doctor_wheel)).returncode == 0
    doctor = _run(light, "farm", "doctor", "--python", str(target), "--device", "8.6", "--driver", "580.65.06",
                  "--json")
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["verdicts"][0]["image"] == "sm_86"

    build = subprocess.run([str(light.parent / "farm"), "build", "demo_ext", "--root", str(REPO)],
                           capture_output=True, text=True, check=False, cwd=tmp_path)
    assert build.returncode == 3
    assert "pip install 'cuda-wheel-farm[build]'" in build.stderr
    assert "cibuildwheel" in build.stderr


@pytest.mark.slow
def test_the_wheel_installs_with_the_build_extra(dists: tuple[Path, Path], tmp_path: Path) -> None:
    """`cuda-wheel-farm[build]` from the wheel file: the build tooling comes with it, and the
    build command gets past its check for the extra (to the recipe it is asked for)."""
    _, wheel = dists
    full = fresh_venv(tmp_path / "full")
    proc = pip_install(full, f"{DISTRIBUTION}[build] @ {wheel.as_uri()}")
    assert proc.returncode == 0, proc.stderr[-2000:]
    show = _run(full, "python", "-c", "import importlib.metadata as m; "
                "print(*(m.version(n) for n in ('cuda-wheel-farm', 'cibuildwheel', 'nox', 'nvidia-cuda-cuobjdump')))")
    assert show.returncode == 0, show.stderr
    assert show.stdout.split()[0] == __version__
    build = subprocess.run([str(full.parent / "farm"), "build", "no_such_package", "--root", str(REPO)],
                           capture_output=True, text=True, check=False, cwd=tmp_path)
    assert build.returncode == 2, build.stderr  # the recipe, not the tooling, is what is missing
    assert "no_such_package" in build.stderr

"""A real torch extension, built end to end by `farm build` (native builder): tests/data/torch_ext
(two .cu files using ATen's CUDA headers, one .cpp binding) against a real CUDA build of torch
installed with pip's own configuration (FARM_TORCH_INDEX=pip), asserted, stamped, installed into
a fresh venv and imported; its override twin (setup.py assigns TORCH_CUDA_ARCH_LIST) is refused
by the assertion and reuses the first build's environment instead of installing torch again.

Slow: the first run installs torch (about 5 GB) into the shared build environment and compiles
ATen's headers with nvcc. One SASS target keeps the compile as small as it gets.
FARM_TEST_CACHE_DIR keeps farm's cache (toolkit, build environment) between runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from farm.cli import main
from farm.load.defaults import load_defaults
from farm.provenance.buildinfo import BuildInfo
from tests.support.buildroot import REPO, make_root

pytestmark = pytest.mark.slow

TORCH_MINOR = "2.14"
ARCH = "8.0"
RECIPE = """\
name: {name}
version: '0.1.0'
source:
  path: src/{name}
links_torch: true
arch:
  list: '{arch}'
"""
# The twin's override is what this test proves the assertion catches; the lint, which catches it
# first in a real recipe, is told so explicitly.
TWIN_IGNORE = """\
dist: torch_ext
lint_ignore:
  - {rule: arch-override, path: setup.py, reason: the post-build assertion must refuse the wheel on its own}
"""
PY = f"{sys.version_info.major}.{sys.version_info.minor}"
CP = f"cp{sys.version_info.major}{sys.version_info.minor}"


def _build(root: Path, cache: Path, name: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any], str]:
    code = main(["build", name, "--root", str(root), "--builder", "native", "--cuda", "13.0", "--torch", TORCH_MINOR,
                 "--python", PY, "--platform", "linux_x86_64", "--cache-dir", str(cache),
                 "--out", str(root / "upload"), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), err


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if not any(r.cuda == "13.0" and r.torch_minor == TORCH_MINOR and PY in r.pythons
               for r in load_defaults(REPO / "_defaults.yml").grid):
        pytest.fail(f"the grid has no CUDA 13.0 / torch {TORCH_MINOR} / Python {PY} row")
    root = tmp_path_factory.mktemp("torchroot")
    data = REPO / "tests" / "data"
    make_root(root, {"torch_ext": RECIPE.format(name="torch_ext", arch=ARCH),
                     "torch_ext_override": RECIPE.format(name="torch_ext_override", arch=ARCH) + TWIN_IGNORE},
              {"src/torch_ext": data / "torch_ext", "src/torch_ext_override": data / "torch_ext_override"})
    # FARM_TEST_CACHE_DIR: a farm --cache-dir kept between runs (toolkit, torch build environment),
    # as CI restores it; by default a fresh one per session
    kept = os.environ.get("FARM_TEST_CACHE_DIR")
    return root, Path(kept) if kept else tmp_path_factory.mktemp("torchcache")


def test_a_torch_extension_is_built_asserted_stamped_and_imports(built, capsys, monkeypatch, tmp_path) -> None:
    root, cache = built
    monkeypatch.setenv("FARM_TORCH_INDEX", "pip")  # pip's own configuration: mirrors, caches, constraints
    code, out, err = _build(root, cache, "torch_ext", capsys)
    assert code == 0, err[-4000:]
    (result,) = out["results"]
    assert result["plan"]["torch_index"] == "pip"
    assert result["plan"]["torch_version"].startswith(TORCH_MINOR + ".")
    (wheel,) = map(Path, result["wheels"])
    assert wheel.name.startswith(f"torch_ext-0.1.0+cu130torch{TORCH_MINOR}-{CP}-{CP}-manylinux_")
    dist_info = f"torch_ext-0.1.0+cu130torch{TORCH_MINOR}.dist-info"
    with zipfile.ZipFile(wheel) as zf:
        raw = zf.read(f"{dist_info}/_build_info.json")
        metadata = zf.read(f"{dist_info}/METADATA").decode()
    info = json.loads(raw)
    assert BuildInfo.from_json(raw).to_json() == raw  # a cibuildwheel build's provenance, byte for byte
    so = f"torch_ext/_C.cpython-{CP[2:]}-x86_64-linux-gnu.so"
    assert info["found"] == info["expected"] == {so: "sm_80"}
    assert info["assertion"]["result"] == "passed"
    # the torch it was compiled against: the build environment's, version and CUDA
    assert info["toolchain"]["torch"].startswith(TORCH_MINOR + ".")
    assert info["toolchain"]["torch_cuda"] == "13.0"
    assert info["cell"]["torch"] == TORCH_MINOR
    # upstream's install_requires (torch>=2.0) is replaced by the cell's torch
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:")]
    assert requires == [f"Requires-Dist: torch=={TORCH_MINOR}.*"]

    # farm build's own import check: the stamped wheel in a fresh venv of the cell's Python, torch
    # visible from the build environment, the package and its extension imported
    (check,) = result["imports"]
    assert check["passed"]
    assert [i["module"] for i in check["imports"]] == ["torch", "torch_ext", "torch_ext._C"]
    assert all(i["error"] is None for i in check["imports"])

    # installed into a fresh venv (torch made visible from the build environment rather than a
    # second 5 GB install) and imported; on a machine with a GPU, its kernels run
    env_dir = Path(result["build_env"])
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (site,) = venv.glob("lib/python*/site-packages")
    (build_site,) = env_dir.glob("lib/python*/site-packages")
    (site / "torch_from_build_env.pth").write_text(str(build_site) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True)
    probe = (
        "import torch, torch_ext\n"
        f"assert torch_ext._C.__file__.startswith({str(site)!r}), torch_ext._C.__file__\n"
        "if torch.cuda.is_available():\n"
        "    x = torch.arange(1000, dtype=torch.float32, device='cuda')\n"
        "    assert torch.equal(torch_ext.scale(x, 2.0), 2 * x)\n"
        "    assert abs(torch_ext.square_sum(x).item() - float((x * x).sum())) < 1e-3 * float((x * x).sum())\n"
        "    print('kernels ran on', torch.cuda.get_device_name())\n"
        "print('imported', torch.__version__)\n"
    )
    proc = subprocess.run([str(venv / "bin" / "python"), "-c", probe], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"imported {TORCH_MINOR}." in proc.stdout


def test_the_override_twin_is_refused_and_reuses_the_build_environment(built, capsys, monkeypatch) -> None:
    root, cache = built
    monkeypatch.setenv("FARM_TORCH_INDEX", "pip")
    envs_before = sorted(p.name for p in (cache / "envs").iterdir() if not p.name.startswith("."))
    code, out, err = _build(root, cache, "torch_ext_override", capsys)
    assert code == 1, err[-4000:]
    # the same (torch, CUDA, Python): the environment of the first build, not a reinstall
    assert "reusing build environment py" in err
    assert "installing torch==" not in err
    assert sorted(p.name for p in (cache / "envs").iterdir() if not p.name.startswith(".")) == envs_before
    (result,) = out["results"]
    assert not result["passed"]
    assert result["wheels"] == []
    (ext,) = result["postbuild"][0]["assertion"]["extensions"]
    assert (ext["expected"], ext["found"], ext["missing"], ext["extra"]) == ("sm_80", "sm_75", "sm_80", "sm_75")
    # sm_75 alone is a build's own list (nvcc's default is sm_75 + compute_75): the override is named first
    assert ext["likely_causes"][0] == "setup.py/CMake override"
    assert not any((root / "upload").glob("torch_ext_override-*.whl"))

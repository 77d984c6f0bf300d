"""Stamped demo_ext wheels for the doctor's tests: examples/demo_ext built by nvcc for a given arch
list and Python, then asserted and stamped by the real postbuild (so the wheel carries
``_build_info.json``, as a farm wheel a user installs does)."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def python_tag(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@functools.cache  # one build per session, whichever test module asks first
def build_stamped(work: Path, cuda_home: Path, arch: str, python: str = sys.executable) -> Path:
    """demo_ext built for ``arch`` with ``python`` (which needs setuptools), asserted and stamped."""
    from farm.binary.assertion import Expected
    from farm.model.arch import ArchList
    from farm.model.cells import Cell
    from farm.provenance import buildinfo, probe
    from farm.provenance.postbuild import BuildContext, cuda_line, postbuild_wheel

    shutil.rmtree(work, ignore_errors=True)  # what an earlier, failed call left
    work.mkdir(parents=True)
    src = work / "demo_ext"
    shutil.copytree(REPO / "examples" / "demo_ext", src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    raw_dir, out = work / "raw", work / "out"
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "TORCH_CUDA_ARCH_LIST": arch, "MAX_JOBS": "1"}
    subprocess.run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-q",
                    "-w", str(raw_dir), str(src)], check=True, env=env)
    (raw,) = raw_dir.glob("demo_ext-*.whl")
    cell = Cell("demo_ext", "0.1.0", cuda_line(cuda_home), "none", python_tag(python), "linux_x86_64")
    context = BuildContext(
        cell=cell, expected=Expected(ArchList.parse(arch)), requested=arch, build_epoch=0,
        defaults_sha256=None, recipe_sha256=None,
        source=buildinfo.PathSourceRecord("examples/demo_ext", None),
        run=probe.run_from_env({}),
        toolchain=probe.toolchain(cuda_home=cuda_home, builder="native"),
    )
    result = postbuild_wheel(raw, out, context, dist="demo_ext")
    assert result.passed, result.to_json()
    assert result.stamped, result.to_json()
    return result.stamped.path


ARCH = "8.0;8.6+PTX"  # SASS for Ampere, PTX the newer GPUs JIT: every kind of verdict across devices


@pytest.fixture(scope="session")
def doctor_wheel(tmp_path_factory: pytest.TempPathFactory, cuda_home: Path) -> Path:
    """demo_ext for sm_80 and sm_86 SASS plus compute_86 PTX, stamped by postbuild."""
    return build_stamped(tmp_path_factory.getbasetemp() / "doctor-demo", cuda_home, ARCH)


if __name__ == "__main__":  # python -m tests.doctorfix OUT ARCH [PYTHON]: one wheel, by hand
    sys.path.insert(0, str(REPO))
    wheel = build_stamped(Path(sys.argv[1]), Path(os.environ["CUDA_HOME"]), sys.argv[2],
                          sys.argv[3] if len(sys.argv) > 3 else sys.executable)
    print(wheel)

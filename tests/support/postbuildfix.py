"""Farm trees and builder wheels for the postbuild and audit tests.

A farm root is the repository's ``_defaults.yml`` plus small recipes whose arch list is given;
builder wheels hold a real nvcc-built extension from :mod:`tests.support.cudafix`.
:func:`build_stamped` is examples/demo_ext built by nvcc and put through the real postbuild, as
the doctor's and the upload tests install and publish it.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.wheelmaker import make_wheel

REPO = Path(__file__).resolve().parents[2]
PY = f"cp{sys.version_info.major}{sys.version_info.minor}"
TAG = f"{PY}-{PY}-linux_x86_64"
SO = f"_C.cpython-{sys.version_info.major}{sys.version_info.minor}-x86_64-linux-gnu.so"


def write_farm_root(root: Path, recipes: Mapping[str, str], *, build_epoch: int = 0) -> Path:
    """A farm repository at ``root``: one torch-free recipe per name, with its arch list."""
    root.mkdir(parents=True, exist_ok=True)
    defaults = (REPO / "_defaults.yml").read_text()
    defaults, n = re.subn(r"(?m)^build_epoch: \d+$", f"build_epoch: {build_epoch}", defaults)
    assert n == 1, "_defaults.yml has no build_epoch line"
    (root / "_defaults.yml").write_text(defaults)
    packages = root / "packages"
    if packages.exists():
        shutil.rmtree(packages)
    packages.mkdir()
    for name, arch in recipes.items():
        (packages / f"{name}.yml").write_text(textwrap.dedent(f"""\
            name: {name}
            version: '0.1.0'
            source:
              git: {{repo: example/{name}, ref: v0.1.0}}
            links_torch: false
            arch:
              list: '{arch}'
            """))
    return root


def builder_wheel(out: Path, dist: str, so: Path, *, version: str = "0.1.0",
                  extra: Mapping[str, bytes] | None = None, executables: tuple[str, ...] = ()) -> Path:
    """The wheel a builder would hand to postbuild: a package with one real extension."""
    files: dict[str, bytes | Path] = {f"{dist}/__init__.py": b"", f"{dist}/{SO}": so}
    files.update(extra or {})
    return make_wheel(out, dist, version, files, tag=TAG, executables=executables)


@dataclass(frozen=True)
class Batch:
    raw: Path  # the builder's wheel, unstamped
    wheel: Path  # postbuild's stamped wheel
    fragment: Path  # its ledger fragment, beside it


def python_tag(python: str) -> str:
    out = subprocess.run([python, "-c", "import sys; print(f'cp{sys.version_info[0]}{sys.version_info[1]}')"],
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@functools.cache  # one build per arch list and Python, whichever test module asks first
def build_stamped(work: Path, cuda_home: Path, arch: str, python: str = sys.executable, *,
                  build_epoch: int = 0) -> Batch:
    """demo_ext built for ``arch`` with ``python`` (which needs setuptools), asserted and stamped
    by postbuild with ``build_epoch``, with its ledger fragment."""
    from farm.binary.archrule import Expected
    from farm.model.arch import ArchList
    from farm.model.cells import Cell
    from farm.provenance import buildinfo, probe
    from farm.provenance.postbuild import BuildContext, cuda_line, postbuild_wheel

    shutil.rmtree(work, ignore_errors=True)  # what an earlier, failed call left
    work.mkdir(parents=True)
    src = work / "demo_ext"
    shutil.copytree(REPO / "examples" / "demo_ext", src, ignore=shutil.ignore_patterns("build", "*.egg-info"))
    raw_dir, out = work / "raw", work / "out"
    env = {**os.environ, "CUDA_HOME": str(cuda_home), "TORCH_CUDA_ARCH_LIST": arch, "MAX_JOBS": "2"}
    subprocess.run([python, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-cache-dir", "-q",
                    "-w", str(raw_dir), str(src)], check=True, env=env)
    (raw,) = raw_dir.glob("demo_ext-*.whl")
    cell = Cell("demo_ext", "0.1.0", cuda_line(cuda_home), "none", python_tag(python), "linux_x86_64")
    context = BuildContext(
        cell=cell, expected=Expected(ArchList.parse(arch)), requested=arch, build_epoch=build_epoch,
        defaults_sha256=None, recipe_sha256=None,
        source=buildinfo.PathSourceRecord("examples/demo_ext", None),
        run=probe.run_from_env({}),
        toolchain=probe.toolchain(cuda_home=cuda_home, builder="native"),
    )
    result = postbuild_wheel(raw, out, context, dist="demo_ext")
    assert result.passed, result.to_json()
    assert result.stamped, result.to_json()
    assert result.fragment, result.to_json()
    return Batch(raw, result.stamped.path, result.fragment)

"""Farm trees and builder wheels for the postbuild and audit tests.

A farm root is the repository's ``_defaults.yml`` plus small recipes whose arch list is given;
builder wheels hold a real nvcc-built extension from :mod:`tests.cudafix`.
"""

from __future__ import annotations

import re
import shutil
import sys
import textwrap
from collections.abc import Mapping
from pathlib import Path

from tests.wheelmaker import make_wheel

REPO = Path(__file__).resolve().parent.parent
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
